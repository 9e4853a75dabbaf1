"""A head-effects run starts by freezing what is alive (the loaded model among it), so the garbage
collector's full passes during the run, which hold the GIL and so stall the window, skip those objects."""

from __future__ import annotations

import gc
import threading

import numpy as np

from attnviz.ui.head_effects import EffectsJob


def test_starting_a_run_freezes_the_objects_alive_and_computes(qtbot):
    release = threading.Event()

    def compute(config, position, ablation, *, cancel=None, progress=None):
        release.wait(5)
        return np.ones((2, 3))

    job = EffectsJob(compute)
    before = gc.get_freeze_count()
    alive = [[] for _ in range(5_000)]  # tracked containers made before the run starts
    with qtbot.waitSignal(job.sigDone, timeout=5_000) as done:
        job.start("key", None, None, "zero")
        assert gc.get_freeze_count() >= before + len(alive)
        release.set()
    assert done.args[0] == "key" and np.array_equal(done.args[1], np.ones((2, 3)))
