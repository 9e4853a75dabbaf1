"""run(): cooperative cancellation and the memory-budget messages."""

from __future__ import annotations

import pytest
import torch

from attnviz.core import ConfigError, RunConfig, estimate_memory, run
from attnviz.core.runs import device, memory, runner
from attnviz.core.runs.runner import Cancelled, result_memory


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
    config = RunConfig(heads=8, d_model=64, seq_q=2048, pool="never")  # auto would pool it
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


def test_result_memory_covers_the_arrays_a_run_returns():
    for config in (RunConfig(seq_q=24, heads=4, d_model=32),
                   RunConfig(seq_q=24, heads=4, d_model=32, train=True, dropout=0.1),
                   RunConfig.for_variant("cross-context", seq_q=12, seq_kv=20, d_cross=48)):
        result = run(config)
        held = sum(a.nbytes for name, a in result.arrays().items()
                   if not (name == "dropped" and a is result.weights))  # shared in eval
        assert held <= result_memory(config)


def fake_free_memory(monkeypatch, gpu: int, cpu: int) -> None:
    monkeypatch.setattr(device, "available_memory", lambda device: gpu if device.type == "cuda" else cpu)


def test_a_cuda_run_whose_result_does_not_fit_in_host_memory_is_refused(monkeypatch):
    config = RunConfig(heads=8, d_model=64, seq_q=4096)
    host_budget = result_memory(config) // 4
    fake_free_memory(monkeypatch, gpu=1 << 50, cpu=int(host_budget / memory.MEMORY_FRACTION))
    with pytest.raises(ConfigError) as info:
        runner.check_memory(config, torch.device("cuda"))
    message = str(info.value)
    assert "copied to the CPU" in message and "free memory on cpu" in message
    (fit,) = info.value.suggestions
    assert result_memory(config.replace(seq_q=fit)) <= host_budget < result_memory(config.replace(seq_q=fit + 1))
    assert runner.check_memory(config.replace(seq_q=fit), torch.device("cuda")) > 0


def test_host_memory_is_not_counted_twice_for_a_cpu_run(monkeypatch):
    config = RunConfig(heads=8, d_model=64, seq_q=512)
    need = estimate_memory(config)
    fake_free_memory(monkeypatch, gpu=0, cpu=int(need / memory.MEMORY_FRACTION) + 1)
    assert runner.check_memory(config, torch.device("cpu")) == need


def test_when_gpu_and_host_both_refuse_the_quick_fix_fits_both(monkeypatch):
    config = RunConfig(heads=8, d_model=64, seq_q=4096)
    # the GPU refuses first, but the host allows the shorter length: the suggestion must fit both
    gpu_budget, host_budget = estimate_memory(config) // 3, result_memory(config) // 9
    fake_free_memory(monkeypatch, gpu=int(gpu_budget / memory.MEMORY_FRACTION) + 1,
                     cpu=int(host_budget / memory.MEMORY_FRACTION) + 1)
    with pytest.raises(ConfigError) as info:
        runner.check_memory(config, torch.device("cuda"))
    (fit,) = info.value.suggestions
    fitted = config.replace(seq_q=fit)
    assert estimate_memory(fitted) <= gpu_budget and result_memory(fitted) <= host_budget
    longer = config.replace(seq_q=fit + 1)
    assert estimate_memory(longer) > gpu_budget or result_memory(longer) > host_budget


def test_memory_allowance_is_the_budget_given_else_the_share_of_the_free_memory(monkeypatch):
    fake_free_memory(monkeypatch, gpu=8 << 30, cpu=4 << 30)
    assert memory.memory_allowance(123) == (123, "the memory_budget given")
    allowed, source = memory.memory_allowance(None)
    assert allowed == int((4 << 30) * memory.MEMORY_FRACTION) and "free memory on cpu" in source
    assert memory.memory_allowance(None, torch.device("cuda"))[0] == int((8 << 30) * memory.MEMORY_FRACTION)
