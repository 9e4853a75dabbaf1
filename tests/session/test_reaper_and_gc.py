"""The memory policy: replaced results are freed off the GUI thread a moment later, the memory goes back to
the system once the edits pause, and glibc's thresholds let a thread's freed memory go. The reaper's timing is
driven by a clock the test steps (Reaper(clock, thread=False)); its thread by its own seams (flush, wait_idle)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest
import torch

from attnviz.core.kernel import buffers
from attnviz.session import memory
from attnviz.session.memory import Reaper


class Big:
    """Stands in for a replaced result: records which thread frees it."""

    def __init__(self, log: list):
        self.log = log

    def __del__(self):
        self.log.append(("freed", threading.current_thread().name))


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def stepped(monkeypatch):
    """A reaper without a thread on a clock the test steps, and the malloc_trim calls it makes."""
    trims: list[int] = []
    monkeypatch.setattr(memory, "malloc_trim", lambda: trims.append)
    clock = Clock()
    reaper = Reaper(clock, thread=False)
    reaper.HOLD_S, reaper.IDLE_S = 1.0, 10.0

    def after(seconds: float) -> None:
        clock.now += seconds
        reaper.tick()
    return reaper, after, trims


def test_the_reaper_holds_a_replaced_result_then_frees_it_on_its_thread():
    log: list = []
    reaper = Reaper()
    reaper.HOLD_S = 60.0
    reaper.drop(Big(log))  # the reaper now holds the only reference
    assert reaper.wait_idle() and log == []  # held, not freed while the GUI paints
    assert reaper.flush()  # flush() frees what is held
    assert log == [("freed", "attnviz-reaper")]


def test_a_newer_result_frees_the_held_one_at_once():
    older, newer = [], []
    reaper = Reaper()
    reaper.HOLD_S = 60.0
    reaper.drop(Big(older))
    reaper.drop(Big(newer))
    assert reaper.wait_idle()
    assert older == [("freed", "attnviz-reaper")] and newer == []
    assert reaper.flush() and newer  # the newest was still held (flush freed it): only one is kept alive


def test_the_reaper_frees_a_held_result_once_hold_s_has_passed(stepped):
    reaper, after, _ = stepped
    log: list = []
    reaper.drop(Big(log))
    after(0.9)
    assert log == []
    after(0.1)  # no newer result and no flush: the hold ends by itself
    assert [what for what, _ in log] == ["freed"]
    assert not reaper.flush()  # nothing held any more


def test_the_reaper_trims_the_heap_only_once_results_stop_coming(stepped):
    reaper, after, trims = stepped
    for _ in range(5):  # a drag: each result replaces the previous one within HOLD_S
        reaper.drop(Big([]))
        after(0.5)
    assert trims == []  # malloc_trim walks the heap under the allocator's locks: not mid-drag
    after(0.5)  # the last replaced result freed after HOLD_S ...
    after(9.5)
    assert trims == []
    after(0.5)  # ... and one trim IDLE_S later
    assert trims == [0]
    after(100.0)
    assert trims == [0]  # given back once per pause
    reaper.drop(Big([]))
    assert reaper.flush() and trims == [0, 0]  # flush() asks for memory: it trims before returning


def test_a_short_pause_keeps_the_memory_the_next_edit_writes_into(stepped, monkeypatch):
    """The replaced result is freed after HOLD_S, but its map buffers and the heap's pages stay until IDLE_S
    more has passed without a result (or a flush asks): the next edit after a pause maps nothing anew."""
    reaper, after, trims = stepped
    monkeypatch.setattr(buffers, "MIN_BYTES", 1 << 10)
    buffers.release()
    log: list = []
    reaper.drop(Big(log), buffers.empty((1000, 10), torch.float32))  # a result and the maps it holds
    after(1.0)
    assert [what for what, _ in log] == ["freed"]
    assert buffers.idle_bytes() == 40_000 and trims == []  # freed, kept for the next run
    after(5.0)
    assert buffers.idle_bytes() == 40_000 and trims == []
    assert not reaper.flush() and buffers.idle_bytes() == 0 and trims == [0]


def test_the_reaper_gives_free_map_buffers_back_on_a_flush(monkeypatch):
    monkeypatch.setattr(buffers, "MIN_BYTES", 1 << 10)
    buffers.release()
    free = buffers.empty((1000, 10), torch.float32)
    del free
    assert buffers.idle_bytes() == 40_000  # kept for the next run of this shape
    reaper = Reaper(thread=False)
    reaper.drop(object())
    assert reaper.flush() and buffers.idle_bytes() == 0


def test_a_models_first_forward_freezes_what_is_alive_once(monkeypatch):
    from attnviz.core import RunConfig
    from attnviz.session.memory import FreezeOnLoad

    freezes = []
    monkeypatch.setattr(memory.gc, "freeze", lambda: freezes.append(1))
    freezer = FreezeOnLoad()
    toy = RunConfig.for_variant("toy-induction")
    freezer.after(RunConfig())  # a seed variant loads nothing
    freezer.after(toy)
    freezer.after(toy.replace(ablate=("0.1",)))  # the same model again
    assert len(freezes) == 1
    freezer.after(RunConfig.for_variant("toy-reverse"))
    assert len(freezes) == 2


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

if sys.argv[1] == "session":  # what the app does: a session tunes malloc as it starts
    from attnviz.session import Session
    assert Session(sync=True).stop()
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


@pytest.mark.skipif(memory._libc("mallopt") is None, reason="glibc only")
def test_memory_a_thread_freed_goes_back_to_the_system():
    def retained(mode: str) -> int:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
        env["PYTHONPATH"] = os.pathsep.join(sys.path)
        done = subprocess.run([sys.executable, "-c", ARENA_TOP, mode], capture_output=True, text=True, env=env,
                              timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        return int(done.stdout.split()[-1])

    if retained("plain") < 32:
        pytest.skip("this glibc returns a thread arena's free top by itself")
    assert retained("session") < 16  # the trim threshold: a free top past it is handed back
