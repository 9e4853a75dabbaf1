"""Zoom to exact in the window: a rectangle dragged on a map shows that block exactly (every head, its tokens),
computed on the worker; Esc or Back returns to the full maps; a failure leaves the view as it was."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from PySide6.QtCore import QEvent, QPointF, Qt
from PySide6.QtGui import QMouseEvent
from PySide6.QtWidgets import QApplication
from uihelpers import wait_shown

from attnviz.core import RunConfig, run
from attnviz.ui import MainWindow
from attnviz.ui.maps.zoom import ZOOM_MAX, drag_region

POOLED = RunConfig.for_variant("causal", d_model=32, heads=4, seq_q=64, pool="always", seed=2)


class Recording:
    """The real engine, recording each call's region and thread."""

    def __init__(self, fail_region: bool = False):
        self.calls: list[tuple] = []
        self.fail_region = fail_region

    def __call__(self, config, cancel=None, **kwargs):
        self.calls.append((kwargs.get("region"), threading.current_thread()))
        if self.fail_region and kwargs.get("region") is not None:
            raise MemoryError
        return run(config, cancel=cancel, **kwargs)


def window_for(qtbot, config: RunConfig | None, compute) -> MainWindow:
    w = MainWindow(compute=compute)
    qtbot.addWidget(w)
    w.resize(1200, 800)
    w.show()
    wait_shown(qtbot, w)
    if config is not None:
        w.panel.set_config(config)
        qtbot.waitUntil(lambda: w.is_settled() and w.result is not None and w.result.config.seq_q == config.seq_q,
                        timeout=20000)
    return w


@pytest.fixture
def pooled(qtbot, monkeypatch):
    from attnviz.core.kernel import pooling

    monkeypatch.setattr(pooling, "TARGET", 16)  # 64 tokens pool by 4
    compute = Recording()
    w = window_for(qtbot, POOLED, compute)
    assert w.result.pool_factor == (4, 4)
    yield w, compute
    w.close()


def test_a_drag_on_a_pooled_map_shows_that_block_exactly_and_esc_returns(pooled, qtbot):
    w, compute = pooled
    grid = w.headGrid
    before = len(compute.calls)
    # head 1, from query 41 / key 2 to query 46 / key 9: the pooled cells it touches are queries 40-47, keys 0-11
    region = grid.drag_zoom(grid.cell_scene_pos(1, 2.0, 41.0), grid.cell_scene_pos(1, 9.0, 46.0))
    assert region == (40, 48, 0, 12)
    qtbot.waitUntil(lambda: w.is_settled() and grid.zoom is not None, timeout=20000)
    exact = run(POOLED.replace(pool="never")).weights[0]  # the whole exact maps, computed independently
    np.testing.assert_allclose(grid.zoom.values, exact[:, 40:48, 0:12], atol=1e-6)
    assert [t.heat.shape for t in grid.tiles] == [(8, 12)] * 4  # every head, a cell per token
    assert grid.mosaic.map_shape == (8, 12)
    assert grid.mosaic.tokens == (tuple(str(i) for i in range(40, 48)), tuple(str(j) for j in range(12)))
    assert "rows 40–47, keys 0–11, exact" in w.captionLabel.text() and w.backButton.isVisible()
    region_calls = compute.calls[before:]
    assert [r for r, _ in region_calls] == [(40, 48, 0, 12)]  # one run keeping the region
    assert region_calls[0][1] is not threading.main_thread()  # on the worker, never the GUI thread
    texts = []
    grid.sigHover.connect(texts.append)
    grid._hovered(grid.cell_scene_pos(2, 3.0, 5.0))  # head 2, query 45, key 3
    assert "query 45" in texts[-1] and "key 3" in texts[-1] and f"{exact[2, 45, 3]:.4g}" in texts[-1]

    qtbot.keyClick(w, Qt.Key_Escape)
    assert grid.zoom is None and grid.mosaic.map_shape == (64, 64) and not w.backButton.isVisible()
    assert len(grid.tiles) == 4 and grid.tiles[0].heat.shape == (64, 64)
    assert "Zoomed" not in w.captionLabel.text()


def test_a_drag_inside_a_zoomed_block_cuts_it_from_the_block_without_another_run(pooled, qtbot):
    w, compute = pooled
    grid = w.headGrid
    grid.drag_zoom(grid.cell_scene_pos(0, 0.0, 32.0), grid.cell_scene_pos(0, 15.0, 47.0))  # queries 32-47, keys 0-15
    qtbot.waitUntil(lambda: w.is_settled() and grid.zoom is not None, timeout=20000)
    runs = len(compute.calls)
    assert grid.drag_zoom(grid.cell_scene_pos(0, 2.0, 3.0), grid.cell_scene_pos(0, 5.0, 7.0)) == (35, 40, 2, 6)
    qtbot.waitUntil(lambda: w.is_settled() and grid.zoom is not None and grid.zoom.region == (35, 40, 2, 6),
                    timeout=20000)
    np.testing.assert_allclose(grid.zoom.values, run(POOLED.replace(pool="never")).weights[0, :, 35:40, 2:6],
                               atol=1e-6)
    assert len(compute.calls) == runs


