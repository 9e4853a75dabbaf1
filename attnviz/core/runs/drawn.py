"""A seed variant's module and random inputs as the seed drew them, kept for the configurations used last.

Drawing them costs more than one would think (a sixth of the forward at M: benchmarks/README.md, Behind the code), and
most edits do not change them: a mask, a window, a length of the keys' padding, the scale mode, or a seed flipped back
to one just shown. What the draws depend on is the key; the CPU generator's state after them is kept too, so
dropout in train mode draws the same numbers as after a fresh draw (bit-identical results either way).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import fields

import torch
from torch import Tensor, nn

from attnviz.core.runs.config import RunConfig
from attnviz.core.runs.lru import LRU

# Fields that neither build() nor inputs() read: the forward's options, pooling, where and how it runs.
# (A field missing here only costs cache hits, never correctness.)
NOT_DRAWN = frozenset({"mask", "window", "sinks", "kv_lengths", "safe_softmax", "pool", "device", "dtype", "train",
                       "ablate", "ablation", "top_k", "text", "generate", "temperature", "sample_top_k", "chat",
                       "decoder_text", "stack", "image"})
KEPT = 4  # configurations
KEPT_BYTES = 64 << 20  # a larger module and inputs (a few hundred MB at XL) are drawn each time instead

_DRAWN: LRU[tuple[nn.Module, tuple[Tensor, ...], Tensor]] = LRU(KEPT)


def draw_key(config: RunConfig) -> tuple:
    """What a seed variant's draws depend on: every field but NOT_DRAWN."""
    return tuple((f.name, getattr(config, f.name)) for f in fields(config) if f.name not in NOT_DRAWN)


def drawn(config: RunConfig, build: Callable[[], nn.Module], inputs: Callable[[], tuple[Tensor, ...]],
          fresh: bool = False) -> tuple[nn.Module, tuple[Tensor, ...]]:
    """(module, inputs) as build() then inputs() draw them after the seed was set (the caller set it), from the
    cache when this configuration drew them before; the CPU generator is left as those draws leave it.
    The module comes in eval mode and must not be changed: fresh=True (the caller moves it, trains it or loads
    weights into it) gives a copy."""
    key = draw_key(config)
    hit = _DRAWN.get(key)
    if hit is None:
        module = build().eval()
        xs = tuple(inputs())
        hit = (module, xs, torch.default_generator.get_state())
        size = sum(t.numel() * t.element_size() for t in (*module.state_dict().values(), *xs))
        if size <= KEPT_BYTES:
            _DRAWN.put(key, hit)
    else:
        torch.default_generator.set_state(hit[2])
    module, xs, _ = hit
    return (copy.deepcopy(module) if fresh else module), xs
