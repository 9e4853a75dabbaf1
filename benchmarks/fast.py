"""The window against the tutorial's own forward, every figure measured in one process.

    python -m benchmarks.fast                      # S, M, L and the pretrained rows
    python -m benchmarks.fast --sizes S,M,L,XL     # XL too (minutes)
    python -m benchmarks.fast --quick              # fewer rounds

Per size (benchmarks.common.SIZES: seed 002's causal self-attention, batch 1), round by round in rotating
order in one offscreen MainWindow (1280 x 820):

- `anchor`: seed 002's CausalSelfAttention forward, copied verbatim (seeds_reference.py), on the same
  config's weights and input, in inference mode, as a user's script runs it: built and called on the main
  thread with torch's default thread count (`_bare_anchor`).
- `run`: core.run() with the window's record (ui.worker.window_record), a new seed each round.
- `render_<mode>`: frames.render of a fresh result (an empty pool cache) at the window's own tile and output
  view sizes, for each scale mode.
- run and render's runs run on the window's compute lane at the anchor's torch thread count, as every forward
  of a user's window does (_on_lane); the harness's 5 ms stall timer is off.
- `window_log`, `window_linear`: the seed spin toggled -> the newest request shown (gui.Harness.change's
  to_sigshown_s: the window settled on the new result), with the weights' default scale (log) and with linear;
  `<name>_painted`: the same changes until every head of the grid is painted (a forced repaint unless the loop
  painted already). Each is also a paired ratio against the anchor of its own round. The toggle flips between
  two seeds, whose weights and inputs the run keeps drawn (core/runs/drawn.py) after the first round;
  `window_new_seed` (log) moves to a seed never drawn before.
  Each of these three gets rounds of its own, alternating with the anchor alone, and run and render get
  rounds of their own (with the anchor): a second engine allocating maps between the window's changes slowed
  the window by half at M, and new seeds between the toggles pushed the toggle's seeds out of the kept draws.
- at L also `view_only`: colormap, per-head scale and batch item changes (gui._view_only).

Pretrained: a SmolLM2-135M-shaped llama (random weights written with transformers) at 128 and 512 tokens:
the window's text edit -> the layer's heads on screen against transformers' eager forward of the same ids
(models.bench_edit_vs_eager; both at the worker's torch thread count).

Targets: window <= 0.8 x anchor at M, L and XL (log and linear; the paired ratio's median); at S
<= max(30 ms, 3 x anchor + 20 ms);
render <= 0.1 x anchor at M and L for every mode; view-only <= 50 ms at L; pretrained edit <= 1.0 x eager
+ 60 ms. Writes benchmarks/results-fast.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path

from .common import interleaved, machine_info, median, paired_ratios, parse_sizes, summary

WINDOW_RATIO = 0.8  # window latency / anchor at M, L, XL
RENDER_RATIO = 0.1  # frames.render / anchor at M, L
SMALL_S = (0.030, 3.0, 0.020)  # at S: <= max(30 ms, 3 x anchor + 20 ms)
VIEW_S = 0.050  # view-only change at L
PRETRAINED = (1.0, 0.060)  # edit <= 1.0 x eager + 60 ms
ROUNDS = {"S": 15, "M": 9, "L": 7, "XL": 4, "tiny": 3}
SCALE_MODES = ("linear", "log", "rank", "row")


def _bare_anchor(size):
    """Seed 002's forward as a user's script runs it: the module and its input drawn from the config's seed, the
    forward called on this (the main) thread at torch's default thread count, in inference mode."""
    import torch

    from .seeds_reference import CausalSelfAttention as SeedCausalSelfAttention
    from .seeds_reference import generate_mask as seed_generate_mask

    torch.manual_seed(size.config().seed)
    seed = SeedCausalSelfAttention(size.width, size.heads).eval()
    x = torch.randn(size.batch, size.seq, size.width)
    mask = seed_generate_mask(x, causal=True)

    def anchor():
        with torch.inference_mode():
            return seed(x, mask)
    return anchor


