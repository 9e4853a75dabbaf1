"""The explaining views on the live window: colour scales, statistics, pipeline, token focus,
compare and rollout, driven through their widgets (offscreen)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from PySide6.QtCore import Qt
from uihelpers import CountingRun, open_dock, wait_shown

from attnviz import colormaps
from attnviz.core import RunConfig
from attnviz.core.analysis.stats import rollout
from attnviz.core.kernel.stages import STAGE_NAMES
from attnviz.ui import MainWindow


def select(combo, data) -> None:
    combo.setCurrentIndex(combo.findData(data))


def entropy(w):
    w = w.astype(np.float64)
    return -(np.where(w > 0, w * np.log(np.where(w > 0, w, 1.0)), 0.0)).sum(-1).mean(-1)


@pytest.mark.parametrize("mode", ["log", "row"])
def test_a_256_token_causal_tile_shows_structure(window, qtbot, mode):
    window.panel.widgets["heads"].setValue(1)
    window.panel.widgets["seq_q"].setValue(256)
    select(window.scaleCombo, mode)
    wait_shown(qtbot, window)
    assert window.result.config.seq_q == 256 and window.frames.options.scale_mode == mode
    image = window.headGrid.tiles[0].heat.image
    lower = np.tril(np.ones(image.shape, bool))
    levels = np.unique(image[lower])
    assert (levels < colormaps.DATA_LEVELS).all()
    assert len(levels) >= 64
    ticks = window.headGrid.bar.getAxis("right")._tickLevels  # the bar is labelled in the map's units
    assert ticks and len(ticks[0]) >= 2


def test_each_view_starts_with_its_own_scale(window, qtbot, counting_run):
    assert window.scaleCombo.currentData() == "log"  # weights: log shows a long causal map's structure
    select(window.viewCombo, "scores")
    assert window.scaleCombo.currentData() == "linear"
    select(window.scaleCombo, "rank")
    window.scaleCombo.activated.emit(window.scaleCombo.currentIndex())
    select(window.viewCombo, "weights")
    assert window.scaleCombo.currentData() == "log"
    select(window.viewCombo, "scores")
    assert window.scaleCombo.currentData() == "rank"  # remembered per view
    wait_shown(qtbot, window)  # the scores view runs once for its stage (the window's run leaves it out)
    computed = len(counting_run.calls)
    select(window.scaleCombo, "linear")
    window.scaleCombo.activated.emit(window.scaleCombo.currentIndex())
    wait_shown(qtbot, window)
    assert len(counting_run.calls) == computed  # a scale is view only


def test_entropy_column_equals_the_formula(window, qtbot, counting_run):
    computed = len(counting_run.calls)
    open_dock(window, qtbot, "statsDock")
    stats = window.explain.stats
    assert stats.table.objectName() == "statsTable" and stats.model.rowCount() == 4
    assert window.result.config.mask == "causal"
    w = window.result.weights[0][:, 1:]  # the first row has one key (no choice): left out
    np.testing.assert_allclose(stats.column("entropy"), entropy(w), rtol=1e-6)
    np.testing.assert_allclose(stats.column("sink"), w[:, :, 0].mean(-1), rtol=1e-6)
    np.testing.assert_allclose(stats.column("max_weight"), w.max((1, 2)), rtol=1e-6)
    assert (stats.column("max_weight") < 1).all()  # not 1.0 for every causal head
    stats.table.sortByColumn(1, Qt.DescendingOrder)  # sortable: by entropy, largest first
    shown = stats.column("entropy")
    assert (np.diff(shown) <= 0).all()
    assert stats.csv().splitlines()[0].startswith("head,entropy (nats)")
    select(stats.columnCombo, "distance")
    assert len(counting_run.calls) == computed  # statistics never re-run the forward


def test_pipeline_shows_every_stage_of_a_causal_head(window, qtbot, counting_run):
    window.perHeadCheck.setChecked(True)  # the grid's tile then has the pipeline's per-map levels
    open_dock(window, qtbot, "pipelineDock")
    pipe = window.explain.pipeline
    pipe.headSpin.setValue(2)
    wait_shown(qtbot, window)
    assert {"qk", "scaled"} <= window.result.stages.keys()  # recorded because the pipeline is shown
    names = [s.name for s in pipe.frames.stages]
    assert len(names) >= 8 and pipe.frames.head == 2
    core = [n for n in names if n in STAGE_NAMES]
    assert core == sorted(core, key=STAGE_NAMES.index)
    assert names[:7] == ["x", "q", "k", "v", "qk", "scaled", "scores"]
    softmax = pipe.stage("weights")
    np.testing.assert_array_equal(softmax.data, window.result.weights[0, 2])
    np.testing.assert_array_equal(softmax.image.image, window.headGrid.tiles[2].heat.image)
    tile = pipe.tiles[names.index("weights")]
    np.testing.assert_array_equal(tile.image.image, softmax.image.image)
    text = pipe.show_path(7, 3)
    r = window.result
    assert f"{r.qk[0, 2, 7, 3]:.4g}" in text and f"{r.weights[0, 2, 7, 3]:.4g}" in text
    pipe.stage_name = "scaled"  # a click on a stage shows it large
    pipe.sigChanged.emit()
    wait_shown(qtbot, window)
    assert pipe.frames.large[0] == "scaled"
    assert pipe.largeImage.image.shape == (16, 16)
    # closed again: the next run keeps only what the other views read (memory)
    window.explain.docks["pipelineDock"].hide()
    window.panel.widgets["seed"].setValue(3)
    wait_shown(qtbot, window)
    assert "qk" not in window.result.stages


def test_token_focus_draws_one_line_per_head(window, qtbot, counting_run):
    open_dock(window, qtbot, "focusDock")
    computed = len(counting_run.calls)
    grid = window.headGrid
    pos = grid.mapFromScene(grid.cell_scene_pos(1, 2.0, 5.0))
    qtbot.mouseClick(grid.viewport(), Qt.LeftButton, pos=pos)
    wait_shown(qtbot, window)
    focus = window.explain.focus
    assert focus.row == 5 and grid.focus is None  # a row pick, not a head focus
    curves = [c for c in focus.curves if c.isVisible()]
    assert len(curves) == 4
    for h, curve in enumerate(curves):
        np.testing.assert_array_equal(curve.yData, window.result.weights[0, h, 5])
    focus.toggle(5)  # the same token again clears
    wait_shown(qtbot, window)
    assert focus.row is None and not any(c.isVisible() for c in focus.curves)
    assert len(counting_run.calls) == computed


def test_difference_with_itself_is_zero_then_follows_the_change(window, qtbot):
    open_dock(window, qtbot, "compareDock")
    compare = window.explain.compare
    compare.pinButton.click()
    wait_shown(qtbot, window)
    frames = window.frames.extras["compare"]
    assert frames.message == "" and frames.max_abs == 0.0  # every head
    assert (frames.diff == 0).all()
    centre = round((colormaps.DATA_LEVELS - 1) / 2)
    image = compare.tiles[2].image.image.astype(int)
    data = image < colormaps.DATA_LEVELS
    assert data.sum() == 16 * 17 // 2 and (np.abs(image[data] - centre) <= 1).all()  # the middle of the scale
    pinned = window.result
    window.panel.widgets["seed"].setValue(5)
    compare.headSpin.setValue(2)
    wait_shown(qtbot, window)
    frames = window.frames.extras["compare"]
    expected = window.result.weights[0] - pinned.weights[0]
    np.testing.assert_allclose(frames.diff, expected[2], atol=1e-7)
    assert frames.max_abs == pytest.approx(float(np.abs(expected).max()), rel=1e-6)
    np.testing.assert_array_equal(compare.tiles[1].image.image, frames.current.image)
    window.panel.widgets["seq_q"].setValue(12)
    wait_shown(qtbot, window)
    assert "shapes differ" in window.frames.extras["compare"].message


class LayeredRun(CountingRun):
    """The real engine plus synthetic per-layer weights (the model-backed variants fill these)."""

    def __call__(self, config, cancel=None, **kwargs):
        result = super().__call__(config, cancel, **kwargs)
        w = result.weights
        layers = np.stack([w, np.roll(w, 1, axis=1), w ** 2 / (w ** 2).sum(-1, keepdims=True)])
        return dataclasses.replace(result, layer_weights=np.nan_to_num(layers))


def test_rollout_and_layer_overview_for_multi_layer_results(qtbot, tmp_path):
    w = MainWindow(compute=LayeredRun())
    qtbot.addWidget(w)
    w.resize(1200, 800)
    w.show()
    wait_shown(qtbot, w)
    open_dock(w, qtbot, "rolloutDock")
    frames = w.frames.extras["rollout"]
    np.testing.assert_allclose(frames.data, rollout(w.result.layer_weights)[0], rtol=1e-5)
    open_dock(w, qtbot, "statsDock")
    stats = w.explain.stats
    assert stats.frames.layers["entropy"].shape == (3, 4)
    assert stats.overviewPanel.isVisibleTo(w)
    assert stats.overviewImage.image.shape == (3, 4)
    w.explain.export("rollout", str(tmp_path / "rollout.csv"))
    table = np.loadtxt(tmp_path / "rollout.csv", delimiter=",", skiprows=1, usecols=range(1, 17))  # labelled
    assert table.shape == (16, 16)
    w.close()


def test_rollout_of_a_single_layer_run_says_why_not(window, qtbot):
    open_dock(window, qtbot, "rolloutDock")
    assert "multi-layer" in window.explain.rollout.infoLabel.text()


def test_every_panel_exports_image_and_numbers(window, qtbot, tmp_path):
    for name in ("pipelineDock", "statsDock", "focusDock", "compareDock"):
        open_dock(window, qtbot, name)
    window.explain.focus.toggle(3)
    window.explain.compare.pinButton.click()
    wait_shown(qtbot, window)
    ex = window.explain
    for kind, exts in (("pipeline", (".png", ".svg", ".npz")), ("stats", (".csv", ".png")),
                       ("focus", (".csv", ".png")), ("compare", (".npz", ".png"))):
        for ext in exts:
            if kind != "pipeline":
                window.explain.docks[f"{kind}Dock"].raise_()
                qtbot.waitUntil(lambda k=kind: window.explain.shown(f"{k}Dock"))
                wait_shown(qtbot, window)
            path = ex.export(kind, str(tmp_path / f"{kind}{ext}"))
            assert path.stat().st_size > 100, (kind, ext)
    assert (np.load(tmp_path / "compare.npz")["difference"] == 0).all()  # pinned = current: all heads zero
    svg = (tmp_path / "pipeline.svg").read_text()
    assert "softmax" in svg and "data:image/png;base64" in svg
    arrays = np.load(tmp_path / "pipeline.npz")
    np.testing.assert_array_equal(arrays["weights"], window.result.weights[0, 0])
    lines = (tmp_path / "focus.csv").read_text().splitlines()
    assert len(lines) == 1 + 4
    np.testing.assert_allclose([float(v) for v in lines[1].split(",")[1:]], window.result.weights[0, 0, 3],
                               rtol=1e-5)


def test_explain_panels_are_in_the_view_menu_with_shortcuts(window):
    actions = {a.text(): a for a in window.menuBar().actions()[1].menu().actions()}
    for title in ("Pipeline", "Statistics", "Token focus", "Compare", "Rollout"):
        assert title in actions and not actions[title].shortcut().isEmpty()


def test_nothing_is_computed_for_hidden_panels(window):
    options = window.view_options(RunConfig())
    assert options.pipeline_head is None and not options.stats and options.focus_row is None
    assert options.pinned is None and not options.rollout and not options.lens and options.unablated is None
    # the predictions strip and the model view are shown: for random weights each only says why it has nothing
    extras = window.frames.extras
    assert set(extras) <= {"predictions", "head_scores"}
    assert all(part.message for part in extras.values())
