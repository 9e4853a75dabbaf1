"""frames: worker-side pooling and quantisation (no Qt)."""

from __future__ import annotations

import numpy as np

from attnviz import colormaps
from attnviz.core import RunConfig, load_preset, run
from attnviz.frames import ViewOptions, quantise_maps, render

DATA_MAX = colormaps.DATA_LEVELS - 1


def test_small_maps_are_not_pooled_and_follow_the_weights():
    result = run(RunConfig(heads=2, seq_q=8, mask="none"))
    frames = render(result, ViewOptions())
    w = result.weights[0]
    for h, tile in enumerate(frames.heads):
        assert tile.image.shape == (8, 8) and tile.image.dtype == np.uint8
        expected = np.round(w[h] / w.max() * DATA_MAX)  # shared scale: 0 .. max over all heads
        np.testing.assert_allclose(tile.image, expected, atol=1)
    assert frames.levels == (0.0, float(w.max()))


def test_pooling_keeps_a_single_peak_and_masks_need_a_whole_block():
    values = np.zeros((1, 1000, 1000), np.float32)
    values[0, 500, 737] = 1.0
    allowed = np.ones((1, 1000, 1000), bool)
    allowed[0, :, 900:] = False  # a masked band wider than one block
    allowed[0, 10, 10] = False  # one masked cell inside data: its block stays data
    (image,), (levels,) = quantise_maps(values, allowed, None, (100, 100), signed=False)
    assert image.shape == (100, 100)
    assert image[50, 73] == DATA_MAX and (image[:, :90] < colormaps.DATA_LEVELS).all()
    assert (image[:, 90:] == colormaps.MASKED_INDEX).all()
    assert levels == (0.0, 1.0)


def test_signed_pooling_keeps_the_largest_magnitude():
    values = np.full((1, 40, 40), 0.1, np.float32)
    values[0, 3, 3] = -5.0
    values[0, 30, 30] = 2.0
    (image,), (levels,) = quantise_maps(values, None, None, (4, 4), signed=True)
    assert levels == (-5.0, 5.0)
    assert image[0, 0] == 0  # -5 is the bottom of the diverging scale
    assert image[3, 3] == round((2.0 + 5.0) / 10.0 * DATA_MAX)


def test_no_key_rows_are_drawn_apart_from_masked_cells():
    result = run(load_preset("no-key-rows"))
    for view in ("weights", "scores"):
        image = render(result, ViewOptions(view=view)).heads[0].image
        assert (image[:4] == colormaps.NAN_INDEX).all()
        assert (image[4:] != colormaps.NAN_INDEX).all()
        i, j = np.arange(12)[:, None], np.arange(8)[None, :]
        masked = (j > i - 4) & (i >= 4)  # bottom-right causal: query i sits at key position i - 4
        assert (image[masked] == colormaps.MASKED_INDEX).all()
        assert (image[(j <= i - 4)] < colormaps.DATA_LEVELS).all()


def test_per_head_levels_and_mean_tile():
    result = run(RunConfig(heads=4, seq_q=12))
    frames = render(result, ViewOptions(shared_scale=False, mean=True))
    for h, tile in enumerate(frames.heads):
        assert tile.levels == (0.0, float(result.weights[0, h].max()))
        assert tile.image[tile.image < colormaps.DATA_LEVELS].max() == DATA_MAX
    mean = result.weights[0].mean(0)
    assert frames.mean.levels == (0.0, float(mean.max()))
    assert render(result, ViewOptions(mean=False)).mean is None


def test_tensor_tile_is_centred_at_zero():
    result = run(RunConfig(heads=2, seq_q=5))
    frames = render(result, ViewOptions(tensor="v", tensor_head=1))
    v = result.v[0, 1]
    m = float(np.abs(v).max())
    assert frames.tensor.levels == (-m, m)
    assert frames.tensor.image.shape == v.shape


def test_block_pooling_equals_torch_max_pool2d():
    import torch
    import torch.nn.functional as F

    from attnviz.frames import _pool

    g = torch.Generator().manual_seed(0)
    for shape, max_px in [((3, 100, 70), (9, 11)), ((2, 64, 64), (16, 64)), ((1, 5, 1000), (5, 7))]:
        x = torch.randn(shape, generator=g)
        fh, fw = -(-shape[1] // max_px[0]), -(-shape[2] // max_px[1])
        expected = F.max_pool2d(x, (fh, fw), (fh, fw), ceil_mode=True)
        assert torch.equal(_pool(x, max_px), expected)
        low = -F.max_pool2d(-x, (fh, fw), (fh, fw), ceil_mode=True)
        assert torch.equal(_pool(x, max_px, signed=True), torch.where(expected.abs() >= low.abs(), expected, low))


def test_view_only_changes_reuse_the_pooled_maps():
    from attnviz.frames import PoolCache

    result = run(RunConfig(heads=4, seq_q=300))
    cache = PoolCache()
    first = render(result, ViewOptions(max_px=(50, 50)), cache)
    pooled = dict(cache.entries)
    again = render(result, ViewOptions(max_px=(50, 50), colormap="magma", shared_scale=False), cache)
    assert all(cache.entries[k] is v for k, v in pooled.items())  # nothing pooled twice
    assert (again.heads[0].lut == colormaps.lut("magma")).all()
    data = first.heads[0].image < colormaps.DATA_LEVELS
    np.testing.assert_array_equal(again.heads[0].image < colormaps.DATA_LEVELS, data)


def test_nan_rows_of_a_tensor_are_drawn_as_no_key():
    result = run(load_preset("no-key-rows"))  # the first 4 queries have no key: NaN outputs
    tensor = render(result, ViewOptions(tensor="output")).tensor
    assert (tensor.image[:4] == colormaps.NAN_INDEX).all()
    assert (tensor.image[4:] < colormaps.DATA_LEVELS).all()
    finite = result.output[0][4:]
    assert tensor.levels == (-float(np.abs(finite).max()), float(np.abs(finite).max()))


def test_argb_pixels_match_qts_own_conversion_of_the_indexed_map():
    from PySide6.QtGui import QImage

    from attnviz.frames import HeatImage, argb_pixels

    rng = np.random.default_rng(0)
    lut = rng.integers(0, 256, (256, 4), dtype=np.uint8)  # translucent entries too: premultiplied
    image = rng.integers(0, 256, (7, 5), dtype=np.uint8)
    heat = HeatImage(image, (7, 5), (0.0, 1.0), lut)
    c = lut.astype(np.uint32)
    indexed = QImage(image.tobytes(), 5, 7, 5, QImage.Format_Indexed8)
    indexed.setColorTable(((c[:, 3] << 24) | (c[:, 0] << 16) | (c[:, 1] << 8) | c[:, 2]).tolist())
    qt = indexed.convertToFormat(QImage.Format_ARGB32_Premultiplied)
    expected = np.array([[qt.pixel(x, y) for x in range(5)] for y in range(7)], dtype=np.uint32)
    assert np.array_equal(argb_pixels(heat), expected)


def test_the_grid_maps_carry_their_pixels_from_the_worker():
    result = run(RunConfig(heads=4, seq_q=9, seq_kv=9))
    frames = render(result, ViewOptions(mean=True, grid_pixels=True))
    for heat in [*frames.heads, frames.mean]:
        assert heat.argb is not None and heat.argb.shape == heat.image.shape
    assert all(heat.argb is None for heat in render(result, ViewOptions()).heads)  # exports: none made
