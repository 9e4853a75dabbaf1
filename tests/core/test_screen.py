"""The kernel pools the shown weights to the view's size as it makes them (core/kernel/screen.py): the same pooled
values as torch's max_pool2d over the whole map, and the same frames as pooling the whole maps after the run."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnviz import frames
from attnviz.core import RunConfig, run
from attnviz.session.request import kernel_screen_px, window_record

# each map several times CACHE_BLOCK_BYTES, so it is computed in blocks of query rows
CONFIGS = {
    "causal": RunConfig(variant="causal", d_model=128, heads=8, seq_q=640, seed=3),
    "window": RunConfig(variant="causal", d_model=128, heads=8, seq_q=600, seed=1, mask="window", window=37),
    "keyless rows": RunConfig(variant="cross", d_model=128, heads=8, seq_q=700, seq_kv=500, seed=1,
                              mask="causal-bottom-right"),
    "keyless, safe softmax": RunConfig(variant="cross", d_model=128, heads=8, seq_q=700, seq_kv=500, seed=1,
                                       mask="causal-bottom-right", safe_softmax=True),
    "padding": RunConfig(variant="self", d_model=128, heads=8, seq_q=600, batch=2, seed=1, mask="padding",
                         kv_lengths=(0, 333)),
}


def _run(config: RunConfig, options: frames.ViewOptions):
    return run(config, record=window_record(config, frozenset({"weights"})),
               screen_px=kernel_screen_px(config, options))


@pytest.mark.parametrize("name", CONFIGS)
def test_pooled_maps_are_torch_max_pool2d_of_the_whole_maps(name):
    config = CONFIGS[name]
    result = _run(config, frames.ViewOptions(max_px=(70, 45)))
    fq, fk = result.screen_maps.pooled
    assert (fq, fk) == (-(-config.seq_q // 70), -(-config.lkv // 45))
    whole = torch.from_numpy(np.nan_to_num(result.weights, nan=0.0))  # a no-key row is drawn as no-key, pooled as 0
    expected = F.max_pool2d(whole, (fq, fk), ceil_mode=True)
    np.testing.assert_array_equal(result.screen_maps.maps["weights"], expected.numpy())
    assert result.screen_maps.maps["dropped"] is result.screen_maps.maps["weights"]  # the same map in eval mode


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("mode", frames.SCALE_MODES)
def test_frames_from_the_kernels_pooling_are_those_of_the_whole_maps(name, mode):
    config = CONFIGS[name]
    for max_px in [(130, 130), (100, 60)]:
        for b in range(config.batch):
            options = frames.ViewOptions(max_px=max_px, scale_mode=mode, batch_index=b)
            result = _run(config, options)
            assert result.screen_maps is not None
            whole = dataclasses.replace(result, screen_maps=None)  # the same maps, pooled after the run
            got, want = frames.render(result, options), frames.render(whole, options)
            for a, e in zip(got.heads, want.heads, strict=True):
                np.testing.assert_array_equal(a.image, e.image)
                assert a.levels == e.levels
            assert got.scale == want.scale and got.levels == want.levels


def test_the_row_scale_gets_its_maps_pooled_by_columns_alone():
    config = CONFIGS["causal"]
    result = _run(config, frames.ViewOptions(max_px=(100, 60), scale_mode="row"))
    assert result.screen_maps.pooled == (1, -(-config.lkv // 60))
    expected = F.max_pool2d(torch.from_numpy(result.weights), (1, -(-config.lkv // 60)), ceil_mode=True)
    np.testing.assert_array_equal(result.screen_maps.maps["weights"], expected.numpy())


def test_a_view_of_another_size_pools_the_whole_maps():
    config = CONFIGS["causal"]
    result = _run(config, frames.ViewOptions(max_px=(130, 130)))
    options = frames.ViewOptions(max_px=(64, 64))  # the window was resized: the kernel's pooling does not fit
    assert result.screen_maps.serving("dropped", (config.seq_q, config.lkv), options.max_px) is None
    got = frames.render(result, options)
    want = frames.render(dataclasses.replace(result, screen_maps=None), options)
    for a, e in zip(got.heads, want.heads, strict=True):
        np.testing.assert_array_equal(a.image, e.image)


def test_nothing_is_pooled_for_signed_maps_a_map_that_fits_or_no_size():
    differential = RunConfig(variant="differential", d_model=128, heads=4, seq_q=600, seed=1)
    assert _run(differential, frames.ViewOptions(max_px=(100, 100))).screen_maps is None
    config = CONFIGS["causal"]
    assert _run(config, frames.ViewOptions(max_px=(1024, 1024))).screen_maps is None
    assert _run(config, frames.ViewOptions(max_px=None)).screen_maps is None
    assert _run(config, frames.ViewOptions(view="scores", max_px=(100, 100))).screen_maps is None


def test_only_the_batch_items_with_a_keyless_row_pool_their_nan_as_zero():
    """Item 0 has a query row with no key (NaN, drawn as no-key); item 1 has a NaN of its own (an overflow, say),
    which a max keeps: the kernel pools each item as frames does."""
    from attnviz.core.kernel import screen

    torch.manual_seed(0)
    b, h, n = 2, 2, 40
    w = torch.rand(b, h, n, n)
    w[0, :, 5, :] = float("nan")
    w[1, 0, 10, 10] = float("nan")
    mask = torch.ones(b, 1, n, n, dtype=torch.bool)
    mask[0, :, 5, :] = False
    pooling = screen.ScreenPooling(screen.factors((n, n), (10, 10)))
    rows = pooling.block_rows(8, mask, b)
    for r0 in range(0, n, rows):
        r1 = min(n, r0 + rows)
        pooling.write(["weights"], w[:, :, r0:r1], (r0, r1, 0, n), (n, n))
    empty = (~mask.any(-1)).numpy()
    for item in range(b):
        got = frames.pool_maps(pooling.maps["weights"][item].numpy(), mask[item].numpy(), empty[item][:1], (10, 10),
                               False, shape=(n, n))
        want = frames.pool_maps(w[item].numpy(), mask[item].numpy(), empty[item][:1], (10, 10), False)
        np.testing.assert_array_equal(got.values.numpy(), want.values.numpy())  # NaN where want has NaN
    assert torch.isnan(pooling.maps["weights"][1]).any() and not torch.isnan(pooling.maps["weights"][0]).any()


def test_blocks_shorter_than_a_row_group_leave_the_pooling_to_the_view():
    config = CONFIGS["causal"]  # blocks of ~200 rows: a 2-pixel tile's row groups are 320 rows
    options = frames.ViewOptions(max_px=(2, 2))
    result = _run(config, options)
    assert result.screen_maps is None
    assert frames.render(result, options).heads[0].image.shape == (2, 2)
