"""Value-weighted attention (Kobayashi et al., 2020): α_ij · ‖v_j W_O,h‖, each row renormalised to sum to 1.

A head that attends to a key whose value vector its output projection maps to almost nothing (a sink)
moves almost nothing: weighting by the norm of what each key contributes shows where the output comes from.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnviz.core.kernel.kernel import repeat_kv


def value_norms(v: Tensor, w_out: Tensor) -> Tensor:
    """‖v_j W_O,h‖ per head and key: v (B, Hkv, Lkv, dv), w_out (d_out, H·dv) the output projection's weight
    (its input is the heads' contexts side by side, head-major) -> (B, H, Lkv). Through the (dv, dv) Gram
    matrix of each head's slice, so no (B, H, Lkv, d_out) tensor is made."""
    heads = w_out.shape[1] // v.shape[-1]
    per_head = w_out.float().reshape(w_out.shape[0], heads, v.shape[-1]).permute(1, 2, 0)  # (H, dv, d_out)
    gram = per_head @ per_head.transpose(1, 2)  # (H, dv, dv)
    vh = repeat_kv(v.float(), heads)
    squared = torch.einsum("bhjd,hde,bhje->bhj", vh, gram, vh)
    return squared.clamp_min(0).sqrt()


def value_weighted(weights: Tensor, v: Tensor, w_out: Tensor) -> Tensor:
    """weights (B, H, Lq, Lkv) -> the value-weighted map of the same shape (rows sum to 1; a row of zero
    weight stays NaN, as the seeds' fully masked rows)."""
    weighted = weights.float() * value_norms(v, w_out)[:, :, None, :]
    return weighted / weighted.sum(-1, keepdim=True)
