"""`attnviz render` runs its forward through a sync Session (attnviz/session) as a script runs it: on the calling
thread, with torch's threads and the thread's niceness as they are, no thread started, nothing presented for views
it never draws; the run keeps what the command asks for (--stages, --region)."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest
import torch

import attnviz.core as core
from attnviz.cli import main
from attnviz.core import RunConfig, run
from attnviz.core.runs.runner import run_stages
from attnviz.session import session as session_module

SMALL = ["--d-model", "8", "--heads", "2", "--seq-q", "6"]


@pytest.mark.skipif(not hasattr(os, "getpriority"), reason="niceness is POSIX's")
def test_render_runs_its_forward_on_the_calling_thread_as_it_finds_it(tmp_path, monkeypatch):
    seen = []

    def compute(config, **kwargs):
        seen.append((threading.current_thread(), torch.get_num_threads(),
                     os.getpriority(os.PRIO_PROCESS, threading.get_native_id()), set(threading.enumerate())))
        return run(config, **kwargs)

    monkeypatch.setattr(core, "run", compute)
    own = torch.get_num_threads()
    torch.set_num_threads(3)  # not what the session's thread policy picks for a tiny forward
    try:
        before = (threading.current_thread(), 3, os.getpriority(os.PRIO_PROCESS, threading.get_native_id()),
                  set(threading.enumerate()))
        assert main(["render", *SMALL, "-o", str(tmp_path / "m.npz")]) == 0
        assert seen == [before] and torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(own)


def test_render_presents_nothing_and_keeps_the_stages_and_region_it_asks_for(tmp_path, monkeypatch):
    def no_present(*args, **kwargs):
        raise AssertionError("the CLI's session presented frames the CLI never draws")

    monkeypatch.setattr(session_module, "present", no_present)
    out = tmp_path / "m.npz"
    assert main(["render", *SMALL, "--seq-q", "40", "--stages", "all", "--region", "2:6,0:4", "-o", str(out)]) == 0
    config = RunConfig(d_model=8, heads=2, seq_q=40, pool="always")
    want = run(config, record=run_stages(config), region=(2, 6, 0, 4))
    with np.load(out) as saved:
        for stage in ("x", "q", "k", "v", "context", "output"):  # --stages all: beyond the default record
            np.testing.assert_array_equal(saved[stage], want.stages[stage])
        np.testing.assert_array_equal(saved["weights_pooled"], want.weights)
        np.testing.assert_array_equal(saved["region"], want.region)
