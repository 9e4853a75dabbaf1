"""The seed tutorials' modules, reproduced: same constructor arguments, submodule names
(so identical state_dict keys) and numbers. Each is its projections plus the one kernel.

Superset of the seeds: every forward takes a general `mask` (True / nonzero = may attend),
`safe_softmax`, `return_trace` and the forward's context `ctx` (core/kernel/context.py); calls written for the
seed classes work unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor, nn

from attnviz.core.kernel.context import ForwardContext
from attnviz.core.kernel.kernel import Trace, attention, check_heads, merge_heads, split_heads
from attnviz.core.kernel.masks import causal_mask, generate_mask
from attnviz.core.kernel.mods import AttentionOptions
from attnviz.core.kernel.stages import DEFAULT_RECORD
from attnviz.core.kernel.value_weighted import value_weighted

__all__ = [
    "CausalSelfAttention",
    "ContextCrossAttention",
    "CrossAttention",
    "SelfAttention",
    "generate_mask",
]


def _combine(*masks: Tensor | None) -> Tensor | None:
    present = [m if m.dtype == torch.bool else m != 0 for m in masks if m is not None]
    if not present:
        return None
    out = present[0]
    for m in present[1:]:
        out = out & m
    return out


def _causal(length: int, device: torch.device) -> Tensor:
    return causal_mask(length, device=device)


def record_of(return_trace: bool | Iterable[str]) -> frozenset[str]:
    """return_trace: False (nothing), True (the default stages) or the stage names to keep."""
    if return_trace is True:
        return DEFAULT_RECORD
    return frozenset(return_trace or ())


def kv_projection_width(width: int, heads: int, kv_heads: int) -> int:
    """Width of the K and V projections: kv_heads * d_head (the whole width for plain MHA)."""
    if kv_heads and (kv_heads > heads or heads % kv_heads):
        raise ValueError(f"kv_heads {kv_heads} must divide heads {heads}")
    return width // heads * kv_heads if kv_heads else width


def _sinks(heads: int, sink_logit: float) -> nn.Parameter | None:
    """gpt-oss's learned sink logit per head, or None (then no parameter and no state_dict key)."""
    return nn.Parameter(torch.full((heads,), float(sink_logit))) if sink_logit else None


def attend(
    module: nn.Module, x: Tensor | None, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, *,
    heads: int, safe_softmax: bool, return_trace: bool | Iterable[str], dropout_p: float = 0.0,
    ctx: ForwardContext | None = None,
) -> tuple[Tensor, Trace]:
    """Split projected q (B, Lq, d), k, v (B, Lkv, kv_width) into heads, run the kernel with the
    module's options (`attn`, `kv_heads`, `sinks`) under the forward's context `ctx`, merge heads. Returns the
    context and the trace."""
    kv = module.kv_heads or heads
    record = record_of(return_trace)
    v_heads = split_heads(v, kv)
    context, trace = attention(
        split_heads(q, heads), split_heads(k, kv), v_heads, mask=mask,
        **module.attn.kernel_args(heads), sink=module.sinks, dropout_p=dropout_p, training=module.training,
        safe_softmax=safe_softmax, record=record | ({"weights"} if "value_weighted" in record else set()),
        ctx=ctx,
    )
    if x is not None:
        trace.keep("x", x)
    if "value_weighted" in record:
        trace.keep("value_weighted", value_weighted(trace["weights"], v_heads, _out_projection(module).weight))
        if "weights" not in record:
            del trace["weights"]
    return trace.keep("context", merge_heads(context)), trace


def _out_projection(module: nn.Module) -> nn.Linear:
    """The seed module's output projection (seed 002 names it `output`)."""
    return getattr(module, "out_proj", None) or module.output


def finish_trace(out: Tensor, trace: Trace, return_trace) -> Tensor | tuple[Tensor, Trace]:
    if not return_trace:
        return out
    trace.keep("output", out)
    return out, trace


class CrossAttention(nn.Module):
    """Seed 000: multi-head cross-attention with separate Q, K, V projections from d_in."""

    def __init__(self, d_in: int, d_out: int, dropout: float, num_heads: int, qkv_bias: bool = False, *,
                 kv_heads: int = 0, attn: AttentionOptions | None = None):
        super().__init__()
        check_heads(d_out, num_heads, "d_out")
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.kv_heads, self.attn, self.sinks = kv_heads, attn or AttentionOptions(), None
        kv_width = kv_projection_width(d_out, num_heads, kv_heads)
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, kv_width, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, kv_width, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        queries: Tensor,  # (B, Lq, d_in)
        keys: Tensor,  # (B, Lkv, d_in)
        values: Tensor,  # (B, Lkv, d_in)
        mask: Tensor | None = None,  # broadcastable to (B, H, Lq, Lkv); 0 = blocked
        *,
        safe_softmax: bool = False,
        return_trace: bool | Iterable[str] = False,
        ctx: ForwardContext | None = None,
    ) -> Tensor | tuple[Tensor, Trace]:
        context, trace = attend(
            self, queries, self.W_query(queries), self.W_key(keys), self.W_value(values), mask,
            heads=self.num_heads, dropout_p=self.dropout.p, safe_softmax=safe_softmax, return_trace=return_trace,
            ctx=ctx,
        )
        return finish_trace(self.out_proj(context), trace, return_trace)  # (B, Lq, d_out)


