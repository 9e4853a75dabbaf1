"""Progress and Cancel inside one forward, and while a model opens.

A long forward (a model at thousands of tokens) spends seconds in each layer, out of reach of the checks a
run makes between its stages. So the kernel reports each attention call it finishes and asks whether to
stop between its blocks of query rows: the window shows "layer 12 of 30" and Cancel stops within one layer.
A forward's Watch travels in its ForwardContext (context.py).

Opening a large model is no forward: it reports its steps (`stage`: a GGUF's tensors n of N) to the watch
`opening(watch)` binds for the opening thread, and Cancel stops it between two tensors. That one binding stays
per thread because a model opens through the variants' shared, cached `load(config, budget)`, which carries no
watch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass


class Cancelled(Exception):
    """Raised by run() when its `cancel` callback says the result is no longer wanted."""


@dataclass
class Watch:
    cancel: Callable[[], bool] | None = None  # True: stop (Cancelled is raised in the kernel)
    on_call: Callable[[int], None] | None = None  # the number of attention calls finished so far
    calls: int = 0
    on_stage: Callable[[str, int, int], None] | None = None  # a long preparation's step: ("tensors", 12, 272)


_opening = threading.local()  # the watch of the model opening on this thread (opening())


@contextmanager
def opening(watch: Watch | None) -> Iterator[Watch | None]:
    """Bind `watch` to this thread's model opening while the block runs (its steps, its Cancel)."""
    previous, _opening.watch = getattr(_opening, "watch", None), watch
    try:
        yield watch
    finally:
        _opening.watch = previous


def stage(name: str, done: int, total: int) -> None:
    """A step of opening a model ("parse", "tensors" 12 of 272, "tokenizer"): tell the opening's watch, then stop
    with Cancelled if its cancel says so."""
    watch = getattr(_opening, "watch", None)
    if watch is None:
        return
    if watch.on_stage is not None:
        watch.on_stage(name, done, total)
    if watch.cancel is not None and watch.cancel():
        raise Cancelled
