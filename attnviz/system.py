"""What the machine says about itself, and how attnviz's background work shares it.

The /proc readers (Linux; None elsewhere, so callers pick their own fallback) are the only code in attnviz
and benchmarks/ that opens /proc. The thread policy says how many torch threads and how much niceness the
app's background threads take: the worker reads it before each forward, benchmarks set it through
set_thread_policy() (or using_thread_policy()) instead of overwriting module globals.
No Qt here, and torch only inside the functions that set its threads: core and benchmarks import it.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace

# --- /proc ------------------------------------------------------------------------------------------------


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _field(path: str, key: str) -> list[str] | None:
    """The words after "Key:" on that line of a /proc file, or None."""
    for line in (_read(path) or "").splitlines():
        if line.startswith(key + ":"):
            return line.split()[1:]
    return None


def proc_value(path: str, key: str) -> int | None:
    """The number on a "Key:  N [kB]" line of a /proc file (a kB figure in bytes), or None."""
    words = _field(path, key)
    try:
        return int(words[0]) * (1024 if words[1:2] == ["kB"] else 1)  # type: ignore[index]
    except (TypeError, IndexError, ValueError):
        return None


def memory_bytes(key: str = "MemAvailable") -> int | None:
    """A /proc/meminfo figure in bytes (MemAvailable, MemTotal), or None."""
    return proc_value("/proc/meminfo", key)


def umask() -> int | None:
    """This process's umask (/proc/self/status: reading it by os.umask would change it for every thread)."""
    words = _field("/proc/self/status", "Umask")
    try:
        return int(words[0], 8)  # type: ignore[index]
    except (TypeError, IndexError, ValueError):
        return None


def cpu_jiffies() -> tuple[int, int] | None:
    """(all, idle) jiffies of every CPU together since boot (/proc/stat), or None."""
    text = _read("/proc/stat")
    try:
        cpu = [int(x) for x in text.splitlines()[0].split()[1:]]  # type: ignore[union-attr]
    except (AttributeError, IndexError, ValueError):
        return None
    # user nice system idle iowait irq softirq steal (guest is counted inside user); idle with iowait
    return sum(cpu[:8]), cpu[3] + (cpu[4] if len(cpu) > 4 else 0)


def own_jiffies() -> int | None:
    """CPU jiffies this process has used, user + system (/proc/self/stat), or None."""
    text = _read("/proc/self/stat")
    try:
        own = text.rsplit(")", 1)[1].split()  # type: ignore[union-attr]  # the fields after the command name
        return int(own[11]) + int(own[12])
    except (AttributeError, IndexError, ValueError):
        return None


def resident_bytes() -> int | None:
    """This process's resident memory (/proc/self/statm), or None."""
    text = _read("/proc/self/statm")
    try:
        return int(text.split()[1]) * os.sysconf("SC_PAGE_SIZE")  # type: ignore[union-attr]
    except (AttributeError, IndexError, ValueError):
        return None


def cpu_model() -> str | None:
    """The CPU's model name (/proc/cpuinfo), or None."""
    for line in (_read("/proc/cpuinfo") or "").splitlines():
        if line.lower().startswith("model name"):
            return line.split(":", 1)[1].strip()
    return None


