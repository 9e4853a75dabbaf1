"""The live app, driven through its widgets: what the views hold after each change."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from PySide6.QtCore import QCoreApplication, QPoint, QRect, QSettings, Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QComboBox, QLabel, QWidget
from uihelpers import CountingRun, drain, wait_shown

from attnviz import colormaps
from attnviz.core import RunConfig, run
from attnviz.ui import MainWindow
from attnviz.ui.maps.mosaic import grid_shape

OBJECT_NAMES = [
    "variantCombo", "dModelSpin", "dOutSpin", "dCrossSpin", "headsSpin", "batchSpin", "batchIndexSpin",
    "seqQSpin", "seqKvSpin", "maskCombo", "windowSpin", "dropoutSpin", "trainCheck", "seedSpin",
    "deviceCombo", "dtypeCombo", "presetCombo", "colormapCombo", "headGrid", "outputView",
]


def select(combo: QComboBox, data) -> None:
    index = combo.findData(data)
    assert index >= 0, f"{data!r} not in {combo.objectName()}"
    combo.setCurrentIndex(index)


def tiles(window):
    return window.headGrid.tiles


def test_every_named_widget_exists_with_accessible_name(window):
    for name in OBJECT_NAMES:
        w = window.findChild(QWidget, name)
        assert w is not None, name
        assert w.accessibleName() == name
        assert w.toolTip(), f"{name} has no tooltip"


def test_default_view_shows_causal_heads(window):
    config = window.result.config
    assert (config.variant, config.heads, config.seq_q, config.d_model) == ("causal", 4, 16, 64)
    assert len(tiles(window)) == 4
    expected = run(config)
    np.testing.assert_array_equal(window.result.weights, expected.weights)
    for h, tile in enumerate(tiles(window)):
        image = tile.heat.image
        assert image.shape == (16, 16)
        colours = tile.heat.lut[image]  # what is painted
        masked_colour = colormaps.lut("viridis")[colormaps.MASKED_INDEX]
        is_masked = (colours == masked_colour).all(-1)
        np.testing.assert_array_equal(is_masked, np.triu(np.ones((16, 16), bool), 1))
        # brighter cells are larger weights: the painted order follows the engine's numbers
        w = expected.weights[0, h][~is_masked]
        idx = image[~is_masked].astype(int)
        order = np.argsort(w, kind="stable")
        assert np.all(np.diff(idx[order]) >= 0)
        assert idx[np.argmax(w)] == colormaps.DATA_LEVELS - 1


def test_heads_and_lengths_follow_the_spin_boxes(window, qtbot):
    window.panel.widgets["heads"].setValue(8)
    wait_shown(qtbot, window)
    assert len(tiles(window)) == 8
    window.panel.widgets["seq_q"].setValue(24)
    wait_shown(qtbot, window)
    assert all(t.heat.image.shape == (24, 24) for t in tiles(window))
    assert window.result.weights.shape == (1, 8, 24, 24)


def test_cross_attention_with_padding_shows_lq_by_lkv(window, qtbot):
    p = window.panel
    select(p.widgets["variant"], "cross")
    assert p.widgets["seq_kv"].isVisibleTo(window) and p.widgets["d_out"].isVisibleTo(window)
    assert not p.widgets["d_cross"].isVisibleTo(window)
    p.widgets["seq_q"].setValue(6)
    p.widgets["seq_kv"].setValue(10)
    p.widgets["batch"].setValue(2)
    select(p.widgets["mask"], "padding")
    assert p.widgets["kv_lengths"].isVisibleTo(window)
    p.widgets["kv_lengths"].setText("10, 7")
    wait_shown(qtbot, window)
    config = window.result.config
    assert (config.seq_q, config.seq_kv, config.kv_lengths) == (6, 10, (10, 7))
    p.batchIndexSpin.setValue(1)
    wait_shown(qtbot, window)
    image = tiles(window)[0].heat.image
    assert image.shape == (6, 10)
    assert (image[:, 7:] == colormaps.MASKED_INDEX).all()
    assert (image[:, :7] < colormaps.DATA_LEVELS).all()


def test_view_only_changes_do_not_recompute(window, qtbot, counting_run):
    p = window.panel
    p.widgets["batch"].setValue(3)
    wait_shown(qtbot, window)
    computed = len(counting_run.calls)
    select(window.colormapCombo, "magma")
    wait_shown(qtbot, window)
    assert (tiles(window)[0].heat.lut == colormaps.lut("magma")).all()
    window.perHeadCheck.setChecked(True)
    wait_shown(qtbot, window)
    p.batchIndexSpin.setValue(2)
    wait_shown(qtbot, window)
    assert len(counting_run.calls) == computed
    assert "view only" in window.statusLabel.text()


def test_the_scores_view_runs_once_for_the_scores_then_weights_are_view_only(window, qtbot, counting_run):
    """The window's run leaves a seed variant's pre-softmax scores out until a view draws them."""
    wait_shown(qtbot, window)
    assert "scores" not in window.result.stages
    computed = len(counting_run.calls)
    select(window.viewCombo, "scores")
    wait_shown(qtbot, window)
    assert len(counting_run.calls) == computed + 1 and "scores" in window.result.stages
    select(window.viewCombo, "weights")
    wait_shown(qtbot, window)
    assert len(counting_run.calls) == computed + 1


def test_scores_view_uses_diverging_map_and_masked_colour(window, qtbot):
    select(window.viewCombo, "scores")
    wait_shown(qtbot, window)
    tile = tiles(window)[1]
    assert (tile.heat.lut == colormaps.lut(colormaps.DEFAULT_DIVERGING)).all()
    image = tile.heat.image
    upper = np.triu(np.ones(image.shape, bool), 1)
    assert (image[upper] == colormaps.MASKED_INDEX).all()
    assert (image[~upper] < colormaps.DATA_LEVELS).all()
    lo, hi = window.frames.levels
    assert lo == -hi  # centred at zero


def test_burst_of_200_changes_ends_on_the_last_request(window, qtbot):
    shown = []
    window.sigShown.connect(shown.append)
    spin = window.panel.widgets["seq_q"]
    for n in range(200):
        spin.setValue(8 + n % 40)
        if n % 7 == 0:
            qtbot.wait(1)
    spin.setValue(33)
    wait_shown(qtbot, window)
    drain(qtbot, window)  # every result the worker sent is in: nothing older may have come after the last one
    assert shown == sorted(shown) and len(set(shown)) == len(shown)
    assert shown[-1] == window.latest_id
    assert window.result.config.seq_q == 33
    assert tiles(window)[0].heat.image.shape == (33, 33)


def test_heads_not_dividing_width_keeps_last_view_and_offers_fixes(window, qtbot):
    before = window.shown_id
    window.panel.widgets["heads"].setValue(6)
    qtbot.waitUntil(lambda: window.panel.errorLabel.text() != "")
    message = window.panel.errorLabel.text()
    assert "6 heads do not divide hidden_dim = 64" in message or "do not divide" in message
    assert "4 or 8" in message
    assert window.staleLabel.isVisibleTo(window)
    assert "Not updated" in window.statusBar().currentMessage()
    assert len(tiles(window)) == 4 and window.shown_id == before  # last good maps kept
    fix = window.panel.findChild(QWidget, "fixButton_8")
    assert fix is not None
    fix.click()
    wait_shown(qtbot, window)
    assert len(tiles(window)) == 8
    assert window.panel.errorLabel.text() == "" and not window.staleLabel.isVisibleTo(window)


def test_run_over_memory_budget_is_refused_by_the_worker(qtbot):
    w = MainWindow(compute=CountingRun(memory_budget=4 << 20))
    qtbot.addWidget(w)
    w.show()
    wait_shown(qtbot, w)
    pool = w.panel.widgets["pool"]
    pool.setCurrentIndex(pool.findData("never"))  # auto would pool a run over the budget
    wait_shown(qtbot, w)
    failures = []
    w.sigFailed.connect(lambda rid, msg: failures.append(msg))
    w.panel.widgets["seq_q"].setValue(2048)
    qtbot.waitUntil(lambda: bool(failures), timeout=10000)
    assert "budget" in failures[-1]
    assert w.result.config.seq_q == 16 and w.staleLabel.isVisibleTo(w)
    assert w.panel.widgets["seq_q"].styleSheet()  # marked at the control
    assert w.panel.findChildren(QWidget, None)  # still alive
    w.close()


def test_hover_reads_exact_values(window, qtbot):
    grid = window.headGrid
    texts = []
    grid.sigHover.connect(texts.append)
    grid._hovered(grid.cell_scene_pos(2, 3.2, 4.8))
    w = window.result.weights[0, 2, 5, 3]
    from attnviz.core import run

    s = run(window.result.config).scores[0, 2, 5, 3]  # the window's run left the scores out: hover recomputes
    assert "head 2" in texts[-1] and "query i=5, key j=3" in texts[-1]
    assert f"{w:.4g}" in texts[-1] and f"{s:.4g}" in texts[-1]
    grid._hovered(grid.cell_scene_pos(2, 9.0, 2.0))
    assert "masked" in texts[-1] and "may not attend key 9" in texts[-1]
    assert window.hoverLabel.text() == texts[-1]


def test_fully_masked_rows_get_their_own_colour_and_hover(window, qtbot):
    from attnviz.core import load_preset

    window.panel.set_config(load_preset("no-key-rows"))
    wait_shown(qtbot, window)
    image = tiles(window)[0].heat.image
    assert (image[:4] == colormaps.NAN_INDEX).all()
    assert (image[4:] != colormaps.NAN_INDEX).all()
    texts = []
    window.headGrid.sigHover.connect(texts.append)
    window.headGrid._hovered(window.headGrid.cell_scene_pos(0, 0.0, 1.0))
    assert "no key to attend to" in texts[-1] and "NaN" in texts[-1]


def test_click_focuses_a_head_and_escape_returns(window, qtbot):
    grid = window.headGrid
    grid.set_focus(3)
    wait_shown(qtbot, window)
    assert len(tiles(window)) == 1 and grid.tile_heads == [3]
    assert grid.mosaic.axis_names == ("query position i", "key position j")  # drawn large with position labels
    assert len(grid.mosaic.tick_labels(0)[0]) > 1
    qtbot.keyClick(window, Qt.Key_Escape)
    wait_shown(qtbot, window)
    assert len(tiles(window)) == 4


def test_a_focused_head_that_goes_away_gives_the_grid_maps_pooled_for_it(window, qtbot):
    window.panel.set_config(window.panel.config().replace(heads=8))
    wait_shown(qtbot, window)
    grid = window.headGrid
    grid.set_focus(6)
    wait_shown(qtbot, window)
    window.panel.widgets["heads"].setValue(2)  # head 6 is gone: back to the grid
    wait_shown(qtbot, window)
    c = window.result.config
    assert grid.focus is None and grid.tile_heads == [0, 1]
    assert window.frames.options.max_px == grid.tile_pixels(c.seq_q, c.lkv, c.heads)  # asked for again


def test_mean_tile(window, qtbot):
    window.meanCheck.setChecked(True)
    wait_shown(qtbot, window)
    assert grid_heads(window) == [0, 1, 2, 3, -1]
    assert window.frames.mean is not None


def grid_heads(window):
    return window.headGrid.tile_heads


def test_tensor_view_shows_output_and_qkv(window, qtbot):
    image = window.outputView.image.image
    assert image.shape == window.result.output[0].shape
    select(window.tensorCombo, "k")
    window.tensorHeadSpin.setValue(2)
    wait_shown(qtbot, window)
    np.testing.assert_array_equal(window.outputView.data(), window.result.k[0, 2])
    assert window.outputView.image.image.shape == window.result.k[0, 2].shape


def test_device_combo_disables_cuda_without_a_gpu(window):
    combo = window.panel.widgets["device"]
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    index = combo.findData("cuda")
    assert index >= 0
    assert not combo.model().item(index).isEnabled()
    assert "not available" in combo.itemText(index)
    assert "is_available" in combo.itemData(index, Qt.ToolTipRole)


def test_settings_are_remembered(qtbot, tmp_path):
    settings = QSettings(str(tmp_path / "attnviz.ini"), QSettings.IniFormat)
    w = MainWindow(settings=settings)
    qtbot.addWidget(w)
    w.show()
    wait_shown(qtbot, w)
    assert w.result.config.variant == "toy-reverse"  # a first launch opens on a trained toy
    w.panel.set_config(RunConfig())
    wait_shown(qtbot, w)
    w.panel.widgets["heads"].setValue(2)
    select(w.colormapCombo, "cividis")
    assert w.modelDock.isVisible()  # open at a first launch
    central, dock = w.centralWidget().geometry(), w.modelDock.geometry()
    start = QPoint(dock.center().x(), (central.bottom() + dock.top()) // 2)
    QTest.mousePress(w, Qt.LeftButton, Qt.NoModifier, start)  # the user drags the split to make it taller ...
    for dy in range(-10, -70, -10):
        QTest.mouseMove(w, start + QPoint(0, dy))
        qtbot.wait(10)
    QTest.mouseRelease(w, Qt.LeftButton, Qt.NoModifier, start + QPoint(0, -60))
    qtbot.waitUntil(lambda: w.modelDock.height() >= dock.height() + 50)
    share = w.headGrid.height() / w.height()  # the maps' share of the window's height, kept and remembered
    w.modelDock.close()  # ... then closes it
    wait_shown(qtbot, w)
    w.close()
    again = MainWindow(settings=QSettings(str(tmp_path / "attnviz.ini"), QSettings.IniFormat))
    qtbot.addWidget(again)
    again.show()
    wait_shown(qtbot, again)
    assert again.result.config.heads == 2
    assert again.colormapCombo.currentData() == "cividis"
    assert not again.modelDock.isVisible()
    again.modelDock.show()
    qtbot.waitUntil(lambda: again.modelDock.isVisible())
    qtbot.waitUntil(lambda: abs(again.headGrid.height() / again.height() - share) < 0.01)
    again.close()


def test_presets_and_reset(window, qtbot):
    combo = window.panel.presetCombo
    index = combo.findData("seed000-demo")
    combo.activated.emit(index)
    wait_shown(qtbot, window)
    assert window.result.config == RunConfig.from_json(
        (__import__("attnviz.core", fromlist=["x"]).load_preset("seed000-demo")).to_json())
    qtbot.keyClick(window, Qt.Key_R, Qt.ControlModifier)
    wait_shown(qtbot, window)
    assert window.result.config == RunConfig()


def test_close_during_long_run_is_prompt_and_the_worker_ends(qtbot):
    import time

    from attnviz.core.runs.runner import Cancelled

    started = []

    cancelled = []

    def slow(config, cancel=None, **_):  # a long run (10 s) that, like run(), polls cancel between stages
        started.append(config)
        for _ in range(400):
            if cancel and cancel():
                cancelled.append(config)
                raise Cancelled
            time.sleep(0.025)
        return run(config)

    w = MainWindow(compute=slow)
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: bool(started))
    w.close()
    qtbot.waitUntil(lambda: not w.worker.is_alive(), timeout=5000)
    assert cancelled == started  # closing cancelled the run in flight rather than waiting for it


def test_close_during_real_run(qtbot):
    w = MainWindow()
    qtbot.addWidget(w)
    w.show()
    wait_shown(qtbot, w)
    busy = []
    w.worker.sigBusy.connect(busy.append)
    w.panel.set_config(RunConfig(heads=16, d_model=256, seq_q=1024, batch=2))
    qtbot.waitUntil(lambda: bool(busy))
    w.close()
    qtbot.waitUntil(lambda: not w.worker.is_alive(), timeout=5000)  # the forward in flight was cancelled


def test_device_combo_lists_each_cuda_device(qtbot, monkeypatch):
    # No GPU here: stand in for torch's CUDA queries to exercise the listing itself.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: f"Fake GPU {i}")
    from attnviz.ui.window.panel import ParameterPanel

    panel = ParameterPanel()
    qtbot.addWidget(panel)
    combo = panel.widgets["device"]
    items = [(combo.itemData(i), combo.itemText(i)) for i in range(combo.count())]
    assert ("cuda:0", "cuda:0 (Fake GPU 0)") in items and ("cuda:1", "cuda:1 (Fake GPU 1)") in items
    assert all(combo.model().item(i).isEnabled() for i in range(combo.count()))


def test_groups_come_back_when_switching_variants(window):
    p = window.panel
    for variant in ("self", "cross", "causal"):
        select(p.widgets["variant"], variant)
    assert p.groups["Training"].isVisibleTo(window)
    assert p.widgets["dropout"].isVisibleTo(window) and p.widgets["train"].isVisibleTo(window)


def test_turning_the_mean_tile_off_while_focused(window, qtbot):
    window.meanCheck.setChecked(True)
    wait_shown(qtbot, window)
    window.headGrid.set_focus(-1)
    wait_shown(qtbot, window)
    window.meanCheck.setChecked(False)
    wait_shown(qtbot, window)
    assert window.headGrid.focus is None and len(tiles(window)) == 4


def test_the_mean_cannot_be_focused_while_it_is_not_drawn(window, qtbot):
    """Focusing the mean with its tile off left an empty grid (found by the fuzz benchmark, seed 5)."""
    assert not window.meanCheck.isChecked()
    window.headGrid.set_focus(-1)
    wait_shown(qtbot, window)
    assert window.headGrid.focus is None and len(tiles(window)) == 4


def test_an_older_result_does_not_clear_a_newer_local_error(qtbot):
    import time

    def slow(config, cancel=None, **_):
        time.sleep(0.4)
        return run(config)

    w = MainWindow(compute=slow)
    qtbot.addWidget(w)
    w.show()
    wait_shown(qtbot, w)
    w.panel.widgets["seq_q"].setValue(20)  # valid: computing for 0.4 s
    qtbot.wait(50)
    w.panel.widgets["heads"].setValue(5)  # invalid while that runs
    qtbot.waitUntil(lambda: w.result.config.seq_q == 20, timeout=5000)
    qtbot.wait(50)
    assert "do not divide" in w.panel.errorLabel.text()
    assert w.staleLabel.isVisibleTo(w) and w.is_settled()
    w.close()


def test_memory_fix_never_lengthens_and_batch_change_keeps_lengths(window):
    p = window.panel
    select(p.widgets["variant"], "cross")
    p.widgets["seq_q"].setValue(16)
    p.widgets["seq_kv"].setValue(4000)
    p.apply_fix("seq_q", 600)
    assert (p.widgets["seq_q"].value(), p.widgets["seq_kv"].value()) == (16, 600)
    p.widgets["batch"].setValue(3)
    select(p.widgets["mask"], "padding")
    p.widgets["kv_lengths"].setText("8, 4, 2")
    p.widgets["batch"].setValue(2)
    assert p.config().kv_lengths == (8, 4)
    p.widgets["batch"].setValue(4)
    assert p.config().kv_lengths == (8, 4, 4, 4)


def test_the_memory_fix_recomputes_when_the_query_is_already_short(qtbot):
    # the keys are the long side: the fix shortens them only, and must still send a new run
    def small_budget(config, cancel=None, **kwargs):
        return run(config, cancel=cancel, memory_budget=40 << 20, **kwargs)

    w = MainWindow(compute=small_budget)
    qtbot.addWidget(w)
    w.show()
    wait_shown(qtbot, w)
    p = w.panel
    p.set_config(RunConfig.for_variant("cross", mask="padding", kv_lengths=(4000, 100), seq_q=300, pool="never",
                                       seq_kv=4000, heads=8, batch=2))
    qtbot.waitUntil(lambda: w.failed_id == w.latest_id and "memory" in p.errorLabel.text(), timeout=10000)
    buttons = [p.fixButtons.itemAt(k).widget() for k in range(p.fixButtons.count())]
    assert buttons and all("Key" in b.text() or "key" in b.text() for b in buttons)  # names the long side
    sent = w.latest_id
    buttons[0].click()
    qtbot.waitUntil(lambda: w.latest_id > sent and w.shown_id == w.latest_id, timeout=10000)
    shown = w.result.config
    assert shown.seq_q == 300 and shown.seq_kv < 4000 and max(shown.kv_lengths) <= shown.seq_kv
    assert p.errorLabel.text() == ""
    w.close()


def on_window(widget) -> QRect:
    return QRect(widget.mapTo(widget.window(), QPoint(0, 0)), widget.size())


def test_the_stale_banner_and_long_hover_texts_never_resize_the_head_grid(window, qtbot):
    # a resized grid lays out and re-renders every tile: banners and hover lines must not cause one
    window.headGrid.sigHover.emit("a long hover text " * 40)  # the hover line grows once (4 lines at most)
    qtbot.wait(50)
    size = window.headGrid.size()
    window.headGrid.sigHover.emit("short")  # and never shrinks back
    window.headGrid.sigHover.emit("a long hover text " * 60)
    window.panel.widgets["heads"].setValue(3)  # 3 heads do not divide 64: the stale banner shows
    qtbot.waitUntil(lambda: window.staleLabel.isVisibleTo(window))
    qtbot.wait(50)
    assert window.headGrid.size() == size
    assert window.staleLabel.height() > 0
    assert not on_window(window.staleLabel).intersects(on_window(window.headGrid))  # over the caption, no map
    window.staleLabel.setText("a very long reason " * 80)  # cut to the bar's lines, never over the maps
    banner = window.staleLabel
    assert QLabel.text(banner).endswith("…") and banner.heightForWidth(banner.width()) <= window.infoBar.height()
    window.headGrid.sigHover.emit("a hovered cell")  # a hovered cell's values show over the banner
    layers = window.infoBar.children()
    assert layers.index(window.hoverLabel) > layers.index(window.staleLabel) and window.infoBar.hovering()
    window.panel.widgets["heads"].setValue(4)
    wait_shown(qtbot, window)
    assert not window.staleLabel.isVisibleTo(window) and window.headGrid.size() == size


def test_a_head_count_change_adds_no_scene_items(window, qtbot):
    # The maps are drawn by one item: a head-count change used to add and remove a PlotItem per head
    window.panel.set_config(window.panel.config().replace(d_model=64, heads=8))
    wait_shown(qtbot, window)
    items = len(window.headGrid.scene().items())
    for heads in (16, 2, 8):
        window.panel.widgets["heads"].setValue(heads)
        wait_shown(qtbot, window)
        assert len(tiles(window)) == heads and len(window.headGrid.scene().items()) == items
    expected = run(window.result.config).weights[0]
    for h, tile in enumerate(tiles(window)):  # each tile shows its own head, in the engine's order
        order = np.argsort(expected[h][np.tril(np.ones((16, 16), bool))], kind="stable")
        idx = tile.heat.image[np.tril(np.ones((16, 16), bool))].astype(int)
        assert np.all(np.diff(idx[order]) >= 0)


def test_the_grid_paints_each_cell_in_its_colour(window, qtbot):
    window.panel.set_config(window.panel.config().replace(d_model=64, heads=8))
    wait_shown(qtbot, window)
    window.show()
    qtbot.wait(50)
    grid = window.headGrid
    shot = grid.grab().toImage()
    ratio = shot.devicePixelRatio()
    for k, tile in enumerate(tiles(window)):
        for i, j in ((0, 0), (5, 3), (15, 15), (2, 11)):  # 16 x 16 maps are not pooled: a pixel per cell
            p = grid.mapFromScene(grid.cell_scene_pos(k, j, i))
            painted = shot.pixelColor(int(p.x() * ratio), int(p.y() * ratio))
            expected = tile.heat.lut[tile.heat.image[i, j]]
            assert (painted.red(), painted.green(), painted.blue()) == tuple(int(c) for c in expected[:3]), (k, i, j)


def test_results_that_arrive_together_are_swapped_in_once(window, qtbot):
    shown: list[int] = []
    window.sigShown.connect(shown.append)
    sent: list[int] = []
    window.worker.sigDone.connect(lambda o: sent.append(o.request.id), Qt.DirectConnection)  # worker thread
    ids = []
    for seed in (5, 6):  # both results arrive while the GUI thread is busy elsewhere
        window.panel.widgets["seed"].blockSignals(True)
        window.panel.widgets["seed"].setValue(seed)
        window.panel.widgets["seed"].blockSignals(False)
        ids.append(window.request())
        deadline = time.monotonic() + 15
        while ids[-1] not in sent and time.monotonic() < deadline:
            time.sleep(0.01)  # no event processing: the window's queued slot waits
    wait_shown(qtbot, window)
    assert shown == [ids[1]]  # the older result was never swapped in (nor painted)
    assert window.result.config.seed == 6


def test_a_result_paints_the_grid_and_tensor_view_once(window, qtbot, monkeypatch):
    # the layout, the views' transforms and the axes' widths are settled before the paint, not in it:
    # a colour bar whose tick labels grew (a new seed, new levels) resized its axis inside the paint
    window.show()
    paints: dict[str, list] = {"headGrid": [], "outputView": []}

    def counting(view):
        original, counted = view.paintEvent, paints[view.objectName()]
        return lambda event: (counted.append(1), original(event))

    for view in (window.headGrid, window.outputView):
        monkeypatch.setattr(view, "paintEvent", counting(view))
    changes = [("heads", 8), ("heads", 2), ("heads", 16), ("heads", 4), ("seed", 3), ("seed", 11), ("seq_q", 40),
               ("d_model", 128)]
    for name, value in changes:
        qtbot.wait(100)
        for counted in paints.values():
            counted.clear()
        window.panel.widgets[name].setValue(value)
        wait_shown(qtbot, window)
        qtbot.wait(200)
        assert (len(paints["headGrid"]), len(paints["outputView"])) == (1, 1), (name, value)


def test_the_focus_token_list_is_filled_only_while_its_panel_is_open(window, qtbot):
    focus = window.explain.focus
    window.panel.widgets["seq_q"].setValue(12)
    wait_shown(qtbot, window)
    assert focus.tokenList.count() == 0  # hidden: 512 list items per length change were built for nothing
    window.explain.docks["focusDock"].show()
    qtbot.waitUntil(lambda: focus.tokenList.count() == 12, timeout=10000)


def test_token_labels_go_when_the_next_run_has_no_tokens(qtbot):
    from attnviz.core import load_preset
    from attnviz.frames import ViewOptions, render
    from attnviz.ui.maps.views import HeadGrid

    grid = HeadGrid()
    qtbot.addWidget(grid)
    grid.resize(900, 500)
    grid.show()

    def ink_left_of_maps() -> int:  # dark pixels in the strip left of the first map: token labels
        qtbot.wait(20)
        left = grid.mapFromScene(grid.cell_scene_pos(0, -0.5, 0)).x()
        strip = grid.grab().toImage().copy(0, 0, int(left) - 2, grid.height() - 40)
        return sum(strip.pixelColor(x, y).lightness() < 160
                   for x in range(0, strip.width(), 2) for y in range(0, strip.height(), 2))

    toy = run(load_preset("toy-reverse"))  # tokens along the maps' edges
    grid.show_frames(toy, render(toy, ViewOptions()))
    assert grid.mosaic.tokens is not None and ink_left_of_maps() > 20
    plain = run(RunConfig.for_variant("causal", heads=toy.config.heads, seq_q=toy.config.seq_q, d_model=64))
    grid.show_frames(plain, render(plain, ViewOptions()))
    assert grid.mosaic.tokens is None and ink_left_of_maps() == 0


def test_a_focused_map_has_token_axes_then_position_axes_again(qtbot):
    from attnviz.core import load_preset
    from attnviz.frames import ViewOptions, render
    from attnviz.ui.maps.views import HeadGrid

    grid = HeadGrid()
    qtbot.addWidget(grid)
    grid.resize(900, 500)
    grid.set_focus(1)
    toy = run(load_preset("toy-reverse"))
    grid.show_frames(toy, render(toy, ViewOptions()))
    left = grid.mosaic.tick_labels(0)[0]
    assert grid.tile_heads == [1] and len(grid.mosaic.rects) == 1  # drawn large, square cells, every label
    assert [label for _, label in left] == list(toy.axis_tokens()[0])
    plain = run(RunConfig.for_variant("causal", heads=toy.config.heads, seq_q=toy.config.seq_q, d_model=64))
    grid.show_frames(plain, render(plain, ViewOptions()))
    left = grid.mosaic.tick_labels(0)[0]
    assert [label for _, label in left] == [str(i) for i in range(plain.config.seq_q)]
    assert grid.mosaic.axis_names[0] == "query position i"


def test_a_resize_while_stale_regrids(window, qtbot):
    window.panel.set_config(window.panel.config().replace(heads=16))
    wait_shown(qtbot, window)
    window.panel.widgets["heads"].setValue(3)  # invalid: no new result will come to regrid
    qtbot.waitUntil(lambda: window.staleLabel.isVisibleTo(window))
    grid = window.headGrid
    grid.resize(300, 1200)  # tall and narrow: fewer columns fit

    def columns() -> int:
        return len({round(r.left()) for r in grid.mosaic.rects})

    def fitting() -> int:
        area = grid.mosaic.tile_area()
        return grid_shape(16, 16, 16, area.width(), area.height())[1]

    qtbot.waitUntil(lambda: grid.mosaic.rect().width() < 300 and columns() == fitting(), timeout=2000)
    assert columns() < 8 and all(grid.mosaic.rect().contains(r) for r in grid.mosaic.rects)


def test_the_stale_banner_lets_the_mouse_through_to_the_maps(window, qtbot):
    window.panel.widgets["heads"].setValue(3)
    qtbot.waitUntil(lambda: window.staleLabel.isVisibleTo(window))
    assert window.staleLabel.testAttribute(Qt.WA_TransparentForMouseEvents)


def test_opening_the_focus_panel_while_stale_lists_the_shown_tokens(window, qtbot):
    focus = window.explain.focus
    window.panel.widgets["seq_q"].setValue(12)
    wait_shown(qtbot, window)
    window.panel.widgets["heads"].setValue(3)  # no result will come
    qtbot.waitUntil(lambda: window.staleLabel.isVisibleTo(window))
    window.explain.docks["focusDock"].show()
    qtbot.waitUntil(lambda: focus.tokenList.count() == 12, timeout=5000)


def test_a_result_swapped_in_after_a_newer_failure_is_marked_stale(window, qtbot):
    from attnviz.session import Failure, Outcome, Request

    result, frames = window.result, window.frames
    window.result = None  # as at start-up: the first result not yet on screen
    older, newer = window.delivery.next_id(), window.delivery.next_id()  # two requests sent; the newer fails first
    window._on_failed(Failure(Request(newer, result.config, frames.options), "refused", None))
    window.delivery.arrived(Outcome(Request(older, result.config, frames.options), result, frames, False, 0.0))
    qtbot.waitUntil(lambda: window.shown_id == older)
    assert window.staleLabel.isVisibleTo(window) and window.headGrid.stale  # not shown as current


def test_the_grid_paints_a_result_before_the_other_views_take_it(window, qtbot, monkeypatch):
    """A result is shown in two event-loop passes: the head grid (and its paint), then the rest, so a
    timer or an edit gets the loop between the grid's repaint and the tensor view's."""
    from attnviz.session import Outcome, Request

    result, frames, grid = window.result, window.frames, window.headGrid
    grid_painted_first = []
    show = window.outputView.show_frames
    monkeypatch.setattr(window.outputView, "show_frames",
                        lambda *a: (grid_painted_first.append(grid.paints > grid.shown_at), show(*a)))
    tensor_painted_at_signal = []
    window.sigShown.connect(lambda rid: tensor_painted_at_signal.append(window.outputView.painted_shown()))
    rid = window.delivery.next_id()
    with qtbot.waitSignal(window.sigShown, timeout=5000):
        window.delivery.arrived(Outcome(Request(rid, result.config, frames.options), result, frames, False, 0.0))
    assert grid_painted_first == [True] and window.shown_id == window.latest_id
    assert tensor_painted_at_signal == [False]  # the worker waits for this paint too
    qtbot.waitUntil(window.outputView.painted_shown, timeout=5000)


def test_between_the_two_passes_of_a_swap(window, qtbot):
    """The grid shows a result the other views do not yet: the window is not settled, an older
    result is dropped, and closing finishes the swap instead of leaving the views on two results."""
    import copy

    from attnviz.session import Outcome, Request

    result, frames = window.result, copy.copy(window.frames)
    delivery = window.delivery
    older, newer = delivery.next_id(), delivery.next_id()
    delivery.arrived(Outcome(Request(newer, result.config, frames.options), result, frames, False, 0.0))
    delivery.swap_timer.stop()
    delivery.swap()  # the first pass, now
    assert window.headGrid.frames is frames and window.outputView.frames is not frames
    assert not window.is_settled()
    delivery.arrived(Outcome(Request(older, result.config, frames.options), result, frames, False, 0.0))
    assert delivery.waiting is None  # older than the result being shown: dropped
    window.close()
    assert window.shown_id == newer and window.outputView.frames is frames


def test_closing_drops_a_result_waiting_to_be_swapped_in(window, qtbot):
    from attnviz.session import Outcome, Request

    result, frames, shown = window.result, window.frames, window.shown_id
    delivery = window.delivery
    delivery.arrived(Outcome(Request(delivery.next_id(), result.config, frames.options), result, frames, False, 0.0))
    assert delivery.waiting is not None and delivery.swap_timer.isActive()
    window.close()
    assert delivery.waiting is None and not delivery.swap_timer.isActive()  # dropped, and no swap is due
    QCoreApplication.sendPostedEvents()
    QCoreApplication.processEvents()
    assert window.shown_id == shown  # nothing swapped into a closed window


def test_map_axes_tick_on_two_levels_without_an_si_prefix(window):
    """lean_axes: a third tick level and the SI-prefix label re-render were a third of the axes' paint time."""
    import pyqtgraph as pg

    explain = window.explain
    for view in (window.headGrid, window.outputView, window.modelView, explain.pipeline.large, explain.stats.overview):
        axes = [item for item in view.scene().items() if isinstance(item, pg.AxisItem)]
        assert axes, view.objectName()
        for axis in axes:
            assert len(axis.tickValues(-0.5, 511.5, 500)) <= 2 and not axis.autoSIPrefix, view.objectName()


