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
