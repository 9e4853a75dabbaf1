"""Background threads' manners: replaced results are freed off the GUI thread, a moment later,
and every background thread runs below the GUI thread."""

from __future__ import annotations

import os
import sys
import threading
import time
import weakref
from dataclasses import replace

import pytest
import torch
from uihelpers import wait_shown

from attnviz.core import RunConfig, run
from attnviz.core.runs.runner import MemoryBudgetError, estimate_flops
from attnviz.frames import ViewOptions
from attnviz.system import MAX_NICE, lower_priority, thread_policy
from attnviz.ui.window import worker as worker_module
from attnviz.ui.window.worker import Reaper, Request, Worker

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread niceness is Linux's")


class Big:
    """Stands in for a replaced result: records which thread frees it and when."""

    def __init__(self, log: list):
        self.log = log

    def __del__(self):
        self.log.append(("freed", threading.current_thread().name, time.monotonic()))


def nice_of(tid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, tid)


def tiny_request(rid: int, seed: int = 0) -> Request:
    return Request(rid, RunConfig(seq_q=8, heads=2, d_model=16, seed=seed), ViewOptions())


@pytest.fixture
def yielding_worker(qapp, qtbot, monkeypatch):
    """A worker that has delivered request 1 (seed 0) and waits for the window (YIELD_MAX_S made
    long), with the list of seeds its runs started computing."""
    monkeypatch.setattr(worker_module, "YIELD_MAX_S", 60.0)
    seeds: list[int] = []

    def compute(config, cancel=None, **_):
        seeds.append(config.seed)
        return run(config, cancel=cancel)

    worker = Worker(compute=compute)
    try:
        with qtbot.waitSignal(worker.sigDone, timeout=10000):
            worker.submit(tiny_request(1))
        yield worker, seeds
    finally:
        assert worker.stop()


def test_the_reaper_holds_a_replaced_result_then_frees_it_on_its_thread(qapp):
    log: list = []
    reaper = Reaper()
    reaper.HOLD_S = 60.0
    reaper.drop(Big(log))  # the reaper now holds the only reference
    assert reaper.flush()  # flush() frees what is held: it was held, not freed while the GUI paints
    (what, thread, _), = log
    assert (what, thread) == ("freed", "attnviz-reaper")


def test_the_reaper_frees_a_held_result_once_hold_s_has_passed(qapp, qtbot):
    log: list = []
    reaper = Reaper()
    reaper.HOLD_S = 0.05
    reaper.drop(Big(log))
    qtbot.waitUntil(lambda: bool(log), timeout=10000)  # no newer result and no flush: the hold ends by itself
    assert [(what, thread) for what, thread, _ in log] == [("freed", "attnviz-reaper")]
    assert not reaper.flush()  # nothing held any more


def test_a_newer_result_frees_the_held_one_at_once(qapp):
    older, newer = [], []
    reaper = Reaper()
    reaper.HOLD_S = 60.0
    reaper.drop(Big(older))
    reaper.drop(Big(newer))
    deadline = time.monotonic() + 10
    while not older and time.monotonic() < deadline:
        time.sleep(0.01)
    assert older and older[0][1] == "attnviz-reaper"
    assert reaper.flush() and newer  # the newest was still held (flush freed it): only one is kept alive


def test_a_run_refused_for_memory_is_retried_once_the_held_result_is_freed(qapp, qtbot):
    log: list = []
    config = RunConfig(seq_q=8, heads=2, d_model=16)

    def compute(config, cancel=None, **_):  # fits only once the held result is gone
        log.append(("run", threading.current_thread().name, time.monotonic()))
        if not any(what == "freed" for what, _, _ in log):
            raise MemoryBudgetError("seq_q", config.seq_q, "over the budget", "use shorter lengths")
        return run(config, cancel=cancel)

    worker = Worker(compute=compute)
    worker.reaper.HOLD_S = 60.0
    try:
        worker.release(Big(log))
        with qtbot.waitSignal(worker.sigDone, timeout=10000):
            worker.submit(Request(1, config, ViewOptions()))
        assert [what for what, _, _ in log] == ["run", "freed", "run"]
    finally:
        assert worker.stop()


def test_a_refusal_with_nothing_held_is_reported_not_retried(qapp, qtbot):
    calls = []

    def compute(config, cancel=None, **_):
        calls.append(config)
        raise MemoryBudgetError("seq_q", config.seq_q, "over the budget", "use shorter lengths")

    worker = Worker(compute=compute)
    try:
        with qtbot.waitSignal(worker.sigFailed, timeout=10000) as failed:
            worker.submit(tiny_request(1))
        assert len(calls) == 1 and "over the budget" in failed.args[0].message
    finally:
        assert worker.stop()


