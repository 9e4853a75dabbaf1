"""One mask, analysed once for the blocks of rows every path computes (attention-gym's BlockMask and
transformers' flex mask are the models): the keys each block of query rows may see, the mask's 0 / -inf bias
and each block's share of it, and, for a pooled call, each block's pooled record.

A model's layers pass one mask (two with sliding-window layers): reading a long mask again for each of 30
layers cost a few percent of a forward (benchmarks/README.md, Behind the code), so a forward's ForwardContext
holds the BlockMask of the masks it has seen (`BlockMasks`) and every attention call given that very mask,
whole, in blocks of rows or pooled, reads the same one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from attnviz.core.kernel.maxpool import max_pool

HELD = 2  # masks a forward keeps analysed: Gemma's sliding and full layers alternate two


class KeySpans:
    """For each query row, the first and last key some batch item and head may attend, found once for the
    whole mask; span(r0, r1) is then a block's keys [k0, k1)."""

    def __init__(self, mask: Tensor | None, lkv: int):
        self.lkv = lkv
        if mask is None:
            self.first = None
            return
        rows = mask.reshape(-1, *mask.shape[-2:]).cpu().numpy()  # NumPy: torch's bool reductions are slower
        union = rows[0] if rows.shape[0] == 1 else rows.any(0)  # (Lq or 1, Lkv): some item and head may attend
        self.every_row_has_a_key = rows.any(-1).all(0).tolist()
        self.first = union.argmax(-1).tolist()
        self.last = (lkv - 1 - union[:, ::-1].argmax(-1)).tolist()

    def span(self, r0: int, r1: int) -> tuple[int, int]:
        """The keys [k0, k1) that some row of r0..r1 may attend; every key where a row has none (its
        softmax over all -inf gives NaN in every cell, which trimmed keys would not show)."""
        if self.first is None:
            return 0, self.lkv
        rows = slice(0, 1) if len(self.first) == 1 else slice(r0, r1)
        if not all(self.every_row_has_a_key[rows]):
            return 0, self.lkv
        return min(self.first[rows]), max(self.last[rows]) + 1

    def trims(self, rows: int, lq: int) -> bool:
        """Whether some block of `rows` query rows leaves keys out (a causal or windowed mask)."""
        return any(self.span(r0, min(lq, r0 + rows)) != (0, self.lkv) for r0 in range(0, lq, rows))


def masked_columns(mask: Tensor | None) -> tuple[int, int]:
    """The columns [m0, m1) of a block's mask that hold a masked cell (m0 == m1: none): only they need the
    -inf bias (a causal block's diagonal square, a window's two edges), not the whole block."""
    if mask is None:
        return 0, 0
    flat = mask.reshape(-1, mask.shape[-1]).cpu().numpy()  # NumPy: torch's bool reductions are slower
    partial = ~flat.all(0)
    if not partial.any():
        return 0, 0
    where = partial.nonzero()[0]
    return int(where[0]), int(where[-1]) + 1


def block_cells(mask: Tensor | None, r0: int, r1: int, k0: int, k1: int) -> tuple:
    """The index of a block's cells in a mask (or its bias) that may have one row for every query."""
    return (..., slice(r0, r1) if mask is not None and mask.shape[-2] > 1 else slice(None), slice(k0, k1))


@dataclass(frozen=True)
class PooledBlock:
    """What a pooled call's block of rows needs of the mask (pooling.Pooling.attend)."""

    keys: tuple[int, int]  # the keys [k0, k1) the block computes, widened to whole pooled cells
    cells: tuple  # the block's index in the mask
    masked: tuple[int, int]  # the block's columns [m0, m1) that hold a masked cell
    allowed: Tensor  # (B or 1, 1, pooled rows, pooled columns) bool: the cell holds a key that may be attended
    empty: Tensor  # (B, rows) bool: rows with no key
    choices: Tensor  # (B or 1, H or 1, rows) int: the keys each head's row may attend to


