"""One cached model computed on from several threads at once (the app's map worker and its panels' threads): each
analysis gives what it gives alone. The analyses hook the shared model's modules for the length of their forwards,
so a forward on another thread meanwhile must wait rather than run through those hooks."""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest
from tiny import KV, SENTENCE, make_family

from attnviz.core import RunConfig, head_circuits, head_logit_attribution, run
from attnviz.core.analysis.circuits import composition_scores, copying_scores
from attnviz.core.analysis.heads import head_effects
from attnviz.core.analysis.patching import patch_heads

OTHER = "A bird flew over the house while the children played."  # a different length from SENTENCE
CORRUPTED = "The dog sat on the mat, and the cat chased it."
ROUNDS, COPIES = 6, 2  # each round starts every call COPIES times at once


@pytest.fixture
def switching():
    """Python switches threads every microsecond rather than every 5 ms: the tiny model's forwards take about a
    millisecond, so at the default interval two of them seldom overlap."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def _calls(a: RunConfig, b: RunConfig) -> dict:
    return {
        "attribution": lambda: head_logit_attribution(a).heads,
        "attribution other": lambda: head_logit_attribution(b).heads,
        "circuits": lambda: head_circuits(a, 1, 0).qk,
        "copying": lambda: copying_scores(a),
        "composition": lambda: composition_scores(a)["k"],
        "run other": lambda: run(b).layer_weights[-1],
        "effects": lambda: head_effects(a),
        "patching": lambda: patch_heads(a, CORRUPTED, " the", " cat"),
    }


def _together(calls: dict) -> dict[str, list]:
    """Every call COPIES times, all released at once by a barrier; name -> its results (or exceptions)."""
    jobs = [(name, f) for name, f in calls.items() for _ in range(COPIES)]
    barrier, got, lock = threading.Barrier(len(jobs)), {name: [] for name in calls}, threading.Lock()

    def go(name, f):
        barrier.wait()
        try:
            value = f()
        except Exception as exc:  # noqa: BLE001 - a race shows as any error: kept to be reported
            value = exc
        with lock:
            got[name].append(value)
    threads = [threading.Thread(target=go, args=job) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return got


def test_analyses_on_one_model_from_several_threads_equal_each_alone(tmp_path, switching):
    make_family(tmp_path, "llama", **KV)  # seeded weights: the patching ratios divide by a logit difference
    a = RunConfig.for_variant("pretrained", model=str(tmp_path), text=SENTENCE)
    b = a.replace(text=OTHER)
    calls = _calls(a, b)
    alone = {name: np.asarray(f()) for name, f in calls.items()}
    for _ in range(ROUNDS):
        for name, values in _together(calls).items():
            for value in values:
                assert not isinstance(value, Exception), f"{name} failed beside the others: {value!r}"
                np.testing.assert_allclose(np.asarray(value), alone[name], rtol=1e-5, atol=1e-6, err_msg=name)