def test_the_tensor_view_stays_legible_in_a_cramped_window(window, qtbot):
    from attnviz.ui.window.main_window import TENSOR_MIN_PX

    window.resize(1280, 700)  # the model dock open below takes its share
    qtbot.waitUntil(lambda: window.height() == 700)
    assert window.modelDock.isVisible() and window.outputView.height() >= TENSOR_MIN_PX


def test_the_hover_line_says_what_hovering_does_until_a_cell_is_hovered(window, qtbot):
    from attnviz.ui.window.main_window import HOVER_HINT

    label, grid = window.hoverLabel, window.headGrid
    assert label.text() == HOVER_HINT
    grid._hovered(grid.cell_scene_pos(0, 1.2, 1.2))
    assert "query i=1, key j=1" in label.text()
    assert label.textFormat() == Qt.PlainText  # a token such as '<s>' is text, not a tag
    window.panel.widgets["seed"].setValue(window.panel.widgets["seed"].value() + 1)
    wait_shown(qtbot, window)
    assert label.text() == HOVER_HINT  # the old text described the previous run's cells


def test_colour_bar_label_and_rows_follow_edits_after_seed_changes(window, qtbot):
    """A seed edit skips the panel's row refresh and the bar's label (same rows, same label); the
    edits that change them still do."""
    bar = window.headGrid.bar.getAxis("right")
    seed = window.panel.widgets["seed"]
    for _ in range(2):
        seed.setValue(seed.value() + 1)
        wait_shown(qtbot, window)
    assert bar.labelText.startswith("weights") and "dropout" not in bar.labelText
    weights_range = window.headGrid.bar.getViewBox().viewRange()[1]
    window.panel.widgets["dropout"].setValue(0.3)
    window.panel.widgets["train"].setChecked(True)
    wait_shown(qtbot, window)
    assert bar.labelText.startswith("weights after dropout")
    select(window.viewCombo, "scores")
    wait_shown(qtbot, window)
    assert bar.labelText.startswith("scores") and window.headGrid.bar.getViewBox().viewRange()[1] != weights_range
    window_row = window.panel.widgets["window"]
    assert not window_row.isVisibleTo(window.panel)
    select(window.panel.widgets["mask"], "window")
    assert window_row.isVisibleTo(window.panel)


