"""A long pooled forward of a pretrained model fills the model view in layer by layer: each finished layer's row
of tiles appears before the run ends (the rest grey), and the final view is the normal one."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from uihelpers import wait_shown

from attnviz.core import RunConfig, run
from attnviz.model_mosaic import model_mosaic
from attnviz.models.tokens import display
from attnviz.ui import MainWindow
from attnviz.ui.maps import layer_feed, model_view

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))  # the tiny checkpoints' writers
from tiny import SENTENCE, make_family  # noqa: E402

LAYERS = 4


@pytest.fixture(scope="module")
def llama4(tmp_path_factory):
    pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp("fill") / "llama4"
    folder.mkdir()
    make_family(folder, "llama", num_hidden_layers=LAYERS)
    return folder


class SlowLayers:
    """The real engine; each finished layer takes a moment longer, so the window sees the forward run."""

    def __init__(self):
        self.threads = []

    def __call__(self, config, cancel=None, progress=None, **kwargs):
        self.threads.append(threading.current_thread())

        def slow(done, total, pooled=()):
            progress(done, total, pooled)
            time.sleep(0.3)
        return run(config, cancel=cancel, progress=None if progress is None else slow, **kwargs)


def test_the_model_view_fills_in_layer_by_layer_and_ends_as_the_normal_view(llama4, qtbot, monkeypatch):
    from attnviz.core.kernel import pooling

    monkeypatch.setattr(pooling, "TARGET", 8)  # the sentence's tokens pool by 2 (or more)
    monkeypatch.setattr(layer_feed, "FEED_INTERVAL_S", 0.0)  # every layer (the slow forward paces them)
    compute = SlowLayers()
    w = MainWindow(compute=compute)
    qtbot.addWidget(w)
    w.resize(1200, 900)
    w.show()
    wait_shown(qtbot, w)
    view = w.modelView
    seen = []  # (request shown when the partial picture was swapped in, the picture)
    view._sigRows.connect(lambda *_: seen.append((w.shown_id, view.image.image.copy())))
    config = RunConfig(variant="pretrained", model=str(llama4), text=SENTENCE, pool="always")
    w.panel.set_config(config)
    qtbot.waitUntil(lambda: w.is_settled() and w.result is not None and w.result.source is not None, timeout=30000)
    rid = w.shown_id
    assert w.result.pool_factor is not None
    assert all(t is not threading.main_thread() for t in compute.threads)

    early = [picture for shown, picture in seen if shown < rid]  # swapped in while the forward still ran
    assert early, "no layer appeared before the run ended"
    qtbot.waitUntil(lambda: view.drawn is w.result.source, timeout=10000)
    final = view.image.image
    source = w.result.source
    expected = model_mosaic([(lw, allowed) for _, lw, allowed in source.blocks()], view.tile, view.colormap,
                            model_view.GAP)
    np.testing.assert_array_equal(final, expected)  # the normal model view
    tile, tops = view.tile, view.tops
    first = early[0]
    assert first.shape == final.shape
    done = [np.array_equal(first[y:y + tile], final[y:y + tile]) for y in tops]
    grey = [bool((first[y:y + tile, :tile, :3] == model_view.PENDING_GREY).all()) for y in tops]
    assert done[0] and grey[-1]  # the first layer's tiles as they end up, the last layer still grey
    assert all(d != g for d, g in zip(done, grey))  # each row either finished (exact) or waiting
    assert len(early) >= 2 or sum(done) >= 2  # more than one layer came in before the end
    assert "max-pooled" in w.statusLabel.text()
    w.close()


def test_the_status_line_says_how_a_pooled_models_maps_were_pooled(llama4, qtbot, monkeypatch):
    from attnviz.core.kernel import pooling

    monkeypatch.setattr(pooling, "TARGET", 8)
    w = MainWindow()
    qtbot.addWidget(w)
    w.show()
    wait_shown(qtbot, w)
    w.panel.set_config(RunConfig(variant="pretrained", model=str(llama4), text=SENTENCE, pool="always"))
    qtbot.waitUntil(lambda: w.is_settled() and w.result is not None and w.result.source is not None, timeout=30000)
    n, (f, _) = w.result.config.seq_q, w.result.pool_factor
    # it leads the line: a long status line is cut at the window's edge
    assert w.statusLabel.text().startswith(f"maps max-pooled {n:,} → {-(-n // f):,} inside the kernel")
    w.close()


def pooled_window(qtbot, folder, compute):
    """A shown window on the tiny llama's pooled forward (pool="always"), settled: (window, config)."""
    w = MainWindow(compute=compute)
    qtbot.addWidget(w)
    w.resize(1200, 900)
    w.show()
    wait_shown(qtbot, w)
    config = RunConfig(variant="pretrained", model=str(folder), text=SENTENCE, pool="always")
    w.panel.set_config(config)
    qtbot.waitUntil(lambda: w.is_settled() and w.result is not None and w.result.source is not None, timeout=30000)
    return w, config


