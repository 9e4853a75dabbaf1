"""What the blocks of a pooled attention call need of its mask, found once for every call given that very mask
(a model's layers share one: reading an 8,192² mask again for each of 30 layers cost ~3 % of the forward).

A block is query rows r0..r1 against the keys k0..k1 some of them may see (blocks.KeySpans), widened to whole
pooled cells. Its record (MaskBlock) says which of its columns hold a masked cell (those alone get the -inf
bias), which pooled cells hold a key that may be attended, which rows have no key at all, and how many keys
each row may attend to (the statistics leave out rows with fewer than two).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from attnviz.core.kernel.blocks import KeySpans, block_cells, masked_columns
from attnviz.core.kernel.maxpool import max_pool


@dataclass(frozen=True)
class MaskBlock:
    keys: tuple[int, int]  # the keys [k0, k1) the block computes
    cells: tuple  # the block's index in the mask
    masked: tuple[int, int]  # the block's columns [m0, m1) that hold a masked cell
    allowed: Tensor  # (B or 1, 1, pooled rows, pooled columns) bool: the cell holds a key that may be attended
    empty: Tensor  # (B, rows) bool: rows with no key
    choices: Tensor  # (B or 1, H or 1, rows) int: the keys each head's row may attend to


class MaskBlocks:
    """The MaskBlock of every block of rows of one mask (None: every key allowed), made when first asked for."""

    def __init__(self, mask: Tensor | None, lkv: int):
        self.mask, self.lkv = mask, lkv  # the mask is held: its id is not reused while this lives
        self.spans = KeySpans(mask, lkv)
        self._blocks: dict[tuple[int, ...], MaskBlock] = {}

    def serves(self, mask: Tensor | None, lkv: int) -> bool:
        return mask is self.mask and lkv == self.lkv

    def block(self, r0: int, r1: int, fq: int, fk: int, batch: int) -> MaskBlock:
        """Rows r0..r1 of a map pooled in fq x fk cells, for `batch` items."""
        key = (r0, r1, fq, fk, batch)
        if key not in self._blocks:
            self._blocks[key] = self._make(r0, r1, fq, fk, batch)
        return self._blocks[key]

    def _make(self, r0: int, r1: int, fq: int, fk: int, batch: int) -> MaskBlock:
        k0, k1 = self.spans.span(r0, r1)
        k0, k1 = k0 // fk * fk, min(self.lkv, -(-k1 // fk) * fk)  # whole pooled cells
        cells = block_cells(self.mask, r0, r1, k0, k1)
        n, width = r1 - r0, k1 - k0
        if self.mask is None:
            allowed = torch.ones((1, 1, n, width), dtype=torch.bool)
            return MaskBlock((k0, k1), cells, (0, 0), max_pool(allowed.to(torch.uint8), fq, fk) > 0,
                             torch.zeros((batch, n), dtype=torch.bool), torch.full((1, 1, n), self.lkv))
        block = self.mask[cells].cpu()
        allowed = torch.broadcast_to(block, (block.shape[0], block.shape[1], n, width)).any(dim=1, keepdim=True)
        empty = torch.broadcast_to(~allowed.any(-1)[:, 0], (batch, n)).contiguous()
        choices = torch.broadcast_to(block, (block.shape[0], block.shape[1], n, width)).sum(-1)
        return MaskBlock((k0, k1), cells, masked_columns(block), max_pool(allowed.to(torch.uint8), fq, fk) > 0, empty,
                         choices)
