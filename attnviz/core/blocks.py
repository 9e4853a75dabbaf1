"""The whole attention map computed in blocks of query rows, each block's keys trimmed to those it may see.

A (B, H, Lq, Lkv) map passes through several full-size ops (Q·Kᵀ, scale, mask, softmax, @ V); done at once,
each op streams the whole map through memory. In blocks of BLOCK_BYTES the scores stay in the CPU's cache
between the ops, and a block only computes the keys that some of its rows may attend (a causal map: the
lower triangle, half the work; a sliding window: its band). The cells left out hold what the whole
computation gives there exactly: -inf scores, 0 weights. The numbers are the whole path's to float32
rounding (the same ops on the same values; only the matmul's blocking differs).

Stages defined at masked cells as well (qk, scaled, biased, capped) keep every key of every block, so a run
that records them sees them whole.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

BLOCK_BYTES = 4 << 20  # one block of float32 scores: a few of them fit the caches of a desktop CPU
PRE_MASK = frozenset({"qk", "scaled", "biased", "capped"})  # defined where masked too: computed for every key
FILL = {"scores": -math.inf}  # what a left-out (masked) cell holds; every other map stage holds 0 there
INPUT_STAGES = frozenset({"q_proj", "k_proj", "q", "k", "v"})  # kept by the caller, not per block


def block_rows(q: Tensor, lkv: int) -> int:
    """Query rows per block: the block's scores within BLOCK_BYTES (at least one row)."""
    b, h, _, _ = q.shape
    return max(1, BLOCK_BYTES // max(1, b * h * lkv * q.element_size()))


def key_span(mask: Tensor | None, lkv: int) -> tuple[int, int]:
    """The keys [k0, k1) that some row of this block may attend; every key where a row has none (its
    softmax over all -inf gives NaN in every cell, which trimmed keys would not show)."""
    if mask is None:
        return 0, lkv
    flat = mask.reshape(-1, mask.shape[-2], mask.shape[-1])
    if not bool(flat.any(-1).all()):
        return 0, lkv
    keys = flat.any(-2).any(0).nonzero()
    return int(keys[0]), int(keys[-1]) + 1


def blocked_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, trace: dict, map_rows: Callable,
                      repeat: Callable[[Tensor, int], Tensor]) -> Tensor | None:
    """The context (B, H', Lq, dv) of `attention`, in blocks of query rows; the kept map stages are written
    whole into `trace`. None when one block would hold every row (the whole path is then the same work).

    map_rows(q_rows, mask=, trace=, row0=, col0=, keys_t=) -> (map, mask): kernel._map on a block.
    repeat(x, heads): kernel.repeat_kv."""
    b, h, lq, _ = q.shape
    lkv = k.shape[2]
    rows = block_rows(q, lkv)
    if rows >= lq:
        return None
    record = frozenset(getattr(trace, "record", ())) - INPUT_STAGES
    trim = not record & PRE_MASK
    keys_t = repeat(k, h).transpose(-2, -1)
    values = context = None
    whole: dict[str, Tensor] = {}
    for r0 in range(0, lq, rows):
        r1 = min(lq, r0 + rows)
        m = None if mask is None else (mask if mask.shape[-2] == 1 else mask[..., r0:r1, :])
        k0, k1 = key_span(m, lkv) if trim else (0, lkv)
        block_trace = type(trace)(record)
        dropped, _ = map_rows(q[:, :, r0:r1], mask=None if m is None else m[..., k0:k1], trace=block_trace,
                              row0=r0, col0=k0, keys_t=keys_t[..., k0:k1])
        if context is None:  # the map's head count is known now (differential attention halves it)
            values = repeat(v, dropped.shape[1])
            context = q.new_empty((b, dropped.shape[1], lq, v.shape[-1]))
        context[:, :, r0:r1] = torch.matmul(dropped, values[:, :, k0:k1])
        _write_block(whole, block_trace, (lq, lkv), (r0, r1, k0, k1))
    trace.update(whole)
    return context


def _write_block(whole: dict[str, Tensor], block_trace: dict, shape: tuple[int, int],
                 cells: tuple[int, int, int, int]) -> None:
    """Copy a block's kept stages into the whole maps (made at the first block), filling its left-out keys.
    A stage that is another stage's very tensor (dropped = weights in eval mode) stays one tensor."""
    r0, r1, k0, k1 = cells
    first: dict[int, str] = {}
    for name, t in block_trace.items():
        twin = first.setdefault(id(t), name)
        if twin != name:
            whole.setdefault(name, whole[twin])
            continue
        if name not in whole:
            whole[name] = t.new_empty((*t.shape[:2], *shape))
        out = whole[name][:, :, r0:r1]
        out[..., k0:k1] = t
        fill = FILL.get(name, 0.0)
        out[..., :k0] = fill
        out[..., k1:] = fill
