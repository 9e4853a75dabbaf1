"""Fuzz: 1,000 random changes of every kind through the window's widgets, with a 5 ms
GUI-thread timer recording the longest stall, the slowest GUI-thread methods, RSS growth, and
whether the final view matches the final parameters.

    python -m benchmarks.fuzz                          # lengths and widths <= 512
    python -m benchmarks.fuzz --max-len 2048 --changes 300 --seed 3 --out fuzz.json
    python -m benchmarks.fuzz --passes 4               # the same window again: does RSS keep growing?

Changes include invalid combinations (heads that do not divide the width, bad padding lengths);
dtype and device stay float32 / cpu (half precision on a CPU is a known 50-400x slowdown, not a stall).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import gc
import json
import random
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

from .common import load_average

if TYPE_CHECKING:
    from attnviz.core import RunConfig

STALL_TARGET_S = {512: 0.050, 2048: 0.100}
RSS_TARGET_BYTES = 50 << 20


def actions(w, rng: random.Random, max_len: int, max_width: int) -> list:
    """(name, function) pairs; each function makes one random change through a widget."""
    p = w.panel.widgets

    def spin(name, lo, hi):
        return lambda: p[name].setValue(rng.randint(lo, hi))

    def combo(widget):
        return lambda: widget.setCurrentIndex(rng.randrange(widget.count()))

    def check(widget):
        return lambda: widget.setChecked(not widget.isChecked())

    def kv_text():
        n = rng.randint(1, 4)
        text = ", ".join(str(rng.randint(0, max_len)) for _ in range(n))
        p["kv_lengths"].setText(rng.choice([text, text, "x", ""]))

    def focus():
        heads = w.result.config.heads if w.result is not None else 1
        w.headGrid.set_focus(rng.choice([None, None, -1, rng.randrange(heads)]))

    heads_choices = [1, 2, 3, 4, 6, 8, 12, 16, 5, 7]
    variant, mask = p["variant"], p["mask"]
    return [
        ("variant", combo(variant)), ("mask", combo(mask)),
        ("heads", lambda: p["heads"].setValue(rng.choice(heads_choices))),
        ("seq_q", spin("seq_q", 1, max_len)), ("seq_kv", spin("seq_kv", 1, max_len)),
        ("d_model", lambda: p["d_model"].setValue(rng.choice([8, 16, 32, 48, 64, 96, 128, max_width]))),
        ("d_out", lambda: p["d_out"].setValue(rng.choice([8, 16, 32, 64, 128, max_width]))),
        ("d_cross", lambda: p["d_cross"].setValue(rng.choice([8, 16, 32, 64, max_width]))),
        ("window", spin("window", 0, 64)), ("kv_lengths", kv_text), ("batch", spin("batch", 1, 4)),
        ("batch_index", lambda: w.panel.batchIndexSpin.setValue(rng.randint(0, 3))),
        ("seed", spin("seed", 0, 1000)), ("dropout", lambda: p["dropout"].setValue(rng.choice([0.0, 0.1, 0.5]))),
        ("train", check(p["train"])), ("safe_softmax", check(p["safe_softmax"])),
        ("in_bias", check(p["in_bias"])), ("out_bias", check(p["out_bias"])),
        ("view", combo(w.viewCombo)), ("colormap", combo(w.colormapCombo)), ("per_head", check(w.perHeadCheck)),
        ("mean", check(w.meanCheck)), ("tensor", combo(w.tensorCombo)),
        ("tensor_head", lambda: w.tensorHeadSpin.setValue(rng.randint(0, 15))), ("focus", focus),
    ]


class Timings:
    """Wraps GUI-thread methods and keeps the longest and total time of each (what stalls the loop)."""

    def __init__(self):
        self.longest: dict[str, float] = defaultdict(float)
        self.total: dict[str, float] = defaultdict(float)
        self.calls: list[tuple[float, float, str]] = []  # (start, end, label) of calls over 5 ms
        self.ticks: list[float] = []  # a 5 ms GUI-thread timer's tick times: the gaps are the stalls
        # one Timings listens at a time (a later pass in the same window makes another)
        gc.callbacks[:] = [c for c in gc.callbacks if getattr(c, "__func__", None) is not Timings._gc]
        gc.callbacks.append(self._gc)
        self._gc_start = 0.0

    def _gc(self, phase: str, info: dict) -> None:
        now = time.perf_counter()
        if phase == "start":
            self._gc_start = now
        elif now - self._gc_start > 0.005:
            self.calls.append((self._gc_start, now, f"gc generation {info.get('generation')}"))

    def tick(self) -> None:
        self.ticks.append(time.perf_counter())

    def in_longest_gap(self) -> dict:
        """The longest gap between ticks and the timed calls inside it (what stalled the loop)."""
        if len(self.ticks) < 2:
            return {}
        gap, a, b = max((b - a, a, b) for a, b in zip(self.ticks, self.ticks[1:]))
        inside = [(label, round((min(e, b) - max(s, a)) * 1e3, 1)) for s, e, label in self.calls if e > a and s < b]
        return {"gap_ms": round(gap * 1e3, 1), "calls_ms": inside}

    def wrap(self, obj, name: str, label: str) -> None:
        original = getattr(obj, name)
        original = getattr(original, "__wrapped__", original)  # a later pass in the same window: rewrap

        @functools.wraps(original)
        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                t1 = time.perf_counter()
                dt = t1 - t0
                self.longest[label] = max(self.longest[label], dt)
                self.total[label] += dt
                if dt > 0.005:
                    self.calls.append((t0, t1, label))

        setattr(obj, name, timed)

    def top(self, n: int = 8) -> list:
        return sorted(((k, round(v * 1e3, 1)) for k, v in self.longest.items()), key=lambda kv: -kv[1])[:n]


def instrument(w, timings: Timings) -> None:
    grid = w.headGrid
    for obj, name, label in [
        (w.delivery, "swap", "delivery.swap"), (w.delivery, "finish", "delivery.finish"),
        (w, "request", "window.request"),
        (w, "_show_failure", "window._show_failure"), (w, "_clear_failure", "window._clear_failure"),
        (grid, "show_frames", "headGrid.show_frames"), (grid.mosaic, "set_tiles", "mosaic.set_tiles"),
        (grid.bar, "show_levels", "colourBar.show_levels"), (w.outputView, "show_frames", "outputView.show_frames"),
        (w.panel, "_refresh_visibility", "panel._refresh_visibility"), (w.panel, "show_error", "panel.show_error"),
        (w.panel, "clear_error", "panel.clear_error"), (w.panel, "_edited", "panel._edited"),
        (grid, "paintEvent", "headGrid.paintEvent"), (w.outputView, "paintEvent", "outputView.paintEvent"),
        (w.panel, "_variant_changed", "panel._variant_changed"), (w.panel, "apply_fix", "panel.apply_fix"),
        (grid, "resizeEvent", "headGrid.resizeEvent"), (w, "view_options", "window.view_options"),
        (w.panel, "config", "panel.config"),
    ]:
        timings.wrap(obj, name, label)


def run_fuzz(changes: int, max_len: int, max_width: int, seed: int, interval_ms: int, harness=None) -> dict:
    """One pass in a new window, or in `harness`'s window (left open) for a later pass."""
    from PySide6.QtCore import QEventLoop, Qt, QTimer

    from attnviz.system import resident_bytes

    from .common import SIZES
    from .gui import Harness

    h = harness or Harness(SIZES["tiny"])
    w = h.window
    rng = random.Random(seed)
    acts = actions(w, rng, max_len, max_width)
    timings = Timings()
    instrument(w, timings)
    start_config = w.panel.config()
    gc.collect()
    w.worker.reaper.flush()
    rss0 = resident_bytes()
    counts: dict[str, int] = defaultdict(int)
    state = {"k": 0, "slowest_change": (0.0, "")}
    loop = QEventLoop()
    driver = QTimer()
    driver.setTimerType(Qt.PreciseTimer)
    driver.setInterval(interval_ms)

    def step():
        name, act = acts[rng.randrange(len(acts))]
        t0 = time.perf_counter()
        act()
        dt = time.perf_counter() - t0
        if dt > state["slowest_change"][0]:
            state["slowest_change"] = (dt, name)
        counts[name] += 1
        state["k"] += 1
        if state["k"] >= changes:
            driver.stop()
            loop.quit()

    driver.timeout.connect(step)
    ticker = QTimer()
    ticker.setTimerType(Qt.PreciseTimer)
    ticker.setInterval(5)
    ticker.timeout.connect(timings.tick)
    ticker.start()
    load = load_average()
    h.monitor.reset()
    t0 = time.perf_counter()
    driver.start()
    loop.exec()
    storm = h.monitor.stats()
    settle = settle_by_polling(h)
    h.force_paint()
    all_stats = h.monitor.stats(until=time.perf_counter())
    h.app.processEvents()
    settle_by_polling(h)  # the paint's layout may re-pool to the final tile size (one more, view-only)
    final = final_state(h)
    # RSS growth is measured back on the starting configuration: the last random one may hold
    # hundreds of MiB of maps by design (batch 4 x 16 heads x 512 x 512), which is not a leak.
    w.viewCombo.setCurrentIndex(w.viewCombo.findData("weights"))  # a stage the start config has
    w.panel.set_config(start_config)
    settle_by_polling(h)
    gc.collect()
    w.worker.reaper.flush()
    rss1 = resident_bytes()
    res = {
        "changes": changes, "max_len": max_len, "max_width": max_width, "seed": seed, "interval_ms": interval_ms,
        "loadavg": load, "loadavg_after": load_average(), "storm_s": time.perf_counter() - t0,
        "during_changes": storm, "longest_stall_s": all_stats["longest_stall_s"], "settled": settle is not None,
        "slowest_change": {"s": state["slowest_change"][0], "action": state["slowest_change"][1]},
        "slowest_methods_ms": timings.top(), "longest_gap": timings.in_longest_gap(),
        "rss_growth_bytes": (rss1 - rss0) if rss0 and rss1 else None,
        "counts": dict(counts), "computes": h.compute.calls, **final,
    }
    target = STALL_TARGET_S[512 if max_len <= 512 else 2048]
    res["pass"] = (res["longest_stall_s"] <= target and final["final_ok"]
                   and (res["rss_growth_bytes"] or 0) <= RSS_TARGET_BYTES)
    if harness is None:
        h.close()
    return res


