"""Predictions, the logit lens, ablation and value-weighted attention of transformers models, against
transformers' own eager model (its logits, its hidden_states, and forward hooks written here)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tiny import SENTENCE

from attnviz.core import ConfigError, RunConfig, head_effects, head_scores, run
from attnviz.models import load_model

# family -> (the block list, the final norm, the attention's output projection) in transformers' own model
PARTS = {
    "gpt2": (lambda m: m.transformer.h, lambda m: m.transformer.ln_f, lambda block: block.attn.c_proj),
    "llama": (lambda m: m.model.layers, lambda m: m.model.norm, lambda block: block.self_attn.o_proj),
    "gemma2": (lambda m: m.model.layers, lambda m: m.model.norm, lambda block: block.self_attn.o_proj),
}


def eager(folder):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()


def _config(folder, **changes):
    return RunConfig.for_variant("pretrained", model=str(folder), text=SENTENCE, **changes)


def _head_logits(model, family, hidden):
    logits = model.lm_head(PARTS[family][1](model)(hidden))
    cap = getattr(model.config, "final_logit_softcapping", None)
    return torch.tanh(logits / cap) * cap if cap else logits


@pytest.mark.parametrize("family", list(PARTS))
def test_predictions_and_lens_equal_transformers(tiny_models, family):
    folder = tiny_models(family)
    result = run(_config(folder, top_k=3))
    ids = torch.tensor([result.token_ids])
    model = eager(folder)
    with torch.no_grad():
        out = model(ids, output_hidden_states=True)
        probs = torch.softmax(out.logits[0], -1)
        lens = [torch.softmax(_head_logits(model, family, h)[0], -1) for h in out.hidden_states[1:-1]] + [probs]
    top = probs.topk(3, -1)
    np.testing.assert_array_equal(result.top_ids, top.indices.numpy())
    np.testing.assert_allclose(result.top_probs, top.values.numpy(), atol=1e-4)
    nxt = ids[0, 1:]
    np.testing.assert_allclose(result.target_probs[:-1], probs[torch.arange(len(nxt)), nxt].numpy(), atol=1e-4)
    expected = torch.stack([p.max(-1).values for p in lens]).numpy()
    assert result.lens_ids.shape == (len(PARTS[family][0](model)), ids.shape[1])
    np.testing.assert_allclose(result.lens_probs, expected, atol=1e-4)
    np.testing.assert_array_equal(result.lens_ids[-1], result.top_ids[:, 0])


@pytest.mark.parametrize("family", list(PARTS))
def test_ablation_equals_the_heads_slice_zeroed_at_the_output_projection(tiny_models, family):
    folder = tiny_models(family)
    layer, head = 1, 2
    result = run(_config(folder, ablate=(f"{layer}.{head}",)))
    model = eager(folder)
    blocks, _, out_proj = PARTS[family]
    dh = model.config.hidden_size // model.config.num_attention_heads
    dh = getattr(model.config, "head_dim", None) or dh

    def zero(module, args):
        x = args[0].clone()
        x[..., head * dh:(head + 1) * dh] = 0
        return (x,)
    handle = out_proj(blocks(model)[layer]).register_forward_pre_hook(zero)
    with torch.no_grad():
        probs = torch.softmax(model(torch.tensor([result.token_ids])).logits[0], -1)
    handle.remove()
    np.testing.assert_allclose(result.top_probs[:, 0], probs.max(-1).values.numpy(), atol=1e-5)
    nxt = torch.tensor(result.token_ids[1:])
    np.testing.assert_allclose(result.target_probs[:-1], probs[torch.arange(len(nxt)), nxt].numpy(), atol=1e-5)
    assert float(np.nanmax(result.kl)) > 0  # the head mattered somewhere


@pytest.mark.parametrize("family", ["llama", "gpt2", "bert"])
def test_value_weighted_equals_the_formula_from_v_and_the_output_projection(tiny_models, family):
    folder = tiny_models(family)
    model = load_model(folder)
    enc = model.encode(SENTENCE)
    _, traces = model.forward(torch.tensor([enc.ids]), record={"weights", "v", "value_weighted"})
    hf = model.module
    torch.set_grad_enabled(False)  # the traces are inference tensors
    try:
        _check_value_weighted(family, hf, traces)
    finally:
        torch.set_grad_enabled(True)


def _check_value_weighted(family, hf, traces):
    for n, trace in enumerate(traces):
        if family == "bert":
            w_out = hf.bert.encoder.layer[n].attention.output.dense.weight
        elif family == "gpt2":
            w_out = hf.transformer.h[n].attn.c_proj.weight.T  # Conv1D stores (in, out)
        else:
            w_out = hf.model.layers[n].self_attn.o_proj.weight
        weights, v = trace.weights[0], trace.v[0]
        heads, dv = weights.shape[0], v.shape[-1]
        for h in range(heads):
            contribution = v[h // (heads // v.shape[0])] @ w_out[:, h * dv:(h + 1) * dv].T
            weighted = weights[h] * contribution.norm(dim=-1)[None, :]
            torch.testing.assert_close(trace.value_weighted[0, h], weighted / weighted.sum(-1, keepdim=True),
                                       atol=1e-5, rtol=1e-4)


def test_head_effects_of_a_model_equal_one_ablated_run_per_head(tiny_models):
    config = _config(tiny_models("llama"))
    position = 4
    effects = head_effects(config, position=position)
    assert effects.shape == (2, 4)
    base = np.log(run(config).target_probs[position])
    for layer, head in [(0, 0), (1, 3)]:
        after = np.log(run(config.replace(ablate=(f"{layer}.{head}",))).target_probs[position])
        assert effects[layer, head] == pytest.approx(base - after, abs=1e-4)


def test_head_scores_of_a_model_probe_with_its_bos(tiny_models):
    folder = tiny_models("llama")
    model = load_model(folder)
    probe = model.probe(8, 0)
    bos = model.encode("the cat").ids[0]
    assert probe[0] == bos and probe[1:9] == probe[9:17] and len(set(probe[1:9])) == 8
    scores = head_scores(_config(folder))
    assert all(s.shape == (2, 4) and np.isfinite(s).all() for s in scores.values())


def test_an_encoder_decoder_has_no_predictions_and_says_so_on_the_command_line(tiny_models, tmp_path, capsys):
    from attnviz.cli import main

    folder = tiny_models("t5")
    assert run(_config(folder)).predictions is None
    out = tmp_path / "p.csv"
    assert main(["render", "--model", str(folder), "--text", SENTENCE, "--predictions", str(out)]) == 2
    assert "no output head" in capsys.readouterr().err and not out.exists()


def test_a_family_off_the_kernel_refuses_ablation(tiny_models):
    with pytest.raises(ConfigError, match="not attnviz's kernel"):
        run(_config(tiny_models("gpt_neo"), ablate=("0.1",)))


def test_predictions_csv_from_the_command_line(tiny_models, tmp_path):
    from attnviz.cli import main

    out = tmp_path / "p.csv"
    assert main(["render", "--model", str(tiny_models("gpt2")), "--text", SENTENCE, "--ablate", "0.*",
                 "--predictions", str(out), "--top-k", "2"]) == 0
    import csv

    rows = list(csv.reader(out.read_text(encoding="utf-8").splitlines(keepends=True)))  # labels hold newlines
    assert rows[0][:6] == ["position", "token", "target", "target_prob", "top1", "top1_prob"]
    assert rows[0][-1] == "kl_nats" and len(rows) == 1 + len(load_model(tiny_models("gpt2")).encode(SENTENCE).ids)
    assert all(float(r[-1]) >= 0 for r in rows[1:])


def test_masked_lm_predictions_equal_transformers_and_target_their_own_token(tiny_models):
    from transformers import AutoModelForMaskedLM

    folder = tiny_models("bert")
    result = run(_config(folder))
    model = AutoModelForMaskedLM.from_pretrained(folder, attn_implementation="eager").eval()
    with torch.no_grad():
        probs = torch.softmax(model(torch.tensor([result.token_ids])).logits[0], -1)
    np.testing.assert_allclose(result.top_probs[:, 0], probs.max(-1).values.numpy(), atol=1e-4)
    np.testing.assert_array_equal(result.target_ids, result.token_ids)  # a masked LM reconstructs its input
    ids = torch.tensor(result.token_ids)
    np.testing.assert_allclose(result.target_probs, probs[torch.arange(len(ids)), ids].numpy(), atol=1e-4)


def test_an_encoder_saved_without_its_head_has_no_predictions(tiny_models, tmp_path, capsys):
    from transformers import BertModel

    from attnviz.cli import main

    headless = tmp_path / "bert-base-only"
    BertModel.from_pretrained(tiny_models("bert")).save_pretrained(headless)
    (headless / "tokenizer.json").write_bytes((tiny_models("bert") / "tokenizer.json").read_bytes())
    assert run(_config(headless)).predictions is None
    assert main(["render", "--model", str(headless), "--text", SENTENCE, "--predictions",
                 str(tmp_path / "p.csv")]) == 2
    assert "no output head" in capsys.readouterr().err


@pytest.mark.parametrize("flags, problem", [
    (["--ablate", "9.0"], "layer 9 does not exist"), (["--ablate", "0.7"], "head 7 does not exist"),
    (["--ablate", "zero"], "is not layer.head"), (["--ablate", "0.1", "--ablation", "mean", "--text", "a"],
                                                  "single position"),
])
def test_bad_ablations_on_the_command_line_are_one_line_and_exit_2(tiny_models, tmp_path, capsys, flags, problem):
    from attnviz.cli import main

    args = ["render", "--model", str(tiny_models("gpt2")), "--text", SENTENCE, "-o", str(tmp_path / "x.npz")]
    assert main(args + flags) == 2
    err = capsys.readouterr().err.strip()
    assert problem in err and len(err.splitlines()) == 1 and not (tmp_path / "x.npz").exists()


@pytest.mark.parametrize("pool", ["never", "always"])
def test_head_scores_from_the_shown_forward_equal_a_fresh_run_and_run_nothing_again(tiny_models, monkeypatch, pool):
    from attnviz.core.analysis import heads as heads_module

    config = RunConfig.for_variant("pretrained", model=str(tiny_models("llama")), text=SENTENCE, pool=pool)
    shown = run(config)
    expected = head_scores(config.replace(pool="never"))
    monkeypatch.setattr(heads_module, "run", lambda *a, **k: pytest.fail("ran the forward again"))
    scores = head_scores(config, shown.source)
    assert set(scores) == set(expected)
    for name, values in expected.items():  # a pooled forward's statistics are its exact ones
        np.testing.assert_allclose(scores[name], values, rtol=1e-5, atol=1e-6, err_msg=name)


def test_the_probe_runs_once_per_model_not_on_every_text(tiny_models, monkeypatch):
    from attnviz.core.analysis import heads as heads_module

    config = _config(tiny_models("llama"))
    calls = []
    original = heads_module._probe
    monkeypatch.setattr(heads_module, "_probe", lambda *a: (calls.append(1), original(*a))[1])
    heads_module._PROBED.clear()
    first = head_scores(config)
    again = head_scores(config.replace(text="a dog ran home"))
    assert len(calls) == 1  # the probe's tokens are the model's, not the text's
    np.testing.assert_array_equal(first["induction"], again["induction"])
    assert np.isfinite(first["induction"]).all()


def test_predictions_made_a_few_positions_at_a_time_equal_transformers_with_their_kl(tiny_models, monkeypatch):
    # the logits are made LOGIT_ROWS positions at a time (never whole): 3 here, so every run of positions ends
    # mid-sentence; the unablated predictions and the KL come from the same pass
    from attnviz.core.runs import predictions as predictions_module

    monkeypatch.setattr(predictions_module, "LOGIT_ROWS", 3)
    folder, family, layer, head = tiny_models("llama"), "llama", 1, 2
    result = run(_config(folder, ablate=(f"{layer}.{head}",), top_k=3))
    model = eager(folder)
    blocks, _, out_proj = PARTS[family]
    dh = getattr(model.config, "head_dim", None) or model.config.hidden_size // model.config.num_attention_heads
    ids = torch.tensor([result.token_ids])
    with torch.no_grad():
        intact = torch.log_softmax(model(ids).logits[0].double(), -1)
        handle = out_proj(blocks(model)[layer]).register_forward_pre_hook(
            lambda module, args: (args[0].index_fill(-1, torch.arange(head * dh, (head + 1) * dh), 0),))
        ablated = torch.log_softmax(model(ids).logits[0].double(), -1)
        handle.remove()
    assert len(result.top_ids) == ids.shape[1] > 3
    np.testing.assert_array_equal(result.top_ids, ablated.topk(3, -1).indices.numpy())
    np.testing.assert_array_equal(result.unablated.top_ids, intact.topk(3, -1).indices.numpy())
    np.testing.assert_allclose(result.unablated.top_probs, intact.exp().topk(3, -1).values.numpy(), atol=1e-5)
    kl = (intact.exp() * (intact - ablated)).sum(-1).numpy()
    np.testing.assert_allclose(result.kl, kl, atol=1e-5)


def _mean_over_rows_with_a_choice(layer_weights, column):
    """(layers, H): the mean weight on key `column(i)` over the rows i of a causal map with more than one
    allowed key (rows 1..L-1), computed here from the maps themselves."""
    lw = np.asarray(layer_weights, np.float64)[:, 0]  # (layers, H, L, L)
    rows = np.arange(1, lw.shape[-2])
    return lw[..., rows, column(rows)].mean(-1)


def test_first_token_and_self_count_only_rows_where_the_head_has_a_choice(tiny_models):
    from attnviz.core.analysis import heads as heads_module

    heads_module._PROBED.clear()
    config = _config(tiny_models("llama"))
    lw = run(config).layer_weights
    scores = head_scores(config)
    first = _mean_over_rows_with_a_choice(lw, lambda i: np.zeros_like(i))
    own = _mean_over_rows_with_a_choice(lw, lambda i: i)
    np.testing.assert_allclose(scores["first_token"], first, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(scores["self"], own, rtol=1e-5, atol=1e-7)
    # the forced first row (weight 1 on key 0, which is itself) counted would raise both scores
    counted = lw[:, 0, :, :, 0].astype(np.float64).mean(-1)
    assert (counted - scores["first_token"] > 1e-3).all()


def test_a_head_that_attends_only_to_itself_scores_one_for_self_and_a_uniform_head_does_not():
    from attnviz.core.analysis.heads import map_scores

    n = 6
    causal = np.tri(n, dtype=bool)
    uniform = causal / causal.sum(-1, keepdims=True)
    maps = np.stack([np.eye(n), uniform])[None, None]  # (layers 1, B 1, H 2, L, L)
    scores = map_scores(maps, [causal[None, None]])
    assert scores["self"][0, 0] == 1.0 and scores["first_token"][0, 0] == 0.0
    expected = np.mean([1 / (i + 1) for i in range(1, n)])  # rows 1..5: weight 1/(i+1) on itself and on key 0
    assert scores["self"][0, 1] == pytest.approx(expected) and scores["self"][0, 1] < 0.5
    assert scores["first_token"][0, 1] == pytest.approx(expected)
    # a bidirectional map has no forced row: every row counts
    full = np.full((n, n), 1 / n)
    both = map_scores(np.stack([np.eye(n), full])[None, None], [np.ones((1, 1, n, n), bool)])
    assert both["self"][0].tolist() == pytest.approx([1.0, 1 / n])
