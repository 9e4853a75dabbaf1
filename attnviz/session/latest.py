"""The latest-wins queue: at most one pending request, a newer one replacing it (napari's slicer cancels its
pending task on submit the same way), so a burst of edits costs one run per finished computation."""

from __future__ import annotations

import threading

from attnviz.session.request import Request


class LatestWins:
    """The pending request, whether a thread serves the queue, and whether it is handling a request now."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._pending: Request | None = None
        self.stopping = False
        self._serving = False  # a thread serves the queue (changed under the lock only)
        self._active = False  # a request taken and not yet finished

    def serve(self) -> None:
        """A thread serves the queue from now on (started with it)."""
        with self._cond:
            self._serving = True

    def put(self, request: Request) -> bool:
        """Make `request` the pending one (replacing any older one); True when no thread serves the queue now:
        the caller starts one (the thread that ended has decided so under this lock)."""
        with self._cond:
            self._pending, self.stopping = request, False
            start, self._serving = not self._serving, True
            self._cond.notify_all()
            return start

    def wait(self) -> None:
        """Wait until a request is pending or the queue stops."""
        with self._cond:
            self._cond.wait_for(lambda: self._pending is not None or self.stopping)

    def take(self) -> Request | None:
        """The pending request, now being handled (finished() ends it); None when stopping: the serving thread
        ends, and put() starts a new one from now on."""
        with self._cond:
            if self.stopping or self._pending is None:
                self._serving = False
                self._cond.notify_all()
                return None
            request, self._pending, self._active = self._pending, None, True
            return request

    def finished(self) -> None:
        """The request taken last is handled (its outcome delivered, or its failure)."""
        with self._cond:
            self._active = False
            self._cond.notify_all()

    def peek(self) -> Request | None:
        with self._cond:
            return self._pending

    def has_newer(self) -> bool:
        """A request waits, or the queue stops: what is being handled is replaced."""
        with self._cond:
            return self._pending is not None or self.stopping

    def reopen(self) -> None:
        """Requests come again after stop() (a sync session handles them on the caller's thread)."""
        with self._cond:
            self.stopping = False

    def stop(self) -> None:
        """Drop the pending request; the serving thread ends once it is done with the current one."""
        with self._cond:
            self.stopping, self._pending = True, None
            self._cond.notify_all()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until nothing is pending or being handled (or no thread serves); False if `timeout` passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._serving or (self._pending is None and not self._active),
                                       timeout)
