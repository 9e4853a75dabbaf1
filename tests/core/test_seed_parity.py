"""attnviz.core's modules against the seed tutorials' own code (tests/seeds.py).

Same constructor signatures, identical state_dict keys, seed weights load strictly, and with the
same weights and inputs the same outputs, attention weights and intermediates, masked or not,
in eval and in train mode (dropout under the same torch.manual_seed).
"""

from __future__ import annotations

import inspect

import pytest
import torch
from seeds import (
    Seed000CrossAttention,
    Seed001CrossAttention,
    Seed001SelfAttention,
    Seed002CausalSelfAttention,
    seed002_generate_mask,
)
from torch.overrides import TorchFunctionMode

import attnviz.core as core
from attnviz.core import (
    CausalSelfAttention,
    ContextCrossAttention,
    CrossAttention,
    SelfAttention,
    Trace,
    generate_mask,
)
from attnviz.core.kernel.stages import ordered

TOL = dict(atol=1e-5, rtol=1e-5)
B, LQ, LKV = 2, 5, 7


def close(actual, expected, **kw):
    torch.testing.assert_close(actual, expected, **{**TOL, **kw})


def identical(actual, expected):
    """Bit for bit, NaN where NaN."""
    torch.testing.assert_close(actual, expected, atol=0, rtol=0, equal_nan=True)


class SeedRecorder(TorchFunctionMode):
    """Records what the seed code itself computes, without touching it: every matmul's operands,
    every softmax's input and output, and every dropout's output (via torch's function hooks)."""

    def __init__(self):
        super().__init__()
        self.matmuls, self.softmax_in, self.softmax_out, self.dropout_out = [], [], [], []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = getattr(func, "__name__", "")
        if name in ("matmul", "__matmul__"):
            self.matmuls.append(tuple(a.detach().clone() for a in args[:2]))
        elif name == "softmax":
            self.softmax_in.append(args[0].detach().clone())
            self.softmax_out.append(out.detach().clone())
        elif name == "dropout":
            self.dropout_out.append(out.detach().clone())
        return out


def record_seed(seed_module, out_proj, *args, **kwargs):
    """Run a seed module; return its output and the intermediates our trace should hold."""
    seen = {}
    handle = out_proj.register_forward_pre_hook(lambda _m, inp: seen.setdefault("context", inp[0].detach().clone()))
    rec = SeedRecorder()
    try:
        with rec:
            out = seed_module(*args, **kwargs)
    finally:
        handle.remove()
    assert len(rec.matmuls) == 2 and len(rec.softmax_out) == 1
    (q, k_t), (dropped_mm, v) = rec.matmuls
    weights = rec.softmax_out[0]
    dropped = rec.dropout_out[0] if rec.dropout_out else weights
    identical(dropped_mm, dropped)  # what multiplied V
    return out, dict(q=q, k=k_t.transpose(-2, -1), v=v, scores=rec.softmax_in[0], weights=weights,
                     dropped=dropped, context=seen["context"])


def assert_trace_matches(trace: Trace, ref: dict, equal_nan=False):
    for name, expected in ref.items():
        close(getattr(trace, name), expected, equal_nan=equal_nan, msg=lambda m, n=name: f"trace.{n}: {m}")


def assert_trace_shapes(trace: Trace, b, h, lq, lkv, d):
    dh = d // h
    assert trace.q.shape == (b, h, lq, dh)
    assert trace.k.shape == (b, h, lkv, dh)
    assert trace.v.shape == (b, h, lkv, dh)
    for name in ("scores", "weights", "dropped"):
        assert getattr(trace, name).shape == (b, h, lq, lkv), name
    assert trace.context.shape == (b, lq, d)
    assert trace.mask.dtype == torch.bool
    assert torch.broadcast_shapes(trace.mask.shape, trace.scores.shape) == (b, h, lq, lkv)
    # the default stages of a plain call, in the one stage list's order
    assert ordered(trace.keys() - {"mask"}) == ["x", "q", "k", "v", "scores", "weights", "dropped", "context",
                                                "output"]
    assert "mask" in trace
    assert trace["weights"] is trace.weights


