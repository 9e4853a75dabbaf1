"""The window while a model works: its longest stall while a generation streams, and while the "Which heads
matter" panel computes head effects.

    python -m benchmarks.streaming            # benchmarks/results-streaming.json and a table on stdout
    python -m benchmarks.streaming --rounds 1
    python -m benchmarks.streaming --tiny     # the smoke test's size (a 2-layer llama)

A SmolLM2-135M-shaped llama (30 layers, 9 heads, 3 KV heads, width 576, vocab 49152, random float32 weights
written with transformers) in the offscreen MainWindow at 1600 x 1000, the model view open:

1. `streaming`: a prompt of 24 tokens, then the Generate count set to 40: the window streams the generation
   (partial results at most every 50 ms, the maps growing row by row) until the final result is on screen.
2. `head_effects`: a text of 64 tokens on screen, then the "Which heads matter" dock opened: its background
   thread ablates each head in turn until the table is filled.

A QTimer on the GUI thread ticks every 5 ms throughout; a stall is the longest gap between two ticks less the
interval. Target for both: <= 50 ms. Each round records /proc/loadavg before and after, and how long each full
(generation 2) garbage collection took while it ticked: one holds the GIL, so it stalls the window whichever
thread runs it.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from .common import BENCH_DIR, code_state, load_average, log, machine_info
from .models import SMOLLM2, TINY_LLAMA, HfShape, text_of, write_hf_model

STALL_TARGET_S = 0.050
TICK_MS = 5
PROMPT_TOKENS, NEW_TOKENS, EFFECTS_TOKENS = 24, 40, 64
WINDOW_SIZE = (1600, 1000)
TIMEOUT_S = 600.0


class Ticker:
    """A GUI-thread timer's tick times; the longest gap between ticks is how long the window froze."""

    def __init__(self) -> None:
        from PySide6.QtCore import QTimer

        self.ticks: list[float] = []
        self.full_gcs: list[float] = []  # seconds of each full garbage collection while ticking (it holds the GIL)
        self._gc_start: float | None = None
        self.timer = QTimer()
        self.timer.setInterval(TICK_MS)
        self.timer.timeout.connect(lambda: self.ticks.append(time.perf_counter()))

    def _gc(self, phase: str, info: dict) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._gc_start = time.perf_counter()
        elif self._gc_start is not None:
            self.full_gcs.append(time.perf_counter() - self._gc_start)

    def start(self) -> None:
        self.ticks, self.full_gcs = [time.perf_counter()], []
        gc.callbacks.append(self._gc)
        self.timer.start()

    def stop(self) -> dict:
        self.timer.stop()
        gc.callbacks.remove(self._gc)
        gaps = sorted((b - a for a, b in zip(self.ticks, self.ticks[1:])), reverse=True)
        longest = max(gaps[0] - TICK_MS / 1e3, 0.0) if gaps else None
        return {"longest_stall_s": longest, "ticks": len(self.ticks),
                "next_longest_gaps_ms": [round(g * 1e3, 1) for g in gaps[1:6]],
                "full_gc_ms": [round(g * 1e3, 1) for g in self.full_gcs]}


def wait_until(app, until, timeout: float = TIMEOUT_S) -> bool:
    """Run the event loop (as the app does: no busy polling on the GUI thread) until `until()` holds."""
    from PySide6.QtCore import QEventLoop, QTimer

    loop = QEventLoop()
    poll = QTimer()
    poll.setInterval(20)
    poll.timeout.connect(lambda: loop.quit() if until() else None)
    QTimer.singleShot(int(timeout * 1000), loop.quit)
    poll.start()
    loop.exec()
    poll.stop()
    return until()


def make_window(app, folder: Path, shape: HfShape):
    from attnviz.core import RunConfig
    from attnviz.ui import MainWindow

    window = MainWindow()
    window.resize(*WINDOW_SIZE)
    window.show()
    prompt = dataclasses.replace(shape, tokens=min(PROMPT_TOKENS, shape.tokens))
    window.panel.set_config(RunConfig.for_variant("pretrained", model=str(folder), text=text_of(prompt)))
    if not wait_until(app, lambda: window.is_settled() and window.shown_id > 0 and window.result is not None):
        raise RuntimeError("the model never came on screen")
    return window