def test_a_cancelled_forward_puts_the_last_whole_picture_back(llama4, qtbot, monkeypatch):
    from attnviz.core.kernel import pooling

    monkeypatch.setattr(pooling, "TARGET", 8)
    monkeypatch.setattr(layer_feed, "FEED_INTERVAL_S", 0.0)
    w, config = pooled_window(qtbot, llama4, SlowLayers())
    view = w.modelView
    qtbot.waitUntil(lambda: view.drawn is w.result.source, timeout=10000)
    whole = view.image.image.copy()
    w.panel.widgets["text"].setText(SENTENCE + " The dog sat.")  # a new forward of the same model
    qtbot.waitUntil(lambda: view.partial_shows > 0 and view.partial is not None, timeout=20000)
    w.stop_generation()  # Stop / Esc: cancel the forward within its layer
    qtbot.waitUntil(lambda: w.is_settled() and "Cancelled" in w.statusBar().currentMessage(), timeout=20000)
    qtbot.waitUntil(lambda: view.drawn is w.result.source and view.partial is None, timeout=10000)
    np.testing.assert_array_equal(view.image.image, whole)
    w.close()


def test_a_zoom_on_a_pooled_models_map_is_exact_and_follows_the_layer_without_another_forward(llama4, qtbot,
                                                                                              monkeypatch):
    from attnviz.core.kernel import pooling

    monkeypatch.setattr(pooling, "TARGET", 8)
    regions = []

    def recording(config, cancel=None, **kwargs):
        regions.append(kwargs.get("region"))
        return run(config, cancel=cancel, **kwargs)

    w = MainWindow(compute=recording)
    qtbot.addWidget(w)
    w.resize(1200, 900)
    w.show()
    wait_shown(qtbot, w)
    config = RunConfig(variant="pretrained", model=str(llama4), text=SENTENCE, pool="always", layer=1)
    w.panel.set_config(config)
    qtbot.waitUntil(lambda: w.is_settled() and w.result is not None and w.result.pool_factor is not None,
                    timeout=30000)
    grid, (fq, _) = w.headGrid, w.result.pool_factor
    region = grid.drag_zoom(grid.cell_scene_pos(2, 0.0, 6.0), grid.cell_scene_pos(2, 5.0, 11.0))
    qtbot.waitUntil(lambda: w.is_settled() and grid.zoom is not None, timeout=30000)
    q0, q1, k0, k1 = region
    assert q0 % fq == 0 and k0 == 0
    exact = run(config.replace(pool="never")).source.layer_weights[:, 0]  # (layers, H, L, L), unpooled
    np.testing.assert_allclose(grid.zoom.values, exact[1, :, q0:q1, k0:k1], atol=1e-5)
    assert grid.mosaic.tokens[0] == tuple(display(t) for t in w.result.tokens[q0:q1])  # as the axes show them
    zoom_runs = regions.count(region)
    w.panel.widgets["layer"].setValue(0)  # another layer of the same forward: its block kept, no zoom run
    qtbot.waitUntil(lambda: w.is_settled() and grid.zoom is not None and w.result.config.layer == 0, timeout=30000)
    np.testing.assert_allclose(grid.zoom.values, exact[0, :, q0:q1, k0:k1], atol=1e-5)
    assert regions.count(region) == zoom_runs == 1
    w.close()


def test_another_layer_of_a_pooled_forward_shows_its_maps_without_running_again(llama4, qtbot, monkeypatch):
    # a pooled forward keeps every layer's pooled maps but the per-token tensors of the layer it ran for only:
    # a layer change shows the kept maps at once, and the output view says its tensor is not kept there
    from uihelpers import CountingRun

    from attnviz.core.kernel import pooling

    monkeypatch.setattr(pooling, "TARGET", 8)
    compute = CountingRun()
    w, config = pooled_window(qtbot, llama4, compute)
    runs, source = len(compute.calls), w.result.source
    w.panel.widgets["layer"].setValue(2)
    qtbot.waitUntil(lambda: w.is_settled() and w.result.config.layer == 2, timeout=15000)
    assert len(compute.calls) == runs  # no forward
    exact = run(config.replace(layer=2))  # the same pooled forward, computed apart, for layer 2
    np.testing.assert_array_equal(w.result.weights, exact.weights)
    assert w.result.source is source and w.frames.tensor is None
    assert "not kept for this layer" in w.outputView.note.text() and w.outputView.note.isVisible()
    w.panel.widgets["layer"].setValue(int(config.layer))  # back: its tensors are there
    qtbot.waitUntil(lambda: w.is_settled() and w.result.config.layer == config.layer, timeout=15000)
    assert len(compute.calls) == runs and w.frames.tensor is not None and not w.outputView.note.isVisible()
