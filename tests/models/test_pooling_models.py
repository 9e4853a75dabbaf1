"""The pooled path of a transformers model: every layer's pooled maps against transformers' eager
output_attentions, max-pooled here; the region and the statistics exact."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnviz.core import RunConfig, run
from attnviz.core.analysis.stats import head_stats
from attnviz.core.kernel import pooling as pooling_module


def _max_pool(maps: np.ndarray, f: int) -> np.ndarray:
    x = torch.tensor(maps)
    pooled = F.max_pool2d(x.reshape(-1, 1, *x.shape[-2:]), f, ceil_mode=True)
    return pooled.reshape(*x.shape[:-2], *pooled.shape[-2:]).numpy()


@pytest.fixture
def small_target(monkeypatch):
    monkeypatch.setattr(pooling_module, "TARGET", 256)  # 1,024 tokens pool by 4


def _long_model(tiny_models, tmp_path, family: str):
    """A tiny checkpoint whose config reads 2,048 positions (RoPE: no learned position table to grow)."""
    import shutil

    folder = tmp_path / family
    shutil.copytree(tiny_models(family), folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 2048}))
    return folder


@pytest.mark.parametrize("family", ["llama", "gemma2"])
def test_a_models_pooled_maps_equal_transformers_eager_attention(tiny_models, tmp_path, small_target, family):
    from transformers import AutoModel

    folder = _long_model(tiny_models, tmp_path, family)
    text = " ".join(["the cat sat on the mat and the dog chased it"] * 44)
    result = run(RunConfig.for_variant("pretrained", model=str(folder), text=text, pool="always"),
                 region=(500, 540, 0, 600))
    n = len(result.token_ids)
    f = -(-n // 256)
    assert n > 900 and result.pool_factor == (f, f) and result.config.seq_q == n
    model = AutoModel.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()
    with torch.no_grad():
        attentions = model(torch.tensor([result.token_ids]), output_attentions=True).attentions
    for layer, reference in enumerate(attentions):
        np.testing.assert_allclose(result.source.layer_weights[layer, 0], _max_pool(reference[0].numpy(), f),
                                   atol=1e-5, err_msg=f"layer {layer}")
    last = attentions[result.config.layer][0].numpy()
    np.testing.assert_allclose(result.region[0], last[:, 500:540, 0:600], atol=1e-5)
    stats = head_stats(last, keys=np.arange(1, n + 1))  # causal: row i sees i + 1 keys (row 0 left out)
    np.testing.assert_allclose(result.exact_stats["entropy"][0], stats["entropy"], rtol=1e-5)




def test_whole_maps_computed_in_blocks_go_straight_into_the_every_layer_array(tiny_models, monkeypatch):
    # blocks of a few rows (the kernel's path past a few hundred tokens): each layer's weights are written into
    # one (layers, ...) tensor as they are made, so the result is no second copy, and equal to eager attention
    from transformers import AutoModel

    from attnviz.core.kernel import blocks as blocks_module
    from attnviz.core.runs import backed

    monkeypatch.setattr(blocks_module, "CACHE_BLOCK_BYTES", 1 << 12)

    def no_copy(weights):
        raise AssertionError("the layers' maps were copied into a new array")

    monkeypatch.setattr(backed, "stack_weights", no_copy)
    folder = tiny_models("llama")
    result = run(RunConfig.for_variant("pretrained", model=str(folder), text="the cat sat on the mat " * 6))
    model = AutoModel.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()
    with torch.no_grad():
        attentions = model(torch.tensor([result.token_ids]), output_attentions=True).attentions
    assert result.source.layer_weights.shape[0] == len(attentions) > 1
    for layer, reference in enumerate(attentions):
        np.testing.assert_allclose(result.source.layer_weights[layer, 0], reference[0].numpy(), atol=1e-5)