def test_the_window_frees_the_replaced_result_on_the_reaper_thread(window, qtbot):
    first = window.result
    freed_on: list[str] = []
    weakref.finalize(first, lambda: freed_on.append(threading.current_thread().name))
    del first
    window.panel.widgets["seed"].setValue(window.panel.widgets["seed"].value() + 1)
    wait_shown(qtbot, window)
    qtbot.waitUntil(lambda: bool(freed_on), timeout=int((Reaper.HOLD_S + 10) * 1000))
    assert freed_on == ["attnviz-reaper"]


@linux_only
def test_the_worker_thread_runs_below_the_gui_thread(qapp, qtbot):
    """The lane used when every core is free runs nicer than the GUI; the one used when other
    programs hold cores runs the policy's busy_nice nicer (issue 9: nice 10 starved it there)."""
    gui_nice = nice_of(threading.get_native_id())
    worker = Worker(compute=run)
    try:
        qtbot.waitUntil(lambda: hasattr(worker, "lanes"), timeout=5000)
        quiet, busy = worker.lanes["quiet"].thread.native_id, worker.lanes["busy"].thread.native_id
        qtbot.waitUntil(lambda: nice_of(quiet) > gui_nice or gui_nice == MAX_NICE, timeout=5000)
        assert nice_of(busy) == min(gui_nice + thread_policy().busy_nice, MAX_NICE)
        assert nice_of(threading.get_native_id()) == gui_nice
    finally:
        assert worker.stop()


def test_the_worker_uses_the_cores_other_programs_leave(qapp, qtbot, monkeypatch):
    """Two cores, others holding one: the forward runs with one torch thread, on the busy lane."""
    seen = []

    def compute(config, cancel=None, **_):
        seen.append((torch.get_num_threads(), threading.current_thread().name))
        return run(config, cancel=cancel)

    monkeypatch.setattr(worker_module, "SMALL_FORWARD_FLOPS", 0)  # this tiny run counts as big
    worker = Worker(compute=compute)
    try:
        monkeypatch.setattr(worker._share, "cores", 2)
        monkeypatch.setattr(worker._share, "sample", lambda: 1.0)
        done = []
        worker.sigDone.connect(done.append)  # queued to this (GUI) thread
        worker.submit(Request(1, RunConfig(seq_q=4, d_model=8, heads=2), ViewOptions()))
        qtbot.waitUntil(lambda: bool(done), timeout=10000)
        assert seen == [(1, "attnviz-compute-shared")]
        monkeypatch.setattr(worker._share, "sample", lambda: 0.0)
        worker.submit(Request(2, RunConfig(seq_q=4, d_model=8, heads=2, seed=1), ViewOptions()))
        qtbot.waitUntil(lambda: len(done) == 2, timeout=10000)
        assert seen[1] == (2, "attnviz-compute")
    finally:
        assert worker.stop()


def test_a_small_forward_runs_on_one_thread_with_every_core_free(qapp, qtbot, monkeypatch):
    """Below SMALL_FORWARD_FLOPS the forward leaves the GUI thread a core even on an idle machine;
    above it, it takes every free core. Models and half precision on the CPU never count as small."""
    seen = []

    def compute(config, cancel=None, **_):
        seen.append((torch.get_num_threads(), threading.current_thread().name))
        return run(config, cancel=cancel)

    small = RunConfig(seq_q=4, d_model=8, heads=2)
    big = RunConfig(seq_q=256, d_model=512, heads=8)
    assert estimate_flops(small) < worker_module.SMALL_FORWARD_FLOPS <= estimate_flops(big)
    worker = Worker(compute=compute)
    try:
        monkeypatch.setattr(worker._share, "cores", 2)
        samples = []
        monkeypatch.setattr(worker._share, "sample", lambda: samples.append(1) or 0.0)
        assert worker_module.thread_count(worker._share, small) == 1
        assert samples, "a small forward must still sample other programs' CPU use (its window would grow)"
        assert worker_module.thread_count(worker._share, big) == 2
        assert worker_module.thread_count(worker._share, replace(small, dtype="bfloat16")) == 2
        monkeypatch.setattr(worker._share, "cores", 3)
        toy = RunConfig.for_variant("toy-reverse", text="1234")  # tiny, but a model: one core left, not one thread
        assert worker_module.thread_count(worker._share, toy) == worker_module.model_threads(3) == 2
        monkeypatch.setattr(worker._share, "cores", 2)
        done = []
        worker.sigDone.connect(done.append)
        worker.submit(Request(1, small, ViewOptions()))
        qtbot.waitUntil(lambda: bool(done), timeout=10000)
        assert seen == [(1, "attnviz-compute-shared")]
    finally:
        assert worker.stop()


