"""The torch block formulas (gguf_dequant_torch.py, what compact weights use on an accelerator) give the NumPy
formulas' and the gguf package's values bit for bit, every block type; and a compact model forced onto them
on the CPU computes the NumPy path's maps exactly. (On a CUDA device: test_compact_cuda.py.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tiny import SENTENCE, write_llama_gguf

from attnviz.models import compact, gguf_dequant_torch, load_model
from attnviz.models.compact import CompactWeight, float_weight, is_compact, storage_sizes
from attnviz.models.gguf_dequant import BLOCKS, dequantize
from attnviz.models.gguf_dequant_torch import dequantize_rows
from attnviz.models.gguf_files import gguf_header
from attnviz.models.loader import clear_cache

gguf = pytest.importorskip("gguf")
TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K"]
SCALES_AT = {"Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,), "Q4_K": (0, 2),
             "Q5_K": (0, 2), "Q6_K": (208,)}  # where each block keeps its float16 scales (ggml's layouts)


def _blocks(qtype: str, rows: int, blocks_per_row: int, seed: int = 0) -> np.ndarray:
    """(rows, bytes per row) random blocks whose float16 scales are finite: normal ones, zero, the
    smallest subnormal and the largest finite half among them."""
    kind = gguf.GGMLQuantizationType[qtype]
    size = gguf.GGML_QUANT_SIZES[kind][1]
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, (rows * blocks_per_row, size), dtype=np.uint8)
    for at in SCALES_AT[qtype]:
        scales = rng.uniform(-2, 2, len(raw)).astype(np.float16)
        scales[:3] = (0, np.float16(6e-8), np.float16(-65504))
        raw[:, at:at + 2] = scales.view(np.uint8).reshape(-1, 2)
    return raw.reshape(rows, -1)


def _bits(values) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(values, dtype=np.float32)).view(np.uint32)


def test_every_type_numpy_dequantises_has_a_torch_formula():
    """Blocks on a device are dequantised there: a type with NumPy's formula alone would fail there."""
    assert {q: v[:2] for q, v in gguf_dequant_torch.BLOCKS.items()} == {q: v[:2] for q, v in BLOCKS.items()}
    assert sorted(gguf.GGMLQuantizationType[t].value for t in TYPES) == sorted(BLOCKS)


@pytest.mark.parametrize("qtype", TYPES)
def test_torch_formulas_equal_numpys_and_gguf_bit_for_bit(qtype, monkeypatch):
    kind = gguf.GGMLQuantizationType[qtype]
    values = gguf.GGML_QUANT_SIZES[kind][0]
    raw = _blocks(qtype, 12, 3)
    columns = 3 * values
    ours = dequantize_rows(torch.from_numpy(raw), kind.value, columns)
    numpys = dequantize(raw.reshape(-1), kind.value, (12, columns))
    theirs = gguf.quants.dequantize(raw, kind).reshape(12, columns)
    assert ours.dtype == torch.float32 and ours.shape == (12, columns)
    assert np.array_equal(_bits(ours.numpy()), _bits(numpys.numpy()))
    assert np.array_equal(_bits(ours.numpy()), _bits(theirs))
    assert np.isfinite(theirs).all() and np.abs(theirs).max() > 1e3  # the large scales took part
    monkeypatch.setattr(gguf_dequant_torch, "CHUNK_VALUES", values * 5)  # several chunks, one ragged
    assert torch.equal(dequantize_rows(torch.from_numpy(raw), kind.value, columns), ours)


@pytest.mark.parametrize("qtype", TYPES)
def test_a_compact_weight_off_numpy_gives_the_same_rows(qtype, monkeypatch):
    """The entry CompactWeight uses: its rows (a slice, a matrix of looked-up ids, the whole) from the torch
    formulas, NumPy's never called, equal the NumPy path's."""
    kind = gguf.GGMLQuantizationType[qtype]
    values = gguf.GGML_QUANT_SIZES[kind][0]
    weight = CompactWeight(torch.from_numpy(_blocks(qtype, 10, 2, seed=3)), (10, 2 * values), kind.value)
    ids = torch.tensor([[4, 0, 9], [4, 7, 1]])
    on_numpy = [weight.rows(slice(2, 7)), weight.rows(ids), weight.dense()]
    monkeypatch.setattr(compact, "NUMPY_DEVICES", ())
    monkeypatch.setattr(compact, "_dequantized", _refused)
    on_torch = [weight.rows(slice(2, 7)), weight.rows(ids), weight.dense()]
    assert on_torch[1].shape == (2, 3, 2 * values)
    for a, b in zip(on_numpy, on_torch, strict=True):
        assert b.dtype == torch.float32 and torch.equal(a, b)


def _refused(*args):
    raise AssertionError("NumPy's formulas ran")


@pytest.mark.parametrize("qtype", ["Q4_0", "Q5_1", "Q8_0"])
def test_a_compact_model_on_the_torch_formulas_computes_the_numpy_paths_maps(tiny_models, tmp_path, qtype,
                                                                            monkeypatch):
    path = tmp_path / f"tiny-llama-{qtype}.gguf"
    write_llama_gguf(tiny_models("llama"), path, qtype=qtype)
    clear_cache()
    try:
        model = load_model(path, memory_budget=storage_sizes(gguf_header(path))["blocks"])
    finally:
        clear_cache()
    layers = model.module.base_model.layers
    assert is_compact(layers[0].self_attn.q_proj) and is_compact(model.module.get_input_embeddings())
    ids = torch.tensor([model.encode(SENTENCE).ids])
    stages = {"weights", "scores", "q", "k", "v"}
    hidden_a, traces_a = model.forward(ids, stages)
    with torch.inference_mode():
        logits_a = model.logits(hidden_a)
    q_a = float_weight(layers[1].self_attn.q_proj)
    calls = []

    def counted(raw, qtype, columns):
        calls.append(qtype)
        return dequantize_rows(raw, qtype, columns)

    monkeypatch.setattr(compact, "NUMPY_DEVICES", ())
    monkeypatch.setattr(compact, "_dequantized", _refused)
    monkeypatch.setattr(compact, "dequantize_rows", counted)
    hidden_b, traces_b = model.forward(ids, stages)
    with torch.inference_mode():
        logits_b = model.logits(hidden_b)
    assert calls and set(calls) == {gguf.GGMLQuantizationType[qtype].value}
    assert torch.equal(hidden_a, hidden_b) and torch.equal(logits_a, logits_b)
    for a, b in zip(traces_a, traces_b, strict=True):
        for stage in stages:
            assert torch.equal(a[stage], b[stage]), stage
    assert torch.equal(float_weight(layers[1].self_attn.q_proj), q_a)
