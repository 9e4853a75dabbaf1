"""Compact weights on a CUDA device: the blocks and the float16 storage move with the model (buffers), stay
compact there (uint8 blocks, half-precision values), dequantise on the device with the torch formulas (NumPy's
never run) and give the CPU's maps (skipped cleanly without CUDA)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tiny import SENTENCE, write_llama_gguf

from attnviz.core import RunConfig, run
from attnviz.models import compact
from attnviz.models.compact import CompactWeight, storage_sizes
from attnviz.models.gguf_files import gguf_header
from attnviz.models.loader import clear_cache, load_model

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.mark.parametrize("storage", ["blocks", "float16"])
def test_compact_weights_on_cuda_give_the_cpus_maps(tiny_models, tmp_path, monkeypatch, storage):
    pytest.importorskip("gguf")
    if storage == "float16":
        monkeypatch.setenv("ATTNVIZ_COMPACT", "float16")
    path = tmp_path / "tiny-llama-q4.gguf"
    write_llama_gguf(tiny_models("llama"), path, qtype="Q4_0")
    clear_cache()
    try:
        model = load_model(path, memory_budget=storage_sizes(gguf_header(path))["float16"])
        config = RunConfig(variant="pretrained", model=str(path), text=SENTENCE, layer=1)
        on_cpu = run(config)
        numpy_formulas, torch_formulas, devices = compact._dequantized, compact.dequantize_rows, []

        def on_device(raw, qtype, columns):
            devices.append(raw.device.type)
            return torch_formulas(raw, qtype, columns)

        monkeypatch.setattr(compact, "_dequantized", _refused)  # the GPU run never dequantises on the host
        monkeypatch.setattr(compact, "dequantize_rows", on_device)
        on_gpu = run(config.replace(device="cuda"))
        weights = [m for m in model.module.modules() if isinstance(m, CompactWeight)]
        assert weights and all(w.stored.device.type == "cuda" for w in weights)  # compact, on the device
        blocks = [w for w in weights if w.qtype is not None]
        assert bool(blocks) == bool(devices) == (storage == "blocks") and set(devices) <= {"cuda"}
        assert all(w.stored.dtype == torch.uint8 for w in blocks)  # the file's blocks, not a float copy
        if storage == "float16":
            assert all(w.stored.dtype in (torch.float16, torch.bfloat16) for w in weights)
        for w in blocks:  # the device's values are the CPU formulas' bit for bit
            exact = numpy_formulas(w.stored.cpu().numpy(), w.qtype, w.shape[1])
            assert torch.equal(w.dense().cpu(), exact)
        assert on_gpu.device.startswith("cuda")
        np.testing.assert_allclose(on_gpu.layer_weights, on_cpu.layer_weights, atol=1e-4)
        cpu_pred, gpu_pred = on_cpu.source.outputs.predictions(), on_gpu.source.outputs.predictions()
        np.testing.assert_allclose(gpu_pred.top_probs, cpu_pred.top_probs, atol=1e-4)
    finally:
        clear_cache()


def _refused(*args):
    raise AssertionError("NumPy's formulas ran for weights on the device")
