"""How many cores the session's forwards may use now: the machine's cores minus those other programs keep busy.

A forward pass splits each op over torch's threads and waits for the slowest. With one thread per
core and one core held by another program, the thread that shares that core gets a fraction of
it (and at nice 10, almost none), so every op waits for it (benchmarks/README.md, Contention: the thread and
priority policy). With one thread fewer than the busy cores leave, the loss is the lost core
only (<= 2x). So before each run the session measures, from /proc/stat and /proc/self/stat (read by
attnviz.system), how many cores other processes used since the previous run, and runs with the cores left
(at least one).

Linux only; elsewhere (or if /proc cannot be read) the session keeps torch's default.
"""

from __future__ import annotations

import math
import os

from attnviz.system import cpu_jiffies, own_jiffies, usable_cores

MIN_WINDOW_S = 0.05  # shorter windows say too little: keep the previous estimate
BUSY_MARGIN = 0.35  # a core counts as taken when others used more than this share of it


def _read() -> tuple[int, int, int] | None:
    """(all jiffies, idle jiffies, this process's jiffies) summed over every CPU, or None."""
    cpu, own = cpu_jiffies(), own_jiffies()
    return None if cpu is None or own is None else (*cpu, own)


class CpuShare:
    """Measures the cores other programs use between calls; `threads()` is what the next forward should use.
    A test or a benchmark hands the session one of its own (Session(share=...)): anything with `cores` and
    `threads()`."""

    def __init__(self, cores: int | None = None):
        self.cores = cores or usable_cores()
        self.others = 0.0  # cores other programs kept busy in the last window
        self._last = _read()

    def sample(self) -> float:
        """Update and return the number of cores other processes used since the previous sample."""
        now = _read()
        if now is None or self._last is None:
            self._last = now
            return self.others
        total, idle, own = (a - b for a, b in zip(now, self._last))
        per_cpu = total / max(self.cores_on_machine(), 1)  # jiffies of one CPU in the window
        if per_cpu < MIN_WINDOW_S * os.sysconf("SC_CLK_TCK"):
            return self.others
        self._last = now
        self.others = max(0.0, (total - idle - own) / per_cpu)
        return self.others

    @staticmethod
    def cores_on_machine() -> int:
        return os.cpu_count() or 1  # /proc/stat counts every CPU, not only those we may use

    def threads(self) -> int:
        """Cores left for the worker: `cores` minus the cores others hold (rounded), at least 1."""
        taken = math.floor(self.sample() + 1 - BUSY_MARGIN)
        return max(1, min(self.cores, self.cores - taken))
