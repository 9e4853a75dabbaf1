"""Compact weights: a GGUF model whose float32 weights do not fit the memory budget keeps its matrices in
float16 or as the file's quantised blocks, and every map, W_O, the logits and the lens stay those of the
float32 path (its own reference: the same reader dequantising everything up front, checked against
safetensors and gguf's dequantisation in test_gguf*.py) within the tolerance each form states."""

from __future__ import annotations

import pytest
import torch
from tiny import SENTENCE, write_llama_gguf

from attnviz.core import ConfigError, RunConfig, run
from attnviz.models import load_model
from attnviz.models.compact import float_weight, is_compact, storage_sizes
from attnviz.models.errors import ModelError
from attnviz.models.gguf_files import gguf_header
from attnviz.models.loader import clear_cache

pytest.importorskip("gguf")

# max |diff| the compact forms may leave, relative to the largest |value| of the float32 path's tensor (blocks:
# the same float32 weights, products summed in other chunks; float16: each weight rounded to 11 bits, which
# this tiny model with its large random weights amplifies more than a trained one)
TOLERANCE = {"blocks": 1e-6, "float16": 1e-2}  # float16 measured up to 4.7e-3 here


@pytest.fixture(scope="module")
def q4_gguf(tiny_models, tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny-llama-q4.gguf"
    write_llama_gguf(tiny_models("llama"), path, qtype="Q4_0")
    return path


def _load(path, budget=None):
    clear_cache()  # the cache would hand back the model opened under another budget
    try:
        return load_model(path, memory_budget=budget)
    finally:
        clear_cache()


def _diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| / max |a| where both are finite; the masked (-inf) places must be the same ones."""
    assert torch.equal(torch.isfinite(a), torch.isfinite(b))
    finite = torch.isfinite(a)
    return ((a - b)[finite].abs().max() / a[finite].abs().max()).item()


def _forward(model, ids):
    return model.forward(ids, {"weights", "scores", "q", "k", "v"})


@pytest.mark.parametrize("storage", ["blocks", "float16"])
def test_a_compact_model_computes_the_float32_maps(q4_gguf, storage, monkeypatch):
    if storage == "float16":
        monkeypatch.setenv("ATTNVIZ_COMPACT", "float16")
    sizes = storage_sizes(gguf_header(q4_gguf))
    assert sizes["blocks"] < sizes["float16"] < sizes["float32"]
    reference = _load(q4_gguf)
    compact = _load(q4_gguf, sizes["float16"])  # a budget float32 exceeds: the blocks unless float16 is asked for
    assert reference.info.parameter_bytes == sizes["float32"]
    assert compact.info.parameter_bytes == sizes[storage]  # the memory check counts the compact size
    note = next(n for n in compact.load_notes if n.startswith("weights kept compact"))
    assert ("blocks dequantised per layer" in note) == (storage == "blocks")
    layers = compact.module.base_model.layers
    assert is_compact(layers[0].self_attn.q_proj) and is_compact(compact.module.get_input_embeddings())
    assert not reference.load_notes and not is_compact(reference.module.base_model.layers[0].self_attn.q_proj)
    ids = torch.tensor([reference.encode(SENTENCE).ids])
    hidden_a, traces_a = _forward(reference, ids)
    hidden_b, traces_b = _forward(compact, ids)
    tol = TOLERANCE[storage]
    for a, b in zip(traces_a, traces_b, strict=True):
        for stage in ("weights", "scores", "q", "k", "v"):
            assert b[stage].dtype == torch.float32
            assert _diff(a[stage], b[stage]) <= tol, (stage, _diff(a[stage], b[stage]))
    with torch.inference_mode():
        assert _diff(compact.logits(hidden_b), reference.logits(hidden_a)) <= tol
        residual = hidden_a + 0.5
        assert _diff(compact.lens_logits(residual), reference.lens_logits(residual)) <= tol
    for ma, mb in zip(reference.attention_modules, compact.attention_modules, strict=True):
        w_a, w_b = reference.side.out_weights[ma], compact.side.out_weights[mb]
        assert w_b.dtype == torch.float32 and _diff(w_b, w_a) <= tol
    q_a = float_weight(reference.module.base_model.layers[1].self_attn.q_proj)
    q_b = float_weight(layers[1].self_attn.q_proj)  # the rows transformers permutes, permuted in the blocks too
    assert q_b.dtype == torch.float32 and _diff(q_b, q_a) <= tol


@pytest.mark.parametrize("qtype", ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "F16", "BF16"])
def test_blocks_are_the_file_dequantised_exactly(tiny_models, tmp_path, qtype):
    """The blocks form's weights are the float32 path's bit for bit (the same formulas, later), each type."""
    path = tmp_path / f"tiny-llama-{qtype}.gguf"
    write_llama_gguf(tiny_models("llama"), path, qtype=qtype)
    sizes = storage_sizes(gguf_header(path))
    reference, compact = _load(path), _load(path, sizes["blocks"])
    assert is_compact(compact.module.base_model.layers[0].self_attn.q_proj)
    for name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.up_proj"):
        a = float_weight(reference.module.base_model.layers[0].get_submodule(name))
        b = float_weight(compact.module.base_model.layers[0].get_submodule(name))
        assert torch.equal(a, b), name
    assert torch.equal(float_weight(reference.module.get_input_embeddings()),
                       float_weight(compact.module.get_input_embeddings()))


def test_a_run_on_a_compact_model_says_so(q4_gguf):
    sizes = storage_sizes(gguf_header(q4_gguf))
    clear_cache()
    # the forward's own memory check needs more than the weights: a budget between blocks and float16 for
    # the weights is what load_model sees here, so the run is asked through a model opened beforehand
    load_model(q4_gguf, memory_budget=sizes["blocks"])
    result = run(RunConfig(variant="pretrained", model=str(q4_gguf), text=SENTENCE, layer=1))
    clear_cache()
    assert any(n.startswith("weights kept compact") for n in result.notes)
    assert result.weights.shape[-1] == len(result.tokens)


def test_weights_too_large_even_compact_are_refused_before_reading(q4_gguf):
    sizes = storage_sizes(gguf_header(q4_gguf))
    clear_cache()
    with pytest.raises(ModelError, match="even kept compact"):
        load_model(q4_gguf, memory_budget=sizes["blocks"] - 1)
    with pytest.raises(ConfigError, match="even kept compact"):
        run(RunConfig(variant="pretrained", model=str(q4_gguf), text=SENTENCE), memory_budget=sizes["blocks"] - 1)


def test_the_opening_probes_dequantise_each_matrix_once(q4_gguf, monkeypatch):
    """The few-token probes that find the layers, W_O and the output side repeat one input: each compact
    Linear answers it from its memo after the first, and the memo is gone once the model is open."""
    from attnviz.models import compact as compact_module

    calls: dict[int, int] = {}
    rows = compact_module.CompactWeight.rows

    def counted(self, index):
        calls[id(self)] = calls.get(id(self), 0) + 1
        return rows(self, index)

    monkeypatch.setattr(compact_module.CompactWeight, "rows", counted)
    model = _load(q4_gguf, storage_sizes(gguf_header(q4_gguf))["blocks"])
    linears = [m for m in model.module.modules() if isinstance(m, compact_module.CompactLinear)]
    # three probes, yet each matrix once; the attention's output projection at most twice (its input, the
    # context, comes out of the discovery's recording kernel a rounding apart from the later probes')
    outputs = {m.o_proj for m in model.module.base_model.modules() if hasattr(m, "o_proj")}
    assert len(linears) == 15 and len(outputs) == 2
    assert all(calls.get(id(m.compact)) == (calls[id(m.compact)] if m in outputs else 1) for m in linears)
    assert all(calls[id(m.compact)] <= 2 for m in outputs)
    assert not any("probe_memo" in m.__dict__ for m in model.module.modules())
    ids = torch.tensor([[1, 5, 9]])
    model.forward(ids, {"weights"})
    model.forward(ids, {"weights"})  # after the opening, every call dequantises again
    assert all(calls[id(m.compact)] == (3 if m not in outputs else calls[id(m.compact)]) for m in linears
               if m is not model.side.head)
    assert all(calls[id(m.compact)] >= 3 for m in outputs)