class BlockMask:
    """One mask (None: every key allowed) over Lkv keys, analysed as the blocks ask: its key spans, its bias per
    dtype (whole, and each block's masked columns alone), and its pooled blocks. The mask is held (its id is not
    reused while this lives) with its in-place change count, so a changed mask is never served stale."""

    def __init__(self, mask: Tensor | None, lkv: int):
        self.mask, self.lkv, self.version = mask, lkv, _version(mask)
        self._spans: KeySpans | None = None
        self._bias: dict[torch.dtype, Tensor | None] = {}
        self._narrowed: dict[tuple, dict] = {}
        self._pooled: dict[tuple[int, ...], PooledBlock] = {}

    def serves(self, mask: Tensor | None, lkv: int) -> bool:
        return mask is self.mask and lkv == self.lkv and _version(mask) == self.version

    @property
    def spans(self) -> KeySpans:
        if self._spans is None:
            self._spans = KeySpans(self.mask, self.lkv)
        return self._spans

    def keys(self, r0: int, r1: int, trimmed: bool = True) -> tuple[int, int]:
        """The keys [k0, k1) rows r0..r1 compute: those some of them may see, or every key (untrimmed: a run
        recording a stage defined at masked cells too)."""
        return self.spans.span(r0, r1) if trimmed else (0, self.lkv)

    def trims(self, rows: int, lq: int, trimmed: bool = True) -> bool:
        return trimmed and self.mask is not None and self.spans.trims(rows, lq)

    def bias(self, dtype: torch.dtype, bias_of: Callable) -> Tensor | None:
        """bias_of(mask, dtype) (kernel.mask_bias: 0 where allowed, -inf where blocked), made once per dtype."""
        if self.mask is None:
            return None
        if dtype not in self._bias:
            self._bias[dtype] = bias_of(self.mask, dtype)
        return self._bias[dtype]

    def additive(self, dtype: torch.dtype, bias_of: Callable) -> Tensor | None:
        """The bias, or None where the mask allows every key (adding zeros changes no score): the whole path's."""
        key = ("additive", dtype)
        if key not in self._narrowed:
            self._narrowed[key] = None if self.mask is None or bool(self.mask.all()) else self.bias(dtype, bias_of)
        return self._narrowed[key]

    def narrow_bias(self, cells: tuple, dtype: torch.dtype, bias_of: Callable) -> dict:
        """A block's bias keywords for kernel._map: the bias of its masked columns alone, and where they start."""
        at = (cells[-2].start, cells[-2].stop, cells[-1].start, cells[-1].stop, dtype)
        if at not in self._narrowed:
            bias = self.bias(dtype, bias_of)
            if bias is None:
                self._narrowed[at] = {}
            else:
                m0, m1 = masked_columns(self.mask[cells])
                rows, keys = cells[-2], cells[-1]
                self._narrowed[at] = {"bias": bias[..., rows, keys.start + m0:keys.start + m1], "bias_col": m0}
        return self._narrowed[at]

    def pooled(self, r0: int, r1: int, fq: int, fk: int, batch: int) -> PooledBlock:
        """Rows r0..r1 of a map pooled in fq x fk cells, for `batch` items."""
        key = (r0, r1, fq, fk, batch)
        if key not in self._pooled:
            self._pooled[key] = self._pooled_block(r0, r1, fq, fk, batch)
        return self._pooled[key]

    def _pooled_block(self, r0: int, r1: int, fq: int, fk: int, batch: int) -> PooledBlock:
        k0, k1 = self.spans.span(r0, r1)
        k0, k1 = k0 // fk * fk, min(self.lkv, -(-k1 // fk) * fk)  # whole pooled cells
        cells = block_cells(self.mask, r0, r1, k0, k1)
        n, width = r1 - r0, k1 - k0
        if self.mask is None:
            allowed = torch.ones((1, 1, n, width), dtype=torch.bool)
            return PooledBlock((k0, k1), cells, (0, 0), max_pool(allowed.to(torch.uint8), fq, fk) > 0,
                               torch.zeros((batch, n), dtype=torch.bool), torch.full((1, 1, n), self.lkv))
        block = self.mask[cells].cpu()
        whole = torch.broadcast_to(block, (block.shape[0], block.shape[1], n, width))
        allowed = whole.any(dim=1, keepdim=True)
        empty = torch.broadcast_to(~allowed.any(-1)[:, 0], (batch, n)).contiguous()
        return PooledBlock((k0, k1), cells, masked_columns(block), max_pool(allowed.to(torch.uint8), fq, fk) > 0,
                           empty, whole.sum(-1))


def _version(mask: Tensor | None) -> int | None:
    """The mask's in-place change count; an inference-mode tensor keeps none (transformers builds a forward's
    masks once, before its layers, and changes none after)."""
    return None if mask is None or mask.is_inference() else mask._version


class BlockMasks:
    """The BlockMask of the last HELD masks one forward has seen, by identity."""

    def __init__(self):
        self._held: list[BlockMask] = []

    def of(self, mask: Tensor | None, lkv: int) -> BlockMask:
        for held in self._held:
            if held.serves(mask, lkv):
                return held
        made = BlockMask(mask, lkv)
        self._held = [made, *self._held[:HELD - 1]]
        return made

    def clear(self) -> None:
        self._held = []
