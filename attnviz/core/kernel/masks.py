"""Mask builders. Everywhere in attnviz a mask is bool with True = may attend (SDPA's convention).

Query i of Lq sits at key position i (top-left alignment: the seeds' triu(1), SDPA's is_causal)
or at i + Lkv - Lq (bottom-right: the decoding / KV-cache view, where the last query is the
newest token and sees every key). The two agree when Lq == Lkv.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from attnviz.core.kernel.kinds import MASK_INFO, MaskInfo

ALIGNMENTS = ("top-left", "bottom-right")


# The one window convention: a window of w lets query i see key j when 0 <= i - j <= w (causal), or
# |i - j| <= w (both sides): the query itself and w keys on each side it looks. transformers' causal
# sliding_window counts the query too (i - j < sliding_window: w = sliding_window - 1), its bidirectional
# one does not (|i - j| <= sliding_window: w = sliding_window); a model's mask is read back by identify().


def _shift(lq: int, lkv: int, align: str) -> int:
    """Where query 0 sits among the keys: 0 top-left, Lkv - Lq bottom-right."""
    if align not in ALIGNMENTS:
        raise ValueError(f"alignment must be one of {ALIGNMENTS}, got {align!r}")
    return lkv - lq if align == "bottom-right" else 0


def _mod_matrix(mod: Callable, lq: int, lkv: int, device) -> Tensor:
    return mask_from_mod(mod, 1, lq, lkv, device)[0, 0]


def causal_mask(lq: int, lkv: int | None = None, align: str = "top-left", device=None) -> Tensor:
    """(Lq, Lkv): query i may attend key j when j is not after i."""
    lkv = lq if lkv is None else lkv
    return _mod_matrix(_causal_mod(_shift(lq, lkv, align)), lq, lkv, device)


def window_mask(
    lq: int,
    lkv: int | None,
    window: int,
    causal: bool = True,
    align: str = "top-left",
    device=None,
) -> Tensor:
    """(Lq, Lkv) sliding window: keys at most `window` positions from the query (WINDOW_RULE).

    causal: only keys at or before the query (0 <= i - j <= window); otherwise both sides
    (|i - j| <= window).
    """
    if window < 0:
        raise ValueError(f"window must be >= 0, got {window}")
    lkv = lq if lkv is None else lkv
    return _mod_matrix(_window_mod(_shift(lq, lkv, align), window, causal), lq, lkv, device)


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


# --- mask kinds: the registry (one place that defines a kind: name, description, parameters) ----
#
# A mask mod is attention-gym's / flex_attention's mask_mod: (b, h, q_idx, kv_idx) -> bool, here
# evaluated once on broadcast index grids. `shift` places the queries (Lkv - Lq for bottom-right).


@dataclass(frozen=True)
class MaskKind(MaskInfo):
    # (config values) -> mask_mod, or None for "attend everywhere"
    mod: Callable[..., Callable | None] = field(default=lambda **_: None)


def _causal_mod(shift: int):
    return lambda b, h, q, kv: q + shift >= kv


def _window_mod(shift: int, window: int, causal: bool):
    def mod(b, h, q, kv):
        d = q + shift - kv
        return (d >= 0) & (d <= window) if causal else d.abs() <= window
    return mod


def _padding_mod(lengths: Sequence[int]):
    def mod(b, h, q, kv):
        return kv < torch.as_tensor(lengths, device=kv.device)[b]
    return mod


MASK_MODS: dict[str, Callable[..., Callable | None]] = {
    "none": lambda **_: None,
    "causal": lambda shift, **_: _causal_mod(0),
    "causal-bottom-right": lambda shift, **_: _causal_mod(shift),
    "padding": lambda kv_lengths, **_: _padding_mod(kv_lengths),
    "window": lambda window, **_: _window_mod(0, window, True),
    "window-bidirectional": lambda window, **_: _window_mod(0, window, False),
}
MASKS: dict[str, MaskKind] = {name: MaskKind(**vars(info), mod=MASK_MODS[name]) for name, info in MASK_INFO.items()}


def with_sinks(mod: Callable, sinks: int, causal: bool) -> Callable:
    """StreamingLLM's attention sinks: the first `sinks` keys stay visible to every query that may
    see them (causally, for a causal kind), on top of the mask `mod`."""
    def sink_mod(b, h, q, kv):
        sink = kv < sinks
        return mod(b, h, q, kv) | (sink & (q >= kv) if causal else sink)
    return sink_mod


def mask_from_mod(mod: Callable | None, batch: int, lq: int, lkv: int, device=None) -> Tensor | None:
    """Evaluate a mask_mod on index grids: bool (1 or B, 1, Lq, Lkv), True = may attend."""
    if mod is None:
        return None
    b = torch.arange(batch, device=device).view(-1, 1, 1, 1)
    q = torch.arange(lq, device=device).view(1, 1, -1, 1)
    kv = torch.arange(lkv, device=device).view(1, 1, 1, -1)
    return mod(b, torch.zeros(1, 1, 1, 1, dtype=torch.long, device=device), q, kv)


def build_kind(kind: str, batch: int, lq: int, lkv: int, *, window: int = 0, sinks: int = 0,
               kv_lengths: Sequence[int] = (), device=None) -> Tensor | None:
    """The mask of a registered kind: bool (1 or B, 1, Lq, Lkv), True = may attend; None = no mask."""
    spec = MASKS[kind]
    mod = spec.mod(shift=lkv - lq, window=window, kv_lengths=tuple(kv_lengths))
    if sinks and "sinks" in spec.params and mod is not None:
        mod = with_sinks(mod, sinks, spec.causal)
    return mask_from_mod(mod, batch, lq, lkv, device)


def identify(allowed) -> tuple[str, int]:
    """(kind, window) of the registered kind that builds exactly this (Lq, Lkv) mask (bool, True = may
    attend), for a mask made elsewhere (a model family's own): none, causal (either alignment), a window
    of either side. A mask no kind builds reads as causal when no query sees a later key, else none (the
    views draw the mask itself either way)."""
    m = np.asarray(allowed.cpu() if isinstance(allowed, Tensor) else allowed, dtype=bool)
    if m.all():
        return "none", 0
    lq, lkv = m.shape
    rows = _Rows(m)
    for kind in ("causal", "causal-bottom-right", "window", "window-bidirectional"):
        spec = MASKS[kind]
        if rows.built_by(spec.mod(shift=lkv - lq, window=rows.window, kv_lengths=())):
            return kind, rows.window if "window" in spec.params else 0
    return ("causal" if bool((rows.hi <= rows.i)[rows.seen].all()) else "none"), 0


class _Rows:
    """Each query row's first and last allowed key. Every kind identify() tries allows one run of keys per
    row, so a kind whose mask_mod allows both ends of each row's run and refuses the keys just outside it
    builds the whole mask: O(Lq) calls of the kind's own rule instead of building Lq x Lkv of it."""

    def __init__(self, m: np.ndarray):
        self.m = m
        lq, lkv = m.shape
        self.i = np.arange(lq)
        self.seen = m.any(1)
        self.lo = m.argmax(1)
        self.hi = lkv - 1 - m[:, ::-1].argmax(1)
        self.runs = bool((np.count_nonzero(m, axis=1) == (self.hi - self.lo + 1) * self.seen).all())
        reach = np.maximum(self.i - self.lo, self.hi - self.i)[self.seen]
        self.window = int(reach.max()) if reach.size else 0

    def built_by(self, mod: Callable | None) -> bool:
        if mod is None or not self.runs:
            return False
        lq, lkv = self.m.shape
        if not self.seen.all():  # rows with no key (bottom-right with Lq > Lkv): compare it all
            return bool(np.array_equal(mask_from_mod(mod, 1, lq, lkv)[0, 0].numpy(), self.m))
        zero, i, lo, hi = torch.zeros((), dtype=torch.long), *(torch.from_numpy(a) for a in (self.i, self.lo, self.hi))
        ends = mod(zero, zero, i, lo) & mod(zero, zero, i, hi)
        outside = (mod(zero, zero, i, lo - 1) & (lo > 0)) | (mod(zero, zero, i, hi + 1) & (hi < lkv - 1))
        return bool(ends.all()) and not bool(outside.any())


def is_causal(allowed) -> bool:
    """Whether a mask made elsewhere is a causal kind's (see identify): a decoder's, not an encoder's."""
    return MASKS[identify(allowed)[0]].causal
