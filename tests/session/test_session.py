"""The session without a window: driven synchronously (Session(sync=True), force_sync()) or on its thread
with wait_idle(), its events recorded. Latest wins, view-only changes never recompute, a run refused for memory
is retried once the held result is freed, and after a result the next run waits for the window's paint."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from attnviz.core import RunConfig, run
from attnviz.core.runs.runner import MemoryBudgetError
from attnviz.frames import ViewOptions
from attnviz.session import Events, Request, Session, present
from attnviz.session import session as session_module


class Heard:
    """The session's events, recorded."""

    def __init__(self):
        self.done, self.failed, self.busy, self.cancelled = [], [], [], []

    def events(self) -> Events:
        return Events(done=self.done.append, failed=self.failed.append, busy=self.busy.append,
                      cancelled=self.cancelled.append)


class Freed:
    """Stands in for a replaced result: logs when it is freed."""

    def __init__(self, log: list):
        self.log = log

    def __del__(self):
        self.log.append("freed")


def tiny(rid: int, seed: int = 0, **options) -> Request:
    return Request(rid, RunConfig(seq_q=8, heads=2, d_model=16, seed=seed), ViewOptions(**options))


@pytest.fixture
def sync():
    """A sync session over the real engine, counting its runs, and its recorded events."""
    heard, calls = Heard(), []

    def compute(config, **kwargs):
        calls.append(config)
        return run(config, **kwargs)
    session = Session(compute, heard.events(), sync=True)
    yield session, heard, calls
    assert session.stop()


def test_a_sync_session_reports_the_outcome_before_submit_returns(sync):
    session, heard, calls = sync
    request = tiny(1)
    session.submit(request)
    (outcome,) = heard.done
    assert outcome.request is request and outcome.recomputed and heard.busy == [True, False]
    np.testing.assert_array_equal(outcome.result.weights, run(request.config).weights)
    want = present(run(request.config), request.options)
    assert all(np.array_equal(a.image, b.image) for a, b in zip(outcome.frames.heads, want.heads))


def test_a_view_only_change_presents_the_last_result_again_without_a_run(sync):
    session, heard, calls = sync
    session.submit(tiny(1))
    session.submit(tiny(2, colormap="magma", stats=True))
    first, second = heard.done
    assert len(calls) == 1 and not second.recomputed and second.result is first.result
    assert "stats" in second.frames.extras and "stats" not in first.frames.extras
    session.submit(tiny(3, seed=4))
    assert len(calls) == 2 and heard.done[-1].recomputed


def test_a_run_refused_for_memory_is_retried_once_the_held_result_is_freed():
    log: list = []
    heard = Heard()

    def compute(config, **kwargs):  # fits only once the held result is gone
        log.append("run")
        if "freed" not in log:
            raise MemoryBudgetError("seq_q", config.seq_q, "over the budget", "use shorter lengths")
        return run(config, **kwargs)

    session = Session(compute, heard.events(), sync=True)
    session.reaper.HOLD_S = 60.0
    session.release(Freed(log))
    session.submit(tiny(1))
    assert log == ["run", "freed", "run"] and len(heard.done) == 1 and not heard.failed
    assert session.stop()


def test_a_refusal_with_nothing_held_is_reported_not_retried():
    calls, heard = [], Heard()

    def compute(config, **kwargs):
        calls.append(config)
        raise MemoryBudgetError("seq_q", config.seq_q, "over the budget", "use shorter lengths")

    session = Session(compute, heard.events(), sync=True)
    session.submit(tiny(1))
    (failure,) = heard.failed
    assert len(calls) == 1 and "over the budget" in failure.message and failure.field == "seq_q"
    assert not heard.done and heard.busy == [True, False]
    assert session.stop()


def test_force_sync_handles_a_request_before_submit_returns_on_the_serving_lanes():
    heard, threads = Heard(), []

    def compute(config, **kwargs):
        threads.append(threading.current_thread().name)
        return run(config, **kwargs)

    session = Session(compute, heard.events())
    try:
        with session.force_sync():
            session.submit(tiny(1))
            assert len(heard.done) == 1  # no wait: handled before submit returned
        assert threads[0].startswith("attnviz-compute")  # on a lane, not the caller's thread
        session.submit(tiny(2, seed=3))
        assert session.wait_idle(30) and [o.request.id for o in heard.done] == [1, 2]
    finally:
        assert session.stop()


