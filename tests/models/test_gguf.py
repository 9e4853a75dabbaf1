"""GGUF files: a tiny one written with the gguf package's own writer opens through transformers' GGUF
support and equals the same weights from safetensors; bad files give one clear line; the chooser finds
GGUF models in ATTNVIZ_MODELS, Ollama's store and LM Studio's folders."""

from __future__ import annotations

import json

import pytest
import torch
from tiny import SENTENCE, write_llama_gguf

from attnviz.cli import main
from attnviz.core import ConfigError, RunConfig, run
from attnviz.models import load_model
from attnviz.models.discover import find_model_folders

pytest.importorskip("gguf")


@pytest.fixture(scope="module")
def tiny_gguf(tiny_models, tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny-llama.gguf"
    write_llama_gguf(tiny_models("llama"), path)
    return path


def test_a_gguf_file_equals_its_safetensors_folder(tiny_models, tiny_gguf):
    folder = load_model(tiny_models("llama"))
    gguf = load_model(tiny_gguf)
    assert gguf.info.name == "tiny-llama" and gguf.info.dtype == "gguf F32"
    assert (gguf.info.layers, gguf.info.heads, gguf.info.kv_heads) == (2, 4, 2)
    enc = folder.encode(SENTENCE)
    assert gguf.encode(SENTENCE) == enc  # the file's own tokenizer gives the same ids and labels
    ids = torch.tensor([enc.ids])
    hidden_a, traces_a = folder.forward(ids, {"weights", "q", "k"})
    hidden_b, traces_b = gguf.forward(ids, {"weights", "q", "k"})
    for a, b in zip(traces_a, traces_b):
        torch.testing.assert_close(b.weights, a.weights, atol=1e-5, rtol=0)
        torch.testing.assert_close(b.q, a.q, atol=1e-5, rtol=0)  # the q/k row permutation was undone
    torch.testing.assert_close(hidden_b, hidden_a, atol=1e-5, rtol=0)


def test_a_gguf_file_through_the_cli(tiny_gguf, tmp_path):
    out = tmp_path / "gguf.png"
    assert main(["render", "--model", str(tiny_gguf), "--text", SENTENCE, "-o", str(out)]) == 0
    assert out.stat().st_size > 0
    result = run(RunConfig(variant="pretrained", model=str(tiny_gguf), text=SENTENCE, layer=1))
    assert result.tokens[0] == "<s>" and result.weights.shape[-1] == len(result.tokens)


def _fails(path, match, tmp_path):
    with pytest.raises(ConfigError, match=match) as info:
        run(RunConfig(variant="pretrained", model=str(path), text=SENTENCE))
    assert info.value.field == "model"
    out = tmp_path / "never.png"
    assert main(["render", "--model", str(path), "--text", SENTENCE, "-o", str(out)]) == 2
    assert not out.exists()


def test_a_gguf_of_an_architecture_transformers_cannot_dequantise(tiny_models, tmp_path):
    path = tmp_path / "odd.gguf"
    write_llama_gguf(tiny_models("llama"), path, architecture="rwkv6")
    _fails(path, "cannot dequantise GGUF files of the rwkv6 architecture", tmp_path)


def test_a_gguf_with_a_quantisation_type_gguf_cannot_read(tiny_gguf, tmp_path):
    import gguf

    data = bytearray(tiny_gguf.read_bytes())
    reader = gguf.GGUFReader(str(tiny_gguf))
    field = reader.tensors[0].field  # parts: name length, name, n_dims, dims, type (uint32), offset
    type_part = field.parts[4]
    assert type_part.dtype.name == "uint32" and int(type_part[0]) == reader.tensors[0].tensor_type
    offset = int(type_part.ctypes.data - reader.data.ctypes.data)
    data[offset:offset + 4] = (250).to_bytes(4, "little")  # no such GGMLQuantizationType
    path = tmp_path / "unknown-type.gguf"
    path.write_bytes(bytes(data))
    _fails(path, "quantisation type 250, which the gguf package does not know", tmp_path)


def test_a_truncated_gguf(tiny_gguf, tmp_path):
    path = tmp_path / "cut.gguf"
    path.write_bytes(tiny_gguf.read_bytes()[:2000])
    _fails(path, "truncated or damaged: metadata entry 'tokenizer.ggml.tokens' promises 300 values", tmp_path)


def test_a_file_that_is_not_a_model(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello")
    _fails(path, "a file, not a model folder", tmp_path)


def test_the_chooser_finds_gguf_models_in_every_store(tiny_gguf, tmp_path):
    import shutil

    listed = tmp_path / "listed"
    listed.mkdir()
    shutil.copy(tiny_gguf, listed / "mine.gguf")
    home = tmp_path / "home"
    blobs, manifest = home / ".ollama/models/blobs", home / ".ollama/models/manifests/registry.ollama.ai/library/tiny"
    blobs.mkdir(parents=True), manifest.mkdir(parents=True)
    shutil.copy(tiny_gguf, blobs / "sha256-abc123")
    layers = [{"mediaType": "application/vnd.ollama.image.license", "digest": "sha256:000"},
              {"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:abc123"}]
    (manifest / "latest").write_text(json.dumps({"layers": layers}))
    (manifest / "broken").write_text("{not json")
    studio = home / ".lmstudio/models/someone/tiny-GGUF"
    studio.mkdir(parents=True)
    shutil.copy(tiny_gguf, studio / "tiny-Q8_0.gguf")
    env = {"ATTNVIZ_MODELS": str(listed), "HOME": str(home), "HF_HUB_CACHE": str(tmp_path / "no-hub")}
    found = dict(find_model_folders(env))
    assert found == {"mine": listed / "mine.gguf", "ollama: tiny:latest": blobs / "sha256-abc123",
                     "someone/tiny-GGUF/tiny-Q8_0": studio / "tiny-Q8_0.gguf"}
    blob = load_model(blobs / "sha256-abc123")  # Ollama's blobs have no suffix: the magic bytes say GGUF
    assert blob.info.layers == 2
