"""attnviz.core against torch's own attention: nn.MultiheadAttention and F.scaled_dot_product_attention.

Conventions at the boundary: ours and SDPA's bool masks are True = may attend; MHA's bool
attn_mask / key_padding_mask are True = masked, so they get the inverse.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention.bias import causal_lower_right

from attnviz.core import (
    CausalSelfAttention,
    ContextCrossAttention,
    SelfAttention,
    causal_mask,
    multihead_attention,
    padding_mask,
    window_mask,
)

TOL = dict(atol=1e-5, rtol=1e-5)
B, H, D = 2, 4, 16


def close(actual, expected, **kw):
    torch.testing.assert_close(actual, expected, **{**TOL, **kw})


def mha_like(module: nn.Module, kdim: int | None = None) -> nn.MultiheadAttention:
    """An nn.MultiheadAttention carrying `module`'s weights."""
    d = module.out_proj.weight.shape[0] if hasattr(module, "out_proj") else module.output.weight.shape[0]
    heads = module.n_heads
    mha = nn.MultiheadAttention(d, heads, batch_first=True, kdim=kdim, vdim=kdim).eval()
    with torch.no_grad():
        if isinstance(module, SelfAttention):
            mha.in_proj_weight.copy_(module.in_proj.weight)
            mha.in_proj_bias.copy_(module.in_proj.bias)
            mha.out_proj.load_state_dict(module.out_proj.state_dict())
        elif isinstance(module, CausalSelfAttention):
            mha.in_proj_weight.copy_(torch.cat([module.query.weight, module.key.weight, module.value.weight]))
            mha.in_proj_bias.copy_(torch.cat([module.query.bias, module.key.bias, module.value.bias]))
            mha.out_proj.load_state_dict(module.output.state_dict())
        else:  # ContextCrossAttention: separate projections, keys/values of width kdim
            mha.q_proj_weight.copy_(module.q_proj.weight)
            mha.k_proj_weight.copy_(module.k_proj.weight)
            mha.v_proj_weight.copy_(module.v_proj.weight)
            mha.in_proj_bias.copy_(torch.cat([module.q_proj.bias, module.k_proj.bias, module.v_proj.bias]))
            mha.out_proj.load_state_dict(module.out_proj.state_dict())
    return mha


def mha_call(mha, q, kv, allowed=None, key_valid=None):
    """Run MHA with per-head weights; `allowed`/`key_valid` use our convention (True = may attend)."""
    return mha(
        q, kv, kv, need_weights=True, average_attn_weights=False,
        attn_mask=None if allowed is None else ~allowed,
        key_padding_mask=None if key_valid is None else ~key_valid,
    )


# --- nn.MultiheadAttention -------------------------------------------------------------------------


@pytest.mark.parametrize("masking", ["none", "causal", "causal-arg", "padding", "causal+padding"])
def test_self_attention_equals_multihead_attention(masking):
    torch.manual_seed(0)
    ours = SelfAttention(H, D).eval()
    mha = mha_like(ours)
    length = 6
    x = torch.randn(B, length, D)
    lengths = [6, 4]
    causal = causal_mask(length)
    valid = padding_mask(lengths, length)  # (B, 1, 1, L)
    key_valid = valid.view(B, length)
    kwargs, mha_kwargs = {}, {}
    if masking == "causal":
        kwargs, mha_kwargs = {"mask": causal}, {"allowed": causal}
    elif masking == "causal-arg":  # seed 001's switch
        kwargs, mha_kwargs = {"causal_mask": True}, {"allowed": causal}
    elif masking == "padding":
        kwargs, mha_kwargs = {"mask": valid}, {"key_valid": key_valid}
    elif masking == "causal+padding":
        kwargs, mha_kwargs = {"causal_mask": True, "mask": valid}, {"allowed": causal, "key_valid": key_valid}
    expected, expected_weights = mha_call(mha, x, x, **mha_kwargs)
    assert expected_weights.shape == (B, H, length, length)
    out, trace = ours(x, return_trace=True, **kwargs)
    close(trace.weights, expected_weights)
    close(out, expected)
    if masking != "none":
        assert (expected_weights == 0).any()  # the mask really bit


