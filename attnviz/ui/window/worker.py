"""The window's worker: the session (attnviz.session) on a thread of its own, its events as Qt signals.

Everything between a request and its outcome is the session's; this adapter only turns what the session
reports into signals, delivered to GUI-thread slots as queued calls, and hands the window's calls on.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, Signal

from attnviz.core import RunResult, run
from attnviz.session import Events, Failure, Outcome, Request, Session, generating
from attnviz.ui.maps.layer_feed import LayerFeed
from attnviz.ui.maps.zoom import Zoomer

__all__ = ["Failure", "Outcome", "Request", "Worker", "generating"]  # the window's names for what it sends and gets


class Worker(QObject):
    """A Session serving on its own thread; its events become these signals."""

    sigDone = Signal(object)  # Outcome (a generation's partial results too: Outcome.partial)
    sigFailed = Signal(object)  # Failure
    sigBusy = Signal(bool)
    sigCancelled = Signal(int)  # a request id that ended with nothing to show (stopped before its first token)
    sigProgress = Signal(int, int, int)  # request id, attention calls (layers) done, of how many
    sigOpening = Signal(int, str, int, int)  # request id, a model's opening step ("tensors"), done, of how many
    sigExtras = Signal(int, object)  # request id, {name: frames} of its Outcome.late (empty: not computed)
    sigLayers = Signal(int, object, int)  # request id, the finished layers (layer_feed.Layer), of how many

    def __init__(self, compute=run, parent: QObject | None = None, **session):
        """`session`: more of Session's arguments (share, lanes, clock, sync) for a benchmark or a test."""
        super().__init__(parent)
        events = Events(self.sigDone.emit, self.sigFailed.emit, self.sigBusy.emit, self.sigCancelled.emit,
                        self.sigProgress.emit, self.sigOpening.emit, self.sigExtras.emit, self.sigLayers.emit)
        self.session = Session(compute, events, zoomer=Zoomer(), feed=LayerFeed, **session)

    # --- the window's calls, handed on ---------------------------------------------------------------

    def submit(self, request: Request) -> None:
        """Queue `request`, replacing any pending one (Session.submit)."""
        self.session.submit(request)

    def release(self, *objects) -> None:
        """Hand over the last references to a replaced result; freed off the calling thread."""
        self.session.release(*objects)

    def resume(self, request_id: int) -> None:
        """The window has painted (or dropped) the result of `request_id` (Session.resume)."""
        self.session.resume(request_id)

    def cancel(self, request_id: int) -> None:
        """Stop the generation of `request_id` and older ones (Session.cancel)."""
        self.session.cancel(request_id)

    def stop(self, timeout: float | None = 1.5) -> bool:
        """Ask the session's thread to finish; True if it ended within `timeout` seconds (Session.stop)."""
        return self.session.stop(timeout)

    def yielding(self) -> bool:
        return self.session.yielding()

    def is_alive(self) -> bool:
        return self.session.is_alive()

    def wait_idle(self, timeout: float | None = 30.0) -> bool:
        """Wait until every request submitted so far is handled; its signals are queued to the GUI thread by then."""
        return self.session.wait_idle(timeout)

    @property
    def threads_used(self) -> int:
        return self.session.threads_used

    @property
    def lanes(self):
        return self.session.lanes

    @property
    def reaper(self):
        return self.session.reaper

    @property
    def prepare(self) -> Callable[[RunResult], None] | None:
        return self.session.prepare

    @prepare.setter
    def prepare(self, prepare: Callable[[RunResult], None] | None) -> None:
        self.session.prepare = prepare
