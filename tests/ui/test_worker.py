"""The window's worker: the session's events as Qt signals, and its manners with the live window: replaced
results are freed on the reaper's thread, and after a result the worker goes on once both views painted it.
The session's own behaviour (latest wins, pacing, memory, threads) is tested without Qt in tests/session."""

from __future__ import annotations

import threading
import weakref

from uihelpers import wait_shown

from attnviz.core import RunConfig, run
from attnviz.core.runs.runner import MemoryBudgetError
from attnviz.frames import ViewOptions
from attnviz.session import Request
from attnviz.session import session as session_module
from attnviz.ui.window.worker import Worker


def tiny_request(rid: int, seed: int = 0) -> Request:
    return Request(rid, RunConfig(seq_q=8, heads=2, d_model=16, seed=seed), ViewOptions())


def test_the_worker_s_signals_carry_the_session_s_events(qapp):
    """Driven synchronously (sync=True): every signal is sent before submit() returns (those sent on a lane are
    queued to this thread: processEvents delivers them)."""
    heard: dict[str, list] = {"done": [], "failed": [], "busy": []}
    worker = Worker(compute=run, sync=True)
    worker.sigDone.connect(heard["done"].append)
    worker.sigFailed.connect(heard["failed"].append)
    worker.sigBusy.connect(heard["busy"].append)
    worker.submit(tiny_request(1))
    qapp.processEvents()
    (outcome,) = heard["done"]
    assert outcome.request.id == 1 and outcome.frames.heads and heard["busy"] == [True, False]
    worker.submit(Request(2, RunConfig(seq_q=8, heads=2, d_model=16), ViewOptions(view="biased")))  # no bias
    qapp.processEvents()
    (failure,) = heard["failed"]
    assert failure.request.id == 2 and failure.field is not None and len(heard["done"]) == 1
    assert worker.stop()


def test_a_failure_on_the_worker_s_thread_reaches_the_gui_thread(qapp, qtbot):
    def compute(config, **_):
        raise MemoryBudgetError("seq_q", config.seq_q, "over the budget", "use shorter lengths")

    worker = Worker(compute=compute)
    try:
        with qtbot.waitSignal(worker.sigFailed, timeout=10000) as failed:
            worker.submit(tiny_request(1))
        assert "over the budget" in failed.args[0].message
    finally:
        assert worker.stop()


def test_the_window_frees_the_replaced_result_on_the_reaper_thread(window, qtbot):
    first = window.result
    freed_on: list[str] = []
    weakref.finalize(first, lambda: freed_on.append(threading.current_thread().name))
    del first
    window.panel.widgets["seed"].setValue(window.panel.widgets["seed"].value() + 1)
    wait_shown(qtbot, window)
    window.worker.reaper.flush()  # held a moment, or freed already: either way on the reaper's thread
    assert freed_on == ["attnviz-reaper"]


def test_the_window_lets_the_worker_go_on_once_a_result_is_painted(window, qtbot, monkeypatch):
    monkeypatch.setattr(session_module, "YIELD_MAX_S", 60.0)
    window.show()
    window.panel.widgets["seed"].setValue(7)
    wait_shown(qtbot, window)
    qtbot.waitUntil(lambda: not window.worker.yielding(), timeout=2000)  # long before YIELD_MAX_S (60 s)
    window.hide()
    window.panel.widgets["seed"].setValue(8)  # hidden: nothing will paint, the swap lets it go on
    wait_shown(qtbot, window)
    assert not window.worker.yielding()


def test_the_worker_goes_on_only_once_both_views_have_painted_the_result(window, qtbot, monkeypatch):
    # the tensor view is often painted one event-loop pass after the grid: the worker waits for both
    monkeypatch.setattr(session_module, "YIELD_MAX_S", 60.0)
    window.show()
    wait_shown(qtbot, window)
    window.repaint()  # what is shown now is painted: every paint logged below is the next result's
    events: list[str] = []

    def logging(name, original):
        return lambda *args: (events.append(name), original(*args))

    for view in (window.headGrid, window.outputView):
        monkeypatch.setattr(view, "paintEvent", logging(view.objectName(), view.paintEvent))
    monkeypatch.setattr(window.worker, "resume", logging("resume", window.worker.resume))
    window.panel.widgets["seed"].setValue(9)
    wait_shown(qtbot, window)
    qtbot.waitUntil(lambda: "resume" in events, timeout=5000)
    assert events.index("resume") > max(events.index("headGrid"), events.index("outputView")), events