def pair(seed_cls, our_cls, *args, **kwargs):
    torch.manual_seed(0)
    seed = seed_cls(*args, **kwargs)
    ours = our_cls(*args, **kwargs)
    ours.load_state_dict(seed.state_dict(), strict=True)
    return seed.eval(), ours.eval()


# --- signatures and state dicts ------------------------------------------------------------------

PAIRS = [
    (Seed000CrossAttention, CrossAttention, (6, 8, 0.1, 2), {}),
    (Seed000CrossAttention, CrossAttention, (6, 8, 0.0, 4), {"qkv_bias": True}),
    (Seed001SelfAttention, SelfAttention, (2, 8), {}),
    (Seed001SelfAttention, SelfAttention, (4, 8), {"in_proj_bias": False, "out_proj_bias": False}),
    (Seed001CrossAttention, ContextCrossAttention, (2, 8, 6), {}),
    (Seed001CrossAttention, ContextCrossAttention, (2, 8, 6), {"in_proj_bias": False}),
    (Seed002CausalSelfAttention, CausalSelfAttention, (8, 2), {}),
    (Seed002CausalSelfAttention, CausalSelfAttention, (8, 4), {"dropout": 0.25}),
]


def _params(fn):
    return [(p.name, p.kind, p.default) for p in list(inspect.signature(fn).parameters.values())]


@pytest.mark.parametrize(
    "seed_cls, our_cls, method",
    [(s, o, m) for s, o in dict.fromkeys((s, o) for s, o, _, _ in PAIRS) for m in ("__init__", "forward")]
    + [(Seed002CausalSelfAttention, CausalSelfAttention, "get_attention_scores")],
    ids=lambda x: getattr(x, "__name__", x),
)
def test_signatures_extend_the_seeds(seed_cls, our_cls, method):
    seed_params, our_params = _params(getattr(seed_cls, method)), _params(getattr(our_cls, method))
    assert our_params[: len(seed_params)] == seed_params
    # whatever we add comes after and is optional, so every seed-style call works unchanged
    for name, _kind, default in our_params[len(seed_params):]:
        assert default is not inspect.Parameter.empty, name
    if method == "__init__":  # constructors are the seeds' plus keyword-only variant options
        assert all(kind is inspect.Parameter.KEYWORD_ONLY for _, kind, _ in our_params[len(seed_params):])


@pytest.mark.parametrize("seed_cls, our_cls, args, kwargs", PAIRS)
def test_state_dicts_are_interchangeable(seed_cls, our_cls, args, kwargs):
    seed, ours = seed_cls(*args, **kwargs), our_cls(*args, **kwargs)
    seed_sd, our_sd = seed.state_dict(), ours.state_dict()
    assert list(our_sd) == list(seed_sd)
    assert {k: v.shape for k, v in our_sd.items()} == {k: v.shape for k, v in seed_sd.items()}
    ours.load_state_dict(seed_sd, strict=True)
    seed.load_state_dict(our_sd, strict=True)


def test_public_names():
    assert core.CrossAttention is CrossAttention
    assert set(core.__all__) >= {"CrossAttention", "SelfAttention", "ContextCrossAttention",
                                 "CausalSelfAttention", "generate_mask", "run", "RunConfig", "load_preset"}


def test_nondividing_heads_raise_value_error_naming_both_numbers():
    with pytest.raises(AssertionError):  # the seed's own check
        Seed000CrossAttention(10, 64, 0.0, 6)
    cases = [
        (lambda: CrossAttention(10, 64, 0.0, 6), "d_out"),
        (lambda: SelfAttention(6, 64), "d_embed"),
        (lambda: ContextCrossAttention(6, 64, 32), "d_embed"),
        (lambda: CausalSelfAttention(64, 6), "hidden_dim"),
    ]
    for build, width_name in cases:
        with pytest.raises(ValueError) as info:
            build()
        message = str(info.value)
        assert "6 heads" in message and f"{width_name} 64" in message
        assert "4 or 8" in message
    with pytest.raises(ValueError, match="at least 1"):
        CausalSelfAttention(64, 0)


