"""attnviz.system: the /proc readers (checked against what the OS says through other calls) and the thread
policy (set and restored through its functions, never by overwriting globals)."""

from __future__ import annotations

import mmap
import os
import resource
import sys
import threading

import pytest

from attnviz import system

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


@linux
def test_memory_total_is_what_sysconf_counts():
    assert system.memory_bytes("MemTotal") == os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert 0 < system.memory_bytes() <= system.memory_bytes("MemTotal")
    assert system.memory_bytes("NoSuchKey") is None


@linux
def test_umask_is_read_without_changing_it():
    old = os.umask(0o027)
    try:
        assert system.umask() == 0o027
        assert os.umask(0o027) == 0o027  # still what was set
    finally:
        os.umask(old)


@linux
def test_cpu_readers_agree_with_the_os():
    total, idle = system.cpu_jiffies()
    assert 0 <= idle <= total
    used = os.times()
    own_s = system.own_jiffies() / os.sysconf("SC_CLK_TCK")
    assert abs(own_s - (used.user + used.system)) < 1.0  # the same clock, read two ways
    rss = system.resident_bytes()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # the kernel updates it lazily: near, not above
    assert 0 < rss < 1.05 * peak + (8 << 20)  # (well under the peak after a heavier test gave memory back)
    block = mmap.mmap(-1, 256 << 20)  # fresh pages, resident once written: the reader must see them come
    page = b"x" * (1 << 20)
    for _ in range(256):
        block.write(page)
    grown = system.resident_bytes() - rss
    block.close()
    assert 200 << 20 < grown < 320 << 20


def test_a_reader_of_a_missing_file_says_none(monkeypatch):
    monkeypatch.setattr(system, "_read", lambda path: None)
    assert (system.memory_bytes(), system.umask(), system.cpu_jiffies(), system.own_jiffies(),
            system.resident_bytes(), system.cpu_model()) == (None,) * 6


def test_the_thread_policy_is_set_and_restored_through_functions():
    before = system.thread_policy()
    with system.using_thread_policy(threads=2, busy_nice=0) as inside:
        assert system.thread_policy() is inside and (inside.threads, inside.busy_nice) == (2, 0)
        assert inside.quiet_nice == before.quiet_nice
    assert system.thread_policy() == before
    with pytest.raises(ValueError):
        system.set_thread_policy(system.ThreadPolicy(threads="many"))
    assert system.thread_policy() == before


@linux
def test_lower_priority_takes_the_policy_s_quiet_level():
    seen = {}

    def lowered():
        tid = threading.get_native_id()
        start = os.getpriority(os.PRIO_PROCESS, tid)
        system.lower_priority()
        seen["step"] = os.getpriority(os.PRIO_PROCESS, tid) - start, start

    with system.using_thread_policy(quiet_nice=3):
        thread = threading.Thread(target=lowered)
        thread.start()
        thread.join()
    step, start = seen["step"]
    assert step in (min(3, system.MAX_NICE - start), 0)  # 0 where the sandbox refuses setpriority


def test_torch_threads_are_put_back_after_the_block():
    torch = pytest.importorskip("torch")
    own = torch.get_num_threads()
    with system.torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == own


def test_native_stderr_is_held_and_given_back_unless_dropped(capfd, monkeypatch):
    """What native code writes to file descriptor 2 inside the block comes out after it; a dropped exception's
    lines (a tokenizer's panic, which the caller says in one line of its own) do not."""
    import os

    from attnviz import system

    monkeypatch.setattr(system, "_catch_native", True)
    with system.native_stderr_caught():
        os.write(2, b"kept\n")
    with pytest.raises(KeyError), system.native_stderr_caught(drop=lambda exc: isinstance(exc, KeyError)):
        os.write(2, b"dropped\n")
        raise KeyError("x")
    with pytest.raises(ValueError), system.native_stderr_caught(drop=lambda exc: isinstance(exc, KeyError)):
        os.write(2, b"not dropped\n")
        raise ValueError("y")
    assert capfd.readouterr().err.splitlines() == ["kept", "not dropped"]