def test_every_variant_fits_the_panel_column_without_a_sideways_scrollbar(window, qtbot):
    """The panel column starts at its minimum width; no variant's rows may be wider (a clipped
    Reset button and combos behind a horizontal scroll bar, seen on the pretrained variant)."""
    from attnviz.core import VARIANTS

    scroll = window.panel.parentWidget().parentWidget()
    window.resize(1200, 600)  # short enough for the vertical scroll bar to take its share too
    for variant in VARIANTS:
        select(window.panel.widgets["variant"], variant)  # the pretrained one has no folder: not a valid config
        qtbot.wait(20)
        room = scroll.minimumWidth() - 2 * scroll.frameWidth() - scroll.verticalScrollBar().sizeHint().width()
        assert window.panel.minimumSizeHint().width() <= room, variant
        assert not scroll.horizontalScrollBar().isVisible(), variant


def test_a_text_set_by_a_preset_or_file_shows_from_its_start(window):
    text = "abcabcabcabc" * 4
    window.panel.set_config(RunConfig.for_variant("toy-induction", text=text))
    field = window.panel.widgets["text"]
    assert field.text() == text and field.cursorPosition() == 0


def test_a_long_forward_shows_its_layers_and_stop_cancels_it_keeping_the_last_view(qtbot):
    """The busy bar counts a model's layers as they finish; Stop (Esc) cancels the forward within one."""
    from attnviz.core.runs.runner import Cancelled

    polls = []

    def layered(config, cancel=None, progress=None, **kwargs):  # run() of 3 layers, the middle one long
        if config.seed != 7:
            return run(config, cancel=cancel, **kwargs)
        progress(1, 3)
        for _ in range(400):  # within layer 2: the kernel polls cancel between its blocks
            polls.append(1)
            if cancel():
                raise Cancelled
            time.sleep(0.01)
        raise AssertionError("never cancelled")

    w = MainWindow(compute=layered)
    qtbot.addWidget(w)
    w.show()
    wait_shown(qtbot, w)
    shown = w.result
    w.panel.widgets["seed"].setValue(7)
    qtbot.waitUntil(lambda: w.busyIndicator.format() == "layer 1 / 3" and w.panel.stopButton.isEnabled())
    assert w.busyIndicator.maximum() == 3 and w.busyIndicator.value() == 1
    qtbot.keyClick(w, Qt.Key_Escape)
    qtbot.waitUntil(lambda: "Cancelled" in w.statusBar().currentMessage(), timeout=5000)
    assert w.result is shown and not w.panel.stopButton.isEnabled() and w.busyIndicator.maximum() == 0
    w.close()


