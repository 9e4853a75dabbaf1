"""A model forward's weights written by the kernel straight into one (layers, B, H, Lq, Lkv) tensor, layer
after layer, so the every-layer array the views read is no second copy (at 512 tokens of a 30-layer model
the copy was 283 MB, much of an edit's time, most of it the fresh pages: benchmarks/README.md, Behind the code).

A model's forward holds one in its ForwardContext (context.py); blocks.blocked_attention asks it for each call's
weights buffer (`take`), and a call whose map has another shape (an encoder-decoder's stacks) gets none and
keeps its own.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnviz.core.kernel import buffers


class MapSlab:
    def __init__(self, layers: int):
        self.layers = layers
        self.tensor: Tensor | None = None
        self.taken = 0

    def take(self, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> Tensor | None:
        """The next layer's place for a map of `shape`, or None where it does not fit the slab."""
        if self.tensor is None and self.taken == 0:
            self.tensor = buffers.empty((self.layers, *shape), dtype, device)
        t = self.tensor
        if t is None or self.taken >= self.layers or tuple(t.shape[1:]) != tuple(shape) or t.dtype != dtype \
                or t.device != device:
            return None
        self.taken += 1
        return t[self.taken - 1]

    def holding(self, weights: list[Tensor]) -> Tensor | None:
        """The slab when it holds exactly `weights`, layer by layer, else None."""
        t = self.tensor
        if t is None or len(weights) != self.layers or self.taken != self.layers:
            return None
        if any(w.data_ptr() != t[i].data_ptr() or w.shape != t.shape[1:] for i, w in enumerate(weights)):
            return None
        return t
