"""core/runs/memory.py: each estimate against a count by hand, and the budget rule (the budget given, else the
share of the free memory) in its one place."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from attnviz.core import RunConfig
from attnviz.core.runs import device, memory

MiB = 1 << 20


def test_a_seed_runs_estimates_by_hand():
    c = RunConfig(batch=2, heads=3, seq_q=10, d_model=12)  # self-attention, float32, eval: keeps scores and weights
    keep = frozenset({"x", "q", "k", "v", "scores", "weights", "dropped", "context", "output"})
    assert memory.kept_maps(c, keep) == 2  # scores, weights (dropped is the weights without dropout)
    maps = 2 * 3 * 10 * 10
    tokens = 2 * (10 + 10) * 12 * 8 * 4  # both lengths, the width, eight tensors of them, four bytes
    assert memory.seed_bytes(c, keep) == maps * 2 * 4 + tokens + 4 * 12 * 12 * 4
    # float32 maps and five token tensors (counted as four widths' worth each, generously), the bool mask, row flags
    assert memory.result_bytes(c, keep) == (maps * 2 + 2 * 20 * 12 * 4) * 4 + 2 * 10 * 10 + 2 * 3 * 10
    assert memory.seed_map_bytes(c, keep) == maps * 4 * 2
    dropout = c.replace(dropout=0.5, train=True)  # dropped becomes a map of its own, and the noise lives a while
    assert memory.kept_maps(dropout, keep) == 3
    assert memory.seed_bytes(dropout, keep) == maps * 4 * 4 + tokens + 4 * 12 * 12 * 4


def test_a_model_forwards_estimate_by_hand():
    info = SimpleNamespace(layers=4, heads=2, d_model=16)
    keep = frozenset({"scores", "weights", "dropped", "x"})
    one_map = 2 * 100 * 100 * 4
    tokens = 100 * 16 * 4 * 8
    assert memory.map_count(keep) == 2
    assert memory.forward_bytes(info, 100, keep) == 4 * (2 * one_map + tokens) + one_map * 6 + 64 * MiB
    assert memory.forward_map_bytes(info, 100, keep) == 4 * one_map * 2


def test_the_budget_rule(monkeypatch):
    monkeypatch.setattr(device, "available_memory", lambda where: 1000 if where.type == "cpu" else 4000)
    assert memory.over_budget(500, None) is None  # half of the free 1000 bytes
    assert memory.over_budget(501, None) == (500, "50% of the free memory on cpu")
    assert memory.over_budget(501, None, torch.device("cuda")) is None
    assert memory.over_budget(10, 9) == (9, "the memory_budget given")
    assert memory.pools(501, None) and not memory.pools(500, None)  # over the budget: pooled
    assert memory.pools(memory.AUTO_BYTES + 1, 1 << 40) and not memory.pools(memory.AUTO_BYTES, 1 << 40)
