"""A seed variant's kept draws (core/runs/drawn.py): a run from the cache equals a run that draws afresh, bit for
bit, dropout included, and nothing a run does to its module reaches the kept one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnviz.core import RunConfig, run
from attnviz.core.runs import drawn as drawn_module

SMALL = dict(seq_q=48, seq_kv=48, heads=4, d_model=64, seed=3)


def same(a, b) -> None:
    assert a.stages.keys() == b.stages.keys()
    for name in a.stages:
        assert np.array_equal(a.stages[name], b.stages[name], equal_nan=True), name


@pytest.fixture(autouse=True)
def empty_cache():
    drawn_module._DRAWN.clear()
    yield
    drawn_module._DRAWN.clear()


@pytest.mark.parametrize("extra", [{}, {"dropout": 0.3, "train": True}, {"variant": "cross"}])
def test_a_kept_draw_gives_the_numbers_of_a_fresh_one(extra):
    config = RunConfig(**SMALL, **extra)
    fresh = run(config)
    assert len(drawn_module._DRAWN._items) == 1
    same(fresh, run(config))  # from the cache: dropout draws after the restored generator state
    drawn_module._DRAWN.clear()
    run(config.replace(mask="none" if config.mask != "none" else "causal"))  # drawn under another mask
    same(fresh, run(config))


def test_what_changes_the_draws_is_in_the_key_and_the_rest_is_not():
    base = RunConfig(**SMALL)
    key = drawn_module.draw_key
    assert key(base) == key(base.replace(mask="causal")) == key(base.replace(safe_softmax=not base.safe_softmax))
    for change in ({"seed": 4}, {"heads": 8}, {"d_model": 32}, {"seq_q": 40}, {"batch": 2}):
        assert key(base) != key(base.replace(**change)), change


def test_a_run_in_another_dtype_leaves_the_kept_module_alone():
    config = RunConfig(**SMALL)
    first = run(config)
    run(config.replace(dtype="float64"))  # moves a copy of the module, never the kept one
    same(first, run(config))
    module, _, _ = next(iter(drawn_module._DRAWN._items.values()))
    assert all(p.dtype == torch.float32 for p in module.parameters())
