"""Contention: seed-change latency with the machine idle vs with one other CPU-bound
process, interleaved, per worker thread policy; and the 300-change storm stall with the busy process.

    python -m benchmarks.contention                                 # S,M,L; policies adaptive,all@10
    python -m benchmarks.contention --sizes L --policies adaptive@10/3,adaptive@10/0 --storm --out c.json

A policy is `threads[@nice]`: threads = adaptive (cores other programs leave free, measured before
each run; attnviz's default), all (one per core: torch's default) or a number; nice = how much nicer
than the GUI both compute lanes run, or "QUIET/BUSY" (e.g. 10/3: 10 with every core free, 3 when
other programs hold some). Without @nice: attnviz's rule, 10/4 (attnviz/system.py, ThreadPolicy).
"all@10" is the policy before the thread policy (every core at nice 10). One size's window is reused for all policies;
rounds alternate busy-first and idle-first; each block records /proc/loadavg and the CPU share other
processes used (from /proc/stat) so a noisy "idle" is visible. Target: busy/idle p50 <= 2.0.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from .common import SIZES, load_average, median, parse_sizes

BUSY_CODE = "while True: pass"
RATIO_TARGET = 2.0


def _proc_stat() -> tuple[int, int]:
    from attnviz.system import cpu_jiffies

    return cpu_jiffies() or (0, 0)


def _apply_policy(policy: str) -> None:
    """"adaptive" alone is attnviz's default (nice 10 with every core free, 4 when some are taken: the
    ThreadPolicy defaults); "X@N" runs both of the worker's compute lanes N nicer than the GUI."""
    from attnviz.system import ThreadPolicy, set_thread_policy

    threads, _, nice = policy.partition("@")
    default = ThreadPolicy()
    quiet, _, busy = (nice or f"{default.quiet_nice}/{default.busy_nice}").partition("/")  # "N" or "QUIET/BUSY"
    set_thread_policy(ThreadPolicy(threads if threads in ("adaptive", "all") else int(threads), int(quiet),
                                   int(busy or quiet)))


def _block(h, busy: bool, samples: int) -> dict:
    """`samples` seed toggles, with or without one CPU-bound process running."""
    proc = subprocess.Popen([sys.executable, "-c", BUSY_CODE]) if busy else None
    try:
        if proc is not None:
            time.sleep(0.5)  # let it get going, as a browser tab would be
        load, (t0, i0) = load_average(), _proc_stat()
        runs = [_toggle_seed(h) for _ in range(samples)]
        t1, i1 = _proc_stat()
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
    return {"busy": busy, "loadavg": load, "machine_busy_share": round(1 - (i1 - i0) / max(t1 - t0, 1), 3),
            "latency_s": [r["latency_s"] for r in runs], "stall_s": [r["stall_s"] for r in runs],
            "threads": h.window.worker.threads_used}


def _toggle_seed(h) -> dict:
    seed = h.panel.widgets["seed"]
    return h.change(lambda: seed.setValue(1 - seed.value()))


def _storm_busy(h) -> dict:
    from .gui import _storm

    proc = subprocess.Popen([sys.executable, "-c", BUSY_CODE])
    try:
        time.sleep(0.5)
        load = load_average()
        res = _storm(h, verify=False)
    finally:
        proc.kill()
        proc.wait()
    return {"loadavg": load, "longest_stall_s": res["longest_stall_s"], "final_ok": res["final_matches_parameters"],
            "stale": res["stale_frames_shown"]}


def measure(size, policies: list[str], rounds: int, samples: int, storm: bool) -> dict:
    from .gui import Harness

    h = Harness(size)
    out = {}
    try:
        for policy in policies:
            _apply_policy(policy)
            h.window.worker.stop()  # a fresh worker thread takes the policy's nice level
            _toggle_seed(h)  # warm-up (starts the new thread)
            blocks, ratios = [], []
            for r in range(rounds):
                pair = {}
                for busy in ((False, True) if r % 2 == 0 else (True, False)):
                    pair[busy] = _block(h, busy, samples)
                    blocks.append(pair[busy])
                ratios.append(median(pair[True]["latency_s"]) / median(pair[False]["latency_s"]))
            idle = [x for b in blocks if not b["busy"] for x in b["latency_s"]]
            busy = [x for b in blocks if b["busy"] for x in b["latency_s"]]
            res = {"idle_p50_s": median(idle), "busy_p50_s": median(busy), "ratio_p50": median(busy) / median(idle),
                   "ratio_per_round": ratios, "busy_longest_stall_s": max(s for b in blocks if b["busy"]
                                                                              for s in b["stall_s"]),
                   "blocks": blocks}
            res["pass"] = res["ratio_p50"] <= RATIO_TARGET
            if storm:
                res["storm_busy"] = _storm_busy(h)
            out[policy] = res
            print(f"{size.name:3} {policy:12} idle p50 {res['idle_p50_s'] * 1e3:7.1f} ms   busy p50 "
                  f"{res['busy_p50_s'] * 1e3:7.1f} ms   ratio {res['ratio_p50']:.2f} "
                  f"(rounds {', '.join(f'{x:.2f}' for x in ratios)})   threads idle/busy "
                  f"{[b['threads'] for b in blocks if not b['busy']]}/{[b['threads'] for b in blocks if b['busy']]}"
                  + (f"   storm stall (busy) {res['storm_busy']['longest_stall_s'] * 1e3:.0f} ms" if storm else ""),
                  flush=True)
    finally:
        h.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.contention", description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="S,M,L")
    p.add_argument("--policies", default="adaptive,all@10")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--samples", type=int, default=0, help="seed toggles per block (default: by size)")
    p.add_argument("--storm", action="store_true", help="also the 300-change storm with the busy process")
    p.add_argument("--out", help="write the results as JSON here")
    args = p.parse_args(argv)
    default_samples = {"tiny": 3, "S": 9, "M": 5, "L": 3, "XL": 2}
    doc = {"load_before": load_average(), "sizes": {}}
    for size in parse_sizes(args.sizes):
        doc["sizes"][size.name] = measure(size, args.policies.split(","), args.rounds,
                                          args.samples or default_samples.get(size.name, 3), args.storm)
    doc["load_after"] = load_average()
    print(f"load average before {doc['load_before']}, after {doc['load_after']}")
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    assert SIZES
    sys.exit(main())
