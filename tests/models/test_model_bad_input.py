"""Bad model folders and texts: one clear message (ConfigError), CLI exit 2, nothing written."""

from __future__ import annotations

import json
import shutil

import pytest

from attnviz.cli import main
from attnviz.core import ConfigError, RunConfig, run
from attnviz.models import load_model


class Payload:  # not an allowed global for torch.load(weights_only=True)
    pass


def _copy(tiny_models, tmp_path, kind="bert"):
    out = tmp_path / kind
    shutil.copytree(tiny_models(kind), out)
    return out


def _fails(folder, text="the cat sat", match="", field="model", tmp_path=None, **kw):
    with pytest.raises(ConfigError, match=match) as info:
        run(RunConfig(variant="pretrained", model=str(folder), text=text), **kw)
    assert info.value.field == field
    if tmp_path is not None:  # the CLI: exit 2, one line, nothing written
        out = tmp_path / "never.png"
        assert main(["render", "--model", str(folder), "--text", text, "-o", str(out)]) == 2
        assert not out.exists()
    return info.value


def test_missing_folder(tmp_path):
    _fails(tmp_path / "nope", match="no such folder", tmp_path=tmp_path)


def test_not_a_model(tmp_path):
    (tmp_path / "empty").mkdir()
    _fails(tmp_path / "empty", match="no config.json", tmp_path=tmp_path)


def test_an_architecture_transformers_does_not_know(tiny_models, tmp_path):
    f = _copy(tiny_models, tmp_path)
    config = json.loads((f / "config.json").read_text())
    (f / "config.json").write_text(json.dumps({**config, "model_type": "no_such_family"}))
    err = _fails(f, match="does not know this architecture", field="model_type", tmp_path=tmp_path)
    assert "no_such_family" in str(err)


def test_weights_that_do_not_fit_the_config(tiny_models, tmp_path):
    f = _copy(tiny_models, tmp_path, "llama")
    config = json.loads((f / "config.json").read_text())
    (f / "config.json").write_text(json.dumps({**config, "intermediate_size": 40}))
    _fails(f, match="cannot load the weights|of another shape", tmp_path=tmp_path)


def test_config_of_another_family_over_the_weights(tiny_models, tmp_path):
    f = _copy(tiny_models, tmp_path)  # bert's weights under a t5 config: nothing of t5 is in the file
    config = json.loads((f / "config.json").read_text())
    (f / "config.json").write_text(json.dumps({**config, "model_type": "t5"}))
    _fails(f, match="config.json|checkpoint|weights", tmp_path=tmp_path)


def test_more_layers_than_the_checkpoint_is_refused_before_building(tiny_models, tmp_path, monkeypatch):
    import attnviz.models.hf as hf

    f = _copy(tiny_models, tmp_path, "gpt2")
    config = json.loads((f / "config.json").read_text())
    (f / "config.json").write_text(json.dumps({**config, "n_layer": 1_000_000_000}))
    monkeypatch.setattr(hf, "_from_pretrained", lambda *a: pytest.fail("the model was built"))
    err = _fails(f, match=r"asks for 1000000000 layers \(num_hidden_layers\) but the checkpoint holds 3",
                 field="num_hidden_layers")
    assert "config.json" in err.fix


def test_every_layer_count_of_an_encoder_decoder_is_checked(tiny_models, tmp_path, monkeypatch):
    import attnviz.models.hf as hf

    f = _copy(tiny_models, tmp_path, "t5")
    config = json.loads((f / "config.json").read_text())
    (f / "config.json").write_text(json.dumps({**config, "num_decoder_layers": 1_000_000_000}))
    monkeypatch.setattr(hf, "_from_pretrained", lambda *a: pytest.fail("the model was built"))
    _fails(f, match=r"asks for 1000000000 layers \(num_decoder_layers\) but the checkpoint holds 2",
           field="num_decoder_layers")


def test_no_tokenizer(tiny_models, tmp_path):
    f = _copy(tiny_models, tmp_path)
    (f / "tokenizer.json").unlink()
    _fails(f, match="no tokenizer in the folder", tmp_path=tmp_path)


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_corrupt_safetensors(tiny_models, tmp_path, damage):
    f = _copy(tiny_models, tmp_path)
    weights = f / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"\xff" * 64)
    _fails(f, match="corrupt or truncated safetensors", tmp_path=tmp_path)


