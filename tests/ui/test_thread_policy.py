"""The worker takes its thread policy from attnviz.system: what benchmarks set through its functions is what
a new worker runs with."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from attnviz.core import RunConfig, run
from attnviz.system import MAX_NICE, using_thread_policy
from attnviz.ui.window.worker import Worker, thread_count


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread niceness is Linux's")
def test_a_new_worker_s_lanes_take_the_policy_s_niceness(qtbot):
    gui = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    with using_thread_policy(quiet_nice=2, busy_nice=1):
        worker = Worker(compute=run)
    try:
        qtbot.waitUntil(lambda: hasattr(worker, "lanes"), timeout=5000)
        nice = {name: lane.thread.native_id for name, lane in worker.lanes.items()}
        qtbot.waitUntil(lambda: os.getpriority(os.PRIO_PROCESS, nice["quiet"]) != gui or gui == MAX_NICE,
                        timeout=5000)
        assert os.getpriority(os.PRIO_PROCESS, nice["quiet"]) == min(gui + 2, MAX_NICE)
        assert os.getpriority(os.PRIO_PROCESS, nice["busy"]) == min(gui + 1, MAX_NICE)
    finally:
        assert worker.stop()


def test_a_fixed_thread_count_in_the_policy_is_what_a_forward_gets():
    class Share:
        cores = 8

        def threads(self) -> int:
            return 5

    config = RunConfig(d_model=8, heads=2, seq_q=4)
    with using_thread_policy(threads=3):
        assert thread_count(Share(), config) == 3
    with using_thread_policy(threads="all"):
        assert thread_count(Share(), config) == 8
