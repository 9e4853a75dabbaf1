"""Mask builders. Everywhere in attnviz a mask is bool with True = may attend (SDPA's convention).

Query i of Lq sits at key position i (top-left alignment: the seeds' triu(1), SDPA's is_causal)
or at i + Lkv - Lq (bottom-right: the decoding / KV-cache view, where the last query is the
newest token and sees every key). The two agree when Lq == Lkv.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

ALIGNMENTS = ("top-left", "bottom-right")


def _offsets(lq: int, lkv: int, align: str, device: torch.device | str | None) -> Tensor:
    """(Lq, Lkv) matrix of query position minus key position under the given alignment."""
    if align not in ALIGNMENTS:
        raise ValueError(f"alignment must be one of {ALIGNMENTS}, got {align!r}")
    shift = lkv - lq if align == "bottom-right" else 0
    i = torch.arange(lq, device=device).unsqueeze(1) + shift
    j = torch.arange(lkv, device=device).unsqueeze(0)
    return i - j


def causal_mask(lq: int, lkv: int | None = None, align: str = "top-left", device=None) -> Tensor:
    """(Lq, Lkv): query i may attend key j when j is not after i."""
    lkv = lq if lkv is None else lkv
    return _offsets(lq, lkv, align, device) >= 0


def window_mask(
    lq: int,
    lkv: int | None,
    window: int,
    causal: bool = True,
    align: str = "top-left",
    device=None,
) -> Tensor:
    """(Lq, Lkv) sliding window: keys at most `window` positions from the query.

    causal: only keys at or before the query (0 <= i - j <= window); otherwise both sides
    (|i - j| <= window).
    """
    if window < 0:
        raise ValueError(f"window must be >= 0, got {window}")
    lkv = lq if lkv is None else lkv
    d = _offsets(lq, lkv, align, device)
    return (d >= 0) & (d <= window) if causal else d.abs() <= window


def padding_mask(kv_lengths: Sequence[int] | Tensor, lkv: int, device=None) -> Tensor:
    """(B, 1, 1, Lkv): key j of batch item b may be attended when j < kv_lengths[b]."""
    lengths = torch.as_tensor(kv_lengths, device=device).reshape(-1, 1, 1, 1)
    if (lengths < 0).any() or (lengths > lkv).any():
        raise ValueError(f"valid lengths must lie in 0..{lkv}, got {lengths.flatten().tolist()}")
    return torch.arange(lkv, device=device) < lengths


def matrix_mask(matrix, lq: int | None = None, lkv: int | None = None, device=None) -> Tensor:
    """An arbitrary (Lq, Lkv) matrix (nested lists, NumPy or tensor; nonzero = may attend)."""
    m = torch.as_tensor(matrix, device=device)
    m = m if m.dtype == torch.bool else m != 0
    if m.dim() != 2:  # check before reading shape[-2], which a 0-D or 1-D input lacks
        raise ValueError(f"mask matrix must have shape (Lq, Lkv), got {m.dim()}-D {tuple(m.shape)}")
    expected = (lq if lq is not None else m.shape[-2], lkv if lkv is not None else m.shape[-1])
    if tuple(m.shape) != expected:
        raise ValueError(f"mask matrix must have shape (Lq, Lkv) = {expected}, got {tuple(m.shape)}")
    return m


def fully_masked_rows(mask: Tensor) -> Tensor:
    """True for each query row that may attend no key at all (softmax gives NaN there)."""
    return ~mask.any(dim=-1)


def generate_mask(x: Tensor, causal: bool = False) -> Tensor:
    """Seed 002's helper: a (1, 1, L, L) bool mask for x of shape (B, L, d)."""
    _, length, _ = x.shape
    if causal:
        return causal_mask(length).unsqueeze(0).unsqueeze(0)
    return torch.ones((length, length), dtype=torch.bool).unsqueeze(0).unsqueeze(0)