class SelfAttention(nn.Module):
    """Seed 001 SelfAttention: one fused in_proj to Q, K, V (Stable Diffusion style)."""

    def __init__(self, n_heads: int, d_embed: int, in_proj_bias: bool = True, out_proj_bias: bool = True, *,
                 kv_heads: int = 0, attn: AttentionOptions | None = None, sink_logit: float = 0.0):
        super().__init__()
        check_heads(d_embed, n_heads, "d_embed")
        self.kv_heads, self.attn = kv_heads, attn or AttentionOptions()
        self.split = (d_embed, *2 * [kv_projection_width(d_embed, n_heads, kv_heads)])
        self.in_proj = nn.Linear(d_embed, sum(self.split), bias=in_proj_bias)
        self.out_proj = nn.Linear(d_embed, d_embed, bias=out_proj_bias)
        self.n_heads = n_heads
        self.d_head = d_embed // n_heads
        self.sinks = _sinks(n_heads, sink_logit)

    def forward(
        self,
        x: Tensor,  # (B, L, d_embed)
        causal_mask: bool = False,
        mask: Tensor | None = None,
        *,
        safe_softmax: bool = False,
        return_trace: bool | Iterable[str] = False,
        ctx: ForwardContext | None = None,
    ) -> Tensor | tuple[Tensor, Trace]:
        length = x.shape[1]
        causal = _causal(length, x.device) if causal_mask else None  # the argument shadows the builder
        q, k, v = self.in_proj(x).split(self.split, dim=-1)  # the seed's chunk(3) when kv_heads = 0
        context, trace = attend(self, x, q, k, v, _combine(causal, mask), heads=self.n_heads,
                                safe_softmax=safe_softmax, return_trace=return_trace, ctx=ctx)
        return finish_trace(self.out_proj(context), trace, return_trace)


class ContextCrossAttention(nn.Module):
    """Seed 001 CrossAttention: queries from x (d_embed), keys and values from a context y (d_cross)."""

    def __init__(
        self, n_heads: int, d_embed: int, d_cross: int, in_proj_bias: bool = True, out_proj_bias: bool = True,
        *, kv_heads: int = 0, attn: AttentionOptions | None = None,
    ):
        super().__init__()
        check_heads(d_embed, n_heads, "d_embed")
        self.kv_heads, self.attn, self.sinks = kv_heads, attn or AttentionOptions(), None
        kv_width = kv_projection_width(d_embed, n_heads, kv_heads)
        self.q_proj = nn.Linear(d_embed, d_embed, bias=in_proj_bias)
        self.k_proj = nn.Linear(d_cross, kv_width, bias=in_proj_bias)
        self.v_proj = nn.Linear(d_cross, kv_width, bias=in_proj_bias)
        self.out_proj = nn.Linear(d_embed, d_embed, bias=out_proj_bias)
        self.n_heads = n_heads
        self.d_head = d_embed // n_heads

    def forward(
        self,
        x: Tensor,  # (B, Lq, d_embed) latent
        y: Tensor,  # (B, Lkv, d_cross) context
        mask: Tensor | None = None,
        *,
        safe_softmax: bool = False,
        return_trace: bool | Iterable[str] = False,
        ctx: ForwardContext | None = None,
    ) -> Tensor | tuple[Tensor, Trace]:
        context, trace = attend(self, x, self.q_proj(x), self.k_proj(y), self.v_proj(y), mask, heads=self.n_heads,
                                safe_softmax=safe_softmax, return_trace=return_trace, ctx=ctx)
        return finish_trace(self.out_proj(context), trace, return_trace)


class CausalSelfAttention(nn.Module):
    """Seed 002: self-attention with separate projections; causality comes from the mask."""

    def __init__(self, hidden_dim: int, n_heads: int, dropout: float = 0.0, *,
                 kv_heads: int = 0, attn: AttentionOptions | None = None, sink_logit: float = 0.0):
        super().__init__()
        self.hidden_dim = hidden_dim
        self.n_heads = n_heads
        self.head_dim = hidden_dim // n_heads if n_heads > 0 else 0
        check_heads(hidden_dim, n_heads, "hidden_dim")
        self.kv_heads, self.attn = kv_heads, attn or AttentionOptions()
        kv_width = kv_projection_width(hidden_dim, n_heads, kv_heads)
        self.query = nn.Linear(hidden_dim, hidden_dim)
        self.key = nn.Linear(hidden_dim, kv_width)
        self.value = nn.Linear(hidden_dim, kv_width)
        self.output = nn.Linear(hidden_dim, hidden_dim)
        self.dropout = nn.Dropout(p=dropout)
        self.sinks = _sinks(n_heads, sink_logit)

    def forward(
        self,
        x: Tensor,  # (B, L, hidden_dim)
        mask: Tensor | None = None,  # e.g. generate_mask(x, causal=True); 0 = blocked
        *,
        safe_softmax: bool = False,
        return_trace: bool | Iterable[str] = False,
        ctx: ForwardContext | None = None,
    ) -> Tensor | tuple[Tensor, Trace]:
        out = self.get_attention_scores(self.query(x), self.key(x), self.value(x), mask,
                                        safe_softmax=safe_softmax, return_trace=return_trace, ctx=ctx)
        if return_trace:
            out[1].keep("x", x)
        return out

    def get_attention_scores(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, *,
        safe_softmax: bool = False, return_trace: bool | Iterable[str] = False,
        ctx: ForwardContext | None = None,
    ) -> Tensor | tuple[Tensor, Trace]:
        context, trace = attend(self, None, q, k, v, mask, heads=self.n_heads, dropout_p=self.dropout.p,
                                safe_softmax=safe_softmax, return_trace=return_trace, ctx=ctx)
        return finish_trace(self.output(context), trace, return_trace)
