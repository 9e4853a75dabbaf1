"""Experiments behind the recommendations: the same window measurements with one change each.

    python -m benchmarks.experiments --sizes M,L          # -> benchmarks/out/experiments.json
    python -m benchmarks.experiments --sizes XL --variants baseline,release

Nothing in attnviz/ is modified: each variant is a subclass or a compute wrapper made here.
  baseline  MainWindow as it is
  release   the previous RunResult is freed on a helper thread instead of the GUI thread
            (freeing the maps cost ~40 ms at L and ~300 ms at XL, inside MainWindow._swap_in)
  nice      the worker thread (and the torch/OpenMP threads it starts) runs at nice +10, so the
            GUI thread wins the 2 cores whenever it has work
  release+nice  both
Variants alternate within each round (ABCD ABCD ...) so drift on the machine hits all alike.
Both changes are in attnviz since (the worker's reaper and its niced lanes): on today's code the
variants measure nothing new; run them on the code they were made for with --code-from REV.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import threading
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import (  # noqa: E402
    OUT_DIR,
    code_state,
    load_average,
    log,
    machine_info,
    median,
    parse_sizes,
    rerun_in_snapshot,
)

VARIANTS = ("baseline", "release", "nice", "release+nice")


def releasing_window_class():
    from attnviz.ui import MainWindow

    reaper: queue.Queue = queue.Queue()

    def reap():
        while True:
            item = reaper.get()
            del item  # the last references: the maps are freed here, off the GUI thread

    threading.Thread(target=reap, name="attnviz-bench-reaper", daemon=True).start()

    if not hasattr(MainWindow, "_swap_in"):  # today's code: the delivery hands old results to the worker's reaper
        return MainWindow

    class ReleasingMainWindow(MainWindow):
        """MainWindow whose replaced result is handed to a helper thread to free."""

        def _swap_in(self) -> None:
            old = [self.result, self.headGrid.result, self.outputView.result]
            super()._swap_in()
            keep = [r for r in old if r is not None and r is not self.result]
            del old
            if keep:
                reaper.put(keep)

    return ReleasingMainWindow


def nice_worker(level: int = 10):
    def lower_priority(step=None):  # attnviz's signature; the experiment fixes the level
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), level)

    return lower_priority


def run_variant(size, variant: str, samples: int, storm: tuple[int, float]) -> dict:
    from benchmarks.gui import Harness, _latency, _storm

    window_cls = releasing_window_class() if "release" in variant else None
    first = nice_worker() if "nice" in variant else None
    h = Harness(size, window_cls=window_cls, on_first_compute=first)
    try:
        lat = _latency(h, samples, 0)
        st = _storm(h, *storm, verify=False)
    finally:
        h.close()
    seed = lat["seed_toggle"]
    return {
        "latency_p50_s": seed["latency_s"]["p50"],
        "worker_p50_s": seed["worker_s"]["p50"],
        "gui_other_p50_s": seed["gui_other_s"]["p50"],
        "latency_longest_stall_s": seed["longest_stall_s"],
        "storm_longest_stall_s": st["longest_stall_s"],
        "storm_p99_stall_s": st["storm_and_settle"]["p99_stall_s"],
        "storm_stalls_over_50ms": st["storm_and_settle"]["stalls_over_50ms"],
        "storm_frames_shown": st["frames_shown"],
        "storm_stale": st["stale_frames_shown"],
        "storm_final_ok": st["final_matches_parameters"],
        "load_average": load_average(),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.experiments", description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="M,L")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--samples", type=int, default=5)
    p.add_argument("--out", default=str(OUT_DIR / "experiments.json"))
    p.add_argument("--no-snapshot", action="store_true")
    p.add_argument("--code-from", metavar="REV")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = p.parse_args(argv)
    if not args.no_snapshot:
        return rerun_in_snapshot("benchmarks.experiments", argv, args.code_from,
                                 {"--out": str(Path(args.out).resolve())})
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    doc = {"machine": machine_info(), "code": code_state(), "settings": vars(args), "sizes": {}}
    for size in parse_sizes(args.sizes):
        runs: dict[str, list[dict]] = {v: [] for v in variants}
        for r in range(args.rounds):
            for v in variants:
                log(f"[{size.name}] round {r + 1}: {v} ...")
                t0 = time.perf_counter()
                try:
                    runs[v].append(run_variant(size, v, args.samples, (300, 3.0)))
                except Exception as exc:  # noqa: BLE001
                    runs[v].append({"error": f"{type(exc).__name__}: {exc}"})
                runs[v][-1]["wall_s"] = time.perf_counter() - t0
        agg = {}
        for v, rs in runs.items():
            ok = [x for x in rs if "error" not in x]
            agg[v] = {k: median([x[k] for x in ok]) for k in ok[0] if isinstance(ok[0][k], (int, float))
                      and not isinstance(ok[0][k], bool)} if ok else {}
            agg[v]["storm_longest_stall_max_s"] = max((x["storm_longest_stall_s"] for x in ok), default=None)
        doc["sizes"][size.name] = {"rounds": runs, "median_over_rounds": agg}
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    for name, s in doc["sizes"].items():
        print(f"== {name}  (median over rounds; ms)")
        print(f"  {'variant':14s} {'latency p50':>12s} {'gui other':>10s} {'lat. stall':>10s} {'storm stall':>12s}"
              f" {'storm p99':>10s} {'>50ms':>6s}")
        for v, a in s["median_over_rounds"].items():
            if not a:
                print(f"  {v:14s} failed")
                continue
            print(f"  {v:14s} {a['latency_p50_s'] * 1e3:12.0f} {a['gui_other_p50_s'] * 1e3:10.1f} "
                  f"{a['latency_longest_stall_s'] * 1e3:10.1f} {a['storm_longest_stall_s'] * 1e3:12.1f} "
                  f"{a['storm_p99_stall_s'] * 1e3:10.1f} {a['storm_stalls_over_50ms']:6.1f}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
