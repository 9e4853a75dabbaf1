"""The patch view in the real window: a vision model's picture with the query's attention over its patches,
clicks on patches and head tiles, rollout, exports, an image dropped on the window, a bad image keeping the view."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QPoint, Qt
from uihelpers import drop, wait_shown

from attnviz.core import RunConfig
from attnviz.core.analysis.stats import rollout

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))  # the tiny checkpoints' writers
from tiny_vision import draw_picture, make_dinov2_registers  # noqa: E402


@pytest.fixture(scope="module")
def dino(tmp_path_factory):
    pytest.importorskip("transformers")
    pytest.importorskip("PIL")
    root = tmp_path_factory.mktemp("patch-view")
    make_dinov2_registers(root / "dino")
    return root / "dino", draw_picture(root / "shapes.png"), draw_picture(root / "other.png", (50, 50))


def _open(qtbot, window, folder, picture):
    window.panel.set_config(RunConfig(variant="pretrained", model=str(folder), image=str(picture), layer=1))
    dock = window.explain.docks["patchDock"]
    dock.show()
    dock.raise_()
    view = window.explain.patch
    qtbot.waitUntil(lambda: view.frames is not None and not view.frames.message and window.result is not None
                    and window.result.tokens[0] == "[CLS]", timeout=30000)
    wait_shown(qtbot, window)
    return view


def _patch_point(view, r: int, c: int) -> QPoint:
    rect = view.canvas.target()
    rows, cols = view.frames.grid
    return QPoint(int(rect.x() + (c + 0.5) * rect.width() / cols), int(rect.y() + (r + 0.5) * rect.height() / rows))


def test_patch_view_shows_the_query_row_and_follows_clicks(qtbot, window, counting_run, dino):
    folder, picture, _ = dino
    view = _open(qtbot, window, folder, picture)
    w = window.result.stages["weights"][0]
    assert view.frames.query == 0 and len(view.tiles) == w.shape[0]
    np.testing.assert_allclose(view.canvas.values, w[0, 0, 5:].reshape(4, 4), atol=1e-6)
    computed = len(counting_run.calls)
    qtbot.mouseClick(view.canvas, Qt.LeftButton, pos=_patch_point(view, 2, 1))
    token = window.result.tokens.index("r2c1")
    qtbot.waitUntil(lambda: view.frames.query == token, timeout=10000)
    assert len(counting_run.calls) == computed  # a new query re-renders; the model does not run again
    qtbot.mouseClick(view.tiles[3], Qt.LeftButton, pos=QPoint(40, 40))
    assert view.mode == "head" and view.headSpin.value() == 3
    np.testing.assert_allclose(view.canvas.values, w[3, token, 5:].reshape(4, 4), atol=1e-6)
    view.modeCombo.setCurrentIndex(view.modeCombo.findData("rollout"))
    rolled = rollout(window.result.layer_weights)[0]
    np.testing.assert_allclose(view.canvas.values, rolled[token, 5:].reshape(4, 4), atol=1e-6)
    qtbot.mouseClick(view.clsButton, Qt.LeftButton)
    qtbot.waitUntil(lambda: view.frames.query == 0, timeout=10000)


def test_patch_export_png_and_svg(qtbot, window, dino, tmp_path):
    folder, picture, _ = dino
    _open(qtbot, window, folder, picture)
    png = window.explain.export("patch", str(tmp_path / "patch.png"))
    svg = window.explain.export("patch", str(tmp_path / "patch.svg"))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert svg.read_text().count("<rect") == 16


def test_an_image_dropped_on_the_window_becomes_the_input(qtbot, window, dino):
    folder, picture, other = dino
    _open(qtbot, window, folder, picture)
    drop(window, other)
    assert window.panel.widgets["image"].path() == str(other)
    qtbot.waitUntil(lambda: window.result.config.image == str(other), timeout=30000)


def test_a_bad_image_keeps_the_last_view(qtbot, window, dino, tmp_path):
    folder, picture, _ = dino
    view = _open(qtbot, window, folder, picture)
    shown = window.result
    bad = tmp_path / "not-a-picture.png"
    bad.write_text("not an image")
    window.panel.widgets["image"].set_path(str(bad))
    qtbot.waitUntil(lambda: window.panel._error_field == "image", timeout=30000)
    assert window.result is shown and view.frames is not None and not view.frames.message
