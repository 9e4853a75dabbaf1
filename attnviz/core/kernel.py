"""The one attention kernel: scores -> scale -> mask -> softmax -> dropout -> @ V.

Every module in attnviz.core is its projections plus a call to `multihead_attention`.
The arithmetic follows the seed tutorials op for op (matmul, divide by sqrt(d_head),
masked_fill with -inf, softmax, dropout, matmul) so outputs match them to float32 rounding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from torch import Tensor


@dataclass
class AttentionTrace:
    """Every intermediate of one attention call (tensors stay on the compute device).

    Shapes: B batch, H heads, Lq/Lkv query/key lengths, dh = d / H.
    """

    q: Tensor  # (B, H, Lq, dh)
    k: Tensor  # (B, H, Lkv, dh)
    v: Tensor  # (B, H, Lkv, dh)
    scores: Tensor  # (B, H, Lq, Lkv) scaled and masked (-inf), before softmax
    weights: Tensor  # (B, H, Lq, Lkv) softmax output, before dropout
    dropped: Tensor  # (B, H, Lq, Lkv) what multiplied V (is `weights` in eval mode)
    context: Tensor  # (B, Lq, d) heads merged, before the output projection
    mask: Tensor  # bool, True = may attend, broadcastable to scores

    def __getitem__(self, name: str) -> Tensor:  # trace["weights"] reads like trace.weights
        return getattr(self, name)

    def keys(self) -> list[str]:
        return [f.name for f in fields(self)]


def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """(B, L, d) -> (B, H, L, d / H)."""
    b, length, d = x.shape
    return x.view(b, length, n_heads, d // n_heads).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """(B, H, L, dh) -> (B, L, H * dh)."""
    b, h, length, dh = x.shape
    return x.transpose(1, 2).contiguous().view(b, length, h * dh)


def as_allowed(mask: Tensor | None) -> Tensor | None:
    """Any seed-style mask (0 = blocked; bool, int or float) -> bool, True = may attend."""
    if mask is None or mask.dtype == torch.bool:
        return mask
    return mask != 0


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
) -> tuple[Tensor, AttentionTrace | None]:
    """Scaled dot-product attention over projected q (B, Lq, d), k and v (B, Lkv, d).

    mask: bool, True = may attend, broadcastable to (B, H, Lq, Lkv); None attends everywhere.
    A row with no key to attend to gives NaN as the seeds' softmax does, or 0 with safe_softmax
    (what F.scaled_dot_product_attention returns).
    Returns the merged context (B, Lq, d) and, if asked, the trace of every intermediate.
    """
    q, k, v = split_heads(q, n_heads), split_heads(k, n_heads), split_heads(v, n_heads)
    # In place on fresh tensors: same numbers as the seeds' out-of-place ops, half the peak memory.
    scores = torch.matmul(q, k.transpose(-2, -1)).div_(math.sqrt(q.shape[-1]))  # (B, H, Lq, Lkv)
    mask = as_allowed(mask)
    if mask is not None:
        # Adding a 0 / -inf bias equals masked_fill(-inf) for finite scores and broadcasts a small
        # mask ~3x faster over the (B, H, Lq, Lkv) scores.
        scores.add_(torch.zeros(mask.shape, dtype=scores.dtype, device=scores.device).masked_fill_(~mask, -math.inf))
    weights = torch.softmax(scores, dim=-1)
    if safe_softmax and mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    dropped = F.dropout(weights, dropout_p, training) if training and dropout_p > 0 else weights
    context = merge_heads(torch.matmul(dropped, v))  # (B, Lq, d)
    if not return_trace:
        return context, None
    if mask is None:
        mask = torch.ones(1, 1, *scores.shape[-2:], dtype=torch.bool, device=scores.device)
    return context, AttentionTrace(q, k, v, scores, weights, dropped, context, mask)


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


def nearest_heads(width: int, heads: int) -> list[int]:
    """The divisors of `width` closest to `heads` (one below and one above when both exist)."""
    divisors = [h for h in range(1, max(width, 1) + 1) if width % h == 0]
    below = [h for h in divisors if h < heads]
    above = [h for h in divisors if h > heads]
    return ([below[-1]] if below else []) + ([above[0]] if above else [])
