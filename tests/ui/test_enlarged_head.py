"""The enlarged head and a zoomed block keep square cells and label every token that fits, however the docks are
arranged; the docks leave the maps their share of the window, and a dragged split is kept and remembered."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, QSettings, Qt
from PySide6.QtTest import QTest
from uihelpers import wait_shown

from attnviz.core import RunConfig
from attnviz.ui import MainWindow

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))  # the tiny checkpoints' writers
from tiny import SENTENCE, make_family  # noqa: E402

DOCK_SETS = {0: [], 1: ["statsDock"], 3: ["statsDock", "pipelineDock", "lensDock"]}


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """A tiny causal model with tokens on both axes (the Logit lens has something to show)."""
    pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp("enlarged") / "llama"
    folder.mkdir()
    make_family(folder, "llama")
    return folder


def window(qtbot, size, config=None, settings=None) -> MainWindow:
    w = MainWindow(settings=settings)
    qtbot.addWidget(w)
    w.resize(*size)
    w.show()
    wait_shown(qtbot, w)
    if config is not None:
        w.panel.set_config(config)
        wait_shown(qtbot, w, timeout=30000)
    return w


def show_docks(qtbot, w, names) -> None:
    """Only `names` open (the model view and the tensor view closed too), as the View menu does."""
    w.modelDock.setVisible(False)
    w.tensorDock.setVisible(False)
    for name, dock in w.explain.docks.items():
        if dock.isVisible() != (name in names):
            dock.toggleViewAction().trigger()
    for name in names:
        w.explain.docks[name].raise_()
    qtbot.waitUntil(lambda: all(w.explain.docks[n].isVisible() for n in names), timeout=5000)
    qtbot.wait(50)  # the split is kept on the next loop pass
    wait_shown(qtbot, w, timeout=30000)


def cell_sides(w) -> tuple[float, float]:
    """One cell's on-screen width and height in the head grid's widget (device-independent pixels)."""
    grid, mosaic = w.headGrid, w.headGrid.mosaic
    rows, cols = mosaic.map_shape
    box = grid.mapFromScene(mosaic.mapRectToScene(mosaic.rects[0])).boundingRect()
    return box.width() / cols, box.height() / rows


@pytest.mark.parametrize("size", [(1280, 800), (1600, 1000)])
def test_the_enlarged_head_has_square_cells_and_every_label_with_0_1_and_3_docks(qtbot, llama, tmp_path, size):
    w = window(qtbot, size, RunConfig(variant="pretrained", model=str(llama), text=SENTENCE))
    n = len(w.result.tokens)
    for count, names in DOCK_SETS.items():
        show_docks(qtbot, w, names)
        w.headGrid.set_focus(1)
        wait_shown(qtbot, w)
        w.grab().save(str(tmp_path / f"enlarged-{size[0]}x{size[1]}-{count}docks.png"))
        if count == 1:
            assert w.headGrid.height() >= 0.45 * w.height(), (w.headGrid.height(), w.height())
        width, height = cell_sides(w)
        assert abs(width - height) <= 1.0 and height >= 8, (count, width, height)  # a readable row
        left, bottom = w.headGrid.mosaic.tick_labels(0)
        assert [label for _, label in left] == list(w.headGrid.mosaic.tokens[0]) and len(left) == n
        assert len(bottom) == n  # every key too (upright where they are wider than a column)
    w.close()


def test_a_zoomed_block_and_a_long_thin_map_keep_square_cells(qtbot):
    w = window(qtbot, (1280, 800), RunConfig.for_variant("cross", seq_q=4, seq_kv=48, d_model=32, heads=2))
    w.headGrid.set_focus(0)  # 4 x 48: square cells, the map a strip 12 times wider than tall
    wait_shown(qtbot, w)
    width, height = cell_sides(w)
    assert abs(width - height) <= 1.0
    w.headGrid.set_focus(None)
    wait_shown(qtbot, w)
    w.zoom_to((0, 2, 0, 40))  # a block 2 x 40
    qtbot.waitUntil(lambda: w.headGrid.zoom is not None, timeout=10000)
    width, height = cell_sides(w)
    assert abs(width - height) <= 1.0
    w.close()


def drag_split(qtbot, w, dy: int) -> None:
    """Drag the separator between the maps and the bottom docks by dy px, as a user does."""
    central, dock = w.centralWidget().geometry(), w.modelDock.geometry()
    start = QPoint(dock.center().x(), (central.bottom() + dock.top()) // 2)
    QTest.mousePress(w, Qt.LeftButton, Qt.NoModifier, start)
    for step in range(1, 11):
        QTest.mouseMove(w, start + QPoint(0, dy * step // 10))
        qtbot.wait(10)
    QTest.mouseRelease(w, Qt.LeftButton, Qt.NoModifier, start + QPoint(0, dy))
    qtbot.wait(50)


def test_the_split_is_kept_as_the_window_resizes_and_remembered(qtbot, tmp_path):
    ini = str(tmp_path / "attnviz.ini")
    w = window(qtbot, (1280, 800), settings=QSettings(ini, QSettings.IniFormat))
    assert w.headGrid.height() >= 0.45 * w.height()  # the default, with the model and tensor views open
    drag_split(qtbot, w, -100)  # the docks taller
    share = w.headGrid.height() / w.height()
    assert share < 0.42
    w.resize(1600, 1000)
    qtbot.waitUntil(lambda: abs(w.headGrid.height() / w.height() - share) < 0.01, timeout=5000)
    w.close()
    again = window(qtbot, (1280, 800), settings=QSettings(ini, QSettings.IniFormat))
    qtbot.waitUntil(lambda: abs(again.headGrid.height() / again.height() - share) < 0.01, timeout=5000)
    again.close()
