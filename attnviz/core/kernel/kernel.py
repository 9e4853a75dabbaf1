"""The one attention kernel: Q·Kᵀ -> scale -> bias -> cap -> mask -> softmax -> dropout -> @ V.

Every module in attnviz.core is its projections plus a call to `attention`, which records the
stages of stages.py that are asked for. Without modifiers the arithmetic follows the seed
tutorials op for op (matmul, divide by sqrt(d_head), -inf mask, softmax, dropout, matmul) so
outputs match them to float32 rounding.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor

from attnviz.core.kernel.blocks import blocked_attention
from attnviz.core.kernel.buffers import Scratch
from attnviz.core.kernel.context import ForwardContext, context_of
from attnviz.core.kernel.kinds import nearest_heads
from attnviz.core.kernel.mods import ScoreRecipe
from attnviz.core.kernel.pooling import SoftmaxStats, grouped_matmul, softmax_stats
from attnviz.core.kernel.stages import DEFAULT_RECORD


class Trace(dict):
    """Stage name (see stages.py) -> tensor for one attention call, plus "mask" (bool, True = may
    attend). Only the stages asked for are kept; trace.weights reads like trace["weights"]."""

    def __init__(self, record=()):
        super().__init__()
        self.record = frozenset(record)
        self.context_sum: Tensor | None = None  # the call's context summed (backed._check_finite reads it)
        self.recipe: ScoreRecipe | None = None  # a model's call: how its scores were made (hover recomputes them)

    def __getattr__(self, name: str) -> Tensor:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def keep(self, name: str, tensor: Tensor) -> Tensor:
        if name in self.record:
            self[name] = tensor
        return tensor

    def holds(self, tensor: Tensor) -> bool:
        """Whether `tensor` is a kept stage (so it must not be changed in place)."""
        return any(t is tensor for t in self.values())




def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """(B, L, d) -> (B, H, L, d / H)."""
    b, length, d = x.shape
    return x.view(b, length, n_heads, d // n_heads).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """(B, H, L, dh) -> (B, L, H * dh)."""
    b, h, length, dh = x.shape
    return x.transpose(1, 2).contiguous().view(b, length, h * dh)


def repeat_kv(x: Tensor, heads: int) -> Tensor:
    """(B, Hkv, L, d) -> (B, heads, L, d): query head h reads key/value head h // (heads / Hkv)."""
    b, kv_heads, length, d = x.shape
    if kv_heads == heads:
        return x
    return x[:, :, None].expand(b, kv_heads, heads // kv_heads, length, d).reshape(b, heads, length, d)


def as_allowed(mask: Tensor | None) -> Tensor | None:
    """Any seed-style mask (0 = blocked; bool, int or float) -> bool, True = may attend."""
    if mask is None or mask.dtype == torch.bool:
        return mask
    return mask != 0


def _index_grids(s: Tensor, row0: int = 0, col0: int = 0) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Batch, head, query and key index grids of scores whose first cell is the map's (row0, col0)."""
    b, h, lq, lkv = s.shape
    idx = [torch.arange(n, device=s.device) for n in (b, h, lq, lkv)]
    return (idx[0].view(-1, 1, 1, 1), idx[1].view(1, -1, 1, 1), (idx[2] + row0).view(1, 1, -1, 1),
            (idx[3] + col0).view(1, 1, 1, -1))


def _softmax(s: Tensor, sink: Tensor | None, scratch: Scratch | None = None) -> Tensor:
    """Softmax over the keys; a sink logit per head (gpt-oss) joins the denominator, then is dropped.
    scratch: the memory to write it to (torch's own softmax kernel, the same numbers)."""
    if sink is None:
        if scratch is None:
            return torch.softmax(s, dim=-1)
        return torch._softmax(s, -1, False, out=scratch.empty(s.shape, s.dtype, s.device))
    column = sink.to(s.dtype).view(1, -1, 1, 1).expand(s.shape[0], -1, s.shape[2], 1)
    return torch.softmax(torch.cat([s, column], dim=-1), dim=-1)[..., :-1]


def attention(
    q: Tensor,  # (B, H, Lq, dh)
    k: Tensor,  # (B, Hkv, Lkv, dh), Hkv divides H
    v: Tensor,  # (B, Hkv', Lkv, dv), Hkv' divides the heads of the final map
    *,
    mask: Tensor | None = None,  # True = may attend, broadcastable to (B, H, Lq, Lkv)
    scale: float | None = None,  # None: divide by sqrt(dh), as the seeds do
    rotate: Callable[[Tensor], Tensor] | None = None,  # position rotation of q and k (RoPE)
    score_mods: Sequence = (),  # mods.ScoreMod, applied in stage order
    sink: Tensor | None = None,  # (H,) sink logit per head
    combine: Callable[[Tensor], Tensor] | None = None,  # weights -> combined map (differential)
    dropout_p: float = 0.0,
    training: bool = False,
    safe_softmax: bool = False,
    record=(),  # the stage names to keep in the trace
    ctx: ForwardContext | None = None,  # the forward's context (context.py); None: a plain call
) -> tuple[Tensor, Trace]:
    """One attention call: rotate -> Q·Kᵀ -> scale -> bias -> cap -> mask -> softmax -> combine ->
    dropout -> @ V. Returns the per-head context (B, H, Lq, dv) and the trace of the stages asked for.

    A row with no key to attend to gives NaN as the seeds' softmax does, or 0 with safe_softmax
    (what F.scaled_dot_product_attention returns). Ops run in place only on tensors the trace does
    not keep. `ctx` picks the path (pooled, blocks of rows or heads, whole map) and takes the call's
    progress and ablation.
    """
    ctx = context_of(ctx)
    trace = Trace(record)
    if rotate is not None:
        trace.keep("q_proj", q), trace.keep("k_proj", k)
        q, k = rotate(q), rotate(k)
    trace.keep("q", q), trace.keep("k", k), trace.keep("v", v)
    dropout_p = dropout_p if training else 0.0
    options = dict(scale=scale, score_mods=score_mods, sink=sink, combine=combine, safe_softmax=safe_softmax)
    mask = as_allowed(mask)
    if ctx.pooling is not None:  # a long run: the maps in blocks of query rows, reduced at once (pooling.py)
        # the entropy comes from the scores where the map is a plain softmax of them
        scored = sink is None and combine is None and dropout_p == 0.0
        rows = partial(_pooled_map, k=k, dropout_p=dropout_p, scored=scored, **options)
        out = ctx.pooling.attend(q, k, v, mask, rows, repeat_kv, mask_bias, ctx, signed=combine is not None)
        return ctx.finished(out), trace
    out = None
    # dropout draws its random numbers in the whole map's order: that path only; one query row (a generation's
    # step) is one block whatever the blocks' size
    if dropout_p == 0.0 and q.shape[2] > 1:
        out = blocked_attention(q, k, v, mask, trace, partial(_map, k=k, **options), repeat_kv, mask_bias, ctx,
                                heads_apart=combine is None and sink is None and not score_mods)
    if out is None:
        # a model's layers share one mask: its bias is made once per forward (None: every key allowed)
        bias = None if mask is None else ctx.block_mask(mask, k.shape[2]).additive(q.dtype, mask_bias)
        dropped, mask = _map(q, k, mask, trace=trace, dropout_p=dropout_p, bias=bias, **options)
        # grouped-query heads read their value head in place (v is not repeated to every query head)
        out = grouped_matmul(dropped, v, repeat_kv)
    if trace.record:
        trace["mask"] = mask if mask is not None else torch.ones(1, 1, q.shape[2], k.shape[2], dtype=torch.bool,
                                                                 device=q.device)
    trace.context_sum = out.sum()  # a 0-d tensor: no wait for the device here
    # progress, then an ablated head's context knocked out here, before any output projection (ablation.py)
    return ctx.finished(out), trace


def mask_bias(mask: Tensor, dtype: torch.dtype) -> Tensor:
    """0 where a bool mask allows, -inf where it blocks. Adding it equals masked_fill(-inf) for finite
    scores and broadcasts a small mask faster over the (B, H, Lq, Lkv) scores (benchmarks/README.md, Behind the
    code)."""
    return torch.where(mask, torch.zeros((), dtype=dtype, device=mask.device),
                       torch.full((), -math.inf, dtype=dtype, device=mask.device))


def exact_scale(scale: float | None, d_head: int) -> float | None:
    """The score scale as a factor when multiplying by it is exact: a power of two (1/sqrt(d_head) for
    d_head = 4, 16, 64, 256 ...). Then Q·Kᵀ · factor equals the seeds' Q·Kᵀ / sqrt(d_head) bit for bit."""
    factor = 1 / math.sqrt(d_head) if scale is None else scale
    return factor if factor > 0 and math.frexp(factor)[0] == 0.5 else None


def _fused_scores(q: Tensor, keys_t: Tensor, alpha: float, scratch: Scratch | None = None) -> Tensor:
    """alpha · Q·Kᵀ in one BLAS call (baddbmm's alpha), instead of a matmul and a divide over the map. keys_t with
    fewer heads than q (grouped-query attention, not repeated): each key head's query heads as one matrix.
    scratch: the memory to write them to (the pooled path's blocks reuse one)."""
    b, h, n, dh = q.shape
    kv = keys_t.shape[1]
    if kv != h and h % kv == 0 and keys_t.shape[0] == b:  # (B, Hkv, g, n) rows are (B, H, n) rows in order
        q3, k3 = q.reshape(b * kv, h // kv * n, dh), keys_t.reshape(b * kv, dh, -1)
    else:
        keys_t = repeat_kv(keys_t, h) if kv != h else keys_t
        q3, k3 = q.reshape(b * h, n, dh), keys_t.expand(b, h, dh, keys_t.shape[-1]).reshape(b * h, dh, -1)
    out = None if scratch is None else scratch.empty((q3.shape[0], q3.shape[1], k3.shape[2]), q.dtype, q.device)
    out = torch.baddbmm(torch.empty((), dtype=q.dtype, device=q.device), q3, k3, beta=0, alpha=alpha, out=out)
    return out.view(b, h, n, -1)


def _staged_scores(q: Tensor, keys_t: Tensor, scale, score_mods, trace: Trace, row0: int, col0: int) -> Tensor:
    """Q·Kᵀ -> scale -> bias -> cap, each stage kept where the trace asks for it."""
    s = trace.keep("qk", torch.matmul(q, keys_t))  # (B, H, Lq, Lkv)
    if scale is None:  # the seeds divide by sqrt(d_head)
        s = s.div(math.sqrt(q.shape[-1])) if trace.holds(s) else s.div_(math.sqrt(q.shape[-1]))
    else:
        s = s.mul(scale) if trace.holds(s) else s.mul_(scale)
    s = trace.keep("scaled", s)
    for stage in ("biased", "capped"):
        mods = [m for m in score_mods if m.stage == stage]
        for mod in mods:
            s = mod.fn(s, *_index_grids(s, row0, col0))
        if mods:
            trace.keep(stage, s)
    return s


def _masked(s: Tensor, bias: Tensor | None, bias_col: int, trace: Trace) -> Tensor:
    """The scores plus the mask's 0 / -inf bias on the columns bias_col.. it covers. With a mask the kept
    scores are always their own tensor (a copy if s is kept), as in the whole computation, even where this
    block has no masked cell: a stage is another stage's very tensor in every block alike, or in none."""
    if bias is None:
        return s
    s = s.clone() if trace.holds(s) else s
    if bias.shape[-1]:
        s[..., bias_col:bias_col + bias.shape[-1]].add_(bias)
    return s


def _scores(q: Tensor, k: Tensor, mask: Tensor | None, *, scale, score_mods, trace: Trace, row0: int = 0,
            col0: int = 0, keys_t: Tensor | None = None, bias: Tensor | None = None, bias_col: int = 0,
            scratch: Scratch | None = None) -> tuple[Tensor, Tensor | None]:
    """The masked scores the softmax reads (Q·Kᵀ -> scale -> bias -> cap -> mask) and the mask as bool; the
    arguments as _map's (scratch: as _fused_scores')."""
    keys_t = k.transpose(-2, -1) if keys_t is None else keys_t  # grouped keys are repeated only where needed
    mask = as_allowed(mask)
    alpha = exact_scale(scale, q.shape[-1])
    if alpha is not None and not score_mods and not trace.record & {"qk", "scaled"}:
        return _masked(_fused_scores(q, keys_t, alpha, scratch), bias, bias_col, trace), mask
    # keys_t of fewer heads (grouped, from the pooled path) are repeated for the staged ops
    keys_t = repeat_kv(keys_t, q.shape[1]) if keys_t.shape[1] != q.shape[1] else keys_t
    return _masked(_staged_scores(q, keys_t, scale, score_mods, trace, row0, col0), bias, bias_col, trace), mask


def _map(q: Tensor, k: Tensor, mask: Tensor | None, *, scale, score_mods, sink, combine, safe_softmax: bool,
         trace: Trace | None = None, dropout_p: float = 0.0, row0: int = 0, col0: int = 0,
         keys_t: Tensor | None = None, bias: Tensor | None = None, bias_col: int = 0,
         scratch: tuple[Scratch, Scratch] | None = None) -> tuple[Tensor, Tensor | None]:
    """The attention map of q's rows against k's keys (the rows row0.. and keys col0.. of the whole map: ALiBi
    and the like need the true positions): Q·Kᵀ -> scale -> bias -> cap -> mask -> softmax -> combine ->
    dropout. keys_t: k already repeated to q's heads and transposed; bias: mask_bias(mask), made once for
    many blocks, of the columns bias_col.. (those that hold a masked cell; None: nothing is added, the caller
    found every key allowed).
    Returns the map that multiplies V and the mask as bool. Ops run in place only on tensors the trace does
    not keep. scratch: the memory a block's scores and weights are written to (blocks.py copies what it keeps
    before the next block)."""
    trace = trace if trace is not None else Trace()
    scores_at, weights_at = scratch or (None, None)
    s, mask = _scores(q, k, mask, scale=scale, score_mods=score_mods, trace=trace, row0=row0, col0=col0,
                      keys_t=keys_t, bias=bias, bias_col=bias_col, scratch=scores_at)
    weights = _softmax(trace.keep("scores", s), sink, weights_at)
    if safe_softmax and mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    trace.keep("weights", weights)
    if combine is not None:
        weights = trace.keep("combined", combine(weights))
    dropped = F.dropout(weights, dropout_p, True) if dropout_p > 0 else weights
    return trace.keep("dropped", dropped), mask


def _pooled_map(q: Tensor, k: Tensor, mask: Tensor | None, *, scored: bool,
                scratch: tuple[Scratch | None, Scratch | None], **options
                ) -> tuple[Tensor, Tensor | None, SoftmaxStats | None]:
    """_map for the pooled path (pooling.Pooling.attend): the map, the mask and, where `scored` (the map is a
    plain softmax of the scores), what the softmax itself gives the statistics (pooling.softmax_stats: its
    entropy and each row's largest weight, from the passes that make the weights). scratch: the memory every
    block's scores and map are written to (a fresh block-sized tensor is mapped page by page: a tenth of a
    pooled call's time)."""
    if not scored:
        weights, mask = _map(q, k, mask, **options)
        return weights, mask, None
    keep = {name: options[name] for name in ("row0", "col0", "keys_t", "bias", "bias_col") if name in options}
    s, mask = _scores(q, k, mask, scale=options["scale"], score_mods=options["score_mods"], trace=Trace(),
                      scratch=scratch[0], **keep)
    bias, col = options.get("bias"), options.get("bias_col", 0)
    masked = (0, 0) if mask is None else (0, s.shape[-1]) if bias is None else (col, col + bias.shape[-1])
    weights, stats = softmax_stats(s, masked, q.dtype, scratch[1])
    if options["safe_softmax"] and mask is not None:
        keyless = ~mask.any(dim=-1, keepdim=True)
        weights = weights.masked_fill(keyless, 0.0)
        stats.row_max.masked_fill_(keyless[..., 0], 0.0)  # 1 / Z is NaN there; the weights are 0
    return weights, mask, stats


def multihead_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    n_heads: int,
    mask: Tensor | None = None,
    *,
    dropout_p: float = 0.0,
    training: bool = False,
    safe_softmax: bool = False,
    return_trace: bool = False,
) -> tuple[Tensor, Trace | None]:
    """`attention` over projected q (B, Lq, d), k and v (B, Lkv, d) with heads merged: the first
    version's entry point. Returns the merged context (B, Lq, d) and, if asked, the default trace."""
    context, trace = attention(
        split_heads(q, n_heads), split_heads(k, n_heads), split_heads(v, n_heads), mask=mask,
        dropout_p=dropout_p, training=training, safe_softmax=safe_softmax,
        record=DEFAULT_RECORD if return_trace else (),
    )
    context = trace.keep("context", merge_heads(context))
    return context, (trace if return_trace else None)


def check_heads(width: int, heads: int, width_name: str = "width") -> None:
    """Raise ValueError unless `heads` divides `width`, naming the nearest valid head counts."""
    if heads <= 0:
        raise ValueError(f"heads must be at least 1, got {heads}")
    if width % heads:
        options = " or ".join(str(h) for h in nearest_heads(width, heads))
        raise ValueError(
            f"{heads} heads do not divide {width_name} {width} "
            f"({width} / {heads} = {width / heads:.3g}); nearest valid head counts: {options}"
        )