@linux_only
def test_threads_started_after_lowering_inherit_it():
    """torch's intra-op threads, started by the worker, must yield to the GUI thread too."""
    before = set(os.listdir("/proc/self/task"))
    base = nice_of(threading.get_native_id())
    lowered = min(base + 1, MAX_NICE)
    seen: dict[str, int] = {}

    def body():
        lower_priority()
        seen["self"] = nice_of(threading.get_native_id())
        helper = threading.Thread(target=lambda: seen.setdefault("child", nice_of(threading.get_native_id())))
        helper.start()
        helper.join()
        torch.softmax(torch.rand(512, 512) @ torch.rand(512, 512), -1)  # starts this thread's pool
        seen["pool"] = sum(nice_of(int(t)) >= lowered
                           for t in set(os.listdir("/proc/self/task")) - before if t != str(threading.get_native_id()))

    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert seen["self"] >= lowered and seen["child"] >= lowered
    if torch.get_num_threads() > 1:
        assert seen["pool"] >= 1


def test_the_reaper_trims_the_heap_only_once_results_stop_coming(qapp, monkeypatch):
    trims: list[float] = []
    monkeypatch.setattr(worker_module, "_malloc_trim", lambda: lambda pad: trims.append(time.monotonic()))
    reaper = Reaper()
    reaper.HOLD_S = reaper.IDLE_S = 0.3
    for _ in range(5):  # a drag: each result replaces the previous one within HOLD_S
        reaper.drop(Big([]))
        time.sleep(0.05)
    assert trims == []  # malloc_trim walks the heap under the allocator's locks: not mid-drag
    deadline = time.monotonic() + 10
    while not trims and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(trims) == 1  # the last replaced result freed after HOLD_S, one trim IDLE_S later
    reaper.drop(Big([]))
    assert reaper.flush() and len(trims) == 2  # flush() asks for memory: it trims before returning


def test_after_a_result_the_next_run_waits_until_the_window_has_painted_it(yielding_worker, qtbot):
    """The window's swap and paint run 2-3x slower while a forward computes on the other core: after a
    result the worker takes its next request only once resume() says it is painted (bounded by
    YIELD_MAX_S, here made long)."""
    worker, passed = yielding_worker
    assert worker.yielding()
    worker.submit(tiny_request(2, seed=5))
    assert worker.yielding() and passed == [0]  # a new request does not end the wait for the window
    worker.resume(0)  # an older result painted: still waiting
    assert worker.yielding() and passed == [0]
    worker.resume(1)
    assert not worker.yielding()
    qtbot.waitUntil(lambda: passed == [0, 5], timeout=5000)


def test_closing_ends_a_yielding_run_at_once(qapp, qtbot, monkeypatch):
    monkeypatch.setattr(worker_module, "YIELD_MAX_S", 60.0)
    worker = Worker(compute=run)
    with qtbot.waitSignal(worker.sigDone, timeout=10000):
        worker.submit(tiny_request(1))
    worker.submit(tiny_request(2, seed=5))
    assert worker.yielding()  # waiting for the window before taking request 2
    assert worker.stop(timeout=5)


def test_the_window_lets_the_worker_go_on_once_a_result_is_painted(window, qtbot, monkeypatch):
    monkeypatch.setattr(worker_module, "YIELD_MAX_S", 60.0)
    window.show()
    window.panel.widgets["seed"].setValue(7)
    wait_shown(qtbot, window)
    qtbot.waitUntil(lambda: not window.worker.yielding(), timeout=2000)  # long before YIELD_MAX_S (60 s)
    window.hide()
    window.panel.widgets["seed"].setValue(8)  # hidden: nothing will paint, the swap lets it go on
    wait_shown(qtbot, window)
    assert not window.worker.yielding()


def test_edits_made_while_the_worker_waits_for_the_window_replace_its_next_request(yielding_worker, qtbot):
    worker, computed = yielding_worker
    worker.submit(tiny_request(2, seed=2))
    assert worker.yielding()  # the worker waits for the window with request 2 not yet taken
    worker.submit(tiny_request(3, seed=3))
    worker.resume(1)
    qtbot.waitUntil(lambda: computed[-1:] == [3], timeout=5000)
    assert computed == [0, 3]  # request 2, replaced while waiting, was never computed


