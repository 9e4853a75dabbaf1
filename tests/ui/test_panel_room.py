"""The tabbed panel area is usable beside maps that keep their share: Statistics shows several heads' rows and
a readable layer x head overview of a 30-layer model at 1600 x 1000 and at 1280 x 800."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from uihelpers import wait_shown

from attnviz.core import RunConfig
from attnviz.ui import MainWindow

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))  # the tiny checkpoints' writers
from tiny import SENTENCE, make_family  # noqa: E402


@pytest.fixture(scope="module")
def deep(tmp_path_factory):
    pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp("room") / "deep"
    folder.mkdir()
    make_family(folder, "bert", num_hidden_layers=30)
    return folder


@pytest.mark.parametrize(("size", "rows", "overview"), [((1600, 1000), 8, 120), ((1280, 800), 3, 30)])
def test_statistics_shows_rows_and_an_overview_beside_the_maps(qtbot, deep, size, rows, overview):
    w = MainWindow()
    qtbot.addWidget(w)
    w.resize(*size)
    w.show()
    wait_shown(qtbot, w)
    w.panel.set_config(RunConfig(variant="pretrained", model=str(deep), text=SENTENCE))
    wait_shown(qtbot, w, timeout=30000)
    w.explain.docks["statsDock"].toggleViewAction().trigger()
    stats = w.explain.stats
    qtbot.waitUntil(lambda: stats.frames is not None and stats.frames.layers is not None, timeout=15000)
    wait_shown(qtbot, w)
    qtbot.wait(50)
    table = stats.table
    assert table.viewport().height() / table.rowHeight(0) >= rows  # (it was 5.3 and 2.1 rows)
    assert stats.overview.getPlotItem().getViewBox().height() >= overview  # (it was 102 and 5 px: 30 layers)
    assert w.headGrid.height() >= 0.45 * w.height()  # the maps keep their share
    w.close()
