"""The thread policy: a forward takes the cores other programs leave, on the lane that fits, and every lane
(and the threads it starts) runs below the thread that made it. Driven synchronously: Session(sync=True) with
a CPU share of the test's own."""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import replace

import pytest
import torch

from attnviz.core import RunConfig, run
from attnviz.core.runs.runner import estimate_flops
from attnviz.frames import ViewOptions
from attnviz.session import Request, Session
from attnviz.session import threads as threads_module
from attnviz.session.cpushare import CpuShare
from attnviz.session.threads import SMALL_FORWARD_FLOPS, thread_count
from attnviz.system import MAX_NICE, lower_priority, model_threads, using_thread_policy

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread niceness is Linux's")


class Held(CpuShare):
    """The CPU share with the cores other programs hold set by the test, not measured."""

    def __init__(self, cores: int, others: float):
        super().__init__(cores)
        self.held, self.samples = others, 0

    def sample(self) -> float:
        self.samples += 1
        return self.held


def nice_of(tid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, tid)


def recording_run(seen: list):
    def compute(config, **kwargs):
        seen.append((torch.get_num_threads(), threading.current_thread().name))
        return run(config, **kwargs)
    return compute


def test_a_forward_uses_the_cores_other_programs_leave(monkeypatch):
    """Two cores, others holding one: the forward runs with one torch thread, on the busy lane."""
    seen: list = []
    monkeypatch.setattr(threads_module, "SMALL_FORWARD_FLOPS", 0)  # this tiny run counts as big
    share = Held(cores=2, others=1.0)
    session = Session(recording_run(seen), share=share, sync=True)
    try:
        session.submit(Request(1, RunConfig(seq_q=4, d_model=8, heads=2), ViewOptions()))
        assert seen == [(1, "attnviz-compute-shared")] and session.threads_used == 1
        share.held = 0.0
        session.submit(Request(2, RunConfig(seq_q=4, d_model=8, heads=2, seed=1), ViewOptions()))
        assert seen[1] == (2, "attnviz-compute") and session.threads_used == 2
    finally:
        assert session.stop()


def test_a_small_forward_runs_on_one_thread_with_every_core_free():
    """Below SMALL_FORWARD_FLOPS the forward leaves the GUI thread a core even on an idle machine;
    above it, it takes every free core. Models and half precision on the CPU never count as small."""
    small = RunConfig(seq_q=4, d_model=8, heads=2)
    big = RunConfig(seq_q=256, d_model=512, heads=8)
    assert estimate_flops(small) < SMALL_FORWARD_FLOPS <= estimate_flops(big)
    share = Held(cores=2, others=0.0)
    assert thread_count(share, small) == 1
    assert share.samples, "a small forward must still sample other programs' CPU use (its window would grow)"
    assert thread_count(share, big) == 2
    assert thread_count(share, replace(small, dtype="bfloat16")) == 2
    toy = RunConfig.for_variant("toy-reverse", text="1234")  # tiny, but a model: one core left, not one thread
    assert thread_count(Held(cores=3, others=0.0), toy) == model_threads(3) == 2
    seen: list = []
    session = Session(recording_run(seen), share=share, sync=True)
    try:
        session.submit(Request(1, small, ViewOptions()))
        assert seen == [(1, "attnviz-compute-shared")]
    finally:
        assert session.stop()


def test_a_fixed_thread_count_in_the_policy_is_what_a_forward_gets():
    config = RunConfig(d_model=8, heads=2, seq_q=4)
    with using_thread_policy(threads=3):
        assert thread_count(Held(cores=8, others=0.0), config) == 3
    with using_thread_policy(threads="all"):
        assert thread_count(Held(cores=8, others=3.0), config) == 8


@linux_only
def test_a_new_session_s_lanes_take_the_policy_s_niceness():
    """The lane used when every core is free runs quiet_nice nicer than the thread that made it; the one used
    when other programs hold cores busy_nice nicer (nice 10 starved it there)."""
    gui = nice_of(threading.get_native_id())
    with using_thread_policy(quiet_nice=2, busy_nice=1):
        session = Session(run, sync=True)
        session.submit(Request(1, RunConfig(seq_q=4, d_model=8, heads=2), ViewOptions()))
    try:
        for lane in session.lanes.values():
            lane.call(lambda: None)  # a lane lowers its priority before it runs anything
        assert nice_of(session.lanes["quiet"].thread.native_id) == min(gui + 2, MAX_NICE)
        assert nice_of(session.lanes["busy"].thread.native_id) == min(gui + 1, MAX_NICE)
        assert nice_of(threading.get_native_id()) == gui
    finally:
        assert session.stop()


@linux_only
def test_threads_started_after_lowering_inherit_it():
    """torch's intra-op threads, started by a lane, must yield to the GUI thread too."""
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