def test_pickle_that_weights_only_refuses(tiny_models, tmp_path):
    import torch

    f = _copy(tiny_models, tmp_path)
    (f / "model.safetensors").unlink()
    torch.save({"w": torch.zeros(2), "evil": Payload()}, f / "pytorch_model.bin")
    err = _fails(f, match="weights_only=True", tmp_path=tmp_path)
    assert "Payload" in str(err)  # the object it would have unpickled, named as for your own weights


def test_empty_text(tiny_models, tmp_path):
    _fails(tiny_models("bert"), text="   ", match="empty", field="text", tmp_path=tmp_path)


def test_text_longer_than_the_positions_offers_truncation(tiny_models, tmp_path):
    folder = tiny_models("bert")  # 40 positions
    long = " ".join(["the cat sat on the mat"] * 20)
    err = _fails(folder, text=long, match="reads at most 40 positions", field="text", tmp_path=tmp_path)
    cut = err.suggestions[0]
    assert long.startswith(cut)
    result = run(RunConfig(variant="pretrained", model=str(folder), text=cut))
    assert result.weights.shape[-1] == 40
    out = tmp_path / "cut.npz"
    assert main(["render", "--model", str(folder), "--text", long, "--truncate", "-o", str(out)]) == 0
    assert out.exists()


def test_too_large_is_refused_before_loading(tiny_models, tmp_path, monkeypatch):
    from attnviz.models import clear_cache

    clear_cache()
    import attnviz.models.loader as loader

    monkeypatch.setattr(loader, "load_transformers_model", lambda *a: pytest.fail("weights were read"))
    with pytest.raises(ConfigError, match=r"weights need about \d+ KiB as float32, over 1 KiB"):
        load_model(tiny_models("gpt2"), memory_budget=1024)
    _fails(tiny_models("gpt2"), match="over 1 KiB", memory_budget=1024)


