"""run(): cooperative cancellation and the memory-budget messages."""

from __future__ import annotations

import pytest

from attnviz.core import ConfigError, RunConfig, estimate_memory, run
from attnviz.core.runner import Cancelled


def test_cancel_stops_the_run_and_is_polled():
    polls = []

    def cancel():
        polls.append(1)
        return True

    with pytest.raises(Cancelled):
        run(RunConfig(), cancel=cancel)
    assert polls


def test_a_run_nobody_cancels_completes():
    assert run(RunConfig(seq_q=4), cancel=lambda: False).weights.shape == (1, 4, 4, 4)


def test_budget_suggests_a_length_that_fits():
    config = RunConfig(heads=8, d_model=64, seq_q=2048)
    budget = estimate_memory(config) // 8
    with pytest.raises(ConfigError) as info:
        run(config, memory_budget=budget)
    assert info.value.field == "seq_q"
    (fit,) = info.value.suggestions
    assert 1 <= fit < 2048
    assert estimate_memory(config.replace(seq_q=fit)) <= budget
    assert estimate_memory(config.replace(seq_q=fit + 1)) > budget


def test_budget_blames_widths_when_lengths_cannot_help():
    config = RunConfig(heads=1, d_model=8192, seq_q=2)
    with pytest.raises(ConfigError) as info:
        run(config, memory_budget=1 << 20)
    assert info.value.field == "d_model" and "smaller widths" in str(info.value)


def test_estimate_counts_only_the_widths_the_variant_has():
    base = RunConfig(seq_q=16)
    assert estimate_memory(base.replace(d_cross=40000, d_out=40000)) == estimate_memory(base)
    ctx = RunConfig.for_variant("cross-context", seq_q=16, seq_kv=16)
    assert estimate_memory(ctx.replace(d_cross=4096)) > estimate_memory(ctx)