def _engine(size, tile_px: tuple[int, int], tensor_px: tuple[int, int] | None = None) -> dict:
    """core.run and frames.render per scale mode, as callables (each one timed sample)."""
    from attnviz import frames
    from attnviz.core import run
    from attnviz.session.request import window_record

    config = size.config()
    record = window_record(config, frozenset({"weights"}))
    seeds = itertools.count(100)

    def one_run():  # as the worker runs it
        return run(config.replace(seed=next(seeds)), record=record)

    def render(mode: str):
        result = one_run()  # fresh: nothing of it pooled by frames yet (not timed)
        options = dataclasses.replace(frames.ViewOptions(), scale_mode=mode, grid_pixels=True, max_px=tile_px,
                                      tensor_px=tensor_px or frames.ViewOptions().tensor_px)
        t0 = time.perf_counter()
        frames.render(result, options)
        return time.perf_counter() - t0

    return {"run": one_run, **{f"render_{m}": (lambda m=m: render(m)) for m in SCALE_MODES}}


def _timed(fn):
    """A sample: the callable's own figure when it returns one (render times itself), else its wall time."""
    def sample():
        t0 = time.perf_counter()
        out = fn()
        return out if isinstance(out, float) else time.perf_counter() - t0
    return sample


def _on_lane(lane, fn, threads: int):
    """fn run on the window's compute lane at `threads` torch threads, timed there: every forward of the process on
    one thread, as in a user's window. A forward on a second thread starts a second OpenMP team, and with more
    OpenMP threads than cores libgomp barely spins at its barriers: the window's forward at M took 57 against
    44 ms once the main thread had run a single parallel op, and its render 8 against 5 ms."""
    from attnviz.system import torch_threads

    def timed():
        with torch_threads(threads):
            return _timed(fn)()

    return lambda: lane.call(timed)


def _rounds(contenders: dict, rounds: int) -> dict[str, list[float]]:
    """interleaved() on figures that may time themselves (render excludes the run that feeds it)."""
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    timed = {name: _timed(fn) for name, fn in contenders.items()}

    def recorder(name):
        def call():
            samples[name].append(timed[name]())
        return call

    interleaved({name: recorder(name) for name in contenders}, rounds, warmup=1)
    return {name: xs[1:] for name, xs in samples.items()}  # the warm-up round left out


