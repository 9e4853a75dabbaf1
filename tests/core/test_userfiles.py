"""Your own weights and inputs: state_dicts saved from the seed code (tests/seeds.py) load as is and
reproduce the seed module's output; mismatches and unsafe files are refused with the fix."""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from seeds import Seed000CrossAttention, Seed001CrossAttention, Seed001SelfAttention, Seed002CausalSelfAttention

from attnviz.core import ConfigError, RunConfig, load_config, run, saved_json
from attnviz.core.runs.userfiles import FileChanged, load_inputs, load_weights

B, LQ, LKV = 2, 5, 7


def _seed_case(variant: str):
    """(seed module, config changes, inputs dict) for each seed variant, widths unlike the defaults."""
    torch.manual_seed(3)
    if variant == "causal":
        module, changes = Seed002CausalSelfAttention(24, 3), dict(d_model=24, heads=3)
        inputs = {"x": torch.randn(B, LQ, 24)}
    elif variant == "self":
        module, changes = Seed001SelfAttention(4, 32, in_proj_bias=False), dict(d_model=32, heads=4)
        inputs = {"x": torch.randn(B, LQ, 32)}
    elif variant == "cross":
        module, changes = Seed000CrossAttention(32, 64, 0.0, 4), dict(d_model=32, d_out=64, heads=4)
        inputs = {"queries": torch.randn(B, LQ, 32), "keys": torch.randn(B, LKV, 32), "values": torch.randn(B, LKV, 32)}
    else:
        module, changes = Seed001CrossAttention(4, 32, 16, out_proj_bias=False), dict(d_model=32, d_cross=16, heads=4)
        inputs = {"x": torch.randn(B, LQ, 32), "y": torch.randn(B, LKV, 16)}
    return module.eval(), changes, inputs


def _save(obj, path):
    if str(path).endswith(".safetensors"):
        save_file({k: v.contiguous() for k, v in obj.items()}, str(path))
    else:
        torch.save(obj, path)
    return str(path)


@pytest.mark.parametrize("fmt", [".pt", ".safetensors"])
@pytest.mark.parametrize("variant", ["causal", "self", "cross", "cross-context"])
def test_seed_state_dict_and_inputs_reproduce_the_seed_output(variant, fmt, tmp_path):
    module, changes, inputs = _seed_case(variant)
    weights = _save(module.state_dict(), tmp_path / f"w{fmt}")
    data = _save(inputs, tmp_path / f"in{fmt}")
    config = RunConfig.for_variant(variant, mask="none", weights=weights, inputs=data, **changes)
    result = run(config)
    with torch.no_grad():
        expected = module(*inputs.values()).numpy()
    np.testing.assert_allclose(result.output, expected, atol=1e-5, rtol=0)
    assert (result.config.batch, result.config.seq_q) == (B, LQ)  # the lengths follow the file
    if config.spec.cross:
        assert result.config.seq_kv == LKV


def test_bias_flags_come_from_the_file(tmp_path):
    """A seed 001 SelfAttention saved without in_proj bias turns the panel's in_bias off; heads stay as set."""
    module, changes, inputs = _seed_case("self")
    config = RunConfig.for_variant("self", mask="none", weights=_save(module.state_dict(), tmp_path / "w.pt"),
                                   **changes)
    assert config.in_bias
    result = run(config)
    assert not result.config.in_bias and result.config.out_bias and result.config.heads == 4
    assert any("in_bias" in note and "off" in note for note in result.notes)


def test_differential_state_dict_round_trips(tmp_path):
    from attnviz.core import DifferentialAttention

    torch.manual_seed(5)
    module = DifferentialAttention(32, 2).eval()
    x = torch.randn(B, LQ, 32)
    config = RunConfig.for_variant("differential", mask="none", d_model=32, heads=2,
                                   weights=_save(module.state_dict(), tmp_path / "d.safetensors"),
                                   inputs=_save({"x": x}, tmp_path / "x.pt"))
    with torch.no_grad():
        np.testing.assert_allclose(run(config).output, module(x).numpy(), atol=1e-5, rtol=0)


def test_npz_inputs(tmp_path):
    module, changes, inputs = _seed_case("cross-context")
    path = tmp_path / "in.npz"
    np.savez(path, **{k: v.numpy() for k, v in inputs.items()})
    config = RunConfig.for_variant("cross-context", mask="none", inputs=str(path),
                                   weights=_save(module.state_dict(), tmp_path / "w.pt"), **changes)
    with torch.no_grad():
        np.testing.assert_allclose(run(config).output, module(*inputs.values()).numpy(), atol=1e-5, rtol=0)


def test_a_width_mismatch_names_the_key_the_shape_and_the_width_that_fits(tmp_path):
    module, _, _ = _seed_case("cross")
    config = RunConfig.for_variant("cross", weights=_save(module.state_dict(), tmp_path / "w.pt"),
                                   d_model=48, d_out=48)
    with pytest.raises(ConfigError) as info:
        run(config)
    err = info.value
    assert err.field == "d_model" and err.suggestions == (32,)
    assert "W_query.weight" in str(err) and "(64, 32)" in str(err) and "d_out to 64" in str(err)


def test_a_checkpoint_that_needs_pickle_is_refused(tmp_path):
    module, changes, _ = _seed_case("cross")
    path = tmp_path / "whole.pt"
    torch.save(module, path)  # the module object itself: loading it would need pickle
    with pytest.raises(ConfigError) as info:
        run(RunConfig.for_variant("cross", weights=str(path), **changes))
    text = str(info.value)
    assert info.value.field == "weights"
    assert "Seed000CrossAttention" in text and "weights_only" in text and "state_dict()" in text


