"""ScreenQueue, without Qt: which of the session's outcomes reach the screen, in which order and turns, and what
goes back to the session, with a recording worker and recording views instead of the window's widgets; the
test takes the event loop's turns itself (NextTurn)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from attnviz.core import RunConfig
from attnviz.session import Outcome, Request
from attnviz.session.delivery import ScreenEvents, ScreenQueue


class FakeWorker:
    def __init__(self):
        self.released, self.resumed, self.cancelled = [], [], []

    def release(self, *objects):
        self.released.extend(objects)

    def resume(self, rid):
        self.resumed.append(rid)

    def cancel(self, rid):
        self.cancelled.append(rid)


class Screen:
    """The two passes and the paint, recorded."""

    def __init__(self):
        self.first, self.rest, self.painted = [], [], True
        self.shown, self.running = [], []

    def delivery(self, worker) -> ScreenQueue:
        events = ScreenEvents(shown=self.shown.append, generating=self.running.append)
        return ScreenQueue(worker, self.first.append, self.rest.append, lambda: self.painted, events=events)


CONFIG = RunConfig()
GENERATING = RunConfig.for_variant("toy-induction", generate=5)


def outcome(rid, config=CONFIG, partial=False, prompt=None, tokens=0):
    result = SimpleNamespace(config=config, prompt_length=prompt, generated_count=tokens if prompt is not None else 0)
    frames = SimpleNamespace(name=f"frames {rid}/{tokens}")
    return Outcome(Request(rid, config, None), result, frames, True, 0.0, partial=partial)


@pytest.fixture
def setup():
    worker, screen = FakeWorker(), Screen()
    return screen.delivery(worker), worker, screen, screen.shown


def both_passes(d):
    d.swap_timer.take()
    d.rest_timer.take()


def test_a_result_is_shown_in_two_passes_then_the_worker_goes_on(setup):
    d, worker, screen, shown = setup
    rid = d.next_id()
    d.sent(rid, CONFIG)
    assert not d.settled()
    o = outcome(rid)
    d.arrived(o)
    assert d.waiting is o and d.swap_timer.isActive() and screen.first == []  # on the next loop turn
    d.swap()
    assert screen.first == [o] and screen.rest == [] and d.showing is o and not d.settled()
    d.finish()
    assert screen.rest == [o] and shown == [rid] and d.shown_id == rid and d.settled()
    assert worker.resumed == [rid]  # painted already


def test_the_worker_waits_for_the_paint(setup):
    d, worker, screen, shown = setup
    screen.painted = False
    rid = d.next_id()
    d.arrived(outcome(rid))
    both_passes(d)
    assert worker.resumed == []
    d.on_painted()
    assert worker.resumed == []
    screen.painted = True
    d.on_painted()
    d.on_painted()
    assert worker.resumed == [rid]  # once


def test_results_that_arrive_together_are_shown_once_the_replaced_freed(setup):
    d, worker, screen, shown = setup
    a, b = d.next_id(), d.next_id()
    oa, ob = outcome(a), outcome(b)
    d.arrived(oa)
    d.arrived(ob)
    assert worker.released == [oa.result, oa.frames]  # the older one waited: never shown
    both_passes(d)
    assert screen.first == [ob] and shown == [b]


def test_an_older_result_after_a_newer_one_is_dropped(setup):
    d, worker, screen, shown = setup
    a, b = d.next_id(), d.next_id()
    d.arrived(outcome(b))
    both_passes(d)
    old = outcome(a)
    d.arrived(old)
    assert d.waiting is None and worker.released == [old.result, old.frames] and worker.resumed == [b, a]
    assert shown == [b]


def test_replaced_results_are_freed_after_the_second_pass(setup):
    d, worker, screen, shown = setup
    d.retire("old result", "old frames")
    d.arrived(outcome(d.next_id()))
    d.swap()
    assert worker.released == []
    d.finish()
    assert worker.released == [("old result", "old frames")]


def test_failures_and_cancellations_of_older_requests_are_not_news(setup):
    d, worker, screen, shown = setup
    a, b = d.next_id(), d.next_id()
    assert not d.failed(a) and d.failed_id == 0
    assert d.failed(b) and d.failed_id == b and d.settled()
    c = d.next_id()
    assert not d.cancelled(b) and d.cancelled(c) and d.stopped_id == c and d.settled()
    d.refused(d.next_id())  # invalid: never sent
    assert d.failed_id == d.latest_id and d.settled()


def test_a_generation_streams_in_token_order_and_ends_with_its_final_result(setup):
    d, worker, screen, shown = setup
    running = screen.running
    rid = d.next_id()
    d.sent(rid, GENERATING)
    assert d.generating_id == rid and running == [True]
    partial2 = outcome(rid, GENERATING, partial=True, prompt=4, tokens=2)
    d.arrived(partial2)
    both_passes(d)
    d.arrived(outcome(rid, GENERATING, partial=True, prompt=4, tokens=1))  # older tokens: dropped
    assert d.waiting is None
    final = outcome(rid, GENERATING, prompt=4, tokens=5)
    d.arrived(final)
    both_passes(d)
    assert screen.rest == [partial2, final] and shown == [rid] and d.generating_id == 0 and running[-1] is False


def test_stop_cuts_off_the_rest_of_the_stream_but_keeps_the_final_result(setup):
    d, worker, screen, shown = setup
    rid = d.next_id()
    d.sent(rid, GENERATING)
    assert d.stop() and worker.cancelled == [rid] and d.generating_id == 0
    assert not d.stop()  # nothing runs now
    d.arrived(outcome(rid, GENERATING, partial=True, prompt=4, tokens=3))
    assert d.waiting is None  # a partial result after Stop
    final = outcome(rid, GENERATING, prompt=4, tokens=3)
    d.arrived(final)
    assert d.waiting is final  # what it wrote till then


def test_a_request_for_another_run_cuts_off_a_running_generation(setup):
    d, worker, screen, shown = setup
    rid = d.next_id()
    d.sent(rid, GENERATING)
    layer = d.next_id()
    d.sent(layer, GENERATING.replace(layer=0))  # a view of the same forward: it goes on
    assert d.generating_id == layer
    other = d.next_id()
    d.sent(other, RunConfig())
    assert d.generating_id == 0
    d.arrived(outcome(layer, GENERATING, prompt=4, tokens=5))
    assert d.waiting is None  # that run's result, after a request that replaced it
    writing = d.next_id()
    d.sent(writing, GENERATING)
    d.refused(d.next_id())  # an invalid edit while it writes: the worker hears of no new run, so is told to stop
    assert worker.cancelled == [writing] and d.generating_id == 0


def test_closing_finishes_a_half_shown_result_and_frees_a_waiting_one(setup):
    d, worker, screen, shown = setup
    a, b = d.next_id(), d.next_id()
    d.arrived(outcome(a))
    d.swap()
    ob = outcome(b)
    d.arrived(ob)
    d.close()
    assert screen.rest == [screen.first[0]] and shown == [a]  # the views never show two results
    assert d.waiting is None and worker.released == [ob.result, ob.frames]
    assert not d.swap_timer.isActive() and not d.rest_timer.isActive()


def late_outcome(rid):
    o = outcome(rid)
    o.late, o.frames.extras = frozenset({"predictions"}), {}
    return o


def test_late_extras_keep_the_window_unsettled_till_they_come(setup):
    d, worker, screen, shown = setup
    rid = d.next_id()
    d.sent(rid, CONFIG)
    d.arrived(late_outcome(rid))
    both_passes(d)
    assert shown == [rid] and not d.settled()  # the maps are on screen, the predictions not yet
    assert d.extras_arrived(rid, {"predictions": "p"})  # shown: the window puts them into its views
    assert d.settled()


def test_late_extras_that_come_before_their_maps_go_along_with_them(setup):
    d, worker, screen, shown = setup
    rid = d.next_id()
    d.sent(rid, CONFIG)
    o = late_outcome(rid)
    d.arrived(o)
    assert not d.extras_arrived(rid, {"predictions": "p"})  # still waiting: nothing to show them in yet
    both_passes(d)
    assert screen.rest == [o] and o.frames.extras == {"predictions": "p"} and d.settled()


def test_late_extras_of_a_replaced_result_are_dropped(setup):
    d, worker, screen, shown = setup
    first = d.next_id()
    d.sent(first, CONFIG)
    d.arrived(late_outcome(first))
    both_passes(d)
    second = d.next_id()
    d.sent(second, CONFIG)
    d.arrived(outcome(second))
    both_passes(d)
    assert d.settled() and not d.extras_arrived(first, {"predictions": "old"})


def test_a_failure_ends_the_wait_for_late_extras(setup):
    d, worker, screen, shown = setup
    rid = d.next_id()
    d.sent(rid, CONFIG)
    d.arrived(late_outcome(rid))
    both_passes(d)
    d.failed(rid)
    assert d.settled()
