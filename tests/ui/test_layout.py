"""The window's layout at 1600 x 1000 with every panel: the head grid keeps its share of the height and
its maps a readable size, the panels share one tabbed area, and the panels' own maps keep their shape."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from uihelpers import wait_shown

from attnviz.core import RunConfig
from attnviz.explain import token_labels
from attnviz.ui import MainWindow
from attnviz.ui.panels.explain_views import DOCKS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))  # the tiny checkpoints' writers
from tiny import SENTENCE, make_family  # noqa: E402

W, H = 1600, 1000
PANELS = ["modelDock", *DOCKS]  # every dock of the tabbed area


@pytest.fixture(scope="module")
def bert12(tmp_path_factory):
    """A tiny BERT with 12 heads, as all-MiniLM-L6-v2 has."""
    pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp("layout") / "bert12"
    folder.mkdir()
    make_family(folder, "bert", hidden_size=48, num_attention_heads=12)
    return folder


def big_window(qtbot, config: RunConfig | None = None) -> MainWindow:
    w = MainWindow()
    qtbot.addWidget(w)
    w.resize(W, H)
    w.show()
    wait_shown(qtbot, w)
    if config is not None:
        w.panel.set_config(config)
        wait_shown(qtbot, w, timeout=30000)
    return w


def dock(w, name):
    return w.modelDock if name == "modelDock" else w.explain.docks[name]


def open_panel(qtbot, w, name):
    """As a user does: the View menu's entry (the model view is open from the start)."""
    d = dock(w, name)
    if name == "modelDock":
        d.raise_()
    else:
        d.toggleViewAction().trigger()  # its tab comes to the front
    qtbot.waitUntil(lambda: w.rect().contains(d.geometry()), timeout=5000)  # its tab in front
    wait_shown(qtbot, w, timeout=30000)


def check_grid(w, heads):
    grid = w.headGrid
    assert grid.height() >= 0.45 * w.height(), (grid.height(), w.height())
    rects = grid.mosaic.rects
    assert len(rects) == heads
    assert min(min(r.width(), r.height()) for r in rects) >= 96


def check_one_tab_area(w, shown):
    """Every open panel is a tab of the model view's area (none beside or above it)."""
    for name in shown:
        d = dock(w, name)
        assert not d.isFloating() and w.dockWidgetArea(d) == w.dockWidgetArea(w.modelDock)
        others = {dock(w, n) for n in shown if n != name}
        if others:
            assert others <= set(w.tabifiedDockWidgets(d)), name


@pytest.mark.parametrize("model", ["toy", "bert12"])
def test_each_panel_alone_and_all_together_leave_the_grid_its_room(qtbot, request, model):
    config = None
    if model == "bert12":
        config = RunConfig(variant="pretrained", model=str(request.getfixturevalue("bert12")), text=SENTENCE)
    else:
        config = RunConfig.for_variant("toy-induction")
    w = big_window(qtbot, config)
    heads = w.result.config.heads
    check_grid(w, heads)  # the model view alone
    for name in DOCKS:
        open_panel(qtbot, w, name)
        check_grid(w, heads)
        check_one_tab_area(w, ["modelDock", name])
        dock(w, name).toggleViewAction().trigger()  # closed again
        qtbot.waitUntil(lambda d=dock(w, name): not d.isVisible(), timeout=5000)  # noqa: B008 (bound now)
    for name in DOCKS:
        open_panel(qtbot, w, name)
    check_grid(w, heads)
    check_one_tab_area(w, PANELS)
    assert w.tensorDock.isVisible() and w.outputView.height() >= 120
    w.close()


def test_opening_a_panel_brings_its_tab_to_the_front(qtbot):
    w = big_window(qtbot)
    open_panel(qtbot, w, "statsDock")
    stats = w.explain.docks["statsDock"]
    # a tab behind another is moved out of the window; the one in front is in it
    qtbot.waitUntil(lambda: not w.rect().intersects(w.modelDock.geometry()), timeout=5000)
    assert w.rect().contains(stats.geometry()) and w.explain.shown("statsDock")
    w.close()


def test_the_pipeline_draws_square_maps_and_vectors_in_their_shape(qtbot):
    w = big_window(qtbot, RunConfig(seq_q=13, d_model=64, heads=4))
    open_panel(qtbot, w, "pipelineDock")
    view = w.explain.pipeline
    qtbot.waitUntil(lambda: view.frames is not None, timeout=10000)
    qtbot.wait(50)
    for tile in view.tiles:
        rows, cols = tile.stage.data.shape
        box = tile.image.sceneBoundingRect()  # the map as drawn
        assert box.width() / box.height() == pytest.approx(cols / rows, rel=0.05), tile.stage.name
    weights = next(t for t in view.tiles if t.stage.name == "weights").image.sceneBoundingRect()
    assert weights.height() >= 60  # a 13 x 13 stage is a square you can read, not a strip
    large = view.largeImage.mapRectToScene(view.largeImage.boundingRect())
    assert large.width() == pytest.approx(large.height(), rel=0.05)
    (x0, x1), (y0, y1) = view.largePlot.getViewBox().viewRange()
    assert (x0, x1, y0, y1) == pytest.approx((-0.5, 12.5, -0.5, 12.5), abs=1e-6)  # the axes span the data
    w.close()


