"""The same engine on a CUDA device (skipped cleanly where torch.cuda.is_available() is False)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from seeds import (
    Seed000CrossAttention,
    Seed001CrossAttention,
    Seed001SelfAttention,
    Seed002CausalSelfAttention,
    seed002_generate_mask,
    seed002_script,
)
from torch.nn.attention.bias import causal_lower_right

from attnviz.core import (
    CausalSelfAttention,
    ContextCrossAttention,
    CrossAttention,
    SelfAttention,
    causal_mask,
    load_preset,
    multihead_attention,
    padding_mask,
    run,
)

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

FLOATS = ("output", "q", "k", "v", "scores", "weights", "dropped", "context")


@pytest.mark.parametrize("preset", ["default", "cross-padding", "no-key-rows", "stable-diffusion-context",
                                    "alibi-distance-decay", "window-sinks", "gqa-shared-keys", "softcap-flatten",
                                    "differential-cancel"])
def test_run_on_cuda_matches_the_cpu_run(preset):
    config = load_preset(preset)
    cpu = run(config)
    gpu = run(config.replace(device="cuda"))
    assert gpu.device == "cuda:0" and run(config.replace(device="cuda:0")).device == "cuda:0"
    for name in FLOATS:
        array = getattr(gpu, name)
        assert isinstance(array, np.ndarray) and array.dtype == np.float32, name
        np.testing.assert_allclose(array, getattr(cpu, name), atol=2e-3, rtol=2e-3, equal_nan=True, err_msg=name)
    assert np.array_equal(gpu.mask, cpu.mask)
    assert np.array_equal(gpu.fully_masked_rows, cpu.fully_masked_rows)


def test_run_on_cuda_in_half_precision():
    config = load_preset("default").replace(device="cuda", dtype="float16")
    result = run(config)
    assert result.output.dtype == np.float32 and np.isfinite(result.output).all()
    assert not any("slower" in note for note in result.notes)  # the CPU-only warning


def test_seed002_script_on_cuda_equals_the_preset_on_cuda():
    """Weights and inputs drawn on the CPU, dropout drawn on the GPU from the same seed: same sample."""
    torch.manual_seed(0)
    expected = seed002_script(device="cuda").detach().cpu().numpy()
    result = run(load_preset("seed002-demo").replace(device="cuda"))
    np.testing.assert_allclose(result.output, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("seed_cls, our_cls, args", [
    (Seed000CrossAttention, CrossAttention, (6, 8, 0.1, 2)),
    (Seed001SelfAttention, SelfAttention, (2, 8)),
    (Seed001CrossAttention, ContextCrossAttention, (2, 8, 6)),
    (Seed002CausalSelfAttention, CausalSelfAttention, (8, 2, 0.1)),
])
def test_module_parity_on_cuda(seed_cls, our_cls, args):
    torch.manual_seed(0)
    seed = seed_cls(*args).cuda().eval()
    ours = our_cls(*args).cuda().eval()
    ours.load_state_dict(seed.state_dict(), strict=True)
    x = torch.randn(2, 5, 6 if seed_cls is Seed000CrossAttention else 8, device="cuda")
    if seed_cls is Seed000CrossAttention:
        y = torch.randn(2, 7, 6, device="cuda")
        mask = torch.ones(5, 7, device="cuda").tril()
        expected, got = seed(x, y, y, mask=mask), ours(x, y, y, mask=mask)
    elif seed_cls is Seed001SelfAttention:
        expected, got = seed(x, causal_mask=True), ours(x, causal_mask=True)
    elif seed_cls is Seed001CrossAttention:
        y = torch.randn(2, 7, 6, device="cuda")
        expected, got = seed(x, y), ours(x, y)
    else:
        mask = seed002_generate_mask(x, causal=True).cuda()
        expected, got = seed(x, mask=mask), ours(x, mask=mask)
    assert got.is_cuda
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_kernel_equals_sdpa_on_cuda():
    g = torch.Generator(device="cuda").manual_seed(0)
    b, h, d, lq, lkv = 2, 4, 32, 5, 9
    q = torch.randn(b, lq, d, device="cuda", generator=g)
    k, v = (torch.randn(b, lkv, d, device="cuda", generator=g) for _ in range(2))

    def sdpa(**kwargs):
        split = [t.view(b, t.shape[1], h, -1).transpose(1, 2) for t in (q, k, v)]
        return F.scaled_dot_product_attention(*split, **kwargs).transpose(1, 2).reshape(b, lq, d)

    cases = [
        (causal_mask(lq, lkv, device="cuda"), {"is_causal": True}),
        (causal_mask(lq, lkv, "bottom-right", device="cuda"), {"attn_mask": causal_lower_right(lq, lkv)}),
        (padding_mask([9, 4], lkv, device="cuda"), {"attn_mask": padding_mask([9, 4], lkv, device="cuda")}),
    ]
    for mask, kwargs in cases:
        context, trace = multihead_attention(q, k, v, h, mask, return_trace=True)
        assert context.is_cuda and trace.weights.is_cuda
        torch.testing.assert_close(context, sdpa(**kwargs), atol=1e-4, rtol=1e-4)
