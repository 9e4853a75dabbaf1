"""The whole map in blocks of query rows (core/kernel/blocks.py) against the one-block computation, torch's SDPA
and the seed tutorial's code: the same numbers, -inf and NaN where the whole computation has them."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from seeds import Seed002CausalSelfAttention, seed002_generate_mask

from attnviz.core import CausalSelfAttention, RunConfig, run
from attnviz.core.kernel import blocks as blocks_module
from attnviz.core.kernel import kernel
from attnviz.core.kernel.block_mask import KeySpans
from attnviz.core.kernel.context import ForwardContext
from attnviz.core.kernel.kernel import attention
from attnviz.core.kernel.stages import ALL_STAGES

TINY_BLOCKS = 1 << 12  # a few query rows per block at these sizes
WHOLE = 1 << 40  # one block: the whole path


@pytest.fixture
def block_bytes(monkeypatch):
    def set_bytes(n: int) -> None:
        monkeypatch.setattr(blocks_module, "CACHE_BLOCK_BYTES", n)
    return set_bytes


def same(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Equal to float32 rounding, with -inf, +inf and NaN exactly where expected has them."""
    a, e = torch.as_tensor(actual), torch.as_tensor(expected)
    assert torch.equal(a.isnan(), e.isnan()) and torch.equal(a.isinf(), e.isinf())
    finite = torch.isfinite(e)
    torch.testing.assert_close(a[finite], e[finite], atol=2e-5, rtol=1e-5)
    assert torch.equal(a[torch.isinf(e)], e[torch.isinf(e)])


CONFIGS = {
    "causal": dict(variant="causal"),
    "alibi-softcap-gqa": dict(variant="causal", position="alibi", softcap=5.0, kv_heads=2),
    "rope-sink": dict(variant="causal", position="rope", sink_logit=1.5),
    "window": dict(variant="causal", mask="window", window=5, sinks=2),
    "window-both-sides": dict(variant="self", mask="window-bidirectional", window=4),
    "padding": dict(variant="self", mask="padding", kv_lengths=(40, 9)),
    "bottom-right": dict(variant="cross", mask="causal-bottom-right", seq_kv=50),
    "differential": dict(variant="differential"),
}


@pytest.mark.parametrize("record", [None, ALL_STAGES], ids=["default", "every-stage"])
@pytest.mark.parametrize("name", CONFIGS)
def test_blocks_give_the_whole_maps(name, record, block_bytes):
    config = RunConfig.for_variant(**{**dict(d_model=32, heads=4, batch=2, seq_q=40, seed=3), **CONFIGS[name]})
    block_bytes(WHOLE)
    whole = run(config, record=record)
    block_bytes(TINY_BLOCKS)
    blocked = run(config, record=record)
    assert set(blocked.stages) == set(whole.stages)
    for stage in whole.stages:
        same(torch.from_numpy(blocked.stages[stage]), torch.from_numpy(whole.stages[stage]))


def test_a_row_without_keys_stays_nan_in_a_trimmed_block(block_bytes):
    """Safe softmax off: a query that may see no key is NaN in every cell, as in the seeds' math."""
    block_bytes(TINY_BLOCKS)
    q, k, v = torch.randn(1, 2, 30, 8), torch.randn(1, 2, 30, 8), torch.randn(1, 2, 30, 8)
    mask = torch.ones(30, 30, dtype=torch.bool).tril()
    mask[7] = False
    context, trace = attention(q, k, v, mask=mask[None, None], record={"weights"})
    assert trace.weights[0, :, 7].isnan().all() and context[0, :, 7].isnan().all()
    assert not trace.weights[0, :, 8:].isnan().any()


@pytest.mark.parametrize("kind", ["causal", "window", "padding"])
def test_blocked_context_matches_sdpa(kind, block_bytes):
    block_bytes(TINY_BLOCKS)
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, 64, 16), torch.randn(2, 4, 64, 16), torch.randn(2, 4, 64, 16)
    i, j = torch.arange(64).view(-1, 1), torch.arange(64).view(1, -1)
    allowed = {"causal": j <= i, "window": (j <= i) & (i - j <= 6),
               "padding": j < torch.tensor([64, 20]).view(2, 1, 1, 1)}[kind]
    allowed = allowed if allowed.dim() == 4 else allowed[None, None]
    context, trace = attention(q, k, v, mask=allowed, record={"weights"})
    torch.testing.assert_close(context, F.scaled_dot_product_attention(q, k, v, attn_mask=allowed),
                               atol=1e-5, rtol=1e-5)
    assert trace.weights.shape == (2, 4, 64, 64) and torch.all(trace.weights[~allowed.expand(2, 4, 64, 64)] == 0)