def test_rollout_and_focus_label_keys_with_tokens_and_fit_the_data(qtbot, bert12):
    w = big_window(qtbot, RunConfig(variant="pretrained", model=str(bert12), text=SENTENCE))
    n = len(w.result.tokens)
    open_panel(qtbot, w, "rolloutDock")
    rollout = w.explain.rollout
    qtbot.waitUntil(lambda: rollout.frames is not None and rollout.frames.data is not None, timeout=10000)
    qtbot.wait(50)
    plot = rollout.tile.plot
    (x0, x1), (y0, y1) = plot.getViewBox().viewRange()
    assert (x0, x1, y0, y1) == pytest.approx((-0.5, n - 0.5, -0.5, n - 0.5), abs=1e-6)
    ticks = plot.getAxis("bottom")._tickLevels[0]
    assert ticks and all(label == w.result.tokens[k] for k, label in ticks)
    box = rollout.tile.image.mapRectToScene(rollout.tile.image.boundingRect())
    assert box.width() == pytest.approx(box.height(), rel=0.05)
    open_panel(qtbot, w, "focusDock")
    focus = w.explain.focus
    focus.toggle(3)
    qtbot.waitUntil(lambda: focus.frames is not None, timeout=10000)
    plot = focus.plot.getPlotItem()
    (x0, x1), (y0, y1) = plot.getViewBox().viewRange()
    assert (x0, x1) == pytest.approx((-0.5, n - 0.5)) and y0 == 0 and y1 <= 1.05 * focus.frames.values.max() + 1e-6
    labels = [label for _, label in plot.getAxis("bottom")._tickLevels[0]]
    assert labels == token_labels(w.result, keys=True)
    w.close()


def test_a_floated_or_split_panel_is_remembered(qtbot, tmp_path):
    from PySide6.QtCore import QSettings, Qt

    def launch():
        w = MainWindow(settings=QSettings(str(tmp_path / "attnviz.ini"), QSettings.IniFormat))
        qtbot.addWidget(w)
        w.resize(W, H)
        w.show()
        wait_shown(qtbot, w)
        return w

    w = launch()
    stats, focus = w.explain.docks["statsDock"], w.explain.docks["focusDock"]
    open_panel(qtbot, w, "statsDock")
    open_panel(qtbot, w, "focusDock")
    stats.setFloating(True)  # the user pulls one out ...
    w.splitDockWidget(w.tensorDock, focus, Qt.Horizontal)  # ... and puts another beside the tensor view
    qtbot.waitUntil(lambda: stats.isFloating() and focus not in w.tabifiedDockWidgets(w.modelDock), timeout=5000)
    w.close()
    again = launch()
    stats, focus = again.explain.docks["statsDock"], again.explain.docks["focusDock"]
    assert stats.isVisible() and stats.isFloating()
    assert focus.isVisible() and not focus.isFloating() and focus not in again.tabifiedDockWidgets(again.modelDock)
    again.close()


def test_the_model_view_behind_a_tab_waits_and_catches_up_in_front(qtbot, bert12):
    w = big_window(qtbot, RunConfig(variant="pretrained", model=str(bert12), text=SENTENCE))
    assert w.modelView.source is w.result.source and w.modelView.layer == 0
    open_panel(qtbot, w, "statsDock")  # the model view's tab goes behind
    w.panel.widgets["text"].setText(SENTENCE + " Then it slept.")  # a new forward
    wait_shown(qtbot, w, timeout=30000)
    assert w.modelView.source is not w.result.source  # not composed while nobody sees it
    open_panel(qtbot, w, "modelDock")
    qtbot.waitUntil(lambda: w.modelView.source is w.result.source, timeout=10000)
    w.close()