# --- outputs, weights and traces ------------------------------------------------------------------


def _cross_mask_cases():
    g = torch.Generator().manual_seed(5)
    random01 = (torch.rand(B, 2, LQ, LKV, generator=g) > 0.4).float()  # seed-style float 0/1
    random01[0, 1, 2] = 0  # one row with no key: NaN in both
    return {
        "none": None,
        "all-ones-float (seed 000's script)": torch.ones(B, 2, LQ, LKV),
        "random-float-with-empty-row": random01,
        "bool-causal-broadcast": torch.ones(LQ, LKV, dtype=torch.bool).tril(),
        "int-padding": (torch.arange(LKV) < torch.tensor([[7], [3]])).int().view(B, 1, 1, LKV),
    }


@pytest.mark.parametrize("mask_name", list(_cross_mask_cases()))
def test_cross_attention_matches_seed000(mask_name):
    mask = _cross_mask_cases()[mask_name]
    seed, ours = pair(Seed000CrossAttention, CrossAttention, 6, 8, 0.1, 2)
    torch.manual_seed(1)
    q, k, v = torch.randn(B, LQ, 6), torch.randn(B, LKV, 6), torch.randn(B, LKV, 6)
    expected, ref = record_seed(seed, seed.out_proj, q, k, v, mask=mask)
    plain = ours(q, k, v, mask=mask)
    out, trace = ours(q, k, v, mask=mask, return_trace=True)
    nan = mask_name == "random-float-with-empty-row"
    close(plain, expected, equal_nan=nan)
    close(out, expected, equal_nan=nan)
    assert_trace_matches(trace, ref, equal_nan=nan)
    assert_trace_shapes(trace, B, 2, LQ, LKV, 8)
    identical(trace.dropped, trace.weights)  # eval mode: nothing dropped
    if nan:
        assert torch.isnan(trace.weights[0, 1, 2]).all() and torch.isnan(out[0, 2]).all()
        assert not torch.isnan(out[1]).any()


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_self_attention_matches_seed001(causal, bias):
    seed, ours = pair(Seed001SelfAttention, SelfAttention, 4, 12, in_proj_bias=bias, out_proj_bias=bias)
    x = torch.randn(B, LQ, 12)
    expected, ref = record_seed(seed, seed.out_proj, x, causal_mask=causal)
    close(ours(x, causal_mask=causal), expected)
    close(ours(x, causal), expected)  # positional, as the seed allows
    out, trace = ours(x, causal_mask=causal, return_trace=True)
    close(out, expected)
    assert_trace_matches(trace, ref)
    assert_trace_shapes(trace, B, 4, LQ, LQ, 12)
    if causal:
        assert torch.equal(trace.mask.expand(LQ, LQ), torch.ones(LQ, LQ, dtype=torch.bool).tril())
        assert torch.isneginf(trace.scores[..., 0, 1:]).all()
        assert (trace.weights[..., 0, 0] == 1).all()
    else:
        assert trace.mask.all()


