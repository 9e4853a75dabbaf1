"""What heads do, checked against the toys' known heads (toy-induction: a previous-token head in layer 0,
induction heads in layer 1; toy-reverse: the cross-attention layer does the copying)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnviz.core import ConfigError, RunConfig, head_effects, head_scores, run
from attnviz.toys import load_toy

REPEAT = slice(10, 18)  # "pophijackmehijackme": the second "hijackme" predicts from the first


@pytest.fixture(scope="module")
def induction():
    return RunConfig.for_variant("toy-induction")


@pytest.fixture(scope="module")
def scores(induction):
    return head_scores(induction)


def test_head_scores_find_the_previous_token_head_and_the_induction_heads(scores):
    prev = scores["previous_token"]
    assert np.unravel_index(np.argmax(prev), prev.shape)[0] == 0  # layer 0 holds the previous-token head
    induction = scores["induction"]
    assert induction[1].min() > induction[0].max()  # every layer-1 head above every layer-0 head
    assert set(scores) >= {"previous_token", "first_token", "self", "duplicate_token", "induction"}
    assert all(s.shape == (2, 4) for s in scores.values())


def test_knocking_out_layer_1_breaks_the_repeat_and_a_bystander_head_does_not(induction, scores):
    before = np.nanmean(run(induction).target_probs[REPEAT])
    after_layer = np.nanmean(run(induction.replace(ablate=("1.*",))).target_probs[REPEAT])
    assert after_layer < before / 2
    prev_head = int(np.argmax(scores["previous_token"][0]))
    bystander = next(h for h in range(4) if h != prev_head)
    after_one = np.nanmean(run(induction.replace(ablate=(f"0.{bystander}",))).target_probs[REPEAT])
    assert abs(after_one - before) < before / 10


def test_head_effects_put_the_largest_drop_on_the_previous_token_head(induction, scores):
    effects = head_effects(induction, position=11)
    prev_head = int(np.argmax(scores["previous_token"][0]))
    assert np.unravel_index(np.argmax(effects), effects.shape) == (0, prev_head)
    others = [effects[0, h] for h in range(4) if h != prev_head]
    assert effects[1].mean() > max(others)  # the induction heads matter more than the bystanders


def test_head_effects_equal_one_ablated_run_per_head(induction):
    """The batched forwards (one head per batch row) against a plain run with that head ablated."""
    position = 13
    effects = head_effects(induction, position=position)
    base = np.log(run(induction).target_probs[position])
    for layer, head in [(0, 1), (1, 2), (0, 3)]:
        after = np.log(run(induction.replace(ablate=(f"{layer}.{head}",))).target_probs[position])
        assert effects[layer, head] == pytest.approx(base - after, abs=1e-4)


def test_mean_ablation_replaces_a_head_by_its_mean_over_positions(induction):
    zero = run(induction.replace(ablate=("0.1",))).target_probs
    mean = run(induction.replace(ablate=("0.1",), ablation="mean")).target_probs
    assert not np.allclose(zero[:-1], mean[:-1])


def test_toy_reverse_needs_its_cross_attention():
    config = RunConfig.for_variant("toy-reverse")
    assert np.nanmean(run(config).target_probs) > 0.9
    assert np.nanmean(run(config.replace(ablate=("2.*",))).target_probs) < 0.5


def test_predictions_are_the_toys_own_logits(induction):
    result = run(induction)
    toy = load_toy("toy-induction")
    ids = torch.tensor([[toy.spec.vocabulary.index(c) for c in induction.text]])
    with torch.no_grad():
        probs = torch.softmax(toy.module(ids)[0], -1)
    top = probs.topk(5, -1)
    np.testing.assert_array_equal(result.top_ids, top.indices.numpy())
    np.testing.assert_allclose(result.top_probs, top.values.numpy(), atol=1e-6)
    nxt = ids[0, 1:]
    np.testing.assert_allclose(result.target_probs[:-1], probs[torch.arange(len(nxt)), nxt].numpy(), atol=1e-6)
    assert np.isnan(result.target_probs[-1])  # the last position has no next token
    assert result.top_tokens[0][0] == toy.spec.vocabulary[int(top.indices[0, 0])]
    assert result.lens_ids.shape == (2, len(induction.text))
    np.testing.assert_array_equal(result.lens_ids[-1], result.top_ids[:, 0])  # the last layer is the output


def test_ablation_reports_the_unablated_predictions_and_the_kl(induction):
    plain = run(induction)
    ablated = run(induction.replace(ablate=("1.*",)))
    np.testing.assert_allclose(ablated.unablated.target_probs, plain.target_probs, atol=1e-6)
    assert ablated.kl.shape == (len(induction.text),) and (ablated.kl[REPEAT] > 0.1).all()
    assert plain.kl is None and plain.unablated is None


@pytest.mark.parametrize("spec, problem", [("2.0", "layer 2 does not exist"), ("0.4", "head 4 does not exist")])
def test_an_ablation_of_a_missing_layer_or_head_is_one_clear_error(induction, spec, problem):
    with pytest.raises(ConfigError, match=problem) as info:
        run(induction.replace(ablate=(spec,)))
    assert info.value.field == "ablate"


def test_a_malformed_ablation_is_refused_with_the_form_to_use():
    with pytest.raises(ConfigError, match='layer.head') as info:
        RunConfig.for_variant("toy-induction", ablate=("1-2",))
    assert info.value.field == "ablate"


def test_the_induction_toy_writes_the_rest_of_the_repeat():
    result = run(RunConfig.for_variant("toy-induction", text="pophijackmehij", generate=4))
    assert "".join(result.tokens) == "pophijackmehijackm" and result.prompt_length == 14
    full = run(RunConfig.for_variant("toy-induction", text="".join(result.tokens)))
    np.testing.assert_allclose(result.layer_weights, full.layer_weights, atol=1e-6)
