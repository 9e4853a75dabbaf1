"""A script's sync session (the CLI's): the request's own record and region reach the run, a request without
options gets its result alone (nothing presented), on the caller's thread with its torch threads, and a failure
carries the exception it was made from."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest
import torch

from attnviz.core import ConfigError, RunConfig, run
from attnviz.frames import ViewOptions
from attnviz.session import Events, Failure, Request, Session
from attnviz.session import session as session_module
from attnviz.session.lanes import caller_lanes
from attnviz.session.threads import as_is

LONG = RunConfig(seq_q=64, heads=2, d_model=16, pool="always")


def script_session(compute=run) -> tuple[Session, list]:
    heard: list = []
    session = Session(compute, Events(done=heard.append, failed=heard.append, unexpected=heard.append),
                      lanes=caller_lanes, sync=True, threads=as_is)
    return session, heard


def test_a_request_without_options_keeps_its_record_and_region_and_presents_nothing(monkeypatch):
    def no_present(*args, **kwargs):
        raise AssertionError("presented a result nobody shows")
    monkeypatch.setattr(session_module, "present", no_present)
    session, heard = script_session()
    record, region = frozenset({"weights", "scores"}), (4, 12, 0, 8)
    session.submit(Request(1, LONG, None, force=True, record=record, region=region))
    (outcome,) = heard
    want = run(LONG, record=record, region=region)
    assert outcome.frames is None and outcome.result.stages.keys() == want.stages.keys()
    assert outcome.result.region is not None
    np.testing.assert_array_equal(outcome.result.region, want.region)
    np.testing.assert_array_equal(outcome.result.weights, want.weights)
    assert session.stop()


def test_a_generation_without_options_streams_no_partial_results(monkeypatch):
    monkeypatch.setattr(session_module, "PARTIAL_INTERVAL_S", 0.0)  # a partial result after every token
    config = RunConfig.for_variant("toy-induction", generate=3)
    for options, partials in ((ViewOptions(), 2), (None, 0)):  # the last token's result is the final one
        session, heard = script_session()
        session.submit(Request(1, config, options, force=True))
        assert [o.partial for o in heard] == [True] * partials + [False]
        np.testing.assert_array_equal(heard[-1].result.tokens, run(config).tokens)
        assert session.stop()


@pytest.mark.skipif(not hasattr(os, "getpriority"), reason="niceness is POSIX's")
def test_caller_lanes_and_as_is_run_the_forward_on_the_calling_thread_unchanged():
    seen = []

    def compute(config, **kwargs):
        seen.append((threading.current_thread(), torch.get_num_threads(),
                     os.getpriority(os.PRIO_PROCESS, threading.get_native_id()), set(threading.enumerate())))
        return run(config, **kwargs)

    own = torch.get_num_threads()
    torch.set_num_threads(3)  # not what the thread policy would pick for a tiny forward (1, or the cores)
    try:
        before = (threading.current_thread(), 3, os.getpriority(os.PRIO_PROCESS, threading.get_native_id()),
                  set(threading.enumerate()))
        session, heard = script_session(compute)
        session.submit(Request(1, RunConfig(seq_q=4, heads=2, d_model=8), None))
        assert seen == [before] and session.threads_used == 3  # no lane, no reaper: no thread started
        assert session.stop()
    finally:
        torch.set_num_threads(own)


def test_a_failure_carries_its_exception_and_an_unexpected_one_is_heard_first():
    refused = ConfigError("seq_q", 4, "over the budget", "use shorter lengths")
    errors = iter([refused, RuntimeError("boom")])

    def compute(config, **kwargs):
        raise next(errors)

    session, heard = script_session(compute)
    session.submit(Request(1, RunConfig(seq_q=4), None))
    (failure,) = heard
    assert isinstance(failure, Failure) and failure.error is refused and failure.field == "seq_q"
    heard.clear()
    session.submit(Request(2, RunConfig(seq_q=4), None))
    boom, failure = heard
    assert isinstance(boom, RuntimeError) and failure.error is boom and failure.message == "RuntimeError: boom"
    assert session.stop()


def test_by_default_an_unexpected_exception_prints_its_traceback(capsys):
    def compute(config, **kwargs):
        raise RuntimeError("boom")

    failed: list = []
    session = Session(compute, Events(failed=failed.append), lanes=caller_lanes, sync=True)
    session.submit(Request(1, RunConfig(seq_q=4), None))
    err = capsys.readouterr().err
    assert "Traceback" in err and "RuntimeError: boom" in err and failed[0].error.args == ("boom",)
    assert session.stop()