@pytest.mark.parametrize("causal", [False, True])
def test_causal_self_attention_equals_multihead_attention(causal):
    torch.manual_seed(1)
    ours = CausalSelfAttention(D, H).eval()
    mha = mha_like(ours)
    x = torch.randn(B, 5, D)
    allowed = causal_mask(5) if causal else None
    expected, expected_weights = mha_call(mha, x, x, allowed=allowed)
    out, trace = ours(x, mask=allowed, return_trace=True)
    close(trace.weights, expected_weights)
    close(out, expected)


def test_context_cross_attention_equals_multihead_attention_with_kdim():
    torch.manual_seed(2)
    d_cross, lq, lkv = 6, 5, 9
    ours = ContextCrossAttention(H, D, d_cross).eval()
    mha = mha_like(ours, kdim=d_cross)
    x, y = torch.randn(B, lq, D), torch.randn(B, lkv, d_cross)
    valid = padding_mask([9, 2], lkv)
    for mask, key_valid in [(None, None), (valid, valid.view(B, lkv))]:
        expected, expected_weights = mha_call(mha, x, y, key_valid=key_valid)
        out, trace = ours(x, y, mask=mask, return_trace=True)
        assert trace.weights.shape == expected_weights.shape == (B, H, lq, lkv)
        close(trace.weights, expected_weights)
        close(out, expected)


def test_fully_masked_rows_are_nan_like_multihead_attention_by_default():
    torch.manual_seed(3)
    ours = SelfAttention(H, D).eval()
    mha = mha_like(ours)
    x = torch.randn(B, 5, D)
    allowed = causal_mask(5).clone()
    allowed[2] = False  # query 2 sees no key
    expected, expected_weights = mha_call(mha, x, x, allowed=allowed)
    out, trace = ours(x, mask=allowed, return_trace=True)
    assert torch.isnan(expected_weights[:, :, 2]).all()  # torch's own behaviour: NaN
    close(trace.weights, expected_weights, equal_nan=True)
    close(out, expected, equal_nan=True)


# --- F.scaled_dot_product_attention ---------------------------------------------------------------


def split(x):  # (B, L, D) -> (B, H, L, D / H)
    return x.view(x.shape[0], x.shape[1], H, -1).transpose(1, 2)


def merge(x):  # (B, H, L, dh) -> (B, L, D)
    return x.transpose(1, 2).reshape(x.shape[0], x.shape[2], -1)


def sdpa(q, k, v, **kwargs):
    """SDPA on (B, L, D) projected inputs, heads split and merged as ours."""
    return merge(F.scaled_dot_product_attention(split(q), split(k), split(v), **kwargs))


def sdpa_weights(q, k, **kwargs):
    """SDPA's attention weights: attend over V = identity, so the output row is the weight row."""
    lkv = k.shape[1]
    eye = torch.eye(lkv).expand(B, H, lkv, lkv)
    return F.scaled_dot_product_attention(split(q), split(k), eye, **kwargs)


def qkv(lq, lkv, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, lq, D, generator=g), torch.randn(B, lkv, D, generator=g), torch.randn(B, lkv, D, generator=g)


def lower_right(lq, lkv):
    with warnings.catch_warnings():  # torch warns that Lq > Lkv gives rows with no key
        warnings.simplefilter("ignore", UserWarning)
        return causal_lower_right(lq, lkv)


@pytest.mark.parametrize("lq, lkv", [(6, 6), (4, 9), (9, 4)])
def test_kernel_equals_sdpa_no_mask_and_is_causal(lq, lkv):
    q, k, v = qkv(lq, lkv)
    context, trace = multihead_attention(q, k, v, H, return_trace=True)
    close(context, sdpa(q, k, v))
    close(trace.weights, sdpa_weights(q, k))
    # is_causal=True is top-left aligned, like the seeds' triu(1) and our default causal mask
    context, trace = multihead_attention(q, k, v, H, causal_mask(lq, lkv), return_trace=True)
    close(context, sdpa(q, k, v, is_causal=True))
    close(trace.weights, sdpa_weights(q, k, is_causal=True))
    assert not torch.isnan(context).any()