def test_the_worker_goes_on_only_once_both_views_have_painted_the_result(window, qtbot, monkeypatch):
    # the tensor view is often painted one event-loop pass after the grid: the worker waits for both
    monkeypatch.setattr(worker_module, "YIELD_MAX_S", 60.0)
    window.show()
    wait_shown(qtbot, window)
    qtbot.wait(100)
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


# A thread frees 48 MiB it allocated in blocks under glibc's (raised) mmap threshold, then
# malloc_trim runs, as the reaper's does. Prints how much RSS stayed, in MiB.
ARENA_TOP = """
import ctypes, os, sys, threading
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

if sys.argv[1] == "worker":  # what the app does: a Worker tunes malloc as it starts
    from attnviz.ui.window.worker import Worker
    assert Worker().stop()
libc.free(libc.malloc(30 << 20))  # untuned: glibc's thresholds now rise to ~30 MiB (mmap), ~60 MiB (trim)

def work():
    blocks = [libc.malloc(8 << 20) for _ in range(6)]
    for b in blocks:
        ctypes.memset(b, 1, 8 << 20)
    for b in blocks:
        libc.free(b)

before = rss()
t = threading.Thread(target=work)
t.start()
t.join()
libc.malloc_trim(0)
print((rss() - before) >> 20)
"""


@pytest.mark.skipif(worker_module._libc("mallopt") is None, reason="glibc only")
def test_memory_a_thread_freed_goes_back_to_the_system():
    import subprocess

    def retained(mode: str) -> int:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
        env["PYTHONPATH"] = os.pathsep.join(sys.path)
        done = subprocess.run([sys.executable, "-c", ARENA_TOP, mode], capture_output=True, text=True, env=env,
                              timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        return int(done.stdout.split()[-1])

    if retained("plain") < 32:
        pytest.skip("this glibc returns a thread arena's free top by itself")
    assert retained("worker") < 16  # the trim threshold: a free top past it is handed back


def test_the_window_leaves_scores_out_and_an_npz_export_gets_them_back():
    import numpy as np

    from attnviz.ui.window.worker import complete_stages, window_record

    config = RunConfig.for_variant("causal", d_model=32, heads=4, seq_q=12, seed=5)
    record = window_record(config, frozenset({"weights"}))
    assert "scores" not in record and "scores" in window_record(config, frozenset({"scores"}))
    shown = run(config, record=record)
    full = complete_stages(shown)
    assert "scores" not in shown.stages
    assert set(full.stages) == {"x", "q", "k", "v", "scores", "weights", "dropped", "context", "output"}
    np.testing.assert_array_equal(full.scores, run(config).scores)
    np.testing.assert_array_equal(full.weights, shown.weights)


def test_a_short_pause_keeps_the_memory_the_next_edit_writes_into(qapp, monkeypatch):
    """The replaced result is freed after HOLD_S, but its map buffers and the heap's pages stay until IDLE_S
    more has passed without a result (or a flush asks): the next edit after a pause maps nothing anew."""
    from attnviz.core.kernel import buffers

    trims: list[int] = []
    monkeypatch.setattr(worker_module, "_malloc_trim", lambda: trims.append)
    monkeypatch.setattr(buffers, "MIN_BYTES", 1 << 10)
    buffers.release()
    log: list = []
    reaper = Reaper()
    reaper.HOLD_S, reaper.IDLE_S = 0.05, 60.0
    reaper.drop(Big(log), buffers.empty((1000, 10), torch.float32))  # a result and the maps it holds
    deadline = time.monotonic() + 10
    while not log and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [what for what, _, _ in log] == ["freed"]
    assert buffers.idle_bytes() == 40_000 and trims == []  # freed, kept for the next run
    assert not reaper.flush() and buffers.idle_bytes() == 0 and trims == [0]


def test_the_reaper_gives_free_map_buffers_back_on_a_flush(monkeypatch):
    from attnviz.core.kernel import buffers
    from attnviz.ui.window.worker import Reaper

    monkeypatch.setattr(buffers, "MIN_BYTES", 1 << 10)
    buffers.release()
    free = buffers.empty((1000, 10), torch.float32)
    del free
    assert buffers.idle_bytes() == 40_000  # kept for the next run of this shape
    reaper = Reaper()
    reaper.drop(object())
    assert reaper.flush() and buffers.idle_bytes() == 0