def bench_size(size, rounds: int) -> dict:
    import torch

    from .gui import Harness, _view_only

    threads = torch.get_num_threads()  # torch's default on the main thread: the anchor's
    h = Harness(size, stall_timer=False)  # the latency of a window as a user has it: no 5 ms timer of ours
    try:
        grid = h.window.headGrid
        tile_px = grid.tile_pixels(size.seq, size.seq, size.heads)
        lane = h.window.worker.lanes["quiet"]  # where the window ran its forwards so far
        parts = lane.call(lambda: _engine(size, tile_px, h.window.outputView.pixels()))  # the window's own sizes
        engine = {name: _on_lane(lane, fn, threads) for name, fn in parts.items()}
        anchor = _bare_anchor(size)
        seed_spin = h.panel.widgets["seed"]
        painted: dict[str, list[float]] = {}

        def shown(name: str, edit):
            def change():  # the newest request shown; the paint of every head kept beside it
                got = h.change(edit)
                painted.setdefault(f"{name}_painted", []).append(got["latency_s"])
                return got["to_sigshown_s"]
            return change

        fresh_seeds = itertools.count(1000)
        window_change = {"window_log": shown("window_log", lambda: seed_spin.setValue(1 - seed_spin.value())),
                         "window_linear": shown("window_linear", lambda: seed_spin.setValue(1 - seed_spin.value())),
                         # a seed never drawn before (the toggle's two seeds have their draws kept)
                         "window_new_seed": shown("window_new_seed", lambda: seed_spin.setValue(next(fresh_seeds)))}

        # Each of the window's figures gets rounds of its own, alternating with the anchor alone. The engine's
        # parts (run, render) interleaved with the window allocate and free maps of their own between its
        # changes, which no user's window sees (the log rounds read 214 ms at M beside them, 129 ms without);
        # new seeds between the toggles push the toggle's two seeds out of the kept draws (core/runs/drawn.py keeps
        # four), so a third of the toggles drew their weights again.
        times: dict[str, list[float]] = {}
        anchors: dict[str, list[float]] = {}
        for name, mode in (("window_log", "log"), ("window_new_seed", "log"), ("window_linear", "linear")):
            _set_scale(h, mode)
            got = _rounds({name: window_change[name], "anchor": anchor}, rounds)
            anchors[name] = got.pop("anchor")
            times |= got
        times |= {name: xs[1:] for name, xs in painted.items()}  # the warm-up round left out
        got = _rounds({**engine, "anchor": anchor}, rounds)
        anchors["run"] = got.pop("anchor")
        times |= got
        times["anchor"] = [t for xs in anchors.values() for t in xs]
        out = _summarise(size, times, anchors, tile_px)
        out["anchor_threads"] = threads
        if size.name == "L":
            _set_scale(h, "log")
            out["view_only"] = _view_only(h, max(3, rounds // 2))
    finally:
        h.close()
    return out


def _set_scale(h, mode: str) -> None:
    combo = h.window.scaleCombo
    if combo.currentData() != mode:
        h.change(lambda: (combo.setCurrentIndex(combo.findData(mode)), combo.activated.emit(combo.currentIndex())))


def _summarise(size, times: dict[str, list[float]], anchors: dict[str, list[float]], tile_px) -> dict:
    anchor = median(times["anchor"])
    out = {"size": size.describe(), "tile_px": list(tile_px), "samples_s": times,
           "p50_s": {name: median(xs) for name, xs in times.items()},
           "ratio_vs_anchor": {name: median(xs) / anchor for name, xs in times.items() if name != "anchor"},
           "summary_s": {name: summary(xs) for name, xs in times.items()}}
    out["paired_ratio_vs_anchor"] = paired = {
        name: median(paired_ratios(times[name], anchors[name if name in anchors else
                                                        name.removesuffix("_painted")]))
        for name in times if name != "anchor" and not name.startswith(("render", "run"))}
    paired["run"] = median(paired_ratios(times["run"], anchors["run"]))
    checks = {}
    for mode in ("log", "linear"):
        window = out["p50_s"][f"window_{mode}"]
        if size.name == "S":
            limit = max(SMALL_S[0], SMALL_S[1] * anchor + SMALL_S[2])
            checks[f"window_{mode}"] = {"p50_s": window, "limit_s": limit, "pass": window <= limit}
        elif size.name in ("M", "L", "XL"):  # the paired ratio: each change against its own round's anchor
            ratio = paired[f"window_{mode}"]
            checks[f"window_{mode}"] = {"p50_s": window, "paired_ratio": ratio, "limit_ratio": WINDOW_RATIO,
                                        "pass": ratio <= WINDOW_RATIO}
    if size.name in ("M", "L"):
        for mode in SCALE_MODES:
            value = out["p50_s"][f"render_{mode}"]
            checks[f"render_{mode}"] = {"p50_s": value, "limit_s": RENDER_RATIO * anchor,
                                        "pass": value <= RENDER_RATIO * anchor}
    out["checks"] = checks
    return out


def bench_pretrained(tokens: int, rounds: int, root: Path) -> dict:
    from .models import SMOLLM2, bench_edit_vs_eager, write_hf_model

    shape = dataclasses.replace(SMOLLM2, tokens=tokens, name=f"smollm2-135m-{tokens}")
    folder = write_hf_model(shape, root / shape.name)
    r = bench_edit_vs_eager(folder, shape, rounds)
    eager, edit, maps = r["eager_s"]["p50"], r["edit_s"]["p50"], r["edit_maps_s"]["p50"]
    limit = PRETRAINED[0] * eager + PRETRAINED[1]
    # maps: the edit -> every head on screen (the predictions strip's logits follow); edit: -> the strip too
    return {**r, "check": {"edit_p50_s": edit, "maps_p50_s": maps, "eager_p50_s": eager, "limit_s": limit,
                           "pass": maps <= limit, "pass_with_strip": edit <= limit}}


def table(results: dict) -> str:
    sizes = [s for s in results["sizes"] if s in results]
    rows = [("anchor (seed forward) ms", lambda r: f"{r['p50_s']['anchor'] * 1e3:.0f}"),
            ("core.run ms (x anchor)", lambda r: _cell(r, "run")),
            *[(f"render {m} ms (x)", lambda r, m=m: _cell(r, f"render_{m}")) for m in SCALE_MODES],
            ("window log -> shown ms (paired x)", lambda r: _cell(r, "window_log")),
            ("window linear -> shown ms (x)", lambda r: _cell(r, "window_linear")),
            ("window log, new seed ms (x)", lambda r: _cell(r, "window_new_seed")),
            ("window log -> painted ms (x)", lambda r: _cell(r, "window_log_painted"))]
    lines = [f"{'':34}" + "".join(f"{s:>18}" for s in sizes)]
    for label, cell in rows:
        lines.append(f"{label:34}" + "".join(f"{cell(results[s]):>18}" for s in sizes))
    for tokens, r in results.get("pretrained", {}).items():
        c = r["check"]
        lines.append(f"SmolLM2-shaped {tokens} tokens: edit -> heads {c['maps_p50_s'] * 1e3:.0f} ms "
                     f"{'ok' if c['pass'] else 'MISS'}, -> predictions strip {c['edit_p50_s'] * 1e3:.0f} ms "
                     f"{'ok' if c['pass_with_strip'] else 'MISS'}, eager {c['eager_p50_s'] * 1e3:.0f} ms, limit "
                     f"{c['limit_s'] * 1e3:.0f} ms")
    if "L" in results and "view_only" in results["L"]:
        v = results["L"]["view_only"]
        lines.append(f"view-only change at L: worst p50 {v['worst_p50_to_sigshown_s'] * 1e3:.0f} ms "
                     f"({'ok' if v.get('pass') else 'MISS'}, target {VIEW_S * 1e3:.0f} ms)")
    return "\n".join(lines)


def _cell(r: dict, name: str) -> str:
    check = r["checks"].get(name)
    mark = "" if check is None else (" ok" if check["pass"] else " MISS")
    ratio = r["paired_ratio_vs_anchor"].get(name, r["ratio_vs_anchor"][name])  # paired where the rounds pair
    return f"{r['p50_s'][name] * 1e3:.0f} ({ratio:.2f}){mark}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fast", description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="S,M,L", help="comma-separated, of tiny, S, M, L, XL")
    parser.add_argument("--quick", action="store_true", help="3 rounds a size")
    parser.add_argument("--no-pretrained", action="store_true", help="leave the SmolLM2-shaped rows out")
    parser.add_argument("--out", default=str(Path(__file__).with_name("results-fast.json")))
    args = parser.parse_args(argv)
    sizes = parse_sizes(args.sizes)
    results: dict = {"machine": machine_info(), "sizes": [s.name for s in sizes]}
    for size in sizes:
        print(f"[{size.name}] ...", file=sys.stderr, flush=True)
        results[size.name] = bench_size(size, 3 if args.quick else ROUNDS.get(size.name, 5))
    if not args.no_pretrained:
        with tempfile.TemporaryDirectory(prefix="attnviz-fast-") as root:
            results["pretrained"] = {t: bench_pretrained(t, 3 if args.quick else 9, Path(root)) for t in (128, 512)}
    Path(args.out).write_text(json.dumps(results, indent=1, default=str))
    print(table(results))
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
