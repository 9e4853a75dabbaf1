"""Circuits, direct logit attribution and activation patching of transformers models, against transformers' own
eager model: its logits, forward hooks on its output projections and norms, and its weights multiplied out here."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tiny import KV, SENTENCE, make_family

from attnviz.core import ConfigError, RunConfig
from attnviz.core.analysis.attribution import head_logit_attribution
from attnviz.core.analysis.circuits import composition_scores, copying_scores, head_circuits
from attnviz.core.analysis.patching import patch_heads

CORRUPTED = "The dog sat on the mat, and the cat chased it."  # the two animals swapped: as many tokens
ANSWER, WRONG = " the", " cat"


def eager(folder):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    """family -> a tiny checkpoint built from seed 0 with random biases and norm gains (tiny.make_family): the
    patching ratios divide by a logit difference, so the weights are fixed rather than drawn afresh per session."""
    built = {}

    def get(family: str):
        if family not in built:
            built[family] = tmp_path_factory.mktemp(f"seeded-{family}")
            make_family(built[family], family, **(KV if family == "llama" else {}))
        return built[family]
    return get


def _config(folder, text=SENTENCE):
    return RunConfig.for_variant("pretrained", model=str(folder), text=text)


def _ids(folder, text, special=True):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(folder / "tokenizer.json")).encode(text, add_special_tokens=special).ids


# family -> its blocks, its attention's output projection, its final norm, and the head's output as the residual
# stream receives it at one position (Gemma 2 normalises the attention's output: the norm written out here)
def _layers(m):
    return m.transformer.h if hasattr(m, "transformer") else m.model.layers


def _out_proj(block):
    return block.attn.c_proj if hasattr(block, "attn") else block.self_attn.o_proj


def _rms(x, eps):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def _final(m, family, x, r):
    """Component x through the final norm frozen at the residual r (written from each family's definition)."""
    if family == "gpt2":
        ln = m.transformer.ln_f
        return (x - x.mean()) / torch.sqrt(r.var(unbiased=False) + ln.eps) * ln.weight
    eps, w = m.config.rms_norm_eps, m.model.norm.weight
    scale = (1 + w) if family == "gemma2" else w
    return x / torch.sqrt(r.pow(2).mean() + eps) * scale


@pytest.mark.parametrize("family", ["gpt2", "llama", "gemma2"])
def test_logit_attribution_sums_to_transformers_logits_and_each_head_to_a_hand_computation(tiny_models, family):
    folder = tiny_models(family)
    baseline = 7
    attribution = head_logit_attribution(_config(folder), baseline=baseline)
    model = eager(folder)
    seen = {}
    hooks = [_out_proj(b).register_forward_pre_hook(lambda mod, a, i=i: seen.__setitem__(("ctx", i), a[0]))
             for i, b in enumerate(_layers(model))]
    final = model.transformer.ln_f if family == "gpt2" else model.model.norm
    hooks.append(final.register_forward_pre_hook(lambda mod, a: seen.__setitem__("resid", a[0])))
    if family == "gemma2":
        hooks += [b.post_attention_layernorm.register_forward_pre_hook(
            lambda mod, a, i=i: seen.__setitem__(("attn", i), a[0])) for i, b in enumerate(_layers(model))]
    ids = torch.tensor([_ids(folder, SENTENCE)])
    with torch.no_grad():
        logits = model(ids).logits[0, -1]
    for h in hooks:
        h.remove()
    tok = int(logits.argmax())
    assert attribution.token == tok and attribution.position == ids.shape[1] - 1
    total = float(logits[tok] - logits[baseline])
    assert attribution.total == pytest.approx(total, abs=1e-4)
    assert attribution.heads.sum() + attribution.rest == pytest.approx(total, abs=1e-4)
    np.testing.assert_allclose(attribution.sources.sum(-1), attribution.heads, atol=1e-5)
    u = model.lm_head.weight[tok] - model.lm_head.weight[baseline]
    heads = model.config.num_attention_heads
    r = seen["resid"][0, -1]
    with torch.no_grad():
        for layer, block in enumerate(_layers(model)):
            proj = _out_proj(block)
            w_o = proj.weight if family == "gpt2" else proj.weight.T  # (H·dv, d): Conv1D stores it transposed
            dv = w_o.shape[0] // heads
            for head in range(heads):
                out = seen[("ctx", layer)][0, -1, head * dv:(head + 1) * dv] @ w_o[head * dv:(head + 1) * dv]
                if family == "gemma2":  # the post-attention norm frozen at this position's attention output
                    a = seen[("attn", layer)][0, -1]
                    post = block.post_attention_layernorm
                    out = out / torch.sqrt(a.pow(2).mean() + post.eps) * (1 + post.weight)
                expected = float(_final(model, family, out, r) @ u)
                assert attribution.heads[layer, head] == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize("family", ["gpt2", "llama", "gemma2"])
def test_patch_heads_equals_copying_each_heads_slice_with_hooks(seeded, family):
    folder = seeded(family)
    scores = patch_heads(_config(folder), CORRUPTED, ANSWER, WRONG)
    model = eager(folder)
    clean, corrupted = (torch.tensor([_ids(folder, t)]) for t in (SENTENCE, CORRUPTED))
    answer, wrong = _ids(folder, ANSWER, False)[0], _ids(folder, WRONG, False)[0]
    blocks, heads = _layers(model), model.config.num_attention_heads
    cached = {}
    hooks = [_out_proj(b).register_forward_pre_hook(lambda mod, a, i=i: cached.__setitem__(i, a[0].clone()))
             for i, b in enumerate(blocks)]

    def diff(ids):
        with torch.no_grad():
            logits = model(ids).logits[0, -1]
        return float(logits[answer] - logits[wrong])
    d_clean = diff(clean)
    for h in hooks:
        h.remove()
    d_corrupted = diff(corrupted)
    expected = np.zeros((len(blocks), heads))
    for layer, block in enumerate(blocks):
        dv = cached[layer].shape[-1] // heads
        for head in range(heads):
            def patch(mod, args, layer=layer, cut=slice(head * dv, (head + 1) * dv)):
                x = args[0].clone()
                x[..., cut] = cached[layer][..., cut]
                return (x,)
            handle = _out_proj(block).register_forward_pre_hook(patch)
            expected[layer, head] = (diff(corrupted) - d_corrupted) / (d_clean - d_corrupted)
            handle.remove()
    np.testing.assert_allclose(scores, expected, atol=1e-5)
    assert np.abs(expected).max() > 0.1  # some head carries the difference


def _head_weights(model, family, layer):
    """(W_Q, W_K, W_V (H, d, dh) with grouped kv heads repeated, W_O (H, dh, d)) with the pre-attention norm's
    scale folded in, read from transformers' modules by their names."""
    block = _layers(model)[layer]
    heads = model.config.num_attention_heads
    if family == "gpt2":
        g = block.ln_1.weight
        q, k, v = block.attn.c_attn.weight.split(model.config.n_embd, dim=1)  # Conv1D: (d, 3d)
        o = block.attn.c_proj.weight  # (H·dh, d)
    else:
        g = block.input_layernorm.weight
        a = block.self_attn
        q, k, v, o = a.q_proj.weight.T, a.k_proj.weight.T, a.v_proj.weight.T, a.o_proj.weight.T
    d, dh = g.shape[0], q.shape[1] // heads

    def per_head(w):
        w = (g[:, None] * w).reshape(d, -1, dh).permute(1, 0, 2)
        return w.repeat_interleave(heads // w.shape[0], dim=0)  # kv head h // group for query head h
    return per_head(q), per_head(k), per_head(v), o.reshape(heads, -1, d)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_composition_scores_equal_the_definition_on_transformers_weights(tiny_models, family):
    folder = tiny_models(family)
    scores = composition_scores(_config(folder))
    model = eager(folder)
    layers = len(_layers(model))
    with torch.no_grad():
        mats = [_head_weights(model, family, layer) for layer in range(layers)]
        for l1, h1, l2, h2 in [(0, 1, 1, 3), (0, 3, 1, 0)]:
            q1, k1, v1, o1 = (m[h1] for m in mats[l1])
            q2, k2, v2, o2 = (m[h2] for m in mats[l2])
            a = v1 @ o1
            for kind, b in (("q", q2 @ k2.T), ("k", k2 @ q2.T), ("v", v2 @ o2)):
                expected = float((a @ b).norm() / (a.norm() * b.norm()))
                assert scores[kind][l1, h1, l2, h2] == pytest.approx(expected, rel=1e-4)
    assert np.isnan(scores["k"][1, :, 0, :]).all() and np.isnan(scores["q"][1, :, 1, :]).all()


def test_qk_circuit_of_a_rope_model_is_on_the_texts_positions(tiny_models):
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    folder = tiny_models("llama")
    layer, head = 1, 3
    circuits = head_circuits(_config(folder), layer, head)
    model = eager(folder)
    ids = torch.tensor([_ids(folder, SENTENCE)])
    assert circuits.over == "text" and circuits.token_ids == tuple(ids[0].tolist())
    block = model.model.layers[layer]
    a = block.self_attn
    with torch.no_grad():
        x = block.input_layernorm(model.model.embed_tokens(ids))  # the tokens alone, through the layer's norm
        dh = a.head_dim
        q = a.q_proj(x).view(1, -1, 4, dh).transpose(1, 2)
        k = a.k_proj(x).view(1, -1, 2, dh).transpose(1, 2)
        v = a.v_proj(x).view(1, -1, 2, dh).transpose(1, 2)
        cos, sin = model.model.rotary_emb(x, torch.arange(ids.shape[1])[None])
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        qk = q[0, head] @ k[0, head // 2].T
        w_u = model.model.norm.weight[:, None] * model.lm_head.weight.T[:, ids[0]]
        ov = v[0, head // 2] @ a.o_proj.weight.T[head * dh:(head + 1) * dh] @ w_u
    np.testing.assert_allclose(circuits.qk, qk.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(circuits.ov, ov.numpy(), rtol=1e-4, atol=1e-4)
    scores = copying_scores(_config(folder))
    distinct = sorted(set(ids[0].tolist()), key=ids[0].tolist().index)
    rows = [ids[0].tolist().index(t) for t in distinct]
    eig = np.linalg.eigvals(ov.double().numpy()[np.ix_(rows, rows)])
    assert scores[layer, head] == pytest.approx(eig.sum().real / np.abs(eig).sum(), abs=1e-5)


@pytest.mark.parametrize(("family", "says"), [
    ("t5", "encoder-decoder"), ("bart", "encoder-decoder"), ("gpt_neo", "weights only"),
    ("bert", "no next-token head")])
def test_families_where_circuits_do_not_apply_say_so(tiny_models, family, says):
    config = _config(tiny_models(family))
    for call in (lambda: copying_scores(config), lambda: head_logit_attribution(config),
                 lambda: patch_heads(config, CORRUPTED, ANSWER, WRONG)):
        with pytest.raises(ConfigError, match=f"{says}.*circuits, logit attribution and activation patching do not "
                           "apply"):
            call()


def test_patching_bad_inputs(tiny_models):
    config = _config(tiny_models("llama"))
    with pytest.raises(ConfigError, match="tokens where the clean text makes"):
        patch_heads(config, "The dog sat.", ANSWER, WRONG)
    with pytest.raises(ConfigError, match="the tokenizer makes 2 tokens of it"):
        patch_heads(config, CORRUPTED, " mat", WRONG)


IOI_CLEAN = "When Mary and John went to the store, John gave a drink to"
IOI_CORRUPTED = "When Mary and John went to the store, Tom gave a drink to"  # the second John: a third name


@pytest.mark.skipif(not __import__("os").environ.get("ATTNVIZ_TEST_MODEL"),
                    reason="set ATTNVIZ_TEST_MODEL to a causal model folder or .gguf file (SmolLM2-135M)")
def test_an_ioi_pair_gives_a_map_where_a_few_heads_carry_the_answer():
    """The real model: patching the indirect-object pair restores the answer from a few heads, and the heads that
    restore most are among those writing the answer's logit directly (SmolLM2-135M: L23 H3 both times)."""
    config = _config(__import__("os").environ["ATTNVIZ_TEST_MODEL"], IOI_CLEAN)
    scores = patch_heads(config, IOI_CORRUPTED, " Mary", " John")
    ranked = np.argsort(-scores.ravel())
    assert scores.ravel()[ranked[0]] > 0.3  # one head restores a third of the difference or more
    assert np.median(np.abs(scores)) < 0.05  # most heads restore next to nothing: a sparse map
    attribution = head_logit_attribution(config, token=" Mary", baseline=" John")
    assert attribution.total > 0  # the model prefers the indirect object
    direct = set(np.argsort(-attribution.heads.ravel())[:5].tolist())
    assert ranked[0] in direct
