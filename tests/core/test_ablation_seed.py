"""Ablation and value-weighted attention in the seed modules, against references computed by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnviz.core import ConfigError, RunConfig, run


def _module(config):
    torch.manual_seed(config.seed)
    return config.spec.build(config).eval()


@pytest.mark.parametrize("variant", ["causal", "self", "cross", "cross-context"])
def test_zero_ablation_is_the_heads_context_slice_zeroed_before_the_output_projection(variant):
    config = RunConfig.for_variant(variant)
    plain = run(config, record={"context", "output"})
    ablated = run(config.replace(ablate=("0.2",)), record={"context", "output"})
    module = _module(config)
    out_proj = getattr(module, "out_proj", None) or module.output
    dh = plain.context.shape[-1] // config.heads
    context = torch.tensor(plain.context).clone()
    context[..., 2 * dh:3 * dh] = 0
    with torch.no_grad():
        expected = out_proj(context).numpy()
    np.testing.assert_allclose(ablated.output, expected, atol=1e-5)
    np.testing.assert_allclose(ablated.dropped, plain.dropped)  # its own map is unchanged: only what it outputs


def test_mean_ablation_of_a_single_position_is_refused():
    with pytest.raises(ConfigError, match="single position") as info:
        run(RunConfig(seq_q=1, ablate=("0.1",), ablation="mean"))
    assert info.value.field == "ablation"


@pytest.mark.parametrize("variant", ["causal", "self", "cross", "cross-context"])
def test_value_weighted_equals_the_formula_from_the_trace(variant):
    config = RunConfig.for_variant(variant, heads=4, kv_heads=2)
    result = run(config, record={"weights", "v", "value_weighted"})
    w_out = (getattr(_module(config), "out_proj", None) or _module(config).output).weight.detach().numpy()
    weights, v = result.weights[0], result.v[0]  # (H, Lq, Lkv), (Hkv, Lkv, dv)
    heads, dv = weights.shape[0], v.shape[-1]
    expected = np.empty_like(weights)
    for h in range(heads):
        v_h = v[h // (heads // v.shape[0])]  # grouped-query: head h reads key/value head h // group
        contribution = v_h @ w_out[:, h * dv:(h + 1) * dv].T  # (Lkv, d_out): what each key adds
        weighted = weights[h] * np.linalg.norm(contribution, axis=-1)[None, :]
        expected[h] = weighted / weighted.sum(-1, keepdims=True)
    np.testing.assert_allclose(result.value_weighted[0], expected, rtol=1e-4, atol=1e-6)


def test_differential_attention_has_no_value_weighted_stage():
    from attnviz.core.runs.runner import run_stages

    assert "value_weighted" not in run_stages(RunConfig.for_variant("differential"))
    assert "value_weighted" in run_stages(RunConfig())
