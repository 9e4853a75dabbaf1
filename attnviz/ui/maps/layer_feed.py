"""The layers of a long forward as they finish, for the model view.

A pooled forward (core/kernel/pooling.py) reduces each layer's maps as soon as that layer has run: its PooledCall
holds the layer's pooled map. run()'s progress callback hears each finished call with the PooledCalls finished
so far (progress(done, total, pooled)); the worker's callback hands them to `LayerFeed.finished`, which gives the
window the finished layers at most every FEED_INTERVAL_S. The model view composes their tiles off the GUI thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

FEED_INTERVAL_S = 0.3  # a few partial model views a second at most: each composes tiles and repaints the view

# One finished layer: its pooled map of batch item 0 (1, H, Lq', Lkv') and which pooled cells may attend
# ((Lq', Lkv') bool, None where all may)
Layer = tuple[np.ndarray, "np.ndarray | None"]


class LayerFeed:
    """Called after each attention call of one forward; says which finished layers to show, when it is time."""

    def __init__(self, interval_s: float | None = None, clock: Callable[[], float] = time.monotonic):
        self.interval_s = FEED_INTERVAL_S if interval_s is None else interval_s
        self.clock = clock
        self._sent_at = -float("inf")
        self._layers: list[Layer] = []  # those converted so far, in call order

    def finished(self, done: int, total: int, pooled: Sequence = ()) -> tuple[Layer, ...] | None:
        """The finished layers when a partial view is due, from `pooled`, the PooledCalls the forward has finished
        so far (None: not now, not a pooled model forward, or the last layer, whose whole result follows at
        once)."""
        if total <= 1 or done >= total or len(pooled) <= len(self._layers):
            return None
        now = self.clock()
        if now - self._sent_at < self.interval_s:
            return None
        self._sent_at = now
        self._layers += [layer_of(call) for call in pooled[len(self._layers):]]
        return tuple(self._layers)


def layer_of(call) -> Layer:
    """A PooledCall as the model view reads it (views of its tensors: no copy; they are not written again)."""
    allowed = call.allowed[0, 0].numpy()
    return call.weights[:1].numpy(), None if allowed.all() else allowed