def usable_cores() -> int:
    """The cores this process may run on (its affinity), else the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cpu_sample() -> tuple[int, int, int] | None:
    """(all, idle, this process's) jiffies now, for others_cores, or None where /proc cannot be read."""
    cpu, own = cpu_jiffies(), own_jiffies()
    return None if cpu is None or own is None else (*cpu, own)


def others_cores(before, after, min_window_s: float = 0.05) -> float | None:
    """The cores other programs kept busy between two cpu_sample()s: None where either is None, or where the
    window is shorter than min_window_s of each CPU (too few jiffies to say)."""
    if before is None or after is None:
        return None
    total, idle, own = (a - b for a, b in zip(after, before))
    per_cpu = total / (os.cpu_count() or 1)  # /proc/stat counts every CPU, not only those we may use
    if per_cpu < min_window_s * os.sysconf("SC_CLK_TCK"):
        return None
    return max(0.0, (total - idle - own) / per_cpu)


def free_cores(others: float, cores: int | None = None, margin: float = 0.35) -> int:
    """The cores left when other programs keep `others` busy (one counts as taken past `margin` of it), >= 1."""
    cores = cores or usable_cores()
    return max(1, min(cores, cores - math.floor(others + 1 - margin)))


# --- the thread policy ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ThreadPolicy:
    """How the app's background compute shares the machine (numbers behind the defaults: benchmarks/README.md,
    "Contention").

    threads: torch threads per forward: "adaptive" (the cores other programs leave free, session/cpushare.py),
    "all" (torch's default, one per core) or a fixed number. quiet_nice: how much nicer than the process a
    background thread runs while every core is free (the GUI thread then wins every core it wants);
    busy_nice: the nicer level of the lane that runs while other programs hold cores (at quiet_nice it would
    get a sliver of any core it shares). Niceness cannot be lowered again without privileges, so each level
    has its own long-lived thread.
    """

    threads: str | int = "adaptive"
    quiet_nice: int = 10
    busy_nice: int = 4


MAX_NICE = 19
_policy = ThreadPolicy()


def thread_policy() -> ThreadPolicy:
    """The policy in force."""
    return _policy


def set_thread_policy(policy: ThreadPolicy) -> ThreadPolicy:
    """Put `policy` in force for workers started from now on (their lanes take the niceness when they
    start); return the one it replaces."""
    global _policy
    if not (policy.threads in ("adaptive", "all") or isinstance(policy.threads, int) and policy.threads > 0):
        raise ValueError(f"threads must be 'adaptive', 'all' or a positive number, got {policy.threads!r}")
    previous, _policy = _policy, policy
    return previous


@contextlib.contextmanager
def using_thread_policy(**changes) -> Iterator[ThreadPolicy]:
    """The policy with `changes` (ThreadPolicy fields) in force inside the block, the previous one after."""
    previous = set_thread_policy(replace(_policy, **changes))
    try:
        yield _policy
    finally:
        set_thread_policy(previous)


def model_threads(threads: int) -> int:
    """Threads for a model forward: one core fewer, left to this app's own GUI thread, so it runs on the
    busy lane, as when another program holds a core.

    A model forward is a chain of many mid-sized ops, and while it runs the window is usually still painting
    the previous result; a forward thread sharing that core makes every op wait, and at nice 10 it waits
    longest (benchmarks/README.md: a text edit of a MiniLM-sized model at 128 tokens on 2 cores reached the
    screen fastest with 1 thread at nice 0).
    """
    return max(1, threads - 1)


def set_torch_threads(n: int) -> None:
    """Set the calling thread's torch thread count (OpenMP's count is per thread)."""
    import torch

    if torch.get_num_threads() != n:
        torch.set_num_threads(n)


@contextlib.contextmanager
def torch_threads(n: int | None = None) -> Iterator[None]:
    """Inside the block the calling thread runs torch on `n` threads (None: as it is); after it, on what it
    had before (a benchmark matching the worker's count, then leaving the process as it found it)."""
    import torch

    own = torch.get_num_threads()
    if n is not None:
        set_torch_threads(n)
    try:
        yield
    finally:
        set_torch_threads(own)


def lower_priority(step: int | None = None) -> None:
    """Let the GUI thread win the CPU over the calling background thread: `step` (default the policy's
    quiet_nice) nicer than it is.

    On a machine with few cores a forward pass keeps every core busy (torch starts one thread per physical
    core); at the GUI thread's priority the GUI thread then waits its turn (at XL on 2 cores: stalls of
    0.1-0.4 s during a burst of edits, 31-39 ms when lowered). Niceness is per thread on Linux and inherited
    by threads the calling thread starts later, torch's intra-op pool included. Call it only on threads
    that never start pools the GUI thread shares (Qt's global QThreadPool, used by QImage conversions, would
    inherit it). Elsewhere it does nothing.
    """
    if not sys.platform.startswith("linux"):
        return
    step = _policy.quiet_nice if step is None else step
    if step <= 0:
        return
    tid = threading.get_native_id()
    with contextlib.suppress(OSError):  # not permitted in some sandboxes: stay at the normal priority
        os.setpriority(os.PRIO_PROCESS, tid, min(os.getpriority(os.PRIO_PROCESS, tid) + step, MAX_NICE))


def no_display() -> bool:
    """Linux without X11 or Wayland and no Qt platform chosen: Qt would abort, so the app and show() say so."""
    return (sys.platform.startswith("linux") and not os.environ.get("QT_QPA_PLATFORM")
            and not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"))


# --- native code's own lines on stderr ---------------------------------------------------------------------

_catch_native = False


def catch_native_stderr() -> None:
    """For the command line: native code's lines on stderr (Rust's panic hook in `tokenizers` writes two or three
    before the panic reaches Python) are caught around `native_stderr_caught` blocks, so a refusal stays one
    line. Process-wide (file descriptor 2), so only where one thread writes: not in the app."""
    global _catch_native
    _catch_native = True


@contextlib.contextmanager
def native_stderr_caught(drop=lambda exc: False) -> Iterator[None]:
    """While catch_native_stderr() is on: what native code writes to stderr inside the block is held, then written
    after it, unless the block raised an exception `drop(exc)` is true of (a panic the caller turns into its own
    one line)."""
    if not _catch_native:
        yield
        return
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    dropped = False
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        except BaseException as exc:
            dropped = drop(exc)
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            if not dropped and (written := held.read()):
                os.write(2, written)