def bench_streaming(app, window, new_tokens: int) -> dict:
    """One generation of `new_tokens` streamed into the window, timed from the edit to the final result."""
    partials: list[tuple[int, float]] = []
    window.sigPartialShown.connect(lambda rid, n: partials.append((n, time.perf_counter())))
    ticker, load = Ticker(), load_average()
    ticker.start()
    t0 = time.perf_counter()
    window.panel.widgets["generate"].setValue(new_tokens)
    rid = window.request()
    ok = wait_until(app, lambda: window.shown_id >= rid and window.is_settled())
    elapsed = time.perf_counter() - t0
    stall = ticker.stop()
    window.sigPartialShown.disconnect()
    written = len(window.result.tokens) - (window.result.prompt_length or 0)
    gaps = [b - a for (_, a), (_, b) in zip(partials, partials[1:])]
    window.panel.widgets["generate"].setValue(0)  # back to the prompt alone for the next round
    wait_until(app, lambda: window.is_settled())
    return {**stall, "ok": ok and written == new_tokens, "tokens": written, "seconds": round(elapsed, 2),
            "tokens_per_s": round(written / elapsed, 2), "partials_shown": len(partials),
            "longest_gap_between_partials_s": round(max(gaps), 3) if gaps else None,
            "loadavg_before": load, "loadavg_after": load_average(), "torch_threads": window.worker.threads_used}


def bench_head_effects(app, window, shape: HfShape, round_: int) -> dict:
    """The "Which heads matter" dock opened on a text of EFFECTS_TOKENS tokens (another each round: nothing
    cached), timed until its table is filled."""
    text = text_of(dataclasses.replace(shape, tokens=EFFECTS_TOKENS), variant=3 + round_)
    window.panel.widgets["text"].setText(text)
    wait_until(app, lambda: window.is_settled())
    view, dock = window.explain.effects, window.explain.docks["headEffectsDock"]
    view.cache.clear()
    view.effects = None
    ticker, load = Ticker(), load_average()
    ticker.start()
    t0 = time.perf_counter()
    dock.show()
    dock.raise_()
    ok = wait_until(app, lambda: view.effects is not None and view.job.key is None)
    elapsed = time.perf_counter() - t0
    stall = ticker.stop()
    dock.hide()
    wait_until(app, lambda: window.is_settled())
    return {**stall, "ok": ok, "tokens": len(window.result.tokens), "seconds": round(elapsed, 2),
            "loadavg_before": load, "loadavg_after": load_average()}


def summarise(rounds: list[dict]) -> dict:
    stalls = [r["longest_stall_s"] for r in rounds if r["longest_stall_s"] is not None]
    worst = max(stalls) if stalls else None
    return {"rounds": rounds, "longest_stall_s": worst, "target_s": STALL_TARGET_S,
            "meets_target": worst is not None and worst <= STALL_TARGET_S and all(r["ok"] for r in rounds)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tiny", action="store_true", help="a 2-layer llama, one round (a smoke run)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    shape, rounds = (TINY_LLAMA, 1) if args.tiny else (SMOLLM2, args.rounds)
    new_tokens = 8 if args.tiny else NEW_TOKENS
    out = args.out or BENCH_DIR / ("results-streaming-tiny.json" if args.tiny else "results-streaming.json")
    app = QApplication.instance() or QApplication([])
    with tempfile.TemporaryDirectory(prefix="attnviz-streaming-") as tmp:
        folder = write_hf_model(shape, Path(tmp) / shape.name)
        window = make_window(app, folder, shape)
        log(f"{shape.name}: {rounds} round(s) of {new_tokens} tokens streamed, then head effects")
        streams = [bench_streaming(app, window, new_tokens) for _ in range(rounds)]
        effects = [bench_head_effects(app, window, shape, k) for k in range(rounds)]
        window.close()
    results = {"benchmark": "streaming", "model": dataclasses.asdict(shape), "prompt_tokens": PROMPT_TOKENS,
               "new_tokens": new_tokens, "window": WINDOW_SIZE, "tick_ms": TICK_MS,
               "streaming": summarise(streams), "head_effects": summarise(effects),
               "machine": machine_info(), "code": code_state()}
    out.write_text(json.dumps(results, indent=2) + "\n")
    print_table(results)
    log(f"wrote {out}")
    return 0 if results["streaming"]["meets_target"] and results["head_effects"]["meets_target"] else 1


def print_table(results: dict) -> None:
    print(f"{'':14s} {'longest stall':>14s} {'target':>8s} {'rounds':>7s}  per round (stall ms, seconds, load 1m)")
    for name in ("streaming", "head_effects"):
        part = results[name]
        rows = ", ".join(f"({(r['longest_stall_s'] or 0) * 1e3:.0f}, {r['seconds']}, {r['loadavg_before'][0]})"
                         for r in part["rounds"])
        stall = part["longest_stall_s"]
        print(f"{name:14s} {(stall or 0) * 1e3:11.1f} ms {part['target_s'] * 1e3:5.0f} ms {len(part['rounds']):7d}"
              f"  {rows}")
    s = results["streaming"]["rounds"]
    if s:
        print(f"streaming: {s[-1]['tokens']} tokens at {s[-1]['tokens_per_s']} tokens/s, "
              f"{s[-1]['partials_shown']} partial results shown")


if __name__ == "__main__":
    sys.exit(main())
