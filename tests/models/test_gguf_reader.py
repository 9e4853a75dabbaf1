"""attnviz's own GGUF reader: tensors dequantise bit for bit as the gguf package's NumPy does, config, tensor
names, weights, maps and logits equal transformers' GGUF load, and opening reports its steps and stops on
Cancel. (Damaged files: tests/test_bad_input_table.py's GGUF rows.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tiny import SENTENCE, write_llama_gguf

from attnviz.models import load_model
from attnviz.models.gguf_dequant import dequantize
from attnviz.models.gguf_reader import read_header, tensor_bytes

gguf = pytest.importorskip("gguf")
WRITABLE = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"]  # types gguf's writer can quantise to
K_QUANTS = ["Q4_K", "Q5_K", "Q6_K", "Q2_K", "Q3_K", "IQ4_NL"]  # read only: random blocks


def _bits(a) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(a, dtype=np.float32)).view(np.uint32)


@pytest.mark.parametrize("qtype", WRITABLE)
def test_each_written_type_dequantises_as_gguf_does(tmp_path, qtype):
    kind = gguf.GGMLQuantizationType[qtype]
    rng = np.random.default_rng(0)
    values = (rng.standard_normal((48, 256)) * rng.uniform(0.01, 3, (48, 1))).astype(np.float32)
    values[3, :32] = 0  # an all-zero block: scale 0
    path = tmp_path / f"{qtype}.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    if qtype == "F32":
        w.add_tensor("t.weight", values)
    elif qtype == "F16":
        w.add_tensor("t.weight", values.astype(np.float16))
    else:
        w.add_tensor("t.weight", gguf.quants.quantize(values, kind), raw_dtype=kind)
    w.add_tensor("v.weight", values[0])  # a second tensor after the first: offsets and alignment
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    header = read_header(path)
    reference = gguf.GGUFReader(str(path))
    for info, theirs in zip(header.tensors, reference.tensors):
        assert info.name == theirs.name and info.shape == tuple(int(d) for d in reversed(theirs.shape))
        ours = dequantize(tensor_bytes(header, info), info.qtype, info.shape)
        expected = gguf.quants.dequantize(theirs.data, theirs.tensor_type).reshape(info.shape)
        assert ours.dtype == torch.float32 and np.array_equal(_bits(ours.numpy()), _bits(expected))
    if qtype in ("F32", "F16", "BF16", "Q8_0"):  # near-exact types keep the values
        got = dequantize(tensor_bytes(header, header.tensors[0]), header.tensors[0].qtype, (48, 256))
        assert torch.allclose(got, torch.from_numpy(values), atol=0.05 * float(np.abs(values).max()))


@pytest.mark.parametrize("qtype", K_QUANTS)
def test_each_k_quant_dequantises_as_gguf_does(qtype):
    kind = gguf.GGMLQuantizationType[qtype]
    block, size = gguf.GGML_QUANT_SIZES[kind]
    rng = np.random.default_rng(1)
    raw = rng.integers(0, 256, (64, size), dtype=np.uint8)
    scale = rng.uniform(-2, 2, (64, 1)).astype(np.float16).view(np.uint8)  # finite half-precision scales
    offsets = {"Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (size - 2,), "Q2_K": (size - 4, size - 2), "Q3_K": (size - 2,),
               "IQ4_NL": (0,)}[qtype]
    for at in offsets:
        raw[:, at:at + 2] = scale
    ours = dequantize(raw.reshape(-1), kind.value, (64 * block,))
    expected = gguf.quants.dequantize(raw, kind).reshape(-1)
    assert np.array_equal(_bits(ours.numpy()), _bits(expected))


@pytest.fixture(scope="module")
def quantised(tiny_models, tmp_path_factory):
    path = tmp_path_factory.mktemp("q") / "tiny-q8.gguf"
    write_llama_gguf(tiny_models("llama"), path, qtype="Q8_0")
    return path


def test_config_names_and_weights_equal_transformers_gguf_load(quantised):
    from transformers import AutoModelForCausalLM
    from transformers import modeling_gguf_pytorch_utils as g

    from attnviz.models.gguf_model import config_dict, weights_map

    header = read_header(quantised)
    assert config_dict(header) == g.load_gguf_checkpoint(str(quantised), return_tensors=False)["config"]
    model = load_model(quantised)
    assert weights_map(model.module) == g.get_gguf_hf_weights_map(model.module, g.LlamaTensorProcessor())
    theirs = AutoModelForCausalLM.from_pretrained(str(quantised.parent), gguf_file=quantised.name,
                                                  local_files_only=True, dtype=torch.float32,
                                                  attn_implementation="eager")
    ours = model.module.state_dict()
    assert set(ours) == set(theirs.state_dict())
    for key, value in theirs.state_dict().items():
        assert torch.equal(ours[key], value), key
    # the maps and logits of one forward: attnviz's kernel against transformers' eager attention
    ids = torch.tensor([model.encode(SENTENCE).ids])
    hidden, traces = model.forward(ids, {"weights"})
    with torch.inference_mode():
        out = theirs(ids, output_attentions=True)
        logits = model.logits(hidden)
    for trace, ref in zip(traces, out.attentions):
        torch.testing.assert_close(trace.weights, ref, atol=1e-5, rtol=0)
    torch.testing.assert_close(logits, out.logits, atol=1e-5, rtol=0)


def test_the_tokenizer_equals_transformers_gguf_tokenizer(quantised):
    from transformers import AutoTokenizer

    model = load_model(quantised)
    theirs = AutoTokenizer.from_pretrained(str(quantised.parent), gguf_file=quantised.name, local_files_only=True)
    for text in (SENTENCE, "héllo wörld", "  spaces  ", "a\nb\tc", "12345"):
        assert list(model.encode(text).ids) == theirs(text)["input_ids"]


# --- damaged files: their rows are in tests/test_bad_input_table.py (GGUF_ROWS)


@pytest.fixture(scope="module")
def tiny_gguf_path(tiny_models, tmp_path_factory):
    path = tmp_path_factory.mktemp("good") / "good.gguf"
    write_llama_gguf(tiny_models("llama"), path)
    return path


def test_the_undamaged_file_opens(tiny_gguf_path):
    header = read_header(tiny_gguf_path)
    assert header.architecture == "llama" and len(header.tensors) == 21


def test_opening_reports_its_steps_and_cancel_stops_it(tiny_gguf_path, tmp_path):
    import shutil

    from attnviz.core.kernel.progress import Cancelled, Watch, opening

    path = tmp_path / "fresh.gguf"  # not in the model cache
    shutil.copy(tiny_gguf_path, path)
    heard: list[tuple[str, int, int]] = []
    with opening(Watch(cancel=lambda: len(heard) >= 5, on_stage=lambda *s: heard.append(s))), \
            pytest.raises(Cancelled):
        load_model(path)
    assert heard == [("tensors", n, 21) for n in range(1, 6)]  # stopped between two tensors
    heard.clear()
    with opening(Watch(on_stage=lambda *s: heard.append(s))):
        model = load_model(path)  # nothing half-built was kept
    assert heard == [("tensors", n, 21) for n in range(1, 22)] + [("tokenizer", 0, 1), ("tokenizer", 1, 1)]
    assert model.info.layers == 2


def test_the_file_is_parsed_once_by_attnviz_alone(tiny_gguf_path, tmp_path, monkeypatch):
    """No GGUFReader, no load_gguf_checkpoint, no get_gguf_tokenizer: the header attnviz parsed once serves the
    summary, the config, the tokenizer and the weights."""
    import shutil

    import gguf as gguf_package
    from transformers import modeling_gguf_pytorch_utils
    from transformers.integrations import gguf as tf_gguf

    from attnviz.models import gguf_files

    def forbidden(*args, **kwargs):
        raise AssertionError("the file was parsed again")

    for owner, name in ((gguf_package, "GGUFReader"), (modeling_gguf_pytorch_utils, "load_gguf_checkpoint"),
                        (tf_gguf, "get_gguf_tokenizer"), (tf_gguf, "read_gguf_metadata")):
        monkeypatch.setattr(owner, name, forbidden)
    parsed = []
    monkeypatch.setattr(gguf_files, "read_header", lambda path: parsed.append(path) or read_header(path))
    path = tmp_path / "once.gguf"
    shutil.copy(tiny_gguf_path, path)
    model = load_model(path)
    assert parsed == [str(path)] and model.encode(SENTENCE).ids
