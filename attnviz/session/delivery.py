"""The way of a request's outcome from the session to the screen, without any widget.

Every change becomes a Request with a fresh id (`next_id`). The session reports each outcome with its id;
ScreenQueue drops what is older than what is on screen or on its way, keeps only the newest arrival, and
shows it in two event-loop turns: `first(outcome)` (the head grid) on one turn, then `rest(outcome)`
(every other view) on the next, so the loop runs between the two repaints. The session then waits till
`painted()` says both are painted, and gets the replaced results back to free off the GUI thread.

A generation streams partial results of one request, ordered by their tokens, its final result last; a
newer request that needs another run, or Stop, cuts off what is left of that run.

The event loop is the caller's: `turn(slot)` makes what runs a slot on a later turn (the window's is a
zero-interval single-shot QTimer, ui/window/delivery.py); by default NextTurn, which the driver takes itself.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from attnviz.core import RunConfig
from attnviz.session.request import Outcome, generating, supersedes


def order_key(outcome: Outcome) -> tuple[int, int, int]:
    """Orders outcomes: by request id, a generation's partial ones by their tokens, its final one last."""
    return outcome.request.id, int(not outcome.partial), outcome.result.generated_count


class Turn(Protocol):
    """A slot run once on a later turn of the caller's event loop (a single-shot QTimer is one)."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def isActive(self) -> bool: ...  # QTimer's spelling: a QTimer is a Turn


class NextTurn:
    """A Turn its driver takes itself (take()): a test, or a driver without an event loop."""

    def __init__(self, slot: Callable[[], None]):
        self._slot, self._active = slot, False

    def start(self) -> None:
        self._active = True

    def stop(self) -> None:
        self._active = False

    def isActive(self) -> bool:
        return self._active

    def take(self) -> None:
        """Run the slot now if it was started."""
        if self._active:
            self._active = False
            self._slot()


def _ignore(*_args) -> None:
    pass


@dataclass
class ScreenEvents:
    """What reaches the screen, as it happens (the window's adapter emits a signal for each)."""

    shown: Callable[[int], None] = _ignore  # the request id whose (final) result is now on screen
    partial_shown: Callable[[int, int], None] = _ignore  # a generation still running: (request id, tokens on screen)
    generating: Callable[[bool], None] = _ignore  # whether a generation may still be running (Stop applies)


class ScreenQueue:
    """Request ids, and which of the session's outcomes reach the screen and when.

    `worker` needs release(*objects), resume(request_id) and cancel(request_id) (a Session, or the window's
    Worker); `first` and `rest` show an outcome (the two turns); `painted()` says whether what was shown last is
    painted (or need not be); `turn(slot)` makes a Turn; `events` hears what reaches the screen."""

    def __init__(self, worker, first: Callable[[Outcome], None], rest: Callable[[Outcome], None],
                 painted: Callable[[], bool], *, turn: Callable[[Callable[[], None]], Turn] = NextTurn,
                 events: ScreenEvents | None = None):
        self.worker, self._first, self._rest, self._painted = worker, first, rest, painted
        self.events = events or ScreenEvents()
        self._ids = itertools.count(1)
        self.latest_id = 0  # newest request sent
        self.shown_id = 0  # newest request whose final result is on screen
        self.failed_id = 0  # newest request that failed
        self.stopped_id = 0  # newest request stopped before it had anything to show
        self.generating_id = 0  # the newest request whose generation may still be running (0: none)
        self.late_id = 0  # the request on screen whose late extras (Outcome.late) are still on their way
        self._shown_key = (0, 1, 0)  # order_key of what is on screen: partials order by tokens
        # generation outcomes of requests older than these are dropped: a newer request replaced that run
        self._partial_cut = self._final_cut = 0
        self._sent: RunConfig | None = None  # the config of the newest valid request
        self.waiting: Outcome | None = None  # the newest outcome not yet on screen
        self.showing: Outcome | None = None  # in the first pass's view; the rest's turn comes next
        self._unpainted: int | None = None  # the request id shown, not yet painted
        self._retired: list = []  # replaced results and frames, freed once the newest is fully shown
        self.swap_timer = turn(self.swap)  # a timer, not a queued call: the loop runs between
        self.rest_timer = turn(self.finish)

    # --- requests ------------------------------------------------------------------------------

    def next_id(self) -> int:
        """A new request's id; the newest from now on, valid or not (an older result must not clear it)."""
        self.latest_id = next(self._ids)
        return self.latest_id

    def sent(self, rid: int, config: RunConfig | None, force: bool = False) -> None:
        """Request `rid` goes out for `config` (None: invalid, nothing goes to the worker). One that needs
        another run ends a running generation (the worker cancels it within a token) and nothing of that run
        is shown after it; a view of the same run lets it go on. `force`: Generate pressed again."""
        if self.generating_id and (force or self._sent is None or supersedes(config, self._sent)):
            self._partial_cut = self._final_cut = rid
            self.generating_id = 0
            if config is None:  # an invalid edit: the worker hears of no new run, so tell it to stop
                self.worker.cancel(rid - 1)
        self._sent = config if config is not None else self._sent
        if config is not None and generating(config):
            self.generating_id = rid
        self.events.generating(bool(self.generating_id))

    def refused(self, rid: int) -> None:
        """Request `rid` was invalid before it could be sent."""
        self.failed_id = rid
        self.sent(rid, None)

    def stop(self) -> bool:
        """Stop a running generation: the worker ends it after its current token and sends what it wrote; no
        partial result of it is shown after this. False when none runs."""
        if not self.generating_id:
            return False
        self._partial_cut = self.latest_id + 1
        self.worker.cancel(self.latest_id)
        self.generating_id = 0
        self.events.generating(False)
        return True

    def settled(self) -> bool:
        """Nothing on its way to the screen, and the newest request on screen (or failed, or stopped)."""
        return (self.waiting is None and self.showing is None and self.late_id != self.latest_id
                and self.latest_id in (self.shown_id, self.failed_id, self.stopped_id))

    # --- what the worker reports ----------------------------------------------------------------

    def failed(self, rid: int) -> bool:
        """Request `rid` failed; True when that is news to show (no newer request is on its way)."""
        self._generation_done(rid)
        self.late_id = 0 if rid == self.late_id else self.late_id  # its late extras failed: none will come
        if rid < self.latest_id:
            return False
        self.failed_id = rid
        return True

    def extras_arrived(self, rid: int, extras: dict) -> bool:
        """The late extras of request `rid` (worker.sigExtras). True: its result is on screen, show them now;
        an outcome still on its way takes them along instead (its views show them with the rest)."""
        for outcome in (self.waiting, self.showing):
            if outcome is not None and outcome.request.id == rid and not outcome.partial:
                outcome.frames.extras.update(extras)
                outcome.late = frozenset()
                return False
        if rid != self.late_id:
            return False  # dropped, or replaced on screen by a newer result
        self.late_id = 0
        return True

    def cancelled(self, rid: int) -> bool:
        """Request `rid` stopped before it had anything to show; True when it is the newest."""
        self._generation_done(rid)
        if rid != self.latest_id:
            return False
        self.stopped_id = rid
        return True

    def arrived(self, outcome: Outcome) -> None:
        """A result: keep the newest and swap it in on the next timer turn. Qt delivers every signal queued by
        then in one go, so results that arrive together (a fast worker, a busy GUI thread) are swapped and
        painted once, and the loop breathes between swaps."""
        if not outcome.partial:
            self._generation_done(outcome.request.id)
        if self.dropped(outcome):
            self.worker.release(outcome.result, outcome.frames)  # never shown
            self.worker.resume(outcome.request.id)  # nothing to paint
            return
        if self.waiting is not None:
            self.worker.release(self.waiting.result, self.waiting.frames)
        self.waiting = outcome
        if not self.swap_timer.isActive():  # a stream of results must not keep postponing it
            self.swap_timer.start()

    def dropped(self, outcome: Outcome) -> bool:
        """Not to be shown: older than what is on screen or on its way, or a generation's result after a
        request that replaced that run (or, for a partial result, after Stop)."""
        rid = outcome.request.id
        if outcome.partial and rid < self._partial_cut:
            return True
        if outcome.result.prompt_length is not None and rid < self._final_cut:
            return True
        ahead = [order_key(o) for o in (self.waiting, self.showing) if o is not None]
        return order_key(outcome) <= max([self._shown_key, *ahead])

    def _generation_done(self, rid: int) -> None:
        """A request's final outcome (shown, dropped, failed or cancelled): its generation is over."""
        if self.generating_id and rid >= self.generating_id:
            self.generating_id = 0
            self.events.generating(False)

    # --- the two passes ---------------------------------------------------------------------------

    def swap(self) -> None:
        """The first pass: the newest arrival goes on screen in the first view."""
        outcome, self.waiting = self.waiting, None
        if outcome is None:
            return
        self._first(outcome)
        self._shown_key = order_key(outcome)
        self.showing = outcome
        self.rest_timer.start()  # after the first view's paint, which Qt runs first

    def finish(self) -> None:
        """The second pass: the outcome of the first goes into the other views; the replaced results go."""
        outcome, self.showing = self.showing, None
        if outcome is None:
            return
        self._rest(outcome)
        self.release_retired()
        rid = outcome.request.id
        if not outcome.partial:
            self.shown_id = rid
            self.late_id = rid if outcome.late else 0
        self._unpainted = rid  # the worker yields till the views have painted it
        self.on_painted()  # now, if they already have (or none is on screen to paint it)
        if outcome.partial:
            self.events.partial_shown(rid, outcome.result.generated_count)
        else:
            self.events.shown(rid)

    def retire(self, *objects) -> None:
        """A result and frames replaced on screen: freed (off the GUI thread) once the newest is fully shown."""
        self._retired.append(objects)

    def release_retired(self) -> None:
        retired, self._retired = self._retired, []
        self.worker.release(*retired)  # the last references to the old maps

    def on_painted(self) -> None:
        """A view painted: let the worker go on once the result shown last is painted."""
        if self._unpainted is not None and self._painted():
            self.worker.resume(self._unpainted)
            self._unpainted = None

    def close(self) -> None:
        """The window closes: a result half shown is finished (the views never show two results), one still
        waiting is dropped, and every replaced result goes back to the worker."""
        if self.showing is not None:
            self.finish()
        self.swap_timer.stop()
        self.rest_timer.stop()
        if self.waiting is not None:  # a result that came too late to be shown
            self.worker.release(self.waiting.result, self.waiting.frames)
            self.waiting = None
        self.release_retired()
