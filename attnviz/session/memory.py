"""The memory policy: glibc's malloc thresholds, the reaper that frees replaced results off the GUI thread, and
when what is alive leaves the garbage collector's full passes (the one gc policy: freeze_alive)."""

from __future__ import annotations

import functools
import gc
import os
import queue
import sys
import threading
import time
from collections.abc import Callable

from attnviz.core import RunConfig
from attnviz.core.kernel import buffers
from attnviz.system import lower_priority


def freeze_alive() -> None:
    """Leave everything alive now out of the garbage collector's full passes: it lives as long as the app (or the
    loaded model). A full pass over torch, Qt, a loaded model and transformers' modules held the GIL long enough
    to be the window's longest stalls (benchmarks/README.md, Behind the code). Called after start-up, after a
    model's first forward (FreezeOnLoad), and before a panel's long background job."""
    gc.freeze()


class FreezeOnLoad:
    """freeze_alive after each model's first forward (it loads then), once per model."""

    def __init__(self) -> None:
        self._seen: set[tuple[str, str]] = set()

    def after(self, config: RunConfig) -> None:
        loaded = (config.variant, config.model)
        if config.spec.backed and loaded not in self._seen:
            self._seen.add(loaded)
            freeze_alive()


def _libc(name: str):
    """A glibc function, or None (not Linux, or not glibc: musl, ...)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return getattr(ctypes.CDLL("libc.so.6"), name)
    except (OSError, AttributeError):
        return None


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)
MMAP_THRESHOLD_BYTES = 32 << 20  # the most glibc's own dynamic threshold reaches on 64-bit
TRIM_THRESHOLD_BYTES = 16 << 20


@functools.cache
def tune_malloc() -> bool:
    """Fix glibc's thresholds once per process: blocks up to 32 MiB come from the heap, as glibc's
    dynamic rule settles on anyway, but a heap's free top past 16 MiB goes back to the system.

    The dynamic rule also raises the trim threshold to 64 MiB, and malloc_trim never trims the top of
    a thread's arena, so free memory stayed resident in the worker threads' arenas; these thresholds left
    less, at the same S/M/L latencies (benchmarks/README.md, Memory after a fuzz pass: glibc's malloc thresholds)."""
    mallopt = _libc("mallopt")
    if mallopt is None or any(k.startswith("MALLOC_") or k == "GLIBC_TUNABLES" for k in os.environ):
        return False  # not glibc, or the user tunes malloc: theirs wins
    mmap_set = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
    return bool(mmap_set) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))


def malloc_trim():
    """glibc's malloc_trim, or None. After a free glibc keeps medium blocks in the heap (random edits grew RSS by memory
    that was free inside the process: benchmarks/README.md, Behind the code); trimming once a burst of edits is over and
    its last replaced result is freed hands those pages back."""
    return _libc("malloc_trim")


class _Flush:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.freed = False


class _Barrier:
    def __init__(self) -> None:
        self.done = threading.Event()


PAUSE_KEEP_BYTES = 256 << 20  # free map buffers kept once the edits have paused for a while (core/kernel/buffers.py)


class Reaper:
    """Lets go of replaced results on a background thread, a moment after the GUI is done with them.

    Freeing GiB of maps costs the kernel time (benchmarks/README.md, Behind the code). On the GUI thread that is a
    visible stall; on another thread right after a new result arrived it still stalled the GUI thread. So the newest
    replaced result is held for HOLD_S, and freed early when a newer one replaces it or when flush() asks for its
    memory: at most one extra result is alive, and during fast updates each goes as the next comes.

    The memory itself (free map buffers past PAUSE_KEEP_BYTES, the heap's free pages) goes back to the
    system only once no result has come for IDLE_S more, or on flush(): the next edit writes into it
    again. Given back after every pause of a second, a 30-layer model's next forward at 512 tokens
    mapped its maps and the heap's pages anew, ~80,000 page faults (benchmarks/README.md, Behind the code).

    `clock` tells the time; with thread=False nothing runs in the background: drop() and flush() act at once
    and tick() does what is due by the clock (tests step a clock of their own). The thread starts with the first
    call that hands it something: a script's session that never replaces a result (the CLI) starts none.
    """

    HOLD_S = 1.0
    IDLE_S = 10.0

    def __init__(self, clock: Callable[[], float] = time.monotonic, thread: bool = True) -> None:
        self._clock = clock
        self._queue: queue.SimpleQueue | None = queue.SimpleQueue() if thread else None
        self._held: tuple | None = None
        self._given_back = True
        self._due: float | None = None  # when the hold or the pause ends (None: nothing to wait for)
        self._trim = malloc_trim()
        self._thread: threading.Thread | None = None
        self._starting = threading.Lock()

    def drop(self, *objects) -> None:
        """Hold the last references to `objects` (a replaced result) and free them later, on the reaper's thread."""
        self._put(objects)

    def flush(self, timeout: float = 10.0) -> bool:
        """Free what is held now, give the memory back, and wait for it; True if a result was freed."""
        request = _Flush()
        self._put(request)
        request.done.wait(timeout)
        return request.freed

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Wait until everything dropped so far is handled (held or freed); True unless `timeout` passed first."""
        barrier = _Barrier()
        self._put(barrier)
        return barrier.done.wait(timeout)

    def tick(self) -> None:
        """Do what is due by the clock: free the held result after HOLD_S, give the memory back after IDLE_S."""
        if self._due is not None and self._clock() >= self._due:
            self._expire()

    def _put(self, item) -> None:
        if self._queue is None:
            self._take(item)
            return
        with self._starting:  # the GUI thread drops, the session's thread flushes: one thread for both
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="attnviz-reaper", daemon=True)
                self._thread.start()
        self._queue.put(item)

    def _loop(self) -> None:
        lower_priority()
        while True:
            wait = None if self._due is None else max(0.0, self._due - self._clock())
            try:
                self._take(self._queue.get(timeout=wait))
            except queue.Empty:
                self.tick()

    def _give_back(self, keep_bytes: int) -> None:
        buffers.release(keep_bytes)
        if self._trim is not None:  # malloc_trim walks the whole heap under the allocator's locks: not mid-drag
            self._trim(0)
        self._given_back = True

    def _expire(self) -> None:
        if self._held is None:  # no result for IDLE_S after the last one was freed
            self._give_back(PAUSE_KEEP_BYTES)
        else:
            self._held, self._given_back = None, False  # the held result is freed here
        self._schedule()

    def _take(self, item) -> None:
        if isinstance(item, _Barrier):
            item.done.set()
            return
        freeing = self._held is not None
        self._held = item if isinstance(item, tuple) else None  # the previous one is freed here
        self._given_back = self._given_back and not freeing
        if isinstance(item, _Flush):
            self._give_back(0)  # a flush wants all the memory back
            item.freed = freeing
            item.done.set()
        self._schedule()

    def _schedule(self) -> None:
        wait = self.HOLD_S if self._held is not None else None if self._given_back else self.IDLE_S
        self._due = None if wait is None else self._clock() + wait
