"""The thread policy: how many torch threads a forward gets, and on which lane it runs.

The policy itself is attnviz.system's ThreadPolicy (numbers in benchmarks/README.md, "Contention").
Before each request the session measures the cores other programs used since the last one (cpushare). All
cores free: the forward runs with one torch thread per core on the `quiet` lane, quiet_nice nicer than the GUI.
Some cores busy: it runs with the cores left on the `busy` lane, busy_nice nicer (lanes.py).
"""

from __future__ import annotations

from attnviz.core import RunConfig
from attnviz.core.runs.runner import SLOW_CPU_DTYPES, estimate_flops
from attnviz.system import model_threads, thread_policy

# Under "adaptive", a forward of fewer operations than this runs on one torch thread, on the busy
# lane. Right after an edit the GUI thread repaints the edited control on one of the cores; a small
# forward is over before that is done, and with a thread on each core every op waited for the
# thread sharing the GUI's core (S in the window was faster on one thread). Two threads were even at 0.48 GFLOP and won
# every pair from 0.67 GFLOP up (benchmarks/README.md, "Threads for small forwards"); S is 0.30. Half precision on the
# CPU runs far slower than its count says, so it never counts as small.
SMALL_FORWARD_FLOPS = 400_000_000


def small_forward(config: RunConfig) -> bool:
    """Whether `config`'s forward is short enough to leave the GUI thread its core (see above)."""
    if config.spec.backed or config.dtype in SLOW_CPU_DTYPES:  # models: see model_threads
        return False
    return estimate_flops(config) < SMALL_FORWARD_FLOPS


def thread_count(share, config: RunConfig) -> int:
    """Torch threads for the next forward of `config` under the thread policy (a model's: see model_threads).
    `share`: the cores other programs leave (cpushare.CpuShare, or anything with `cores` and `threads()`)."""
    policy = thread_policy().threads
    if policy == "all":
        n = share.cores
    elif policy == "adaptive":
        n = share.threads()  # sampled on every request: each window it measures is one request long
        n = 1 if small_forward(config) else n
    else:
        n = int(policy)
    return model_threads(n) if config.spec.backed else n


def lane_name(threads: int, cores: int) -> str:
    """The lane a forward on `threads` torch threads runs on: `quiet` with every core, else `busy`."""
    return "quiet" if threads >= cores else "busy"


def as_is(share, config: RunConfig) -> int:
    """Torch threads for a forward run as a user's script runs it: the calling thread's count, unchanged (the CLI;
    Session(threads=as_is))."""
    import torch

    return torch.get_num_threads()
