"""The tabbed panel area is usable beside maps that keep their share: at 1280 x 800 and 1600 x 1000, Statistics
shows a screenful of heads' rows and a readable layer x head overview of a 30-layer model, whether it opens as a
tab beside the model view (the window as it starts) or alone."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from uihelpers import open_dock, wait_shown

from attnviz.core import RunConfig
from attnviz.ui import MainWindow

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))  # the tiny checkpoints' writers
from tiny import SENTENCE, make_family  # noqa: E402

# (window size, rows of Statistics, the panel's px, the overview's px). Before, beside the model view: 1280 x 800
# 3.0 rows in 123 px (and 1,356 px wide), 1600 x 1000 8.3 rows in 229 px
ROOM = [((1280, 800), 6, 200, 60), ((1600, 1000), 10, 290, 150)]


@pytest.fixture(scope="module")
def deep(tmp_path_factory):
    pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp("room") / "deep"
    folder.mkdir()
    make_family(folder, "bert", num_hidden_layers=30)
    return folder


@pytest.mark.parametrize("alone", [False, True], ids=["beside-the-model-view", "alone"])
@pytest.mark.parametrize(("size", "rows", "panel", "overview"), ROOM, ids=["1280x800", "1600x1000"])
def test_statistics_shows_rows_and_an_overview_beside_the_maps(qtbot, deep, size, rows, panel, overview, alone):
    w = MainWindow()
    qtbot.addWidget(w)
    w.resize(*size)
    w.show()
    wait_shown(qtbot, w)
    w.panel.set_config(RunConfig(variant="pretrained", model=str(deep), text=SENTENCE))
    wait_shown(qtbot, w, timeout=30000)
    if alone:
        w.modelDock.close()
        w.tensorDock.close()
    open_dock(w, qtbot, "statsDock")
    stats = w.explain.stats
    qtbot.waitUntil(lambda: stats.frames is not None and stats.frames.layers is not None, timeout=15000)
    qtbot.waitUntil(lambda: abs(w.headGrid.height() - w.grid_share * w.height()) <= 2, timeout=5000)
    qtbot.wait(50)
    table = stats.table
    assert w.size().toTuple() == size  # the window fits the screen it was sized for
    assert table.viewport().height() / table.rowHeight(0) >= rows
    assert w.explain.docks["statsDock"].widget().height() >= panel  # the panel's own room, under its tab
    assert stats.overview.getPlotItem().getViewBox().height() >= overview  # 30 layers, each a few px
    assert w.headGrid.height() >= 0.45 * w.height()  # the maps keep their share
    w.close()


def small_window(qtbot) -> MainWindow:
    w = MainWindow()
    qtbot.addWidget(w)
    w.resize(1280, 800)
    w.show()
    wait_shown(qtbot, w)
    return w


def test_the_hovered_cell_takes_the_captions_place_until_the_mouse_leaves_the_maps(qtbot):
    from PySide6.QtCore import QEvent
    from PySide6.QtWidgets import QApplication

    w = small_window(qtbot)
    bar, grid = w.infoBar, w.headGrid
    height, caption = bar.height(), w.captionLabel.text()
    assert caption and not bar.hovering() and w.captionLabel.isVisible() and not w.hoverLabel.isVisible()
    grid._hovered(grid.cell_scene_pos(0, 1.2, 1.2))
    assert bar.hovering() and w.hoverLabel.isVisible() and not w.captionLabel.isVisible()
    assert "query i=1, key j=1" in w.hoverLabel.text()
    assert bar.height() == height  # one bar: a short hover text never lays the maps out again
    QApplication.sendEvent(grid, QEvent(QEvent.Leave))  # the mouse leaves the maps (for somewhere else)
    qtbot.waitUntil(lambda: not bar.hovering())
    assert w.captionLabel.isVisible() and w.captionLabel.text() == caption
    w.close()


def tab_of(w: MainWindow, dock):
    """The dock area's tab bar and the index of `dock`'s tab on it."""
    from PySide6.QtWidgets import QTabBar

    for bar in w.findChildren(QTabBar):
        if bar.parentWidget() is w and bar.isVisible():
            for i in range(bar.count()):
                if bar.tabText(i) == dock.windowTitle():
                    return bar, i
    raise AssertionError(f"no tab for {dock.objectName()}")


def test_a_tabbed_dock_has_no_title_bar_and_its_tab_floats_or_closes_it(qtbot):
    from PySide6.QtCore import QEvent, QPointF, Qt
    from PySide6.QtGui import QHelpEvent, QMouseEvent
    from PySide6.QtWidgets import QApplication, QToolTip

    from attnviz.ui.window.layout import BareTitle

    w = small_window(qtbot)
    stats, model = w.explain.docks["statsDock"], w.modelDock
    assert not isinstance(model.titleBarWidget(), BareTitle)  # alone in its place: its title bar names it
    open_dock(w, qtbot, "statsDock")
    qtbot.waitUntil(lambda: isinstance(stats.titleBarWidget(), BareTitle))
    assert isinstance(model.titleBarWidget(), BareTitle) and not isinstance(w.tensorDock.titleBarWidget(), BareTitle)
    assert stats.widget().geometry().top() <= 2  # the panel starts at the dock's top: no title bar's line
    bar, i = tab_of(w, stats)
    centre = QPointF(bar.tabRect(i).center())
    QApplication.sendEvent(bar, QHelpEvent(QEvent.ToolTip, centre.toPoint(), bar.mapToGlobal(centre.toPoint())))
    tip = QToolTip.text()  # what the panel shows, then what its tab does
    assert QToolTip.isVisible() and tip.startswith("Per-head statistics: ") and "double-click" in tip
    QApplication.sendEvent(bar, QMouseEvent(QEvent.MouseButtonDblClick, centre, bar.mapToGlobal(centre),
                                            Qt.LeftButton, Qt.LeftButton, Qt.NoModifier))
    qtbot.waitUntil(lambda: stats.isFloating())
    qtbot.waitUntil(lambda: stats.titleBarWidget() is None and model.titleBarWidget() is None)  # each alone again
    stats.setFloating(False)
    qtbot.waitUntil(lambda: isinstance(stats.titleBarWidget(), BareTitle))  # back among the tabs
    menu = w._tab_menu.menu(stats)
    assert [a.text() for a in menu.actions()] == ["Float", "Close"] and all(a.toolTip() for a in menu.actions())
    menu.actions()[1].trigger()
    qtbot.waitUntil(lambda: not stats.isVisible() and model.titleBarWidget() is None)
    w.close()
