"""The window's delivery: the session's ScreenQueue (which outcomes reach the screen, and when) on Qt's event
loop, its turns zero-interval single-shot timers and what reaches the screen Qt signals."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, QTimer, Signal

from attnviz.session import Outcome
from attnviz.session.delivery import ScreenEvents, ScreenQueue


def single_shot(parent: QObject, slot) -> QTimer:
    """A zero-interval single-shot timer: `slot` runs on the next event-loop turn, after what is queued."""
    timer = QTimer(parent)
    timer.setSingleShot(True)
    timer.setInterval(0)
    timer.timeout.connect(slot)
    return timer


class Delivery(QObject):
    """A ScreenQueue on the GUI thread. `arrived` is the slot for the worker's sigDone (a method of this GUI-thread
    object, so Qt queues the worker's outcome here); everything else reads through to the queue (`screen`)."""

    sigShown = Signal(int)  # the request id whose (final) result is now on screen
    sigPartialShown = Signal(int, int)  # a generation still running: (request id, generated tokens on screen)
    sigGenerating = Signal(bool)  # whether a generation may still be running (Stop applies)
    sigLateShown = Signal(int)  # the request id whose late extras (Outcome.late) the window now shows

    def __init__(self, worker, first: Callable[[Outcome], None], rest: Callable[[Outcome], None],
                 painted: Callable[[], bool], parent: QObject | None = None):
        super().__init__(parent)
        events = ScreenEvents(self.sigShown.emit, self.sigPartialShown.emit, self.sigGenerating.emit)
        self.screen = ScreenQueue(worker, first, rest, painted, turn=lambda slot: single_shot(self, slot),
                                  events=events)

    def arrived(self, outcome: Outcome) -> None:
        """A result from the worker (ScreenQueue.arrived)."""
        self.screen.arrived(outcome)

    def __getattr__(self, name: str):
        # the queue's ids, state and calls (next_id, sent, latest_id, ...), read through
        if name == "screen":
            raise AttributeError(name)
        return getattr(self.screen, name)
