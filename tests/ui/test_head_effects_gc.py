"""A panel's background run (head effects, circuits, attribution, patching) starts by freezing what is alive
(the loaded model among it), so the garbage collector's full passes during the run, which hold the GIL and so
stall the window, skip those objects."""

from __future__ import annotations

import gc
import threading

import numpy as np

from attnviz.ui.panels.circuit_job import Job


def test_starting_a_run_freezes_the_objects_alive_and_computes(qtbot):
    release = threading.Event()

    def compute(cancel, progress):
        release.wait(5)
        return np.ones((2, 3))

    job = Job("head-effects")
    before = gc.get_freeze_count()
    alive = [[] for _ in range(5_000)]  # tracked containers made before the run starts
    with qtbot.waitSignal(job.sigDone, timeout=5_000) as done:
        job.start("key", compute)
        assert gc.get_freeze_count() >= before + len(alive)
        release.set()
    assert done.args[0] == "key" and np.array_equal(done.args[1], np.ones((2, 3)))


def test_a_models_first_forward_in_the_window_freezes_what_is_alive_once(window, qtbot, monkeypatch):
    # the loaded model (and all transformers built for it) leaves the collector's full passes, which held the
    # GIL 40-160 ms every ~45 s of a long run; a second forward of the same model freezes nothing more
    from uihelpers import wait_shown

    from attnviz.core import load_preset

    freezes = []
    monkeypatch.setattr(gc, "freeze", lambda: freezes.append(threading.current_thread()))
    window.panel.set_config(load_preset("toy-induction"))
    wait_shown(qtbot, window)
    assert len(freezes) == 1 and freezes[0] is not threading.main_thread()
    window.panel.widgets["ablate"].setText("0.1")  # another forward of the same model
    wait_shown(qtbot, window)
    assert len(freezes) == 1