@pytest.fixture
def yielding(monkeypatch):
    """A session on its thread that has delivered request 1 (seed 0) and waits for the window (YIELD_MAX_S made
    long), with the seeds its runs started computing."""
    monkeypatch.setattr(session_module, "YIELD_MAX_S", 60.0)
    seeds, heard = [], Heard()

    def compute(config, **kwargs):
        seeds.append(config.seed)
        return run(config, **kwargs)

    session = Session(compute, heard.events())
    session.submit(tiny(1))
    assert session.wait_idle(30) and len(heard.done) == 1
    yield session, seeds
    assert session.stop()


def test_after_a_result_the_next_run_waits_until_the_window_has_painted_it(yielding):
    """The window's swap and paint run 2-3x slower while a forward computes on the other core: after a
    result the session takes its next request only once resume() says it is painted (bounded by
    YIELD_MAX_S, here made long)."""
    session, seeds = yielding
    assert session.yielding()
    session.submit(tiny(2, seed=5))
    assert session.yielding() and seeds == [0]  # a new request does not end the wait for the window
    session.resume(0)  # an older result painted: still waiting
    assert session.yielding() and seeds == [0]
    session.resume(1)
    assert not session.yielding()
    assert session.wait_idle(30) and seeds == [0, 5]


def test_edits_made_while_the_session_waits_for_the_window_replace_its_next_request(yielding):
    session, seeds = yielding
    session.submit(tiny(2, seed=2))
    assert session.yielding()  # the session waits for the window with request 2 not yet taken
    session.submit(tiny(3, seed=3))
    session.resume(1)
    assert session.wait_idle(30)
    assert seeds == [0, 3]  # request 2, replaced while waiting, was never computed


def test_closing_ends_a_yielding_run_at_once(yielding):
    session, seeds = yielding
    session.submit(tiny(2, seed=5))
    assert session.yielding()  # waiting for the window before taking request 2
    assert session.stop(timeout=5) and seeds == [0] and session.stopping


def test_a_session_serves_again_after_stop():
    heard = Heard()
    session = Session(run, heard.events())
    assert session.stop(timeout=5) and not session.is_alive()
    session.submit(tiny(1))
    assert session.wait_idle(30) and len(heard.done) == 1 and session.is_alive()
    assert session.stop()


def test_the_window_leaves_scores_out_and_an_npz_export_gets_them_back():
    from attnviz.session import complete_stages
    from attnviz.session.request import window_record

    config = RunConfig.for_variant("causal", d_model=32, heads=4, seq_q=12, seed=5)
    record = window_record(config, frozenset({"weights"}))
    assert "scores" not in record and "scores" in window_record(config, frozenset({"scores"}))
    shown = run(config, record=record)
    full = complete_stages(shown)
    assert "scores" not in shown.stages
    assert set(full.stages) == {"x", "q", "k", "v", "scores", "weights", "dropped", "context", "output"}
    np.testing.assert_array_equal(full.scores, run(config).scores)
    np.testing.assert_array_equal(full.weights, shown.weights)


def test_a_generation_streams_its_partial_results_then_the_final_one(monkeypatch):
    monkeypatch.setattr(session_module, "PARTIAL_INTERVAL_S", 0.0)  # a partial result after every token but the last
    heard = Heard()
    config = RunConfig.for_variant("toy-induction", text="pophijackmehij", generate=4)
    session = Session(run, heard.events(), sync=True)
    try:
        session.submit(Request(1, config, ViewOptions(), force=True))  # Generate pressed
        *partials, final = heard.done
        written = [o.generated for o in partials]
        assert written == [(0, 4), (1, 4), (2, 4)] and all(o.partial for o in partials)  # one per token step
        assert final.generated == (4, 4) and not final.partial and not final.stopped
        assert list(final.result.tokens) == list(run(config).tokens)  # the same tokens as the engine writes
    finally:
        assert session.stop()


def test_stop_keeps_what_a_generation_wrote(monkeypatch):
    monkeypatch.setattr(session_module, "PARTIAL_INTERVAL_S", 0.0)
    heard = Heard()
    session = Session(run, sync=True)

    def done(outcome):  # Stop pressed as the first partial result shows
        heard.done.append(outcome)
        session.cancel(outcome.request.id)
    session.events = Events(done=done)
    config = RunConfig.for_variant("toy-induction", text="pophijackmehij", generate=8)
    try:
        session.submit(Request(1, config, ViewOptions(), force=True))
        first, final = heard.done
        assert first.partial and final.stopped and not final.partial
        assert final.generated[0] < 8 and final.result.prompt_length == 14
    finally:
        assert session.stop()