def test_blocked_seed_module_matches_the_tutorial(block_bytes):
    block_bytes(TINY_BLOCKS)
    torch.manual_seed(0)
    seed = Seed002CausalSelfAttention(48, 6).eval()
    ours = CausalSelfAttention(48, 6).eval()
    ours.load_state_dict(seed.state_dict())
    x = torch.randn(2, 70, 48)
    mask = seed002_generate_mask(x, causal=True)
    with torch.no_grad():
        expected = seed(x, mask)
        out, trace = ours(x, mask, return_trace=True)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    assert blocks_module.block_rows(torch.empty(2, 6, 70, 8), 70) < 70  # the run did use blocks


def test_calls_given_the_same_mask_share_its_work_and_a_changed_mask_gets_its_own(block_bytes):
    """A model's layers pass one mask: the calls of one forward (one ForwardContext) share its BlockMask (key
    spans, bias). Another mask, or the same one changed in place, is analysed again, and every call's maps and
    context stay exact."""
    block_bytes(TINY_BLOCKS)
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, 40, 8), torch.randn(1, 2, 40, 8), torch.randn(1, 2, 40, 8)
    i, j = torch.arange(40).view(-1, 1), torch.arange(40).view(1, -1)
    causal = (j <= i)[None, None].clone()
    assert ForwardContext().block_mask(causal, 40) is not ForwardContext().block_mask(causal, 40)  # per forward
    with ForwardContext() as ctx:
        work = _shares_the_work_of_one_mask(ctx, causal, q, k, v, i, j)
        assert ctx.block_mask(causal, 40) is work
    assert ctx.block_mask(causal, 40) is not work  # let go on exit: nothing is held past the forward


def _shares_the_work_of_one_mask(ctx, causal, q, k, v, i, j):
    work = ctx.block_mask(causal, 40)
    assert ctx.block_mask(causal, 40) is work
    assert ctx.block_mask(causal.clone(), 40) is not work
    for allowed in (causal, causal, (j <= i) & (i - j <= 3)):  # the same mask twice, then another
        context, _ = attention(q, k, v, mask=allowed if allowed.dim() == 4 else allowed[None, None], ctx=ctx)
        expected = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        torch.testing.assert_close(context, expected, atol=1e-5, rtol=1e-5)
    work = ctx.block_mask(causal, 40)  # held again (two masks are held: a third one let it go)
    attention(q, k, v, mask=causal, ctx=ctx)
    assert ctx.block_mask(causal, 40) is work  # the call read that one
    causal[..., 30:, :25] = False  # changed in place: the spans of the old mask no longer hold
    assert ctx.block_mask(causal, 40) is not work
    context, _ = attention(q, k, v, mask=causal, ctx=ctx)
    torch.testing.assert_close(context, F.scaled_dot_product_attention(q, k, v, attn_mask=causal),
                               atol=1e-5, rtol=1e-5)
    return ctx.block_mask(causal, 40)


def test_key_spans_are_the_keys_some_row_may_see():
    causal = torch.ones(10, 10, dtype=torch.bool).tril()[None, None]
    assert KeySpans(causal, 10).span(2, 5) == (0, 5)
    band = causal & ~torch.ones(10, 10, dtype=torch.bool).tril(-3)[None, None]
    assert KeySpans(band, 10).span(6, 8) == (4, 8)
    assert KeySpans(None, 10).span(0, 3) == (0, 10)
    no_key = causal.clone()
    no_key[..., 3, :] = False
    assert KeySpans(no_key, 10).span(2, 5) == (0, 10)  # a no-key row is NaN in every key: all computed
    padded = torch.tensor([[True] * 6 + [False] * 4, [True] * 3 + [False] * 7]).view(2, 1, 1, 10)
    assert KeySpans(padded, 10).span(0, 4) == (0, 6)  # one row for every query: the union of the items


@pytest.mark.parametrize("d_head", [16, 64, 48])
def test_scores_equal_the_seeds_divide_bit_for_bit(d_head, block_bytes):
    """A power-of-two scale is fused into one baddbmm (exact); others keep the seeds' own divide. (In one
    block: a matmul split by rows may round its sums differently, which the tests above allow.)"""
    import math

    block_bytes(WHOLE)
    torch.manual_seed(1)
    q, k, v = (torch.randn(2, 3, 50, d_head) for _ in range(3))
    allowed = torch.arange(50).view(1, 1, 1, -1) < torch.tensor([50, 31]).view(2, 1, 1, 1)
    _, trace = attention(q, k, v, mask=allowed, record={"scores", "weights"})
    seed_scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d_head)
    seed_scores = seed_scores.masked_fill(~allowed, float("-inf"))
    assert torch.equal(trace.scores, seed_scores)
    torch.testing.assert_close(trace.weights, torch.softmax(seed_scores, -1), atol=1e-7, rtol=1e-6)


