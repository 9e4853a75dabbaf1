"""Background threads' manners: replaced results are freed off the GUI thread, a moment later,
and every background thread runs below the GUI thread."""

from __future__ import annotations

import os
import sys
import threading
import time
import weakref

import pytest
import torch
from uihelpers import wait_shown

from attnviz.core import run
from attnviz.ui.worker import BACKGROUND_NICE, Reaper, Worker, lower_priority

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread niceness is Linux's")


class Big:
    """Stands in for a replaced result: records which thread frees it and when."""

    def __init__(self, log: list):
        self.log = log

    def __del__(self):
        self.log.append(("freed", threading.current_thread().name, time.monotonic()))


def nice_of(tid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, tid)


def test_the_reaper_holds_a_replaced_result_a_moment_then_frees_it_on_its_thread(qapp):
    log: list = []
    reaper = Reaper()
    reaper.HOLD_S = 0.3
    dropped_at = time.monotonic()
    reaper.drop(Big(log))  # the reaper now holds the only reference
    deadline = time.monotonic() + 10
    while not log and time.monotonic() < deadline:
        time.sleep(0.01)
    (what, thread, freed_at), = log
    assert (what, thread) == ("freed", "attnviz-reaper")
    assert freed_at - dropped_at >= 0.3 * 0.9  # held, not freed while the GUI paints its successor


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
    time.sleep(0.3)
    assert not newer  # held: at most one replaced result is kept alive, the newest


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
    gui_nice = nice_of(threading.get_native_id())
    worker = Worker(compute=run)
    try:
        tid = worker._thread.native_id
        qtbot.waitUntil(lambda: nice_of(tid) >= BACKGROUND_NICE, timeout=5000)
        assert nice_of(threading.get_native_id()) == gui_nice
    finally:
        assert worker.stop()


@linux_only
def test_threads_started_after_lowering_inherit_it(qapp):
    """torch's intra-op threads, started by the worker, must yield to the GUI thread too."""
    before = set(os.listdir("/proc/self/task"))
    seen: dict[str, int] = {}

    def body():
        lower_priority()
        seen["self"] = nice_of(threading.get_native_id())
        helper = threading.Thread(target=lambda: seen.setdefault("child", nice_of(threading.get_native_id())))
        helper.start()
        helper.join()
        torch.softmax(torch.rand(512, 512) @ torch.rand(512, 512), -1)  # starts this thread's pool
        seen["pool"] = sum(nice_of(int(t)) >= BACKGROUND_NICE
                           for t in set(os.listdir("/proc/self/task")) - before if t != str(threading.get_native_id()))

    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert seen["self"] >= BACKGROUND_NICE and seen["child"] >= BACKGROUND_NICE
    if torch.get_num_threads() > 1:
        assert seen["pool"] >= 1
