"""What a pooled model forward keeps: every layer's pooled map once (no stacked copy), the per-token stages of
the shown layer only, and a memory estimate that counts that (a pooled 8,192-token run is not refused for
maps it never keeps)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from attnviz.core import RunConfig, run
from attnviz.core.kernel import pooling as pooling_module
from attnviz.core.runs.backed import check_forward_memory, forward_bytes
from attnviz.core.runs.predictions import SPILL_BYTES

TOKEN_STAGES = {"x", "q", "k", "v", "context", "output"}
SMOLLM2 = SimpleNamespace(layers=30, heads=9, kv_heads=3, d_model=576, name="SmolLM2-135M shape")


@pytest.fixture
def long_llama(tiny_models, tmp_path, monkeypatch):
    import shutil

    monkeypatch.setattr(pooling_module, "TARGET", 256)
    folder = tmp_path / "llama"
    shutil.copytree(tiny_models("llama"), folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 2048}))
    return folder


def test_a_pooled_forward_keeps_the_shown_layers_tokens_and_the_pooled_maps_once(long_llama):
    text = " ".join(["the cat sat on the mat and the dog chased it"] * 30)
    config = RunConfig.for_variant("pretrained", model=str(long_llama), text=text, layer=1)
    exact = run(config.replace(pool="never"))
    pooled = run(config.replace(pool="always"))
    source = pooled.source
    assert pooled.pool_factor is not None and pooled.pool_factor[0] > 1
    # the shown layer's per-token stages are kept, and are the unpooled forward's
    assert pooled.stages.keys() >= TOKEN_STAGES
    for name in TOKEN_STAGES:
        # the same sums, in row blocks against one piece: float32 rounding (1.1e-5 seen on an output of 0.4)
        np.testing.assert_allclose(pooled.stages[name], exact.stages[name], rtol=1e-4, atol=1e-5, err_msg=name)
    # another layer's result has its pooled map but no per-token stage, and says so
    other = source.result(0)
    assert not TOKEN_STAGES & other.stages.keys() and "weights" in other.stages
    assert source.kept(0) == {"weights", "dropped"} and source.kept(1) >= TOKEN_STAGES
    # every layer's map is written once: the model view's array is the pooled calls' own memory
    for layer, call in enumerate(source.pooled):
        assert np.shares_memory(source.layer_weights[layer], call.weights.numpy())
    assert np.shares_memory(pooled.weights, source.layer_weights)


def test_the_pooled_side_follows_how_many_maps_are_kept():
    # 270 heads at 1,024² would be 1.1 GiB: halved; one seed call of 16 heads keeps 1,024
    assert pooling_module.fitting_target(270, 4096, 4096) == 512
    assert pooling_module.fitting_target(270, 8192, 8192) == 512
    assert pooling_module.fitting_target(16, 16384, 16384) == 1024
    assert pooling_module.fitting_target(100_000, 8192, 8192) == pooling_module.MIN_TARGET


def test_a_pooled_8192_token_forward_is_counted_for_what_it_keeps():
    keep = frozenset(TOKEN_STAGES)
    need = forward_bytes(SMOLLM2, 8192, keep, pooled=True)
    maps = 30 * 9 * 512 * 512 * 4
    residuals = SPILL_BYTES  # the residual stream held in memory; the rest of its 566 MB went to a file
    assert maps + residuals < need < 2**30  # the pooled maps and the held residuals, not 30 layers' tokens
    check_forward_memory(RunConfig(), SMOLLM2, 8192, keep, 2 << 30, pooled=True)  # fits 2 GiB: not refused


def test_the_estimate_covers_what_a_pooled_forward_holds(long_llama):
    text = " ".join(["the cat sat on the mat and the dog chased it"] * 30)
    result = run(RunConfig.for_variant("pretrained", model=str(long_llama), text=text, pool="always"))
    source = result.source
    held = source.layer_weights.nbytes + sum(a.nbytes for arrays in source.stages.values() for a in arrays
                                             if a is not None and not np.shares_memory(a, source.layer_weights))
    held += source.outputs.residuals.held_bytes
    need = forward_bytes(source.info, len(result.token_ids), frozenset(TOKEN_STAGES), pooled=True)
    assert held <= need


def test_the_statistics_temporary_is_one_for_every_layer_and_goes_with_the_forward(long_llama):
    text = " ".join(["the cat sat on the mat and the dog chased it"] * 30)
    source = run(RunConfig.for_variant("pretrained", model=str(long_llama), text=text, pool="always")).source
    scratch = source.pooled[0].stats.scratch
    assert all(call.stats.scratch is scratch for call in source.pooled)  # not one block-sized buffer per layer
    assert scratch._t is None  # let go when the forward ended


def test_a_long_residual_stream_goes_to_a_file_and_the_lens_reads_the_same_numbers(long_llama, monkeypatch):
    from attnviz.core.runs import predictions

    text = " ".join(["the cat sat on the mat and the dog chased it"] * 30)
    config = RunConfig.for_variant("pretrained", model=str(long_llama), text=text, pool="always")
    kept = run(config).lens
    monkeypatch.setattr(predictions, "SPILL_BYTES", 0)  # every layer's residuals written to the file
    result = run(config.replace(layer=1))
    residuals = result.source.outputs.residuals
    assert residuals.held_bytes == 0 and len(residuals) == result.source.info.layers
    np.testing.assert_array_equal(result.lens_ids, kept.ids)
    np.testing.assert_array_equal(result.lens_probs, kept.probs)