def test_hover_on_a_pooled_map_names_the_block_of_cells_and_its_maximum(qtbot, monkeypatch):
    from attnviz.core.kernel import pooling as pooling_module

    monkeypatch.setattr(pooling_module, "TARGET", 16)  # 64 tokens pool by 4
    config = RunConfig.for_variant("causal", d_model=32, heads=4, seq_q=64, pool="always", seed=2)
    w = MainWindow()
    qtbot.addWidget(w)
    w.show()
    w.panel.set_config(config)
    qtbot.waitUntil(lambda: w.is_settled() and w.result is not None and w.result.pool_factor == (4, 4),
                    timeout=15000)
    texts = []
    w.headGrid.sigHover.connect(texts.append)
    w.headGrid._hovered(w.headGrid.cell_scene_pos(1, 2.0, 41.0))  # query 41, key 2 of head 1
    expected = run(config.replace(pool="never")).weights[0, 1, 40:44, 0:4].max()
    assert "queries 40–43 × keys 0–3" in texts[-1] and "max-pooled 4 × 4" in texts[-1]
    assert f"max {expected:.4g}" in texts[-1] and "--region 40:44,0:4" in texts[-1]
    w.headGrid._hovered(w.headGrid.cell_scene_pos(1, 60.0, 2.0))  # above the diagonal: all masked
    assert "every cell masked" in texts[-1]
    w.close()