def settle_by_polling(h, timeout_s: float = 120.0) -> float | None:
    """Until the newest request is on screen (or failed); None on timeout."""
    t0 = time.perf_counter()
    while not h.window.is_settled():
        if time.perf_counter() - t0 > timeout_s:
            return None
        h.app.processEvents()
        time.sleep(0.005)
    return time.perf_counter() - t0


def shows_config(shown: RunConfig, config: RunConfig) -> bool:
    """The run shown is the one `config` asks for: every field that applies to its variant is equal.
    The rest mean nothing for it: a model-backed run takes its shapes from the model, and the panel
    keeps the hidden fields' values for a switch back (the fuzz edits hidden widgets too)."""
    return all(getattr(shown, f.name) == getattr(config, f.name) for f in dataclasses.fields(config)
               if config.applies(f.name))


def final_state(h) -> dict:
    """Final view = final valid parameters (or, when they are invalid, the failure is what shows)."""
    from attnviz.core import ConfigError

    w = h.window
    try:
        config = w.panel.config()
    except ConfigError as exc:
        return {"final_valid": False, "final_ok": w.failed_id == w.latest_id and w.last_error == str(exc)}
    if w.failed_id == w.latest_id and w.last_error:  # valid fields the worker refused (e.g. memory)
        return {"final_valid": True, "final_ok": True, "final_failed": w.last_error}
    checks = {"result_is_panel": w.result is not None and shows_config(w.result.config, config),
              "latest_shown": w.shown_id == w.latest_id, "tiles_show_frames": bool(h.tiles_show_frames())}
    return {"final_valid": True, "final_ok": all(checks.values()), "final_checks": checks}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.fuzz", description=__doc__.split("\n\n")[0])
    p.add_argument("--changes", type=int, default=1000)
    p.add_argument("--max-len", type=int, default=512)
    p.add_argument("--max-width", type=int, default=512)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--interval-ms", type=int, default=10, help="time between changes (a fast user: 10 ms)")
    p.add_argument("--passes", type=int, default=1,
                   help="more passes in the same window (seeds seed+1, ...): RSS growth per pass tells a leak "
                        "(it keeps growing) from first use (code pages, cached models, thread arenas)")
    p.add_argument("--out")
    args = p.parse_args(argv)
    if args.passes > 1:
        return _passes(args)
    res = run_fuzz(args.changes, args.max_len, args.max_width, args.seed, args.interval_ms)
    target = STALL_TARGET_S[512 if res["max_len"] <= 512 else 2048]
    print(f"{res['changes']} changes (lengths <= {res['max_len']}, seed {res['seed']}): longest stall "
          f"{res['longest_stall_s'] * 1e3:.0f} ms (target {target * 1e3:.0f}),"
          f" slowest change {res['slowest_change']['s'] * 1e3:.0f} ms ({res['slowest_change']['action']}), "
          f"RSS growth {(res['rss_growth_bytes'] or 0) / 2**20:.1f} MiB, final ok {res['final_ok']} "
          f"(valid {res['final_valid']}), computes {res['computes']}, load {res['loadavg']} -> {res['loadavg_after']}")
    print("slowest GUI-thread methods (ms):", res["slowest_methods_ms"])
    print("inside the longest gap:", res["longest_gap"])
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1))
    return 0 if res["pass"] else 1


def _passes(args) -> int:
    from .common import SIZES
    from .gui import Harness

    h = Harness(SIZES["tiny"])
    runs = []
    for k in range(args.passes):
        res = run_fuzz(args.changes, args.max_len, args.max_width, args.seed + k, args.interval_ms, harness=h)
        runs.append(res)
        print(f"pass {k + 1} (seed {args.seed + k}): RSS growth {(res['rss_growth_bytes'] or 0) / 2**20:.1f} MiB, "
              f"longest stall {res['longest_stall_s'] * 1e3:.0f} ms, final ok {res['final_ok']}", flush=True)
    h.close()
    if args.out:
        Path(args.out).write_text(json.dumps(runs, indent=1))
    return 0 if all(r["pass"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
