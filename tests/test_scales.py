"""Colour scales (frames.py): linear, log, row, rank, on the worker side (no Qt)."""

from __future__ import annotations

import numpy as np
import pytest

from attnviz import colormaps
from attnviz.core import RunConfig, run
from attnviz.frames import SCALE_MODES, ViewOptions, default_scale, pool_maps, quantise_scaled, render

DATA_MAX = colormaps.DATA_LEVELS - 1


@pytest.fixture(scope="module")
def long_causal():
    return run(RunConfig(heads=2, seq_q=512, seq_kv=512))


@pytest.mark.parametrize("mode", ["log", "row", "rank"])
def test_a_long_causal_map_is_not_flat(long_causal, mode):
    tri = np.tril(np.ones((512, 512), bool))
    linear = render(long_causal, ViewOptions(max_px=None)).heads[0].image
    image = render(long_causal, ViewOptions(max_px=None, scale_mode=mode)).heads[0].image
    assert len(np.unique(image[tri])) >= 128 > len(np.unique(linear[tri]))
    assert (image[~tri] == colormaps.MASKED_INDEX).all()


def test_log_and_rank_keep_the_order_of_the_weights(long_causal):
    w = long_causal.weights[0, 1]
    tri = np.tril(np.ones(w.shape, bool))
    for mode in ("log", "rank"):
        idx = render(long_causal, ViewOptions(max_px=None, scale_mode=mode)).heads[1].image[tri].astype(int)
        order = np.argsort(w[tri], kind="stable")
        assert np.all(np.diff(idx[order]) >= 0), mode


def test_row_divides_each_row_by_its_maximum(long_causal):
    w = long_causal.weights[0, 0]
    image = render(long_causal, ViewOptions(max_px=None, scale_mode="row")).heads[0].image
    expected = np.round(w / w.max(-1, keepdims=True) * DATA_MAX)
    tri = np.tril(np.ones(w.shape, bool))
    np.testing.assert_allclose(image[tri], expected[tri], atol=1)
    assert (np.where(tri, image, 0).max(-1) == DATA_MAX).all()


@pytest.mark.parametrize("max_px", [None, (100, 100)])
def test_the_row_scale_leaves_the_results_maps_as_they_were(long_causal, max_px):
    before = long_causal.weights.copy()
    render(long_causal, ViewOptions(max_px=max_px, scale_mode="row"))
    np.testing.assert_array_equal(long_causal.weights, before)


def test_row_normalises_before_pooling_rows():
    values = np.zeros((1, 4, 4), np.float32)
    values[0, 0] = [1.0, 0.0, 0.0, 0.0]  # a big row
    values[0, 1] = [0.0, 0.0, 0.01, 0.0]  # a small row pooled together with it: its peak must still be 1
    pooled = pool_maps(values, None, None, (2, 2), signed=False, row=True)
    (image,), _, scale = quantise_scaled(pooled, True, "row")
    assert image[0, 0] == DATA_MAX and image[0, 1] == DATA_MAX
    assert scale.unit == "/ row max"


def test_log_ticks_are_in_the_maps_units():
    values = np.array([[[1e-3, 1e-2, 1e-1, 1.0]]], np.float32)
    (image,), (levels,), scale = quantise_scaled(pool_maps(values, None, None, None, False), True, "log")
    np.testing.assert_array_equal(image[0], np.round(np.linspace(0, DATA_MAX, 4)))
    assert levels == pytest.approx((1e-3, 1.0))
    assert [label for _, label in scale.ticks] == ["0.001", "0.01", "0.1", "1"]


def test_signed_maps_under_every_scale():
    result = run(RunConfig(heads=2, seq_q=64))
    for mode in SCALE_MODES:
        frames = render(result, ViewOptions(view="scores", scale_mode=mode, mean=True))
        image = frames.heads[0].image
        upper = np.triu(np.ones(image.shape, bool), 1)
        assert (image[upper] == colormaps.MASKED_INDEX).all(), mode
        assert len(np.unique(image[~upper])) > 50, mode
        assert frames.mean is not None


def test_defaults_per_view():
    assert default_scale("weights", RunConfig()) == "log"
    assert default_scale("scores", RunConfig()) == "linear"
    assert default_scale("weights", RunConfig(variant="differential")) == "linear"  # signed weights