def test_back_returns_and_a_view_change_while_zoomed_re_renders_the_block(pooled, qtbot):
    w, _ = pooled
    grid = w.headGrid
    grid.drag_zoom(grid.cell_scene_pos(3, 0.0, 8.0), grid.cell_scene_pos(3, 7.0, 15.0))
    qtbot.waitUntil(lambda: w.is_settled() and grid.zoom is not None, timeout=20000)
    w.colormapCombo.setCurrentIndex((w.colormapCombo.currentIndex() + 1) % w.colormapCombo.count())
    qtbot.waitUntil(lambda: w.is_settled() and grid.zoom is not None
                    and grid.zoom.options.colormap == w.colormapCombo.currentData(), timeout=20000)
    qtbot.mouseClick(w.backButton, Qt.LeftButton)
    assert grid.zoom is None and grid.mosaic.map_shape == (64, 64)


def test_a_short_unpooled_run_cuts_the_block_from_its_exact_maps(qtbot):
    compute = Recording()
    w = window_for(qtbot, None, compute)
    grid, shown = w.headGrid, w.result
    assert shown.pool_factor is None
    c = shown.config
    runs = len(compute.calls)
    region = grid.drag_zoom(grid.cell_scene_pos(0, 1.0, 2.0), grid.cell_scene_pos(0, 4.4, 6.2))
    assert region == (2, 7, 1, 5)
    qtbot.waitUntil(lambda: w.is_settled() and grid.zoom is not None, timeout=20000)
    np.testing.assert_array_equal(grid.zoom.values, shown.weights[0, :, 2:7, 1:5])
    assert len(compute.calls) == runs  # no forward: the exact maps were on hand
    assert len(grid.tiles) == c.heads
    w.close()


def test_a_mouse_drag_zooms_and_is_not_taken_for_a_click(qtbot):
    w = window_for(qtbot, None, Recording())
    grid = w.headGrid
    regions = []
    grid.sigZoom.connect(regions.append)

    def send(kind, scene: QPointF, buttons):
        at = QPointF(grid.mapFromScene(scene))
        event = QMouseEvent(kind, at, grid.viewport().mapToGlobal(at), Qt.LeftButton, buttons, Qt.NoModifier)
        QApplication.sendEvent(grid.viewport(), event)

    a, b = grid.cell_scene_pos(1, 0.0, 1.0), grid.cell_scene_pos(1, 3.0, 5.0)
    send(QEvent.MouseButtonPress, a, Qt.LeftButton)
    for t in np.linspace(0.2, 1.0, 5):
        send(QEvent.MouseMove, a + (b - a) * float(t), Qt.LeftButton)
    assert grid.band.isVisible()
    send(QEvent.MouseButtonRelease, b, Qt.NoButton)
    assert regions == [(1, 6, 0, 4)] and not grid.band.isVisible()
    assert grid.focus is None  # the drag did not also enlarge the head
    qtbot.waitUntil(lambda: w.is_settled() and grid.zoom is not None, timeout=20000)
    w.close()


def test_a_zoom_that_fails_keeps_the_view_with_one_message(qtbot, monkeypatch):
    from attnviz.core.kernel import pooling

    monkeypatch.setattr(pooling, "TARGET", 16)
    w = window_for(qtbot, POOLED, Recording(fail_region=True))
    grid, shown = w.headGrid, w.result
    grid.drag_zoom(grid.cell_scene_pos(0, 0.0, 0.0), grid.cell_scene_pos(0, 5.0, 5.0))
    qtbot.waitUntil(lambda: w.is_settled() and "Zoom not shown" in w.statusBar().currentMessage(), timeout=20000)
    assert "out of memory" in w.statusBar().currentMessage()
    assert grid.zoom is None and w.result is shown and grid.mosaic.map_shape == (64, 64)
    assert not w.staleLabel.isVisible() and not w.backButton.isVisible()
    w.panel.widgets["seed"].setValue(5)  # the next edit is an ordinary request again
    qtbot.waitUntil(lambda: w.is_settled() and w.result.config.seed == 5, timeout=20000)
    assert grid.zoom is None
    w.close()


def test_drag_region_covers_whole_pooled_cells_and_at_most_zoom_max():
    assert drag_region((2.0, 41.0), (9.0, 46.0), (64, 64), (4, 4)) == (40, 48, 0, 12)
    assert drag_region((9.0, 46.0), (2.0, 41.0), (64, 64), (4, 4)) == (40, 48, 0, 12)  # either direction
    assert drag_region((-3.0, -3.0), (100.0, 2.0), (64, 64)) == (0, 3, 0, 64)  # clamped to the map
    q0, q1, k0, k1 = drag_region((0.0, 0.0), (8000.0, 8000.0), (8192, 8192), (8, 8))
    assert (q0, q1, k0, k1) == (0, ZOOM_MAX, 0, ZOOM_MAX)  # kept from the corner the drag began
    assert drag_region((8000.0, 8000.0), (0.0, 0.0), (8192, 8192), (8, 8))[1] == 8008