def test_self_attention_extra_mask_combines_with_causal():
    """Our superset: mask= narrows causal_mask=True further; against the seed's math by hand."""
    _, ours = pair(Seed001SelfAttention, SelfAttention, 2, 8)
    x = torch.randn(B, LQ, 8)
    pad = (torch.arange(LQ) < torch.tensor([[5], [3]])).view(B, 1, 1, LQ)
    out, trace = ours(x, causal_mask=True, mask=pad, return_trace=True)
    allowed = torch.ones(LQ, LQ, dtype=torch.bool).tril() & pad
    assert torch.equal(trace.mask.expand(B, 1, LQ, LQ), allowed.expand(B, 1, LQ, LQ))
    q, k, v = ours.in_proj(x).chunk(3, dim=-1)
    q, k, v = (t.view(B, LQ, 2, 4).transpose(1, 2) for t in (q, k, v))
    w = torch.softmax((q @ k.transpose(-1, -2) / 2.0).masked_fill(~allowed, float("-inf")), dim=-1)
    close(trace.weights, w)
    close(out, ours.out_proj((w @ v).transpose(1, 2).reshape(B, LQ, 8)))


@pytest.mark.parametrize("bias", [True, False])
def test_context_cross_attention_matches_seed001(bias):
    seed, ours = pair(Seed001CrossAttention, ContextCrossAttention, 2, 8, 6, in_proj_bias=bias, out_proj_bias=bias)
    x, y = torch.randn(B, LQ, 8), torch.randn(B, LKV, 6)
    expected, ref = record_seed(seed, seed.out_proj, x, y)
    close(ours(x, y), expected)
    out, trace = ours(x, y, return_trace=True)
    close(out, expected)
    assert_trace_matches(trace, ref)
    assert_trace_shapes(trace, B, 2, LQ, LKV, 8)
    assert trace.mask.all()


@pytest.mark.parametrize("mask_kind", ["none", "causal", "full", "random-int"])
def test_causal_self_attention_matches_seed002(mask_kind):
    seed, ours = pair(Seed002CausalSelfAttention, CausalSelfAttention, 8, 2, 0.1)
    x = torch.randn(B, LQ, 8)
    mask = {
        "none": None,
        "causal": seed002_generate_mask(x, causal=True),
        "full": seed002_generate_mask(x, causal=False),
        "random-int": (torch.rand(B, 1, LQ, LQ, generator=torch.Generator().manual_seed(3)) > 0.3).int()
        | torch.eye(LQ, dtype=torch.int),
    }[mask_kind]
    expected, ref = record_seed(seed, seed.output, x, mask=mask)
    close(ours(x, mask=mask), expected)
    close(ours(x, mask), expected)
    out, trace = ours(x, mask=mask, return_trace=True)
    close(out, expected)
    assert_trace_matches(trace, ref)
    assert_trace_shapes(trace, B, 2, LQ, LQ, 8)
    # the seed's get_attention_scores entry point, on projected inputs
    q, k, v = seed.query(x), seed.key(x), seed.value(x)
    close(ours.get_attention_scores(q, k, v, mask=mask), seed.get_attention_scores(q, k, v, mask=mask))


@pytest.mark.parametrize("causal", [False, True])
def test_generate_mask_matches_seed002(causal):
    x = torch.randn(3, 6, 4)
    expected = seed002_generate_mask(x, causal=causal)
    got = generate_mask(x, causal=causal)
    assert got.dtype == torch.bool and got.shape == (1, 1, 6, 6)
    assert torch.equal(got, expected)
    assert core.generate_mask is generate_mask


@pytest.mark.parametrize("safe", [False, True])
def test_fully_masked_rows_nan_like_the_seeds_or_zero_when_safe(safe):
    seed, ours = pair(Seed002CausalSelfAttention, CausalSelfAttention, 8, 2)
    x = torch.randn(B, LQ, 8)
    mask = seed002_generate_mask(x, causal=True).repeat(B, 1, 1, 1)
    mask[1, 0, 3] = False  # query 3 of item 1 sees no key
    expected = seed(x, mask=mask)
    out, trace = ours(x, mask=mask, safe_softmax=safe, return_trace=True)
    assert torch.isnan(expected[1, 3]).all()
    if safe:
        assert (trace.weights[1, :, 3] == 0).all() and (trace.context[1, 3] == 0).all()
        close(out[1, 3], ours.output.bias)  # zero context -> the output projection's bias
    else:
        assert torch.isnan(trace.weights[1, :, 3]).all() and torch.isnan(out[1, 3]).all()
    # every other row is the seed's, NaN-free
    keep = torch.ones(B, LQ, dtype=torch.bool)
    keep[1, 3] = False
    close(out[keep], expected[keep])
    assert not torch.isnan(out[keep]).any()


