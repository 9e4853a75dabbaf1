"""The seed tutorials' modules, reproduced: same constructor arguments, submodule names
(so identical state_dict keys) and numbers. Each is its projections plus the one kernel.

Superset of the seeds: every forward takes a general `mask` (True / nonzero = may attend),
`safe_softmax` and `return_trace`; calls written for the seed classes work unchanged.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .kernel import AttentionTrace, check_heads, multihead_attention
from .masks import causal_mask, generate_mask

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


class CrossAttention(nn.Module):
    """Seed 000: multi-head cross-attention with separate Q, K, V projections from d_in."""

    def __init__(self, d_in: int, d_out: int, dropout: float, num_heads: int, qkv_bias: bool = False):
        super().__init__()
        check_heads(d_out, num_heads, "d_out")
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
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
        return_trace: bool = False,
    ) -> Tensor | tuple[Tensor, AttentionTrace]:
        context, trace = multihead_attention(
            self.W_query(queries), self.W_key(keys), self.W_value(values), self.num_heads, mask,
            dropout_p=self.dropout.p, training=self.training,
            safe_softmax=safe_softmax, return_trace=return_trace,
        )
        out = self.out_proj(context)  # (B, Lq, d_out)
        return (out, trace) if return_trace else out


class SelfAttention(nn.Module):
    """Seed 001 SelfAttention: one fused in_proj to Q, K, V (Stable Diffusion style)."""

    def __init__(self, n_heads: int, d_embed: int, in_proj_bias: bool = True, out_proj_bias: bool = True):
        super().__init__()
        check_heads(d_embed, n_heads, "d_embed")
        self.in_proj = nn.Linear(d_embed, 3 * d_embed, bias=in_proj_bias)
        self.out_proj = nn.Linear(d_embed, d_embed, bias=out_proj_bias)
        self.n_heads = n_heads
        self.d_head = d_embed // n_heads

    def forward(
        self,
        x: Tensor,  # (B, L, d_embed)
        causal_mask: bool = False,
        mask: Tensor | None = None,
        *,
        safe_softmax: bool = False,
        return_trace: bool = False,
    ) -> Tensor | tuple[Tensor, AttentionTrace]:
        length = x.shape[1]
        causal = _causal(length, x.device) if causal_mask else None  # the argument shadows the builder
        q, k, v = self.in_proj(x).chunk(3, dim=-1)  # each (B, L, d_embed)
        context, trace = multihead_attention(
            q, k, v, self.n_heads, _combine(causal, mask),
            safe_softmax=safe_softmax, return_trace=return_trace,
        )
        out = self.out_proj(context)
        return (out, trace) if return_trace else out


class ContextCrossAttention(nn.Module):
    """Seed 001 CrossAttention: queries from x (d_embed), keys and values from a context y (d_cross)."""

    def __init__(
        self, n_heads: int, d_embed: int, d_cross: int, in_proj_bias: bool = True, out_proj_bias: bool = True
    ):
        super().__init__()
        check_heads(d_embed, n_heads, "d_embed")
        self.q_proj = nn.Linear(d_embed, d_embed, bias=in_proj_bias)
        self.k_proj = nn.Linear(d_cross, d_embed, bias=in_proj_bias)
        self.v_proj = nn.Linear(d_cross, d_embed, bias=in_proj_bias)
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
        return_trace: bool = False,
    ) -> Tensor | tuple[Tensor, AttentionTrace]:
        context, trace = multihead_attention(
            self.q_proj(x), self.k_proj(y), self.v_proj(y), self.n_heads, mask,
            safe_softmax=safe_softmax, return_trace=return_trace,
        )
        out = self.out_proj(context)
        return (out, trace) if return_trace else out


class CausalSelfAttention(nn.Module):
    """Seed 002: self-attention with separate projections; causality comes from the mask."""

    def __init__(self, hidden_dim: int, n_heads: int, dropout: float = 0.0):
        super().__init__()
        self.hidden_dim = hidden_dim
        self.n_heads = n_heads
        self.head_dim = hidden_dim // n_heads if n_heads > 0 else 0
        check_heads(hidden_dim, n_heads, "hidden_dim")
        self.query = nn.Linear(hidden_dim, hidden_dim)
        self.key = nn.Linear(hidden_dim, hidden_dim)
        self.value = nn.Linear(hidden_dim, hidden_dim)
        self.output = nn.Linear(hidden_dim, hidden_dim)
        self.dropout = nn.Dropout(p=dropout)

    def forward(
        self,
        x: Tensor,  # (B, L, hidden_dim)
        mask: Tensor | None = None,  # e.g. generate_mask(x, causal=True); 0 = blocked
        *,
        safe_softmax: bool = False,
        return_trace: bool = False,
    ) -> Tensor | tuple[Tensor, AttentionTrace]:
        return self.get_attention_scores(
            self.query(x), self.key(x), self.value(x), mask,
            safe_softmax=safe_softmax, return_trace=return_trace,
        )

    def get_attention_scores(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, *,
        safe_softmax: bool = False, return_trace: bool = False,
    ) -> Tensor | tuple[Tensor, AttentionTrace]:
        context, trace = multihead_attention(
            q, k, v, self.n_heads, mask,
            dropout_p=self.dropout.p, training=self.training,
            safe_softmax=safe_softmax, return_trace=return_trace,
        )
        out = self.output(context)
        return (out, trace) if return_trace else out
