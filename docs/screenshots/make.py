"""Make the README's "Using the app" screenshots: the real MainWindow, offscreen, at 1600 x 1000.

    python docs/screenshots/make.py --minilm DIR --smollm FILE.gguf [--out DIR] [--only NAME ...]

--minilm is a local all-MiniLM-L6-v2 folder (config.json, model.safetensors, tokenizer.json), --smollm
SmolLM2-135M-Instruct's Q4_1 GGUF file; nothing is downloaded. Before each grab the window shows its newest
request and a background panel holds its own result. A PNG over MAX_BYTES is scaled to SMALL_WIDTH wide
(smooth). The window starts from empty settings (a temporary file), so the user's own are never read or written.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QPointF, QSettings, Qt  # noqa: E402
from PySide6.QtGui import QImage  # noqa: E402
from PySide6.QtTest import QTest  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from attnviz.core import RunConfig, load_preset  # noqa: E402
from attnviz.ui import MainWindow  # noqa: E402

W, H = 1600, 1000
MAX_BYTES, SMALL_WIDTH = 400_000, 1200
SENTENCE = "The cat sat on the mat because it was tired."
REPEAT = "1 2 3 4 5 6 7 8 9 10, the cat sat on the mat. " * 2
COUNT = "Monday, Tuesday, Wednesday,"


def wait(until: Callable[[], bool], timeout: float = 120.0, what: str = "") -> None:
    """Let Qt run until `until()` holds; a view that never settles is an error, not a silent grab."""
    end = time.monotonic() + timeout
    while not until():
        if time.monotonic() > end:
            raise TimeoutError(f"waited {timeout:.0f} s for {what or until}")
        QApplication.processEvents()
        time.sleep(0.02)


def settle(w: MainWindow, timeout: float = 300.0) -> None:
    wait(lambda: w.is_settled() and w.shown_id > 0, timeout, "the window to settle")
    QTest.qWait(300)  # the last repaints


def open_panel(w: MainWindow, name: str) -> None:
    """As the View menu does: the panel's tab, in front."""
    if name == "modelDock":
        w.modelDock.raise_()
        dock = w.modelDock
    else:
        dock = w.explain.docks[name]
        if not dock.isVisible():
            dock.toggleViewAction().trigger()
        dock.raise_()
    wait(lambda: w.rect().contains(dock.geometry()), 10, f"{name} in front")
    settle(w)


def close_panel(w: MainWindow, name: str) -> None:
    dock = w.explain.docks[name]
    if dock.isVisible():
        dock.toggleViewAction().trigger()
    wait(lambda: not dock.isVisible(), 10, f"{name} closed")
    settle(w)


def load(w: MainWindow, config: RunConfig, timeout: float = 300.0) -> None:
    w.panel.set_config(config)
    settle(w, timeout)
    if w.last_error is not None:
        raise RuntimeError(f"{config.variant}: {w.statusLabel.text()}")


def model_view_composed(w: MainWindow) -> None:
    wait(lambda: w.modelView.drawn is w.result.source is not None, 60, "the model view's tiles")
    QTest.qWait(300)


def alt_click_tile(w: MainWindow, layer: int, head: int) -> None:
    """Alt+click on the model view's tile of (layer, head): that head is ablated."""
    view = w.modelView
    x = view.columns[head] + view.tile / 2
    y = view.tops[view.rows.index((view.source.stack, layer))] + view.tile / 2
    pos = view.mapFromScene(view.plot.getViewBox().mapViewToScene(QPointF(x, y)))
    QTest.mouseClick(view.viewport(), Qt.LeftButton, Qt.AltModifier, pos)
    settle(w)


def save(w: MainWindow, out: Path, name: str) -> None:
    path = out / f"{name}.png"
    image = w.grab().toImage()
    image.save(str(path))
    if path.stat().st_size > MAX_BYTES:
        image.scaledToWidth(SMALL_WIDTH, Qt.SmoothTransformation).convertToFormat(QImage.Format_RGB888).save(str(path))
    print(f"{path}  {path.stat().st_size // 1000} kB  {w.statusLabel.text()}", flush=True)