def test_weights_of_another_seed_class_suggest_its_variant(tmp_path):
    module, changes, _ = _seed_case("cross")
    with pytest.raises(ConfigError) as info:
        run(RunConfig.for_variant("causal", weights=_save(module.state_dict(), tmp_path / "w.pt"), d_model=32))
    assert info.value.field == "variant" and info.value.suggestions == ("cross",)


def test_a_training_checkpoint_and_a_prefix_are_unwrapped(tmp_path):
    module, changes, inputs = _seed_case("cross")
    nested = {"epoch": 3, "state_dict": {f"decoder.attn.{k}": v for k, v in module.state_dict().items()}}
    config = RunConfig.for_variant("cross", mask="none", weights=_save(nested, tmp_path / "ckpt.pt"),
                                   inputs=_save(inputs, tmp_path / "in.pt"), **changes)
    result = run(config)
    with torch.no_grad():
        np.testing.assert_allclose(result.output, module(*inputs.values()).numpy(), atol=1e-5, rtol=0)
    assert any("decoder.attn." in note for note in result.notes)


def test_grouped_kv_projections_suggest_kv_heads(tmp_path):
    from attnviz.core import CausalSelfAttention

    module = CausalSelfAttention(32, 4, kv_heads=2)
    with pytest.raises(ConfigError) as info:
        run(RunConfig.for_variant("causal", d_model=32, heads=4, weights=_save(module.state_dict(), tmp_path / "g.pt")))
    assert info.value.field == "kv_heads" and info.value.suggestions == (2,)


def test_missing_biases_name_the_keys(tmp_path):
    module, _, _ = _seed_case("causal")
    state = {k: v for k, v in module.state_dict().items() if not k.endswith("bias")}
    with pytest.raises(ConfigError) as info:
        run(RunConfig.for_variant("causal", d_model=24, heads=3, weights=_save(state, tmp_path / "nb.pt")))
    assert info.value.field == "weights" and "missing" in str(info.value) and "query.bias" in str(info.value)


def _inputs_error(tmp_path, variant, tensors, **changes) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        run(RunConfig.for_variant(variant, inputs=_save(tensors, tmp_path / "in.pt"), **changes))
    return info.value


def test_input_names_must_be_the_forwards_arguments(tmp_path):
    err = _inputs_error(tmp_path, "cross", {"q": torch.randn(1, 3, 64), "keys": torch.randn(1, 3, 64)})
    text = str(err)
    assert err.field == "inputs" and "missing queries, values" in text and "unknown q" in text
    assert "'queries': queries" in text  # the fix shows how to save it


def test_input_rank_and_width_are_checked(tmp_path):
    err = _inputs_error(tmp_path, "causal", {"x": torch.randn(5, 64)})
    assert err.field == "inputs" and "(5, 64)" in str(err) and "unsqueeze(0)" in str(err)
    err = _inputs_error(tmp_path, "cross-context", {"x": torch.randn(1, 3, 64), "y": torch.randn(1, 4, 20)})
    assert err.field == "d_cross" and err.suggestions == (20,) and "(1, 4, 20)" in str(err)


def test_input_batches_and_kv_lengths_must_agree(tmp_path):
    err = _inputs_error(tmp_path, "cross", {"queries": torch.randn(1, 3, 64), "keys": torch.randn(2, 4, 64),
                                            "values": torch.randn(2, 4, 64)})
    assert "batch" in str(err)
    err = _inputs_error(tmp_path, "cross", {"queries": torch.randn(1, 3, 64), "keys": torch.randn(1, 4, 64),
                                            "values": torch.randn(1, 5, 64)})
    assert "values has 5 positions but keys has 4" in str(err)


def test_a_bare_tensor_or_a_bad_suffix_is_explained(tmp_path):
    err = _inputs_error(tmp_path, "causal", torch.randn(1, 3, 64))
    assert "Tensor" in str(err) and "{'x': x}" in str(err)
    with pytest.raises(ConfigError) as info:
        RunConfig(weights="model.ckpt")
    assert info.value.field == "weights" and ".safetensors" in str(info.value)


def test_files_are_read_once_per_mtime_and_size(tmp_path):
    path = _save({"x": torch.zeros(1, 2, 64)}, tmp_path / "in.pt")
    first = load_inputs(path)
    assert load_inputs(path) is first
    torch.save({"x": torch.ones(1, 3, 64)}, path)
    os.utime(path, ns=(1, 1))  # a different mtime even on a coarse clock
    assert load_inputs(path)["x"].shape == (1, 3, 64)
    module, _, _ = _seed_case("cross")
    w = _save(module.state_dict(), tmp_path / "w.safetensors")
    assert load_weights(w) is load_weights(w)


def test_hashes_go_into_the_saved_config_and_a_changed_file_is_reported(tmp_path):
    module, changes, inputs = _seed_case("cross")
    weights = _save(module.state_dict(), tmp_path / "w.pt")
    data = _save(inputs, tmp_path / "in.pt")
    config = RunConfig.for_variant("cross", weights=weights, inputs=data, **changes)
    saved = tmp_path / "saved.json"
    saved.write_text(saved_json(config))  # with the files' sha256s
    files = json.loads(saved.read_text())["files"]
    for field, path in (("weights", weights), ("inputs", data)):
        with open(path, "rb") as f:
            assert files[field]["sha256"] == hashlib.sha256(f.read()).hexdigest()
        assert files[field]["name"] == os.path.basename(path)
    assert load_config(saved) == config
    torch.save({k: v + 1 for k, v in module.state_dict().items()}, weights)
    with pytest.raises(FileChanged) as info:
        load_config(saved)
    assert info.value.field == "weights" and "changed" in str(info.value) and info.value.config == config
    assert load_config(saved, check_files=False) == config
