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

# (window size, rows of Statistics, the panel area's px, the overview's px); before: 1280 x 800 had 3.0 rows in
# ~139 px + tabs, 1600 x 1000 8.3 rows
ROOM = [((1280, 800), 6, 200, 60), ((1600, 1000), 10, 290, 150)]


@pytest.fixture(scope="module")
def deep(tmp_path_factory):
    pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp("room") / "deep"
    folder.mkdir()
    make_family(folder, "bert", num_hidden_layers=30)
    return folder


def panel_area(w: MainWindow) -> int:
    """The height between the maps' column and the status bar: the docks, their tabs and title bars."""
    return w.statusBar().geometry().top() - w.centralWidget().geometry().bottom() - 1


@pytest.mark.parametrize("alone", [False, True], ids=["beside-the-model-view", "alone"])
@pytest.mark.parametrize(("size", "rows", "area", "overview"), ROOM, ids=["1280x800", "1600x1000"])
def test_statistics_shows_rows_and_an_overview_beside_the_maps(qtbot, deep, size, rows, area, overview, alone):
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
    assert panel_area(w) >= area
    assert stats.overview.getPlotItem().getViewBox().height() >= overview  # 30 layers, each a few px
    assert w.headGrid.height() >= 0.45 * w.height()  # the maps keep their share
    w.close()
