"""A model's forward reports each layer as it finishes and stops within a layer when cancelled."""

from __future__ import annotations

import json

import numpy as np
import pytest

from attnviz.core import RunConfig, run
from attnviz.core.kernel import blocks as blocks_module
from attnviz.core.kernel import pooling as pooling_module
from attnviz.core.runs.result import Cancelled

TEXT = "the cat sat on the mat and the dog chased it"


def test_progress_counts_every_layer_in_order(tiny_models):
    folder = tiny_models("llama")
    layers = json.loads((folder / "config.json").read_text())["num_hidden_layers"]
    seen: list[tuple[int, int]] = []
    run(RunConfig.for_variant("pretrained", model=str(folder), text=TEXT), progress=lambda *p: seen.append(p))
    assert seen == [(n, layers, ()) for n in range(1, layers + 1)]  # whole maps: no pooled layers to hand on


def test_a_pooled_forward_hands_each_finished_layer_to_progress(tiny_models):
    """progress(done, total, pooled): the PooledCalls finished so far, the very maps the result then holds."""
    folder = tiny_models("llama")
    seen = []
    result = run(RunConfig.for_variant("pretrained", model=str(folder), text=TEXT, pool="always"),
                 progress=lambda done, total, pooled: seen.append((done, total, tuple(pooled))))
    layers = result.source.info.layers
    assert [(done, total, len(pooled)) for done, total, pooled in seen] == [(n, layers, n)
                                                                          for n in range(1, layers + 1)]
    finished = seen[-1][2]
    for layer, call in enumerate(finished):
        np.testing.assert_array_equal(call.weights.numpy(), result.source.result(layer).stages["weights"])


@pytest.mark.parametrize("pool", ["never", "always"])
def test_cancel_stops_inside_the_first_layer(tiny_models, monkeypatch, pool):
    """Cancel is polled between the blocks of rows of one attention call, whole or pooled."""
    monkeypatch.setattr(blocks_module, "CACHE_BLOCK_BYTES", 1 << 10)  # a few rows per block
    monkeypatch.setattr(pooling_module, "POOLED_BLOCK_BYTES", 1 << 10)
    folder = tiny_models("llama")
    polls, seen = [], []

    def cancel() -> bool:
        polls.append(len(seen))
        return len(polls) > 3  # a few blocks into the first layer

    config = RunConfig.for_variant("pretrained", model=str(folder), text=" ".join([TEXT] * 2), pool=pool)
    with pytest.raises(Cancelled):
        run(config, cancel=cancel, progress=lambda *p: seen.append(p))
    assert seen == [] and len(polls) == 4  # no layer finished: it stopped within the first


def test_a_seed_run_reports_its_one_attention_call():
    seen = []
    run(RunConfig.for_variant("causal", d_model=32, heads=4, seq_q=20), progress=lambda *p: seen.append(p))
    assert seen == [(1, 1, ())]
