"""Check against transformers (models/check.py): its per-head max |diff| is the one a direct comparison with
transformers' eager attention (output_attentions=True) gives on the same ids, for a transformers folder and
a GGUF file kept compact; a copy that would not fit the memory allowance is refused in one line, loading
nothing."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tiny import SENTENCE, write_llama_gguf

from attnviz.core import RunConfig, run
from attnviz.models import reference
from attnviz.models.check import NotChecked, check_against_transformers, transformers_bytes
from attnviz.models.compact import is_compact, storage_sizes
from attnviz.models.folder import read_folder
from attnviz.models.gguf_files import gguf_header
from attnviz.models.loader import clear_cache, load_model


def _direct(path, ids: list[int], gguf: bool = False):
    """transformers' own eager forward, loaded and run here: (attentions, logits)."""
    import transformers

    source = {"gguf_file": path.name} if gguf else {}
    folder = path.parent if gguf else path
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(folder), dtype=torch.float32, attn_implementation="eager", local_files_only=True, **source).eval()
    with torch.inference_mode():
        out = model(input_ids=torch.tensor([ids]), output_attentions=True)
    return out.attentions, out.logits


def _expected(result, attentions) -> np.ndarray:
    ours = result.layer_weights[:, 0]
    return np.stack([np.abs(a - b[0].numpy()).reshape(a.shape[0], -1).max(axis=1) for a, b in zip(ours, attentions)])


@pytest.mark.parametrize("family, isolated", [("llama", True), ("gpt2", False)])
def test_the_report_is_the_direct_comparison_with_transformers(tiny_models, family, isolated):
    """transformers in a child process (as the app runs it) and in this one."""
    config = RunConfig(variant="pretrained", model=str(tiny_models(family)), text=SENTENCE, layer=1)
    result = run(config)
    report = check_against_transformers(result, isolated=isolated)
    attentions, logits = _direct(tiny_models(family), result.token_ids.tolist())
    expected = _expected(result, attentions)
    assert report.per_head.shape == (len(attentions), result.config.heads)
    np.testing.assert_array_equal(report.per_head, expected)
    assert report.maximum < 1e-5
    with torch.inference_mode():
        ours = result.source.outputs.model.logits(result.source.outputs.hidden)
    assert report.logits == pytest.approx(float((ours - logits).abs().max()), abs=0)
    assert report.logits < 1e-4
    assert report.line().startswith(f"checked against transformers: max |diff| {report.maximum:.2g} over "
                                    f"{len(attentions)} layers × {result.config.heads} heads, logits")


def test_a_head_that_differs_is_found_where_it_differs(tiny_models, monkeypatch):
    """transformers' model with layer 0's head 1 changed (its query rows scaled): the report names that head in
    layer 0 and every head after it, and its numbers are those of a direct comparison with the changed model
    (transformers run in this process, where the change can be made)."""
    load = reference.load_reference
    changed = []

    def changed_reference(path, gguf, cls):
        model = load(path, gguf, cls)
        attention = model.model.layers[0].self_attn
        rows = slice(attention.head_dim, 2 * attention.head_dim)
        with torch.no_grad():
            attention.q_proj.weight[rows] *= 1.5
        changed.append(model)
        return model

    monkeypatch.setattr(reference, "load_reference", changed_reference)
    result = run(RunConfig(variant="pretrained", model=str(tiny_models("llama")), text=SENTENCE))
    report = check_against_transformers(result, isolated=False)
    with torch.inference_mode():
        attentions = changed[0](input_ids=torch.tensor([result.token_ids.tolist()]), output_attentions=True).attentions
    np.testing.assert_array_equal(report.per_head, _expected(result, attentions))
    assert report.per_head[0, 1] > 1e-3 and (report.per_head[1] > 1e-4).all()
    assert report.per_head[0, [0, 2, 3]].max() < 1e-6 and report.logits > 1e-3


def test_a_config_runs_its_forward_first_and_an_ablation_is_checked_unablated(tiny_models):
    config = RunConfig(variant="pretrained", model=str(tiny_models("llama")), text=SENTENCE, ablate=("0.1",))
    from_config = check_against_transformers(config, isolated=False)
    # its maps are ablated: checked as the whole model's
    from_result = check_against_transformers(run(config), isolated=False)
    assert from_config.key == from_result.key == config.replace(ablate=(), pool="never")
    assert from_config.maximum < 1e-5 and from_result.maximum < 1e-5


def test_a_compact_gguf_equals_transformers_gguf_load(tiny_models, tmp_path):
    """A GGUF kept as its blocks: the maps against transformers' own GGUF load dequantised to float32."""
    pytest.importorskip("gguf")
    path = tmp_path / "tiny-llama-q8.gguf"
    write_llama_gguf(tiny_models("llama"), path, qtype="Q8_0")
    clear_cache()
    try:
        model = load_model(path, memory_budget=storage_sizes(gguf_header(path))["blocks"])
        assert is_compact(model.module.base_model.layers[0].self_attn.q_proj)
        result = run(RunConfig(variant="pretrained", model=str(path), text=SENTENCE))
        report = check_against_transformers(result)
    finally:
        clear_cache()
    attentions, _ = _direct(path, result.token_ids.tolist(), gguf=True)
    np.testing.assert_array_equal(report.per_head, _expected(result, attentions))
    assert report.maximum < 1e-5 and report.logits < 1e-4


