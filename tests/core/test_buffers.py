"""Recycled map buffers (core/kernel/buffers.py): a buffer is handed out again only when nothing uses it."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch

from attnviz.core import RunConfig, run
from attnviz.core.kernel import blocks as blocks_module
from attnviz.core.kernel import buffers


@pytest.fixture(autouse=True)
def small_buffers(monkeypatch):
    monkeypatch.setattr(buffers, "MIN_BYTES", 1 << 10)
    monkeypatch.setattr(blocks_module, "CACHE_BLOCK_BYTES", 1 << 14)
    buffers.release()
    yield
    buffers.release()


CONFIG = RunConfig.for_variant("causal", d_model=32, heads=4, seq_q=64, seed=1)


def test_a_result_in_use_keeps_its_maps_while_later_runs_write_theirs():
    first = run(CONFIG)
    kept = first.weights.copy()
    second = run(CONFIG.replace(seed=2))
    view = second.weights[0, 1]  # a NumPy view keeps the buffer in use too
    del second
    gc.collect()
    third = run(CONFIG.replace(seed=3))
    assert not np.shares_memory(first.weights, third.weights) and not np.shares_memory(view, third.weights)
    np.testing.assert_array_equal(first.weights, kept)
    np.testing.assert_array_equal(view, run(CONFIG.replace(seed=2)).weights[0, 1])


def test_a_result_let_go_lends_its_buffer_to_the_next_run_with_the_same_numbers():
    fresh = run(CONFIG.replace(seed=4)).weights.copy()
    first = run(CONFIG)
    address = first.weights.ctypes.data
    del first
    gc.collect()
    again = run(CONFIG.replace(seed=4))
    assert again.weights.ctypes.data == address  # no new memory mapped
    np.testing.assert_array_equal(again.weights, fresh)  # every cell written: nothing of the last run left


def test_release_gives_free_buffers_back_and_keeps_those_in_use():
    held = buffers.empty((300, 10), torch.float32)
    loose = buffers.empty((400, 10), torch.float32)
    del loose
    assert buffers.idle_bytes() == 400 * 10 * 4
    assert buffers.release() == 400 * 10 * 4 and buffers.idle_bytes() == 0
    assert buffers.empty((300, 10), torch.float32).data_ptr() != held.data_ptr()


def test_a_buffer_made_in_inference_mode_is_not_lent_outside_it():
    # outside inference mode an in-place write into an inference tensor raises: such a buffer waits for a
    # run in inference mode, and a plain one is made meanwhile
    with torch.inference_mode():
        made = buffers.empty((4, 1024), torch.float32)
    del made
    gc.collect()
    lent = buffers.empty((4, 1024), torch.float32)
    assert not lent.is_inference()
    lent.copy_(torch.ones(4, 1024))
