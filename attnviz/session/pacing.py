"""The session's pace against the window's: after delivering a result the session waits for the window to swap
it in and paint it before it computes again, at most a hold time.

With a forward or render running on the other core the GUI thread's swap and paint took 2-3x their CPU time
alone, and every Python callback of the paint (pyqtgraph items) queued for the GIL behind the worker's Python
between torch ops (benchmarks/README.md, Behind the code).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class PaintWait:
    """Whether the window is still painting the result delivered last, and until when the session waits for it."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._done = threading.Event()  # clear while the window swaps in and paints a result
        self._done.set()
        self._until = 0.0  # the clock's deadline of the current wait
        self._for = 0  # the request id of the result the window is given

    def hold(self, request_id: int, seconds: float) -> None:
        """The result of `request_id` goes to the window: the next wait lasts till it is painted, at most `seconds`."""
        self._for, self._until = request_id, self._clock() + seconds
        self._done.clear()

    def resume(self, request_id: int) -> None:
        """The window has painted (or dropped) the result of `request_id`: when that is the newest one delivered,
        the session goes on without waiting."""
        if request_id >= self._for:
            self._done.set()

    def release(self) -> None:
        """Wait no more (the session stops)."""
        self._done.set()

    def waiting(self) -> bool:
        """Whether the next wait() waits (neither resume() nor the hold's end has come)."""
        return not self._done.is_set() and self._clock() < self._until

    def wait(self, seconds: float | None = None) -> None:
        """Wait for the window's paint till the hold ends, or (`seconds`) at most that long whatever the hold."""
        left = self._until - self._clock() if seconds is None else seconds
        if left > 0:
            self._done.wait(left)
