"""The maps the views show, max-pooled to the view's size by the kernel's blocks while each block is in the cache.

A view draws a (Lq, Lkv) map max-pooled to its tile (frames.pool_maps). Pooled after the run, that reads the
whole map from memory once more (48 MB at 12 heads and 1,024 tokens: half of a render). The blocks of
blocks.blocked_attention pool the block they have just made instead, into a copy the size of the view; the
view then pools nothing. The pooling is frames' own (a block's max, rows first), so the pictures are the same,
byte for byte. The row scale divides each row by its maximum before the rows are pooled: for it the kernel
pools the columns alone, and the view the rows.

Only the unsigned maps the views draw (the softmax weights, 0 where masked) are pooled: a block leaves the
keys it does not hold at 0, which never wins a max over values >= 0. A query row with no key to attend to is
NaN (the seeds' softmax); the views draw it as no-key and pool it as 0, and so does the kernel.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from attnviz.core.kernel.maxpool import ceil_div, reduce_blocks

POOLED_STAGES = frozenset({"weights", "dropped"})  # the softmax weights (dropped is the same map in eval mode)


@dataclass
class ScreenPooling:
    """While a forward runs: the pooling factors asked for and the pooled maps made so far."""

    factors: tuple[int, int]  # (query rows, key columns) per pooled cell
    # the batch items with a query row that has no key: their NaN is pooled as 0 (set by the kernel from the mask)
    keyless: tuple[int, ...] = ()
    active: bool = True  # False: this map's blocks are too short for the row factor; nothing is pooled
    maps: dict[str, Tensor] = field(default_factory=dict)  # stage -> (B, H, ceil(Lq / fq), ceil(Lkv / fk))

    def block_rows(self, rows: int, mask: Tensor | None, batch: int) -> int:
        """Query rows per block for the blocks of one map: a multiple of the row factor, so every block pools
        whole row groups (a block shorter than one group pools nothing: the view pools the whole map). Notes
        from the mask which batch items have a query row with no key (frames asks that of the first head)."""
        fq = self.factors[0]
        self.active = rows >= fq
        if mask is not None:
            first = mask[:, :1].reshape(mask.shape[0], -1, mask.shape[-1]).cpu().numpy()  # NumPy: torch's bool
            keyless = [int(i) for i in (~first.any(-1)).any(-1).nonzero()[0]]  # reductions are slower
            self.keyless = tuple(range(batch)) if keyless and mask.shape[0] == 1 else tuple(keyless)
        return rows // fq * fq if self.active else rows

    def write(self, names: list[str], block: Tensor, cells: tuple[int, int, int, int], shape: tuple[int, int],
              heads: tuple[int, int, int] | None = None) -> None:
        """Pool a block: `block` (B, H, r1 - r0, k1 - k0) holds the keys k0..k1 of rows r0..r1 (r0 a multiple of
        the row factor) of a (Lq, Lkv) map whose other keys are 0; its pooled cells go to every stage in `names`.
        heads (h0, h1, of): the block holds the heads h0..h1 of `of` (blocks of whole heads); None: every head."""
        if not self.active:
            return
        r0, r1, k0, k1 = cells
        h0, h1, of = heads or (0, block.shape[1], block.shape[1])
        fq, fk = self.factors
        if names[0] not in self.maps:
            pooled = block.new_empty((block.shape[0], of, ceil_div(shape[0], fq), ceil_div(shape[1], fk)))
            self.maps.update((name, pooled) for name in names)
        rows = self.maps[names[0]][:, h0:h1, r0 // fq: ceil_div(r1, fq)]
        if fq > 1:
            block = reduce_blocks(_no_key_as_zero(block, self.keyless), block.dim() - 2, fq, torch.amax)
        c0, c1 = k0 // fk, ceil_div(k1, fk)
        rows[..., :c0] = 0.0
        rows[..., c1:] = 0.0
        rows[..., c0:c1] = _pooled_columns(block, k0, fk)


def _no_key_as_zero(block: Tensor, items: tuple[int, ...]) -> Tensor:
    """The block with the NaN of these batch items (those holding a query row without a key) as 0, before its
    rows are pooled: as frames pools such an item."""
    if not items:
        return block
    if len(items) == block.shape[0]:
        return torch.nan_to_num(block, nan=0.0)
    out = block.clone()
    for i in items:
        out[i] = torch.nan_to_num(block[i], nan=0.0)
    return out


def _pooled_columns(block: Tensor, k0: int, f: int) -> Tensor:
    """The max over each run of f columns of the map, for the runs that hold some of the block's keys k0..
    (a run that starts before k0 or ends past the block holds 0 there, which the max ignores)."""
    if f == 1:
        return block
    lead = min((-k0) % f, block.shape[-1])  # the block's keys before the first run that starts in it
    parts = [block[..., :lead].amax(-1, keepdim=True)] if lead else []
    if lead < block.shape[-1]:
        parts.append(reduce_blocks(block[..., lead:], -1, f, torch.amax))
    return torch.cat(parts, -1) if len(parts) > 1 else parts[0]


def factors(shape: tuple[int, int], screen_px: tuple[int, int]) -> tuple[int, int]:
    """(query rows, key columns) per pooled cell for a (Lq, Lkv) map shown at most screen_px (rows, cols)."""
    return ceil_div(shape[0], screen_px[0]), ceil_div(shape[1], screen_px[1])


def planned(screen_px: tuple[int, int] | None, shape: tuple[int, int], signed: bool) -> ScreenPooling | None:
    """A ScreenPooling for (Lq, Lkv) maps shown at most screen_px, or None where nothing would be pooled (the
    map fits, a signed map, no size)."""
    if screen_px is None or signed or factors(shape, screen_px) == (1, 1):
        return None
    return ScreenPooling(factors(shape, screen_px))


@dataclass(frozen=True)
class ScreenMaps:
    """A result's maps pooled by the kernel: `pooled` (query rows, key columns) per cell, stage -> (B, H,
    ceil(Lq / fq), ceil(Lkv / fk))."""

    pooled: tuple[int, int]
    maps: dict[str, np.ndarray]

    def serving(self, stage: str, shape: tuple[int, int], screen_px: tuple[int, int] | None) -> np.ndarray | None:
        """The stage's pooled maps when a view of (Lq, Lkv) maps shown at screen_px pools by these factors."""
        if screen_px is None or factors(shape, screen_px) != self.pooled:
            return None
        return self.maps.get(stage)