def test_maps_over_the_budget_name_the_text_length(tiny_models):
    from attnviz.core.runs.backed import FORWARD_OVERHEAD

    folder = tiny_models("gpt2")  # its weights fit 1 MiB; every layer's maps and the forward do not
    err = _fails(folder, text="the cat sat on the mat", match="every layer's maps at", field="text",
                 memory_budget=FORWARD_OVERHEAD // 2)
    assert "free memory" in str(err)  # not even one token would fit
    from attnviz.core.runs.backed import forward_bytes

    info = load_model(folder).info
    budget = forward_bytes(info, 3, frozenset({"weights", "scores", "output"}))
    err = _fails(folder, text="the cat sat on the mat", match="every layer's maps at", field="text",
                 memory_budget=budget)
    assert "shorter text (at most about" in str(err)


def test_a_pipe_named_model_safetensors_is_refused_without_blocking(tiny_models, tmp_path):
    import os

    f = _copy(tiny_models, tmp_path)
    (f / "model.safetensors").unlink()
    os.mkfifo(f / "model.safetensors")  # opening it for reading would block until a writer came
    _fails(f, match="no weights", tmp_path=tmp_path)


def test_a_stray_safetensors_file_beside_the_weights_is_not_read(tiny_models, tmp_path):
    """Only what transformers loads counts: model.safetensors (or the shards its index names)."""
    import numpy as np
    from tiny import SENTENCE

    f = _copy(tiny_models, tmp_path)
    (f / "adapter.safetensors").write_bytes(b"\xff" * 64)  # garbage: reading it would fail
    result = run(RunConfig(variant="pretrained", model=str(f), text=SENTENCE))
    reference = run(RunConfig(variant="pretrained", model=str(tiny_models("bert")), text=SENTENCE))
    np.testing.assert_array_equal(result.layer_weights, reference.layer_weights)
    assert "read model.safetensors; ignored adapter.safetensors (not this checkpoint's weights)" in result.notes


def test_fewer_layers_in_the_config_than_in_the_checkpoint(tiny_models, tmp_path):
    """The checkpoint's third layer would be dropped without a word: refused, naming the file's key."""
    f = _copy(tiny_models, tmp_path, "gpt2")  # 3 layers
    config = json.loads((f / "config.json").read_text())
    (f / "config.json").write_text(json.dumps({**config, "n_layer": 2}))
    err = _fails(f, match="layer weights in the checkpoint", field="checkpoint key", tmp_path=tmp_path)
    assert ".h.2." in err.value or err.value.startswith("h.2.")


def test_nan_weights_are_refused_naming_the_tensor(tiny_models, tmp_path):
    from safetensors.torch import load_file, save_file

    f = _copy(tiny_models, tmp_path, "llama")
    state = load_file(str(f / "model.safetensors"))
    key = "model.layers.1.self_attn.k_proj.weight"
    state[key][0, 0] = float("nan")
    save_file(state, str(f / "model.safetensors"), metadata={"format": "pt"})
    err = _fails(f, match="NaN or infinite values", field="checkpoint key", tmp_path=tmp_path)
    assert err.value == key


def test_maps_that_come_out_non_finite_are_never_drawn(tiny_models, tmp_path, monkeypatch, capsys):
    """Finite weights whose numbers still overflow (here a huge norm gain): the run says which layer, the
    CLI exits 1 and writes nothing."""
    from safetensors.torch import load_file, save_file

    from attnviz.core.runs.result import NonFiniteResult

    f = _copy(tiny_models, tmp_path, "llama")
    state = load_file(str(f / "model.safetensors"))
    state["model.layers.1.input_layernorm.weight"].fill_(3e38)
    save_file(state, str(f / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(NonFiniteResult, match="layer 1's attention weights are not finite"):
        run(RunConfig(variant="pretrained", model=str(f), text="the cat sat"))
    out = tmp_path / "never.png"
    assert main(["render", "--model", str(f), "--text", "the cat sat", "-o", str(out)]) == 1
    assert not out.exists() and "not finite" in capsys.readouterr().err


def test_a_text_of_control_characters_alone_is_empty(tiny_models, tmp_path):
    """WordPiece drops control characters: the text would show [CLS] [SEP] alone (a byte-level tokenizer keeps
    them as byte tokens of their own, which are text)."""
    err = _fails(tiny_models("bert"), text="\x01\x02\x7f", match="no tokens of its own", field="text",
                 tmp_path=tmp_path)
    assert "type some words" in err.fix and "[CLS] [SEP]" in err.problem


@pytest.mark.parametrize("key, value", [("vocab_size", 1_000_000_000), ("hidden_size", 1_000_000),
                                        ("intermediate_size", 1_000_000_000)])
def test_a_config_far_larger_than_its_checkpoint_is_refused_before_building(tiny_models, tmp_path, monkeypatch,
                                                                              key, value):
    import attnviz.models.hf as hf

    f = _copy(tiny_models, tmp_path, "llama")
    config = json.loads((f / "config.json").read_text())
    (f / "config.json").write_text(json.dumps({**config, key: value}))
    monkeypatch.setattr(hf, "_from_pretrained", lambda *a: pytest.fail("the model was built"))
    err = _fails(f, match=f"config.json \\({key} = {value}\\) describes a model of about", field=key)
    assert "checkpoint holds" in err.problem


@pytest.mark.parametrize("key, value, problem", [
    ("rope_theta", -10000.0, "must be positive"), ("rms_norm_eps", float("nan"), "is not a finite number"),
    ("rms_norm_eps", 0.0, "must be positive"), ("sliding_window", -4, "must be at least 0"),
])
def test_config_values_that_cannot_be_right_are_named(tiny_models, tmp_path, key, value, problem):
    f = _copy(tiny_models, tmp_path, "mistral" if key == "sliding_window" else "llama")
    text = (f / "config.json").read_text()
    config = json.loads(text)
    config[key] = value
    if key == "rope_theta" and "rope_parameters" in config:  # where transformers 5 keeps it
        config["rope_parameters"]["rope_theta"] = value
    (f / "config.json").write_text(json.dumps(config))  # json writes a float NaN as NaN, which it reads back
    _fails(f, match=f"config.json's {key} {problem}", field=key, tmp_path=tmp_path)


@pytest.mark.parametrize("model, tokenizer", [("bert", "gpt2"), ("gpt2", "bert")])
def test_another_models_tokenizer_is_refused_with_both_sizes(tiny_models, tmp_path, model, tokenizer):
    f = _copy(tiny_models, tmp_path, model)
    shutil.copy(tiny_models(tokenizer) / "tokenizer.json", f / "tokenizer.json")
    err = _fails(f, match=r"the tokenizer has \d+ tokens but the model has \d+ token embeddings", field="tokenizer",
                 tmp_path=tmp_path)
    assert "tokenizer saved with this model" in err.fix


def test_a_huge_config_json_is_refused_before_it_is_parsed(tiny_models, tmp_path):
    f = _copy(tiny_models, tmp_path, "gpt2")
    config = json.loads((f / "config.json").read_text())
    (f / "config.json").write_text(json.dumps({**config, "padding": "x" * (17 << 20)}))
    _fails(f, match="config.json is 17 MiB, far larger than a model's", tmp_path=tmp_path)


def test_a_finite_context_vouches_for_its_layers_map_and_a_non_finite_one_has_the_map_read():
    """The kernel's context sum stands in for a layer's map only where it is finite (a NaN or infinite weight
    makes its row's context non-finite); elsewhere the map itself decides, and names the layer."""
    import numpy as np
    import torch

    from attnviz.core.kernel.kernel import attention
    from attnviz.core.runs.backed import _check_finite
    from attnviz.core.runs.result import NonFiniteResult

    info = type("Info", (), {"name": "m"})()
    unread = [object(), object()]  # torch.from_numpy of one of these raises: a vouched map is never read
    _check_finite(unread, info, [torch.tensor(1.0), torch.tensor(-3.0)])
    with pytest.raises(TypeError):
        _check_finite(unread, info, [torch.tensor(1.0), None])  # a layer the kernel did not run: its map is read
    maps = np.zeros((2, 1, 1, 2, 2), np.float32)
    _check_finite(maps, info, [torch.tensor(1.0), torch.tensor(float("inf"))])  # inf context, finite map: fine
    maps[1, 0, 0, 1, 0] = np.nan
    with pytest.raises(NonFiniteResult, match="layer 1's"):
        _check_finite(maps, info, [torch.tensor(1.0), torch.tensor(float("nan"))])

    q = torch.randn(1, 2, 5, 4)
    k, v = torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)
    q[0, 1, 3, 0] = float("inf")  # one query's scores overflow: its row of weights is NaN
    context, trace = attention(q, k, v, record=("weights",))
    assert torch.isnan(trace.weights).any() and not torch.isfinite(trace.context_sum)


def test_the_quick_model_path_check_is_read_folders_first_half(tiny_models, tmp_path):
    """check_model_path (what `attnviz PATH` and File > Open refuse with at once) says what read_folder says about
    names and a GGUF's first bytes, and passes what only the whole header shows."""
    import struct

    from attnviz.models.folder import check_model_path, read_folder

    folder = tiny_models("bert")
    assert check_model_path(str(folder)) == folder and read_folder(folder).path == folder
    empty, foreign, cut = tmp_path / "empty.gguf", tmp_path / "foreign.gguf", tmp_path / "cut.gguf"
    empty.write_bytes(b"")
    foreign.write_text("hello\n")
    entry = struct.pack("<Q", 5) + b"a.key" + struct.pack("<IQ", 8, 1000) + b"0123456789"  # a string cut short
    cut.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + entry)
    no_tokenizer = _copy(tiny_models, tmp_path)
    (no_tokenizer / "tokenizer.json").unlink()
    for path, words in ((empty, "the file is empty"), (foreign, "not a GGUF file"), (tmp_path, "no config.json"),
                        (no_tokenizer, "no tokenizer in the folder")):
        with pytest.raises(ConfigError, match=words) as quick:
            check_model_path(str(path))
        with pytest.raises(ConfigError) as whole:
            read_folder(path)
        assert str(quick.value) == str(whole.value)
    assert check_model_path(str(cut)) == cut  # its first 24 bytes are a GGUF's: the loader's whole read refuses it
    with pytest.raises(ConfigError, match="cut|truncated|damaged"):
        read_folder(cut)
