"""A vision transformer from image to every head on screen, against transformers' eager forward in the same run.

    python -m benchmarks.vision           # ViT-B/16-shaped: 12 layers, 12 heads, width 768, 224 px, 197 tokens
    python -m benchmarks.vision --tiny    # a smoke run on a tiny ViT (seconds)

Random weights written with transformers into a temporary folder (with its image processor), removed at the end.
Interleaved round by round, in rotating order (benchmarks.common.interleaved):
- `edit`: the offscreen MainWindow's Image changed to a new picture file -> that request on screen (sigShown:
  every head of the layer in the head grid, the model view and the patch view drawn), as benchmarks/models.py
  times a text edit;
- `eager`: transformers' own path for the same step: Pillow reads the file, the folder's image processor makes
  the pixels, ViTModel (attn_implementation="eager", output_attentions=True, inference mode) runs them, at the
  torch thread count the worker's last forward used;
- `eager_forward`: that forward alone (the pixels ready).
Target: edit p50 <= 1.3 x eager p50. Writes benchmarks/results-vision.json with the load average around it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from .common import interleaved, log, machine_info, median, paired_ratios, summary
from .models import Watch, Window

RATIO = 1.3
RESULTS = Path(__file__).with_name("results-vision.json")
VIT_B = dict(image_size=224, patch_size=16, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
             intermediate_size=3072)
TINY = dict(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=48)


def write_vit(folder: Path, shape: dict) -> Path:
    import torch
    import transformers as tf

    torch.manual_seed(0)
    tf.ViTModel(tf.ViTConfig(**shape, initializer_range=0.2)).save_pretrained(folder)
    size = shape["image_size"]
    tf.ViTImageProcessor(size={"height": size, "width": size}).save_pretrained(folder)
    return folder


def write_pictures(folder: Path, n: int, size: tuple[int, int] = (320, 240)) -> list[Path]:
    """n different pictures (shapes moved along), so every edit is a new input."""
    from PIL import Image, ImageDraw

    paths = []
    for i in range(n):
        im = Image.new("RGB", size, (30 + 5 * i % 200, 60, 200))
        d = ImageDraw.Draw(im)
        x = 10 + (i * 17) % (size[0] - 120)
        d.ellipse((x, 20, x + 100, 120), fill=(250, 220, 10))
        d.rectangle((size[0] - x - 90, 110, size[0] - x, 220), fill=(200, 20, 20))
        paths.append(folder / f"picture{i}.png")
        im.save(paths[-1])
    return paths


class VisionWindow(Window):
    """benchmarks.models.Window on a vision folder: the patch view open, each change a new image."""

    def __init__(self, folder: Path, picture: Path):  # noqa: D107 - Window's setup, with an image for the text
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
        from PySide6.QtWidgets import QApplication

        from attnviz.ui import MainWindow

        self.app = QApplication.instance() or QApplication([])
        self.w = w = MainWindow()
        w.resize(1600, 1000)
        w.show()
        self.parts = {"worker_s": [], "forward_s": [], "threads": [], "blocking": [], "maps_s": []}
        self._maps_at, self.maps_s = {}, []
        w.sigShown.connect(lambda rid: self._maps_at.setdefault(rid, time.perf_counter()))
        self._worker_s = 0.0
        self._shown = w.delivery.arrived
        w.worker.sigDone.disconnect(w.delivery.arrived)
        w.worker.sigDone.connect(self._on_done)
        dock = w.explain.docks["patchDock"]
        dock.show()
        dock.raise_()
        variant = w.panel.widgets["variant"]
        self.shown_after(lambda: variant.setCurrentIndex(variant.findData("pretrained")))
        self.shown_after(lambda: w.panel.widgets["text"].setText(""))
        self.shown_after(lambda: w.panel.widgets["image"].set_path(str(picture)))
        self.shown_after(lambda: w.panel.widgets["model"].set_folder(str(folder)))
        assert w.last_error is None, w.last_error

    def image(self, picture: Path) -> float:
        dt = self.shown_after(lambda: self.w.panel.widgets["image"].set_path(str(picture)))
        assert self.w.last_error is None, self.w.last_error
        assert self.w.explain.patch.frames is not None and not self.w.explain.patch.frames.message
        self.parts["worker_s"].append(self._worker_s)
        self.parts["maps_s"].append(self.maps_s[-1])
        self.parts["forward_s"].append(self.w.result.compute_time_s)
        self.parts["threads"].append(self.w.worker.threads_used)
        return dt


def eager_parts(folder: Path):
    import torch
    import transformers as tf
    from PIL import Image

    model = tf.ViTModel.from_pretrained(str(folder), attn_implementation="eager", dtype=torch.float32,
                                        local_files_only=True).eval()
    processor = tf.AutoImageProcessor.from_pretrained(str(folder), local_files_only=True)

    def forward(pixels):
        with torch.inference_mode():
            return model(pixel_values=pixels, output_attentions=True).attentions

    def whole(path: Path):
        with Image.open(path) as im:
            pixels = processor(images=im.convert("RGB"), return_tensors="pt")["pixel_values"]
        return forward(pixels)
    return processor, forward, whole


def bench(folder: Path, pictures: list[Path], repeats: int) -> dict:
    from PIL import Image

    from attnviz.system import set_torch_threads, torch_threads

    win = VisionWindow(folder, pictures[0])
    try:
        with torch_threads(max(1, win.w.worker.threads_used)):  # as the worker's last forward; after: as before
            processor, forward, whole = eager_parts(folder)
            pixels = processor(images=Image.open(pictures[0]).convert("RGB"), return_tensors="pt")["pixel_values"]
            fresh, again = itertools.cycle(pictures[1:]), itertools.cycle(pictures)
            contenders = {"edit": lambda: win.image(next(fresh)), "eager": lambda: whole(next(again)),
                          "eager_forward": lambda: forward(pixels)}
            watch = Watch()
            times = interleaved(contenders, repeats, warmup=1,
                                between=lambda: set_torch_threads(max(1, win.w.worker.threads_used)))
            machine = watch.done()
            shape = win.w.result.weights.shape
    finally:
        win.close()
    return _summary(times, win, shape, machine)


def _summary(times: dict, win: VisionWindow, shape, machine: dict) -> dict:
    s = {name: summary(ts) for name, ts in times.items()}
    ratio = s["edit"]["p50"] / s["eager"]["p50"]
    return {"edit_s": s["edit"], "eager_s": s["eager"], "eager_forward_s": s["eager_forward"],
            "worker_s": summary(win.parts["worker_s"]), "forward_s": summary(win.parts["forward_s"]),
            "threads": sorted(set(win.parts["threads"])), "heads": int(shape[1]), "tokens": int(shape[-1]),
            "ratio_edit_vs_eager": ratio, "paired_ratio_edit_vs_eager": median(paired_ratios(times["edit"],
                                                                                              times["eager"])),
            "ratio_edit_vs_eager_forward": s["edit"]["p50"] / s["eager_forward"]["p50"],
            "target": f"edit p50 <= {RATIO} x eager p50 (image file -> attention weights)", "pass": ratio <= RATIO,
            **machine}


def table(r: dict) -> str:
    ms = 1e3
    return "\n".join([
        f"vision ({r['shape']}): {r['layers']} layers x {r['heads']} heads, {r['tokens']} tokens, "
        f"threads {r['threads']}",
        f"  image -> every head on screen  p50 {r['edit_s']['p50'] * ms:8.1f} ms  "
        f"(worker {r['worker_s']['p50'] * ms:.1f}, forward {r['forward_s']['p50'] * ms:.1f})",
        f"  eager: file -> weights         p50 {r['eager_s']['p50'] * ms:8.1f} ms",
        f"  eager forward alone            p50 {r['eager_forward_s']['p50'] * ms:8.1f} ms",
        f"  ratio edit / eager {r['ratio_edit_vs_eager']:.2f} (paired {r['paired_ratio_edit_vs_eager']:.2f}); "
        f"target <= {RATIO}: {'pass' if r['pass'] else 'FAIL'}; loadavg {r['loadavg']}"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.vision", description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="a tiny ViT and a few rounds (a smoke run)")
    parser.add_argument("--repeats", type=int, default=None, help="timed rounds (default 12; --tiny: 3)")
    parser.add_argument("--output", type=Path, default=RESULTS, help=f"the JSON written (default {RESULTS.name})")
    args = parser.parse_args(argv)
    shape, repeats = (TINY, 3) if args.tiny else (VIT_B, 12)
    repeats = args.repeats or repeats
    with tempfile.TemporaryDirectory(prefix="attnviz-vision-") as tmp:
        root = Path(tmp)
        log("writing the random ViT ...")
        folder = write_vit(root / "vit", shape)
        pictures = write_pictures(root, repeats + 3)
        log("timing ...")
        result = {"shape": "tiny" if args.tiny else "ViT-B/16", "layers": shape["num_hidden_layers"],
                  **bench(folder, pictures, repeats)}
    result["machine"] = machine_info()
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))
    return 0 if result["pass"] or args.tiny else 1


if __name__ == "__main__":
    sys.exit(main())