def test_kernel_equals_sdpa_bottom_right_causal():
    lq, lkv = 4, 9  # four new queries over nine cached keys
    q, k, v = qkv(lq, lkv, seed=1)
    bias = lower_right(lq, lkv)
    mask = causal_mask(lq, lkv, "bottom-right")
    context, trace = multihead_attention(q, k, v, H, mask, return_trace=True)
    close(context, sdpa(q, k, v, attn_mask=bias))
    close(trace.weights, sdpa_weights(q, k, attn_mask=bias))
    assert (trace.weights[..., -1, :] > 0).all()  # the newest query sees every key
    assert not torch.allclose(context, sdpa(q, k, v, is_causal=True))  # and differs from top-left


def test_kernel_equals_sdpa_key_padding():
    lq, lkv = 5, 8
    q, k, v = qkv(lq, lkv, seed=2)
    mask = padding_mask([8, 3], lkv)
    context, trace = multihead_attention(q, k, v, H, mask, return_trace=True)
    close(context, sdpa(q, k, v, attn_mask=mask))
    close(trace.weights, sdpa_weights(q, k, attn_mask=mask))
    assert (trace.weights[1, ..., 3:] == 0).all()


@pytest.mark.parametrize("causal", [True, False])
def test_kernel_equals_sdpa_window(causal):
    q, k, v = qkv(7, 7, seed=3)
    mask = window_mask(7, 7, 2, causal=causal)
    context, trace = multihead_attention(q, k, v, H, mask, return_trace=True)
    close(context, sdpa(q, k, v, attn_mask=mask))
    close(trace.weights, sdpa_weights(q, k, attn_mask=mask))


def test_sdpa_returns_zero_for_fully_masked_rows_in_this_torch():
    """Pin the reference: what SDPA really does for a row with no key (it changed across versions)."""
    q, k, v = qkv(6, 4, seed=4)
    out = sdpa(q, k, v, attn_mask=lower_right(6, 4))  # Lq > Lkv: the first two queries see nothing
    assert (out[:, :2] == 0).all()
    assert not torch.isnan(out).any()
    mask = torch.ones(6, 4, dtype=torch.bool)
    mask[3] = False
    out = sdpa(q, k, v, attn_mask=mask)
    assert (out[:, 3] == 0).all() and not torch.isnan(out).any()


@pytest.mark.parametrize("case", ["bottom-right Lq > Lkv", "arbitrary rows"])
def test_safe_softmax_gives_sdpa_zeros_default_gives_seed_nan(case):
    lq, lkv = 7, 4
    q, k, v = qkv(lq, lkv, seed=5)
    if case == "bottom-right Lq > Lkv":
        mask = causal_mask(lq, lkv, "bottom-right")
        reference_mask = lower_right(lq, lkv)
        empty = torch.zeros(B, lq, dtype=torch.bool)
        empty[:, : lq - lkv] = True
    else:
        mask = torch.rand(B, 1, lq, lkv, generator=torch.Generator().manual_seed(6)) > 0.5
        mask[0, 0, 1] = False
        mask[1, 0, 5] = False
        reference_mask = mask
        empty = ~mask.any(-1).view(B, lq)
    assert empty.any() and not empty.all()
    expected = sdpa(q, k, v, attn_mask=reference_mask)
    expected_weights = sdpa_weights(q, k, attn_mask=reference_mask)

    safe, safe_trace = multihead_attention(q, k, v, H, mask, safe_softmax=True, return_trace=True)
    close(safe, expected)
    close(safe_trace.weights, expected_weights)
    assert (safe[empty] == 0).all()

    seedlike, trace = multihead_attention(q, k, v, H, mask, return_trace=True)
    assert torch.isnan(seedlike[empty]).all()
    assert torch.isnan(trace.weights.transpose(1, 2)[empty]).all()
    close(seedlike[~empty], expected[~empty])
    assert not torch.isnan(seedlike[~empty]).any()
    # the scores are -inf across the whole row either way
    assert torch.isneginf(trace.scores.transpose(1, 2)[empty]).all()


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_kernel_equals_sdpa_in_other_dtypes(dtype):
    q, k, v = (t.to(dtype) for t in qkv(5, 6, seed=7))
    mask = causal_mask(5, 6, "bottom-right")
    context, _ = multihead_attention(q, k, v, H, mask)
    assert context.dtype == dtype
    tol = {torch.float64: 1e-10, torch.bfloat16: 2e-2}[dtype]
    close(context.double(), sdpa(q.double(), k.double(), v.double(), attn_mask=mask), atol=tol, rtol=tol)
