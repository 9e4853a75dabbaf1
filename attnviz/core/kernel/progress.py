"""Progress and Cancel inside one forward (and while a model opens).

A long forward (a model at thousands of tokens) spends seconds in each layer, out of reach of the checks a
run makes between its stages. So the kernel reports each attention call it finishes and asks whether to
stop between its blocks of query rows: the window shows "layer 12 of 30" and Cancel stops within one layer.
`watching(Watch(...))` makes a watch current for this thread (as ablation.ablating and pooling.pooling do).
Opening a large model reports its steps the same way (`stage`: a GGUF's tensors n of N), and Cancel stops it
between two tensors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from attnviz.core.kernel.current import ThreadCurrent

_current = ThreadCurrent()


class Cancelled(Exception):
    """Raised by run() when its `cancel` callback says the result is no longer wanted."""


@dataclass
class Watch:
    cancel: Callable[[], bool] | None = None  # True: stop (Cancelled is raised in the kernel)
    on_call: Callable[[int], None] | None = None  # the number of attention calls finished so far
    calls: int = 0
    on_stage: Callable[[str, int, int], None] | None = None  # a long preparation's step: ("tensors", 12, 272)


def watching(watch: Watch | None):
    """Make `watch` current for this thread while the block runs one forward (None: no watch)."""
    return _current.using(watch)


def checkpoint() -> None:
    """Raise Cancelled if the current watch's cancel says so (between blocks, between calls)."""
    watch = _current.value
    if watch is not None and watch.cancel is not None and watch.cancel():
        raise Cancelled


def call_done() -> None:
    """One attention call finished: count it and tell the watch."""
    watch = _current.value
    if watch is None:
        return
    watch.calls += 1
    if watch.on_call is not None:
        watch.on_call(watch.calls)


def stage(name: str, done: int, total: int) -> None:
    """A step of a long preparation (opening a model: "parse", "tensors" 12 of 272, "tokenizer"): tell the watch,
    then stop with Cancelled if its cancel says so."""
    watch = _current.value
    if watch is not None and watch.on_stage is not None:
        watch.on_stage(name, done, total)
    checkpoint()