# --- train mode: dropout -----------------------------------------------------------------------


@pytest.mark.parametrize("seed_cls, our_cls, args", [
    (Seed000CrossAttention, CrossAttention, (6, 8, 0.3, 2)),
    (Seed002CausalSelfAttention, CausalSelfAttention, (8, 2, 0.3)),
])
def test_train_mode_dropout_matches_seed_under_same_manual_seed(seed_cls, our_cls, args):
    seed, ours = pair(seed_cls, our_cls, *args)
    seed.train()
    ours.train()
    if seed_cls is Seed000CrossAttention:
        inputs = (torch.randn(B, LQ, 6), torch.randn(B, LKV, 6), torch.randn(B, LKV, 6))
        mask, out_proj = torch.ones(B, 2, LQ, LKV), seed.out_proj
    else:
        inputs = (torch.randn(B, LQ, 8),)
        mask, out_proj = seed002_generate_mask(inputs[0], causal=True), seed.output
    torch.manual_seed(42)
    expected, ref = record_seed(seed, out_proj, *inputs, mask=mask)
    torch.manual_seed(42)
    out, trace = ours(*inputs, mask=mask, return_trace=True)
    close(out, expected)
    assert_trace_matches(trace, ref)
    # a real dropout sample: some weights zeroed, the rest scaled by 1 / (1 - p)
    p = args[-1] if seed_cls is Seed002CausalSelfAttention else args[2]
    assert not torch.equal(trace.dropped, trace.weights)
    kept = trace.dropped != 0
    assert (~kept & (trace.weights > 0)).any()
    close(trace.dropped[kept], trace.weights[kept] / (1 - p))
    # a different seed draws a different sample
    torch.manual_seed(43)
    assert not torch.equal(ours(*inputs, mask=mask), out)
    # back in eval mode nothing is dropped and the output is the seed's eval output
    seed.eval()
    ours.eval()
    out_eval, trace_eval = ours(*inputs, mask=mask, return_trace=True)
    close(out_eval, seed(*inputs, mask=mask))
    assert torch.equal(trace_eval.dropped, trace_eval.weights)


@pytest.mark.parametrize("seed_cls, our_cls, args, make_inputs", [
    (Seed001SelfAttention, SelfAttention, (2, 8), lambda: (torch.randn(B, LQ, 8),)),
    (Seed001CrossAttention, ContextCrossAttention, (2, 8, 6), lambda: (torch.randn(B, LQ, 8), torch.randn(B, LKV, 6))),
])
def test_modules_without_dropout_ignore_train_mode(seed_cls, our_cls, args, make_inputs):
    seed, ours = pair(seed_cls, our_cls, *args)
    seed.train()
    ours.train()
    inputs = make_inputs()
    out, trace = ours(*inputs, return_trace=True)
    close(out, seed(*inputs))
    assert torch.equal(trace.dropped, trace.weights)


def test_modules_work_with_autograd_like_the_seeds():
    """Not in inference mode: gradients flow through our kernel as through the seed."""
    seed, ours = pair(Seed002CausalSelfAttention, CausalSelfAttention, 8, 2)
    x = torch.randn(B, LQ, 8)
    mask = seed002_generate_mask(x, causal=True)
    seed(x, mask=mask).square().sum().backward()
    ours(x, mask=mask).square().sum().backward()
    for (name, p_seed), (_, p_ours) in zip(seed.named_parameters(), ours.named_parameters()):
        close(p_ours.grad, p_seed.grad, msg=lambda m, n=name: f"{n}.grad: {m}")
