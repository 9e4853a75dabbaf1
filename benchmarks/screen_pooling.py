"""Does view pooling inside the kernel pay for itself? One process, paired rounds in rotating order.

    python -m benchmarks.screen_pooling                 # M and L, log and row scales
    python -m benchmarks.screen_pooling --sizes M --rounds 15 --threads 1

Per size (benchmarks.common.SIZES: seed 002's causal self-attention) and scale mode, each round times what the
worker does for one seed change, both ways, on the same thread:

- `kernel`: core.run() with screen_px (the kernel's blocks pool the weights to the view's size while each block
  is in the cache, core/kernel/screen.py), then frames.render, which takes those pooled maps;
- `frames`: core.run() without screen_px, then frames.render, which pools the whole maps itself.

The tile is the window's own (an offscreen MainWindow's head grid at 1280 x 820). Prints the medians and the
median of the paired ratios kernel / frames (below 1: pooling in the kernel pays); the pictures are checked
equal byte for byte. Writes benchmarks/out/screen_pooling.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import sys
import time
from pathlib import Path

from .common import interleaved, load_average, machine_info, median, paired_ratios, parse_sizes, summary

MODES = ("log", "row")


def _tile_px(size) -> tuple[int, int]:
    """The head grid's tile for this size in the window the fast benchmark uses."""
    from attnviz.ui import MainWindow

    from .gui import WINDOW_SIZE, qapp

    app = qapp()
    w = MainWindow()
    w.resize(*WINDOW_SIZE)
    w.show()
    app.processEvents()
    tile = w.headGrid.tile_pixels(size.seq, size.seq, size.heads)
    w.close()
    w.deleteLater()
    app.processEvents()
    return tuple(tile)


def bench(size, mode: str, rounds: int, tile_px: tuple[int, int]) -> dict:
    from attnviz import frames
    from attnviz.core import run
    from attnviz.ui.window.worker import window_record

    config = size.config()
    record = window_record(config, frozenset({"weights"}))
    options = dataclasses.replace(frames.ViewOptions(), scale_mode=mode, grid_pixels=True, max_px=tile_px)
    shown = frames.screen_px(tile_px, (config.seq_q, config.lkv), mode == "row")
    seeds = itertools.count(100)
    parts: dict[str, list[tuple[float, float]]] = {"kernel": [], "frames": []}

    def change(name: str, screen_px):
        def timed():
            t0 = time.perf_counter()
            result = run(config.replace(seed=next(seeds)), record=record, screen_px=screen_px)
            t1 = time.perf_counter()
            out = frames.render(result, options)
            parts[name].append((t1 - t0, time.perf_counter() - t1))
            return out
        return timed

    same = _same_pictures(config, record, options, shown)
    times = interleaved({"kernel": change("kernel", shown), "frames": change("frames", None)}, rounds)
    for name in parts:
        parts[name] = parts[name][-rounds:]  # the warm-up round left out, as interleaved() does
    ratios = paired_ratios(times["kernel"], times["frames"])
    return {"mode": mode, "tile_px": list(tile_px), "screen_px": list(shown) if shown else None,
            "p50_s": {n: median(xs) for n, xs in times.items()},
            "summary_s": {n: summary(xs) for n, xs in times.items()},
            "run_p50_s": {n: median([r for r, _ in xs]) for n, xs in parts.items()},
            "render_p50_s": {n: median([r for _, r in xs]) for n, xs in parts.items()},
            "paired_ratio_kernel_vs_frames": median(ratios), "ratios": ratios, "same_pictures": same}


def _same_pictures(config, record, options, shown) -> bool:
    """Both ways give the very same tiles (one seed)."""
    import numpy as np

    from attnviz import frames
    from attnviz.core import run

    a = frames.render(run(config, record=record, screen_px=shown), options)
    b = frames.render(run(config, record=record), options)
    return len(a.heads) == len(b.heads) and all(np.array_equal(x.image, y.image) and x.levels == y.levels
                                                for x, y in zip(a.heads, b.heads))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.screen_pooling", description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="M,L")
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--out", default=str(Path(__file__).with_name("out") / "screen_pooling.json"))
    args = parser.parse_args(argv)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    results: dict = {"machine": machine_info(), "load_before": load_average(), "threads": torch.get_num_threads()}
    for size in parse_sizes(args.sizes):
        tile = _tile_px(size)
        for mode in MODES:
            r = results[f"{size.name}-{mode}"] = bench(size, mode, args.rounds, tile)
            p = r["p50_s"]
            print(f"{size.name} {mode}: kernel {p['kernel'] * 1e3:.0f} ms (run {r['run_p50_s']['kernel'] * 1e3:.0f} + "
                  f"render {r['render_p50_s']['kernel'] * 1e3:.1f}), frames {p['frames'] * 1e3:.0f} ms (run "
                  f"{r['run_p50_s']['frames'] * 1e3:.0f} + render {r['render_p50_s']['frames'] * 1e3:.1f}); paired "
                  f"kernel/frames {r['paired_ratio_kernel_vs_frames']:.3f}; same pictures {r['same_pictures']}",
                  flush=True)
    results["load_after"] = load_average()
    print(f"load average before {results['load_before']}, after {results['load_after']}")
    Path(args.out).parent.mkdir(exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