def test_a_deep_model_scrolls_in_the_model_view_at_a_readable_tile_and_a_shallow_one_fits(qtbot, tmp_path):
    # 30 layers in the bottom dock: fitted whole, their tiles were ~5 px on screen and the badges a pixel
    from attnviz.ui.maps.model_view import READABLE_TILE

    deep = tmp_path / "deep"
    deep.mkdir()
    make_family(deep, "bert", num_hidden_layers=30)
    w = big_window(qtbot, RunConfig(variant="pretrained", model=str(deep), text=SENTENCE))
    view, scroll = w.modelView, w.modelPanel.scroll
    qtbot.waitUntil(lambda: view.drawn is w.result.source, timeout=10000)
    assert view.tile >= READABLE_TILE
    assert view.height() > scroll.viewport().height() and scroll.verticalScrollBar().maximum() > 0
    open_panel(qtbot, w, "statsDock")  # its layer x head overview labels every n-th layer that has room
    plot = w.explain.stats.overview.getPlotItem()
    qtbot.waitUntil(lambda: len(plot.getAxis("left")._tickLevels[0]) > 1, timeout=10000)
    ticks = [value for value, _ in plot.getAxis("left")._tickLevels[0]]
    assert 1 < len(ticks) < 30 and (ticks[1] - ticks[0]) * plot.getViewBox().height() / 30 >= 14
    open_panel(qtbot, w, "modelDock")  # in front again: it draws the next model
    shallow = tmp_path / "shallow"
    shallow.mkdir()
    make_family(shallow, "bert")
    w.panel.set_config(RunConfig(variant="pretrained", model=str(shallow), text=SENTENCE))
    wait_shown(qtbot, w, timeout=30000)
    qtbot.waitUntil(lambda: view.drawn is w.result.source, timeout=10000)
    qtbot.waitUntil(lambda: scroll.verticalScrollBar().maximum() == 0, timeout=5000)  # every layer in the dock
    w.close()


def test_a_chosen_model_with_a_long_name_fits_the_panel_column_without_a_sideways_scrollbar(qtbot, tmp_path):
    folder = tmp_path / "SmolLM2-135M-Instruct.Q4_1-dequantised"
    folder.mkdir()
    make_family(folder, "llama")
    w = MainWindow()
    qtbot.addWidget(w)
    w.resize(1400, 950)
    w.show()
    wait_shown(qtbot, w)
    w.panel.set_config(RunConfig(variant="pretrained", model=str(folder), text=SENTENCE))
    wait_shown(qtbot, w, timeout=30000)
    scroll = w.panel.parentWidget().parentWidget()
    room = scroll.width() - 2 * scroll.frameWidth() - scroll.verticalScrollBar().sizeHint().width()
    assert w.panel.minimumSizeHint().width() <= room
    assert not scroll.horizontalScrollBar().isVisible()
    w.close()


def test_with_every_panel_open_at_1280_by_800_each_tab_reads_its_whole_short_name(qtbot):
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QTabBar

    w = big_window(qtbot)
    w.resize(1280, 800)
    for name in DOCKS:
        open_panel(qtbot, w, name)
    bar = next(b for b in w.findChildren(QTabBar) if b.parentWidget() is w and b.isVisible())
    texts = [bar.tabText(i) for i in range(bar.count())]
    assert len(texts) == len(PANELS) and len(set(texts)) == len(texts)
    assert "Model view" in texts and all(len(t) <= 20 for t in texts)  # the explanation is in the tooltip
    assert bar.elideMode() == Qt.ElideNone and bar.usesScrollButtons()  # whole names, arrows where they overflow
    metrics = bar.fontMetrics()
    assert all(bar.tabRect(i).width() >= metrics.horizontalAdvance(t) for i, t in enumerate(texts))
    w.close()


def test_a_12_head_model_views_last_head_label_shows_beside_mean_where_they_do_not_touch(qtbot, tmp_path, monkeypatch):
    from PySide6.QtGui import QFontMetricsF

    from attnviz.ui.maps.model_view import LABEL_PAD_PX

    pytest.importorskip("transformers")
    make_family(tmp_path, "bert", hidden_size=48, num_attention_heads=12, num_hidden_layers=6)  # MiniLM's shape
    w = big_window(qtbot, RunConfig(variant="pretrained", model=str(tmp_path), text=SENTENCE))
    view = w.modelView
    axis = view.plot.getAxis("top")
    qtbot.waitUntil(lambda: view.source is w.result.source and len(axis._tickLevels[0]) > 1, timeout=10000)
    width = QFontMetricsF(axis.font()).horizontalAdvance
    apart = view.columns[-1] - view.columns[-2]  # H11's centre to mean's, in view units
    # the screen scale at which H11 and "mean" are drawn half a pixel more than the least space apart (at
    # 1280 x 800, MiniLM's H11 sat 32.6 px from "mean", 4 px clear of it, and was left out)
    pixels = (width("H11") + width("mean")) / 2 + LABEL_PAD_PX + 0.5
    monkeypatch.setattr(view.plot.getViewBox(), "viewPixelSize", lambda: (apart / pixels, apart / pixels))
    view._set_ticks([f"L{r}" for r in range(6)], view.tops, view.columns, view.tile)
    ticks = axis._tickLevels[0]
    assert [label for _, label in ticks] == [f"H{h}" for h in range(12)] + ["mean"]
    scale = apart / pixels
    for (x0, a), (x1, b) in zip(ticks, ticks[1:]):  # neighbouring labels, centred on their ticks, never touch
        assert (x1 - x0) / scale >= (width(a) + width(b)) / 2, (a, b)
    w.close()
