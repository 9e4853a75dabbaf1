"""Differential attention (Ye et al., 2024, "Differential Transformer"), on the one kernel.

Each of the H heads computes two softmax maps from its two halves of Q and K and subtracts them:
    A = softmax(Q1 K1ᵀ s) - λ softmax(Q2 K2ᵀ s),  λ = exp(λq1·λk1) - exp(λq2·λk2) + λ_init,
    λ_init = 0.8 - 0.6 exp(-0.3 · layer)  (layer counted from 0),
then out = (1 - λ_init) · RMSNorm(A V) per head. Head pairing follows the paper's code
(multihead_diffattn.py): the 2H sub-heads 2h and 2h + 1 form head h. Unlike the paper, which
shares one λ across a layer's heads, each head has its own λ vectors, so heads may differ.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import Tensor, nn

from attnviz.core.kernel.context import ForwardContext
from attnviz.core.kernel.kernel import Trace, attention, check_heads, merge_heads, split_heads
from attnviz.core.kernel.mods import AttentionOptions
from attnviz.core.variants.modules import finish_trace, kv_projection_width, record_of


def lambda_init(layer: int) -> float:
    """The paper's λ_init schedule for a layer counted from 0."""
    return 0.8 - 0.6 * math.exp(-0.3 * layer)


class DifferentialAttention(nn.Module):
    """Multi-head differential self-attention with H heads of two sub-heads each."""

    def __init__(self, embed_dim: int, num_heads: int, layer: int = 0, *, kv_heads: int = 0,
                 attn: AttentionOptions | None = None):
        super().__init__()
        check_heads(embed_dim, 2 * num_heads, "d_model (two sub-heads per head)")
        self.num_heads, self.kv_heads = num_heads, kv_heads or num_heads
        self.head_dim = embed_dim // num_heads // 2  # width of one sub-head
        self.attn = attn or AttentionOptions()
        self.lambda_init = lambda_init(layer)
        kv_width = kv_projection_width(embed_dim, num_heads, kv_heads)
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.k_proj = nn.Linear(embed_dim, kv_width, bias=False)
        self.v_proj = nn.Linear(embed_dim, kv_width, bias=False)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        for name in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"):
            setattr(self, name, nn.Parameter(torch.zeros(num_heads, self.head_dim).normal_(0, 0.1)))
        self.subln = nn.RMSNorm(2 * self.head_dim, eps=1e-5, elementwise_affine=True)

    def lambdas(self) -> Tensor:
        """λ per head, (H,)."""
        first = torch.exp(torch.sum(self.lambda_q1 * self.lambda_k1, dim=-1).float())
        second = torch.exp(torch.sum(self.lambda_q2 * self.lambda_k2, dim=-1).float())
        return first - second + self.lambda_init

    def forward(
        self, x: Tensor, mask: Tensor | None = None, *, safe_softmax: bool = False,
        return_trace: bool | Iterable[str] = False, ctx: ForwardContext | None = None,
    ) -> Tensor | tuple[Tensor, Trace]:
        heads = self.num_heads
        lam = self.lambdas().to(x.dtype).view(1, heads, 1, 1)

        def combine(w: Tensor) -> Tensor:  # (B, 2H, Lq, Lkv) -> (B, H, Lq, Lkv), signed
            pairs = w.view(w.shape[0], heads, 2, *w.shape[-2:])
            return pairs[:, :, 0] - lam * pairs[:, :, 1]

        context, trace = attention(
            split_heads(self.q_proj(x), 2 * heads), split_heads(self.k_proj(x), 2 * self.kv_heads),
            split_heads(self.v_proj(x), self.kv_heads), mask=mask, **self.attn.kernel_args(2 * heads),
            combine=combine, safe_softmax=safe_softmax, record=record_of(return_trace), ctx=ctx,
        )
        trace.keep("x", x)
        context = trace.keep("context", merge_heads(self.subln(context) * (1 - self.lambda_init)))
        return finish_trace(self.out_proj(context), trace, return_trace)
