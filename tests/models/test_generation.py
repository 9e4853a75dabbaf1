"""Generation: greedy continuations against transformers' generate, every step's attention against one
eager forward over the whole sequence, seeded sampling, streaming, cancel and bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnviz.core import ConfigError, RunConfig, run
from attnviz.core.runs.backed import run_forward
from attnviz.core.runs.runner import Cancelled

FAMILIES = ["gpt2", "llama", "gemma2"]
PROMPT = "The cat sat"


def _config(folder, **changes):
    return RunConfig.for_variant("pretrained", model=str(folder), text=PROMPT, **{"generate": 10, **changes})


def _eager(folder):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_generation_equals_transformers_and_every_row_its_full_forward(tiny_models, family):
    folder = tiny_models(family)
    result = run(_config(folder))
    model = _eager(folder)
    prompt = torch.tensor([result.token_ids[:result.prompt_length]])
    expected = model.generate(prompt, do_sample=False, max_new_tokens=10, min_new_tokens=10, pad_token_id=0)
    assert result.token_ids.tolist() == expected[0].tolist()
    assert len(result.tokens) == len(result.token_ids) == result.prompt_length + 10
    with torch.no_grad():
        attentions = model(torch.tensor([result.token_ids]), output_attentions=True).attentions
    for layer, reference in enumerate(attentions):
        np.testing.assert_allclose(result.layer_weights[layer, 0], reference[0].numpy(), atol=1e-4)
    assert result.source.masks[0].shape[-1] == len(result.token_ids)


def test_sampling_follows_the_seed(tiny_models):
    config = _config(tiny_models("llama"), temperature=1.0, sample_top_k=20)
    first, again, other = run(config), run(config), run(config.replace(seed=1))
    assert first.token_ids.tolist() == again.token_ids.tolist()
    assert first.token_ids.tolist() != other.token_ids.tolist()


def test_an_ablated_generation_ablates_every_step(tiny_models):
    folder = tiny_models("llama")
    generated = run(_config(folder, ablate=("1.0",)))
    text_ids = generated.token_ids.tolist()
    from attnviz.models import load_model

    model = load_model(folder)
    with torch.inference_mode():
        from attnviz.core.kernel.ablation import Plan
        from attnviz.core.kernel.context import ForwardContext

        with ForwardContext(plan=Plan.of_layers({1: (0,)}, "zero")) as ctx:
            _, traces = model.forward(torch.tensor([text_ids]), {"weights"}, ctx=ctx)
    for layer, trace in enumerate(traces):
        np.testing.assert_allclose(generated.layer_weights[layer, 0], trace.weights[0].numpy(), atol=1e-5)


def test_streaming_reports_every_token_and_cancel_stops_within_one(tiny_models):
    config = _config(tiny_models("gpt2"), generate=6)
    seen = []
    run_forward(config, on_step=lambda n, build: seen.append((n, len(build().tokens))))
    assert [n for n, _ in seen] == list(range(1, 7))
    assert all(rows == seen[0][1] + i for i, (_, rows) in enumerate(seen))  # the maps grow a row a token
    steps = []
    with pytest.raises(Cancelled):
        run_forward(config, cancel=lambda: len(steps) >= 2, on_step=lambda n, build: steps.append(n))
    assert steps == [1, 2]


@pytest.mark.parametrize("changes, field, problem", [
    ({"generate": 100}, "generate", "exceed the 64 positions"),
    ({"temperature": -0.5}, "temperature", "at least 0"),
    ({"generate": -1}, "generate", "at least 0"),
])
def test_bad_generation_settings_say_what_fits(tiny_models, changes, field, problem):
    with pytest.raises(ConfigError, match=problem) as info:
        run(_config(tiny_models("gpt2"), **changes))
    assert info.value.field == field
    if changes.get("generate") == 100:
        prompt = len(run(_config(tiny_models("gpt2"), generate=0)).tokens)
        assert info.value.suggestions == (64 - prompt,)


def test_an_encoder_cannot_generate(tiny_models, tmp_path, capsys):
    from attnviz.cli import main

    with pytest.raises(ConfigError, match="not a causal language model"):
        run(_config(tiny_models("bert")))
    assert main(["render", "--model", str(tiny_models("bert")), "--text", PROMPT, "--generate", "3",
                 "-o", str(tmp_path / "g.npz")]) == 2
    assert "not a causal language model" in capsys.readouterr().err


def test_the_command_line_writes_a_generation_and_a_chosen_step(tiny_models, tmp_path):
    from attnviz.cli import main

    out = tmp_path / "gen.npz"
    assert main(["render", "--model", str(tiny_models("llama")), "--text", PROMPT, "--generate", "5",
                 "--temperature", "0.7", "--sample-top-k", "50", "-o", str(out)]) == 0
    data = np.load(out)
    n = int(data["prompt_length"]) + 5
    assert data["tokens"].shape == data["token_ids"].shape == (n,)
    assert data["layer_weights"].shape[-2:] == (n, n)
    step = tmp_path / "step.npz"
    assert main(["render", "--model", str(tiny_models("llama")), "--text", PROMPT, "--generate", "5",
                 "--step", "2", "-o", str(step)]) == 0
    assert np.load(step)["weights"].shape[-1] == int(data["prompt_length"]) + 2


@pytest.mark.skipif(not __import__("os").environ.get("ATTNVIZ_TEST_MODEL"),
                    reason="set ATTNVIZ_TEST_MODEL to a causal model folder or .gguf file")
def test_a_real_models_greedy_continuation_equals_transformers():
    import os
    from pathlib import Path

    from transformers import AutoModelForCausalLM

    from attnviz.core import ConfigError

    path = Path(os.environ["ATTNVIZ_TEST_MODEL"])
    try:
        result = run(RunConfig.for_variant("pretrained", model=str(path), text="1, 2, 3, 4,", generate=8))
    except ConfigError as exc:
        if exc.field != "generate":
            raise
        pytest.skip(f"ATTNVIZ_TEST_MODEL is not a causal model: {exc}")
    source = (dict(pretrained_model_name_or_path=path.parent, gguf_file=path.name) if path.is_file()
              else dict(pretrained_model_name_or_path=path))
    model = AutoModelForCausalLM.from_pretrained(**source, dtype=torch.float32).eval()
    prompt = torch.tensor([result.token_ids[:result.prompt_length].tolist()])
    expected = model.generate(prompt, do_sample=False, max_new_tokens=8, pad_token_id=0)[0].tolist()
    assert result.token_ids.tolist() == expected[:len(result.token_ids)]


def test_one_token_steps_run_on_the_cores_other_programs_leave_free_and_the_count_comes_back(tiny_models,
                                                                                             monkeypatch):
    from attnviz.core.runs import generation
    from attnviz.system import free_cores, others_cores

    assert [free_cores(n, 2) for n in (0.0, 0.3, 0.4, 1.0, 5.0)] == [2, 2, 1, 1, 1]
    assert others_cores(None, (1, 1, 1)) is None
    assert others_cores((0, 0, 0), (1, 1, 0)) is None  # a window of a jiffy says too little
    tick, cpus = __import__("os").sysconf("SC_CLK_TCK"), __import__("os").cpu_count()
    assert others_cores((0, 0, 0), (cpus * tick, cpus * tick // 2, 0)) == pytest.approx(cpus / 2)

    own = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        seen = []
        original = generation.choose
        monkeypatch.setattr(generation, "others_cores", lambda before, after: 1.0)  # another program holds a core
        monkeypatch.setattr(generation, "free_cores", lambda others: 1)
        monkeypatch.setattr(generation, "choose", lambda *a: (seen.append(torch.get_num_threads()), original(*a))[1])
        run(RunConfig.for_variant("pretrained", model=str(tiny_models("llama")), text=PROMPT, generate=3))
        assert seen == [1, 1, 1] and torch.get_num_threads() == 2  # the caller's count once it is done
    finally:
        torch.set_num_threads(own)