def test_a_copy_that_would_not_fit_is_refused_in_one_line_loading_nothing(tiny_models, monkeypatch):
    folder = tiny_models("llama")
    result = run(RunConfig(variant="pretrained", model=str(folder), text=SENTENCE))
    need = transformers_bytes(read_folder(folder), result.source.info, len(result.tokens))

    def never(*_, **__):
        raise AssertionError("transformers' model was loaded")

    monkeypatch.setattr(reference, "reference_outputs", never)
    with pytest.raises(NotChecked) as caught:
        check_against_transformers(result, memory_budget=need - 1)
    line = str(caught.value)
    assert line.startswith("transformers' float32 copy would need ") and line.endswith(": not checked")
    assert "\n" not in line


def test_the_estimate_counts_the_float32_parameters_and_every_map(tiny_models):
    folder = read_folder(tiny_models("llama"))
    info = load_model(folder.path).info
    a, b = transformers_bytes(folder, info, 10), transformers_bytes(folder, info, 20)
    params = sum(p.numel() for p in load_model(folder.path).module.parameters()) * 4
    assert a > params
    maps = (info.layers + 1) * info.heads * 4
    assert b - a == maps * (20 * 20 - 10 * 10) + 10 * info.vocab_size * 4 + info.layers * 10 * info.d_model * 32


def test_a_gguf_counts_transformers_dequantised_copy_and_the_file_too(tiny_models, tmp_path):
    pytest.importorskip("gguf")
    path = tmp_path / "tiny-llama.gguf"
    write_llama_gguf(tiny_models("llama"), path)
    gguf, folder = read_folder(path), read_folder(tiny_models("llama"))
    info = load_model(folder.path).info
    float32 = storage_sizes(gguf_header(path))["float32"]
    assert transformers_bytes(gguf, info, 10) - transformers_bytes(folder, info, 10) == 2 * float32 + \
        path.stat().st_size - sum(p.numel() for p in load_model(folder.path).module.parameters()) * 4


def test_a_toy_run_is_not_checked():
    with pytest.raises(NotChecked, match="pretrained model"):
        check_against_transformers(RunConfig())


@pytest.mark.parametrize("at", ["loading", "layers"])
def test_cancel_ends_transformers_process(tiny_models, monkeypatch, at):
    from attnviz.core.runs.result import Cancelled

    children = []
    popen = reference.subprocess.Popen

    def recorded(*args, **kwargs):
        children.append(popen(*args, **kwargs))
        return children[-1]

    monkeypatch.setattr(reference.subprocess, "Popen", recorded)
    result = run(RunConfig(variant="pretrained", model=str(tiny_models("llama")), text=SENTENCE))
    steps = []

    def cancel() -> bool:
        return any(s == at and (at == "loading" or d >= 1) for s, d, _ in steps)

    with pytest.raises(Cancelled):
        check_against_transformers(result, cancel=cancel, progress=lambda *step: steps.append(step))
    assert len(children) == 1 and children[0].poll() is not None  # ended, not left running
    assert not any(s == "comparing" for s, _, _ in steps)
    assert (("layers", 1, 2) in steps) == (at == "layers") and ("layers", 2, 2) not in steps


def test_a_generation_is_checked_over_every_token_it_shows(tiny_models):
    """The written tokens' maps came from the KV cache, transformers' from one forward over the whole text."""
    result = run(RunConfig(variant="pretrained", model=str(tiny_models("llama")), text=SENTENCE, generate=6))
    report = check_against_transformers(result, isolated=False)
    assert report.tokens == len(result.tokens) == result.prompt_length + 6
    attentions, _ = _direct(tiny_models("llama"), result.token_ids.tolist())
    np.testing.assert_array_equal(report.per_head, _expected(result, attentions))
    assert report.maximum < 1e-5 and report.logits < 1e-4


def test_an_encoder_decoder_is_not_checked(tiny_models):
    result = run(RunConfig(variant="pretrained", model=str(tiny_models("t5")), text=SENTENCE))
    with pytest.raises(NotChecked, match="encoder-decoder"):
        check_against_transformers(result, isolated=False)


def test_transformers_process_ends_with_the_app(tmp_path):
    """A parent that dies mid-check (the app quit) leaves no transformers process running, nor its folder."""
    import os
    import subprocess
    import sys
    import time

    work = tmp_path / "work"
    work.mkdir()
    grandchild = ("import sys, time; from pathlib import Path; from attnviz.models.reference import _end_with_parent; "
                  "_end_with_parent(Path(sys.argv[1])); print('watching', flush=True); time.sleep(120)")
    parent = ("import subprocess, sys; child = subprocess.Popen([sys.executable, '-c', sys.argv[1], sys.argv[2]], "
              "stdout=subprocess.PIPE, text=True); assert child.stdout.readline() == 'watching\\n'; "
              "print(child.pid, flush=True)")
    out = subprocess.run([sys.executable, "-c", parent, grandchild, str(work)], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    pid = int(out.stdout.split()[-1])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.2)
    assert not _alive(pid) and not work.exists()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][0] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False
