"""Pretrained models on a CUDA device: the same maps as on the CPU (skipped cleanly without one)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tiny import SENTENCE

from attnviz.core import RunConfig, run

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.mark.parametrize("family", ["llama", "gemma2", "t5"])
def test_a_model_on_cuda_gives_the_cpus_maps(tiny_models, family):
    config = RunConfig(variant="pretrained", model=str(tiny_models(family)), text=SENTENCE, layer=1)
    on_gpu = run(config.replace(device="cuda"))
    on_cpu = run(config)
    assert on_gpu.device.startswith("cuda")
    np.testing.assert_allclose(on_gpu.layer_weights, on_cpu.layer_weights, atol=1e-4)
    np.testing.assert_allclose(on_gpu.output, on_cpu.output, atol=1e-3, rtol=1e-3)


def test_a_bfloat16_checkpoint_computes_in_bfloat16_on_cuda(tiny_models, tmp_path):
    """On CUDA a half-precision checkpoint runs in its dtype (autocast); the maps stay near the CPU's float32."""
    import shutil

    from transformers import AutoModelForCausalLM

    folder = tmp_path / "llama-bf16"
    shutil.copytree(tiny_models("llama"), folder)
    AutoModelForCausalLM.from_pretrained(tiny_models("llama"), dtype=torch.bfloat16).save_pretrained(folder)
    config = RunConfig(variant="pretrained", model=str(folder), text=SENTENCE)
    on_gpu, on_cpu = run(config.replace(device="cuda")), run(config)
    assert any("bfloat16 (autocast)" in n for n in on_gpu.notes)
    assert any("float32 on the CPU" in n for n in on_cpu.notes)
    np.testing.assert_allclose(on_gpu.layer_weights, on_cpu.layer_weights, atol=5e-2)