def test_a_learnable_score_mod_trains_through_the_blocks(monkeypatch):
    # the blocks' reused memory is for forwards without gradients: autograd writes no out= tensor
    from attnviz.core.kernel.mods import ScoreMod

    monkeypatch.setattr(blocks_module, "CACHE_BLOCK_BYTES", 1 << 12)
    q, k, v = (torch.randn(1, 2, 64, 16, generator=torch.Generator().manual_seed(n)) for n in range(3))
    bias = torch.zeros(2, requires_grad=True)
    context, _ = attention(q, k, v, score_mods=[ScoreMod("biased", lambda s, b, h, i, j: s + bias[h] * j)])
    context.sum().backward()
    assert bias.grad is not None and torch.isfinite(bias.grad).all() and bias.grad.abs().sum() > 0


HEAD_CASES = {
    "causal": dict(mask="causal"),
    "no mask": dict(),
    "grouped keys": dict(mask="causal", kv_heads=2),
    "keyless row, safe softmax": dict(mask="keyless", safe_softmax=True),
}


def _head_case(case: dict, n: int = 32):
    torch.manual_seed(1)
    q = torch.randn(1, 4, n, 8)
    k, v = (torch.randn(1, case.get("kv_heads", 4), n, 8) for _ in range(2))
    allowed = None
    if case.get("mask"):
        allowed = torch.ones(n, n, dtype=torch.bool).tril()[None, None]
        if case["mask"] == "keyless":
            allowed = allowed.clone()
            allowed[..., 5, :] = False
    options = dict(mask=allowed, safe_softmax=case.get("safe_softmax", False))
    return q, k, v, options


@pytest.mark.parametrize("record", [{"weights"}, {"scores", "weights", "dropped"}], ids=["weights", "three"])
@pytest.mark.parametrize("name", HEAD_CASES)
def test_a_models_forward_writes_the_whole_maps_into_its_slab(name, record, block_bytes):
    """In a model's forward (a slab current) one batch item's map is written into the slab: in blocks of whole
    heads where no mask leaves keys out, else in blocks of rows that compute only the keys they may see (a
    causal map's lower triangle). The numbers are the one-block path's, the context SDPA's."""
    from attnviz.core.kernel.slab import MapSlab

    q, k, v, options = _head_case(HEAD_CASES[name])
    with torch.no_grad():
        block_bytes(WHOLE)
        want_context, want = attention(q, k, v, record=record, **options)
        block_bytes(TINY_BLOCKS)  # one head's 32 x 32 map per block, 8 rows per block of rows
        calls = []
        head_blocks = blocks_module._head_blocks
        maps = MapSlab(1)
        with ForwardContext(slab=maps) as ctx, pytest.MonkeyPatch.context() as patch:
            patch.setattr(blocks_module, "_head_blocks", lambda *a: calls.append(a) or head_blocks(*a))
            context, got = attention(q, k, v, record=record, ctx=ctx, **options)
    assert len(calls) == (1 if options["mask"] is None else 0)
    assert got["weights"].data_ptr() == maps.tensor.data_ptr()  # written in place, no copy of its own
    for stage in record:
        same(got[stage], want[stage])
    same(context, want_context)
    reference = F.scaled_dot_product_attention(q, kernel.repeat_kv(k, 4), kernel.repeat_kv(v, 4),
                                               attn_mask=options["mask"])
    finite = ~reference.isnan()
    torch.testing.assert_close(context[finite], reference[finite], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("per_head", ["sink", "alibi"])
def test_a_per_head_sink_or_score_mod_keeps_blocks_of_rows_in_a_models_forward(per_head, block_bytes):
    """A head's map that depends on its index (a sink logit, ALiBi's slope) needs every head in each block."""
    from attnviz.core.kernel.mods import alibi
    from attnviz.core.kernel.slab import MapSlab

    q, k, v, options = _head_case(HEAD_CASES["causal"])
    extra = dict(sink=torch.linspace(-1, 1, 4)) if per_head == "sink" else dict(score_mods=[alibi(4)])
    with torch.no_grad():
        block_bytes(WHOLE)
        _, want = attention(q, k, v, record={"weights"}, **options, **extra)
        block_bytes(TINY_BLOCKS)
        with ForwardContext(slab=MapSlab(1)) as ctx:
            _, got = attention(q, k, v, record={"weights"}, ctx=ctx, **options, **extra)
    same(got["weights"], want["weights"])
