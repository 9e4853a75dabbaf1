"""Activation patching: patch_heads against one eager forward per head, in the same process.

    python -m benchmarks.patching            # benchmarks/results-patching.json and a table on stdout
    python -m benchmarks.patching --quick    # 3 rounds; the eager loop over a tenth of the heads, scaled
    python -m benchmarks.patching --tiny     # the smoke test's size

`patch_heads`: attnviz.core.patch_heads on a SmolLM2-135M-shaped llama (30 layers x 9 heads = 270 heads, 3 KV
heads, width 576, vocab 49152, random float32 weights written with transformers) at 32 tokens: each head's
output copied from a clean text into a corrupted one (one word changed), the logit difference of two words at
the last position. The anchor is the loop a notebook writes: transformers' eager AutoModelForCausalLM
(attn_implementation="eager", inference mode), one clean forward caching every o_proj input, one corrupted
forward, then one corrupted forward per head with a forward pre-hook on its layer's o_proj copying that head's
slice from the clean cache. Target: patch_heads / the eager loop <= 1.0. Rounds alternate the two.

`window` (skipped with --no-window): the same patching started from the Patching panel of an offscreen
MainWindow showing that model and text, a 5 ms GUI-thread timer recording the longest gap between its ticks
while it runs (benchmarks.gui's StallMonitor). Target: longest stall <= 50 ms.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from .common import BENCH_DIR, code_state, load_average, log, machine_info, median
from .models import HfShape, text_of, written_model

TARGET_RATIO = 1.0
TOKENS = 32
ANSWER, WRONG = "w3", "w5"


def _eager_patching_loop(model, clean, corrupted, pairs, head_dim: int, answer: int, wrong: int) -> float:
    """Seconds for the clean and corrupted forwards and one corrupted forward per (layer, head) patched."""
    import torch

    t0 = time.perf_counter()
    cached = {}
    layers = model.model.layers
    hooks = [layer.self_attn.o_proj.register_forward_pre_hook(lambda m, a, i=i: cached.__setitem__(i, a[0]))
             for i, layer in enumerate(layers)]
    with torch.inference_mode():
        model(input_ids=clean).logits  # noqa: B018 - the forward is the measurement
        for h in hooks:
            h.remove()
        model(input_ids=corrupted).logits  # noqa: B018
        for layer, head in pairs:
            cut = slice(head * head_dim, (head + 1) * head_dim)

            def patch(module, args, layer=layer, cut=cut):
                x = args[0].clone()
                x[..., cut] = cached[layer][..., cut]
                return (x,)
            handle = layers[layer].self_attn.o_proj.register_forward_pre_hook(patch)
            logits = model(input_ids=corrupted).logits[0, -1]
            float(logits[answer] - logits[wrong])
            handle.remove()
    return time.perf_counter() - t0


def bench_patch_heads(folder: Path, shape: HfShape, rounds: int, fraction: float) -> dict:
    import torch
    import transformers

    from attnviz.core import RunConfig, patch_heads
    from attnviz.models import load_model

    clean_text, corrupted_text = text_of(shape), text_of(shape, 1)
    config = RunConfig.for_variant("pretrained", model=str(folder), text=clean_text)
    model = load_model(folder)
    clean, corrupted = (torch.tensor([model.encode(t).ids]) for t in (clean_text, corrupted_text))
    answer, wrong = (model.tokenizer.encode(t, False).ids[0] for t in (ANSWER, WRONG))
    eager = transformers.AutoModelForCausalLM.from_pretrained(
        str(folder), attn_implementation="eager", dtype=torch.float32, local_files_only=True).eval()
    pairs = [(layer, head) for layer in range(shape.layers) for head in range(shape.heads)]
    timed = pairs[::round(1 / fraction)] if fraction < 1 else pairs
    patch_heads(config, corrupted_text, ANSWER, WRONG)  # warm-up
    ours, theirs, loads = [], [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        patch_heads(config, corrupted_text, ANSWER, WRONG)
        ours.append(time.perf_counter() - t0)
        seconds = _eager_patching_loop(eager, clean, corrupted, timed, shape.width // shape.heads, answer, wrong)
        theirs.append(seconds * (len(pairs) + 2) / (len(timed) + 2))
        loads.append(load_average())
    ratio = median(ours) / median(theirs)
    return {"heads": len(pairs), "tokens": int(clean.shape[1]), "rounds": rounds, "threads": torch.get_num_threads(),
            "patch_heads_s": ours, "eager_loop_s": theirs, "eager_heads_timed": len(timed),
            "eager_extrapolated": len(timed) < len(pairs), "ratio": ratio, "target": TARGET_RATIO,
            "pass": ratio <= TARGET_RATIO, "load_average": loads}


def bench_window(folder: Path, shape: HfShape) -> dict:
    """The longest GUI-thread stall while the Patching panel computes (see the module docstring)."""
    from PySide6.QtCore import QEventLoop, QTimer

    from attnviz.core import RunConfig
    from attnviz.ui import MainWindow

    from .gui import STALL_TARGET_S, WINDOW_SIZE, _make_classes, qapp

    app = qapp()
    _, StallMonitor, _ = _make_classes()  # noqa: N806
    window = MainWindow()
    window.resize(*WINDOW_SIZE)
    window.show()
    window.panel.set_config(RunConfig.for_variant("pretrained", model=str(folder), text=text_of(shape)))
    t_end = time.perf_counter() + 600
    while (window.result is None or window.result.config.variant != "pretrained") and time.perf_counter() < t_end:
        app.processEvents()
        time.sleep(0.01)
    dock = window.explain.docks["patchingDock"]
    dock.show()
    dock.raise_()
    settle = time.perf_counter() + 3  # the run the dock's opening asks for, delivered and painted
    while time.perf_counter() < settle:
        app.processEvents()
        time.sleep(0.01)
    view = window.explain.patching
    view.corruptedEdit.setText(text_of(shape, 1))
    view.answerEdit.setText(ANSWER)
    view.wrongEdit.setText(WRONG)
    loop, monitor = QEventLoop(), StallMonitor(5)
    view.job.sigDone.connect(lambda *_: loop.quit())
    view.job.sigFailed.connect(lambda *_: loop.quit())
    QTimer.singleShot(600_000, loop.quit)
    monitor.start()
    t0 = time.perf_counter()
    view.computeButton.click()
    loop.exec()
    seconds, stats = time.perf_counter() - t0, monitor.stats()
    monitor.stop()
    done = view.scores is not None
    window.close()
    return {"seconds": seconds, "completed": done, **stats, "target_s": STALL_TARGET_S,
            "pass": done and stats["longest_stall_s"] <= STALL_TARGET_S, "load_average": load_average()}


def table(result: dict) -> str:
    e = result["patch_heads"]
    scaled = f" (eager: {e['eager_heads_timed']} heads timed, scaled)" if e["eager_extrapolated"] else ""
    return "\n".join([
        f"patch_heads, {e['heads']} heads at {e['tokens']} tokens, {e['threads']} threads{scaled}",
        f"  patch_heads         {median(e['patch_heads_s']):8.2f} s",
        f"  eager, one per head {median(e['eager_loop_s']):8.2f} s",
        f"  ratio {e['ratio']:.3f} (target <= {e['target']}) {'PASS' if e['pass'] else 'FAIL'}",
    ] + ([] if "window" not in result else [
        f"Patching panel: {result['window']['seconds']:.1f} s, longest GUI stall "
        f"{result['window']['longest_stall_s'] * 1e3:.1f} ms (target <= 50 ms) "
        f"{'PASS' if result['window']['pass'] else 'FAIL'}"]))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.patching", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer rounds; the eager loop over a tenth of the heads")
    p.add_argument("--tiny", action="store_true", help="a tiny model (the smoke test)")
    p.add_argument("--no-window", action="store_true", help="leave out the Patching panel's GUI stall")
    p.add_argument("--output", default=str(BENCH_DIR / "results-patching.json"))
    args = p.parse_args(argv)
    with written_model(args.tiny, TOKENS, "attnviz-patching-") as (folder, shape):
        log(f"patch_heads on {shape.name} at {shape.tokens} tokens")
        result = {"schema": "attnviz-benchmarks-patching/1", "machine": machine_info(), "code": code_state(),
                  "patch_heads": bench_patch_heads(folder, shape, 1 if args.tiny else 3 if args.quick else 5,
                                                   0.1 if args.quick else 1.0)}
        if not args.no_window:
            result["window"] = bench_window(folder, shape)
    Path(args.output).write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
