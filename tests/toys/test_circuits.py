"""Circuits on toy-induction, whose mechanism is known (a previous-token head in layer 0, L0H1, and induction
heads in layer 1 that K-compose with it and copy), against references written here from the seed modules'
weights with plain matrix products (d x d, no factoring)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnviz.core import ConfigError, RunConfig
from attnviz.core.analysis.attribution import head_logit_attribution
from attnviz.core.analysis.circuits import composition_scores, copying_scores, head_circuits
from attnviz.core.analysis.patching import patch_heads, patch_residual
from attnviz.toys import load_toy

PREVIOUS_TOKEN_HEAD = 1  # layer 0 (the toy's card and head_scores agree)
CLEAN, CORRUPTED = "pophijackmehijackm", "pophijackmehijacbm"  # the repeat's 'k' changed: the answer 'e' goes


@pytest.fixture(scope="module")
def config():
    return RunConfig.for_variant("toy-induction", text=CLEAN)


@pytest.fixture(scope="module")
def composition(config):
    return composition_scores(config)


def _head_mats(layer: int, head: int):
    """The head's norm-scale-folded W_Q, W_K, W_V (d, dh) and W_O (dh, d) from the seed module's Linears."""
    module = load_toy("toy-induction").module
    attn, g = module.attns[layer], module.lns[layer].weight.detach()[:, None]
    cut = slice(16 * head, 16 * (head + 1))
    w = [g * lin.weight.detach().T[:, cut] for lin in (attn.query, attn.key, attn.value)]
    return (*w, attn.output.weight.detach().T[cut])


def test_every_induction_head_k_composes_most_with_the_previous_token_head(composition):
    k = composition["k"][0, :, 1, :]  # (layer-0 head, layer-1 head)
    assert (k.argmax(axis=0) == PREVIOUS_TOKEN_HEAD).all()
    assert k[PREVIOUS_TOKEN_HEAD].min() > 0.21 and k[PREVIOUS_TOKEN_HEAD].max() < 0.24  # measured 0.22-0.23
    others = np.delete(k, PREVIOUS_TOKEN_HEAD, axis=0)
    assert others.max() <= 0.16  # measured <= 0.155
    assert np.isnan(composition["q"][1, :, 0, :]).all() and np.isnan(composition["v"][1, :, 1, :]).all()


@pytest.mark.parametrize("kind", ["q", "k", "v"])
def test_composition_equals_the_frobenius_definition(composition, kind):
    for h1, h2 in [(1, 0), (3, 2)]:
        q1, k1, v1, o1 = _head_mats(0, h1)
        q2, k2, v2, o2 = _head_mats(1, h2)
        a = v1 @ o1
        b = {"q": q2 @ k2.T, "k": (q2 @ k2.T).T, "v": v2 @ o2}[kind]
        expected = (a @ b).norm() / (a.norm() * b.norm())
        assert composition[kind][0, h1, 1, h2] == pytest.approx(float(expected), rel=1e-4)


def test_copying_scores_are_highest_for_the_induction_heads(config):
    scores = copying_scores(config)
    assert scores.shape == (2, 4)
    assert scores[1].min() > scores[0].max()
    assert scores[1].min() > 0.99  # measured 0.998-0.999


def test_head_circuits_over_the_whole_vocabulary_equal_the_seed_module(config):
    module = load_toy("toy-induction").module
    circuits = head_circuits(config, 1, 2)
    assert circuits.over == "vocabulary" and circuits.tokens == tuple("abcdefghijklmnop")
    attn, ln = module.attns[1], module.lns[1]
    with torch.no_grad():
        x = ln(module.tok.weight)  # every token through the layer's norm, as the model applies it
        cut = slice(32, 48)
        q, k, v = attn.query(x)[:, cut], attn.key(x)[:, cut], attn.value(x)[:, cut]
        ov = v @ attn.output.weight.T[cut] @ (module.ln_f.weight[:, None] * module.head.weight.T)
    np.testing.assert_allclose(circuits.qk, (q @ k.T).numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(circuits.ov, ov.numpy(), rtol=1e-4, atol=1e-4)
    eig = np.linalg.eigvals(ov.double().numpy())
    assert circuits.copying == pytest.approx(eig.sum().real / np.abs(eig).sum(), abs=1e-6)
    # an induction head copies: attending to a token raises that token's own logit most
    assert (circuits.ov.argmax(axis=1) == np.arange(16)).mean() > 0.9


def test_logit_attribution_sums_to_the_logit_and_the_induction_heads_carry_it(config):
    attribution = head_logit_attribution(config)
    with torch.no_grad():
        logits = load_toy("toy-induction").module(torch.tensor([[ord(c) - 97 for c in CLEAN]]))[0, -1]
    assert attribution.token == int(logits.argmax()) == ord("e") - 97  # "...hijackm" -> e
    assert attribution.total == pytest.approx(float(logits.max()), abs=1e-5)
    assert attribution.heads.sum() + attribution.rest == pytest.approx(attribution.total, abs=1e-4)
    np.testing.assert_allclose(attribution.sources.sum(-1), attribution.heads, atol=1e-5)
    assert attribution.heads[1].min() > attribution.heads[0].max()
    # each induction head's term comes from the key after the earlier copy of "m" ("e", position 10)
    assert (attribution.sources[1].argmax(-1) == 10).all()


def test_patching_finds_the_previous_token_head_and_the_changed_position(config):
    heads = patch_heads(config, CORRUPTED, "e", "b")
    assert np.unravel_index(np.argmax(heads), heads.shape) == (0, PREVIOUS_TOKEN_HEAD)
    residual = patch_residual(config, CORRUPTED, "e", "b")
    assert residual.shape == (2, len(CLEAN))
    changed = CORRUPTED.index("b")
    assert residual[0, changed] == pytest.approx(1.0, abs=1e-6)  # everything after is the clean run again
    assert np.abs(np.delete(residual[0], changed)).max() < 1e-6  # the other positions are the same tokens
    # entering layer 1, the last position carries most of it (its heads still read the corrupted keys)
    assert residual[1].argmax() == len(CLEAN) - 1 and residual[1, -1] > 0.9


def test_bad_inputs_say_which_and_how_to_fix(config):
    with pytest.raises(ConfigError, match="makes 17 tokens where the clean text makes 18"):
        patch_heads(config, CORRUPTED[:-1], "e", "b")
    with pytest.raises(ConfigError, match="2 tokens"):
        patch_heads(config, CORRUPTED, "ef", "b")
    with pytest.raises(ConfigError, match="not in the model's vocabulary"):
        patch_heads(config, CORRUPTED, "z", "b")
    with pytest.raises(ConfigError, match="same token as the answer"):
        patch_heads(config, CORRUPTED, "e", "e")
    with pytest.raises(ConfigError, match="nothing to restore"):
        patch_heads(config, CLEAN, "e", "b")
    with pytest.raises(ConfigError, match="heads per layer"):
        head_circuits(config, 1, 4)
    with pytest.raises(ConfigError, match="encoder-decoder"):
        copying_scores(RunConfig.for_variant("toy-reverse"))
    with pytest.raises(ConfigError, match="positions 0..17"):
        head_logit_attribution(config, position=18)


def test_the_factored_way_for_wide_models_gives_the_same_scores(config, composition, monkeypatch):
    from attnviz.core.analysis import circuits

    monkeypatch.setattr(circuits, "GRAM_BYTES", 0)  # as for a model whose d x d Gram matrices do not fit
    factored = composition_scores(config)
    for kind in ("q", "k", "v"):
        np.testing.assert_allclose(factored[kind], composition[kind], rtol=1e-4, equal_nan=True)