class _Shows:
    """Counts a widget's show events (QWidget has no signal for them)."""

    def __init__(self, widget: QWidget):
        from PySide6.QtCore import QEvent, QObject

        outer = self

        class Filter(QObject):
            def eventFilter(self, obj, event):  # noqa: N802 (Qt's name)
                if event.type() == QEvent.Type.Show:
                    outer.count += 1
                return False

        self.count = 0
        self.filter = Filter()
        widget.installEventFilter(self.filter)


def test_the_busy_bar_shows_only_for_a_run_that_takes_a_while(qtbot):
    """A quick run never animates the busy bar (its repaints woke the GUI thread in the middle of the forward);
    once a run has taken BUSY_SHOW_MS it appears, and it goes when the run ends."""
    from attnviz.ui.window.main_window import BUSY_SHOW_MS

    delay = {"s": 0.0}

    def compute(config, cancel=None, **kwargs):
        time.sleep(delay["s"])
        return run(config, cancel=cancel, **kwargs)

    w = MainWindow(compute=compute)
    qtbot.addWidget(w)
    w.show()
    wait_shown(qtbot, w)
    shows = _Shows(w.busyIndicator)
    seed = w.panel.widgets["seed"]
    seed.setValue(seed.value() + 1)
    wait_shown(qtbot, w)
    assert shows.count == 0 and not w.busyIndicator.isVisible()

    delay["s"] = 3 * BUSY_SHOW_MS / 1000
    seed.setValue(seed.value() + 1)
    qtbot.waitUntil(lambda: w.busyIndicator.isVisible(), timeout=5000)
    wait_shown(qtbot, w)
    qtbot.waitUntil(lambda: not w.busyIndicator.isVisible(), timeout=2000)  # sigBusy(False) follows the result
    assert shows.count == 1
    w.close()