def toy_views(w: MainWindow, out: Path, only: set[str]) -> None:
    """The launch view, then toy-induction: as it opens, with a head ablated, compared with the unablated run,
    and which heads matter."""
    if want(only, "main-window"):
        save(w, out, "main-window")
    if not only & {"toy-induction", "ablation", "compare", "head-effects"} and only:
        return
    load(w, load_preset("toy-induction"))
    open_panel(w, "modelDock")
    model_view_composed(w)
    if want(only, "toy-induction"):
        save(w, out, "toy-induction")
    alt_click_tile(w, 0, 1)  # the previous-token head: layer 1 reads its output, so its maps change too
    if want(only, "ablation"):
        save(w, out, "ablation")
    if want(only, "compare"):
        open_panel(w, "compareDock")
        w.explain.compare.unablatedButton.click()
        settle(w)
        wait(lambda: "compare" in w.frames.extras, 60, "the comparison")
        QTest.qWait(300)
        save(w, out, "compare")
        close_panel(w, "compareDock")
    w.panel.widgets["ablate"].setText("")
    settle(w)
    if want(only, "head-effects"):
        open_panel(w, "headEffectsDock")
        effects = w.explain.effects
        wait(lambda: effects.effects is not None and effects.job.key is None, 300, "the head effects")
        QTest.qWait(300)
        save(w, out, "head-effects")
        close_panel(w, "headEffectsDock")


def minilm_views(w: MainWindow, out: Path, folder: str, only: set[str]) -> None:
    """all-MiniLM-L6-v2 on a sentence: the model view, then each panel alone in front of it."""
    load(w, RunConfig(variant="pretrained", model=folder, text=SENTENCE, layer=5))
    open_panel(w, "modelDock")
    model_view_composed(w)
    if want(only, "minilm-app"):
        save(w, out, "minilm-app")
    explain = w.explain
    panels = {
        "statistics": ("statsDock", lambda: explain.stats.frames is not None),
        "pipeline": ("pipelineDock", lambda: explain.pipeline.frames is not None),
        "focus": ("focusDock", lambda: explain.focus.frames is not None),
        "rollout": ("rolloutDock", lambda: explain.rollout.frames is not None
                    and explain.rollout.frames.data is not None),
    }
    for name, (dock, done) in panels.items():
        if not want(only, name):
            continue
        open_panel(w, dock)
        if name == "focus":
            explain.focus.toggle(w.result.tokens.index("it"))
            settle(w)
        wait(done, 60, name)
        QTest.qWait(300)
        save(w, out, name)
        close_panel(w, dock)


def smollm_views(w: MainWindow, out: Path, gguf: str, only: set[str]) -> None:
    """SmolLM2-135M from its GGUF file: the logit lens on a repeated text, then a generation."""
    load(w, RunConfig(variant="pretrained", model=gguf, text=REPEAT, layer=18), timeout=600)
    if want(only, "logit-lens"):
        open_panel(w, "lensDock")
        wait(lambda: explain_lens_rows(w) > 0, 60, "the lens")
        w.explain.lens.table.scrollToBottom()  # the last layers, where the prediction forms
        QTest.qWait(300)
        save(w, out, "logit-lens")
        close_panel(w, "lensDock")
    if want(only, "generation"):
        w.panel.widgets["text"].setText(COUNT)
        settle(w)
        w.panel.widgets["generate"].setValue(12)
        settle(w, 600)
        w.stepSlider.setValue(4)
        QTest.qWait(500)
        save(w, out, "generation")


def explain_lens_rows(w: MainWindow) -> int:
    return w.explain.lens.table.model().rowCount()


def pooled_view(w: MainWindow, out: Path) -> None:
    """A seed variant at 4,096 tokens, pooled inside the kernel: the status line says by how much."""
    load(w, RunConfig(variant="causal", seq_q=4096, seq_kv=4096, pool="always", position="rope"), timeout=600)
    save(w, out, "pooled")


def want(only: set[str], name: str) -> bool:
    return not only or name in only


VIEWS = ["main-window", "toy-induction", "ablation", "compare", "head-effects", "minilm-app", "statistics",
         "pipeline", "focus", "rollout", "logit-lens", "generation", "pooled"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minilm", required=True, help="a local all-MiniLM-L6-v2 folder")
    parser.add_argument("--smollm", required=True, help="SmolLM2-135M-Instruct's Q4_1 .gguf file")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent, help="where the PNGs go")
    parser.add_argument("--only", nargs="*", choices=VIEWS, default=[], help="make only these views")
    args = parser.parse_args(argv)
    only = set(args.only)
    app = QApplication.instance() or QApplication([])
    with tempfile.TemporaryDirectory() as tmp:
        w = MainWindow(settings=QSettings(str(Path(tmp) / "attnviz.ini"), QSettings.IniFormat))
        w.resize(W, H)
        w.show()
        settle(w)
        toy_views(w, args.out, only)
        if only & {"minilm-app", "statistics", "pipeline", "focus", "rollout"} or not only:
            minilm_views(w, args.out, args.minilm, only)
        if only & {"logit-lens", "generation"} or not only:
            smollm_views(w, args.out, args.smollm, only)
        if want(only, "pooled"):
            pooled_view(w, args.out)
        w.close()
    app.processEvents()


if __name__ == "__main__":
    main()