def test_the_busy_bar_counts_from_the_first_of_a_stream_of_requests_and_stays_away_once_idle(window, qtbot):
    """sigBusy(True) comes with every request: a stream of them must not keep postponing the bar; a partial
    result painted after the worker went idle must not bring it back."""
    from attnviz.ui.window.main_window import BUSY_SHOW_MS

    window._on_busy(True)
    qtbot.wait(150)
    window._on_busy(True)  # the next request of a stream
    assert window._busy_timer.isActive() and window._busy_timer.remainingTime() < BUSY_SHOW_MS - 50
    qtbot.waitUntil(lambda: window.busyIndicator.isVisible(), timeout=2000)
    window._on_busy(True)
    assert window.busyIndicator.isVisible() and not window._busy_timer.isActive()
    window._on_busy(False)
    assert not window.busyIndicator.isVisible()
    window._show_busy_now()  # e.g. a generation's partial result, painted late
    assert not window.busyIndicator.isVisible()


def test_the_tensor_view_closed_opens_again_from_the_view_menu(window, qtbot):
    view_menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&View")
    entry = next(a for a in view_menu.actions() if a.text() == "Tensor view")
    assert entry.isCheckable() and entry.isChecked() and entry.shortcut().toString() == "Ctrl+Shift+E"
    window.tensorDock.close()
    qtbot.waitUntil(lambda: not window.tensorDock.isVisible())
    assert not entry.isChecked()
    entry.trigger()
    qtbot.waitUntil(lambda: window.tensorDock.isVisible() and window.outputView.isVisible())
