"""Every layer's attention weights and the last hidden state against transformers' eager attention."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from tiny import INTERFACE_FAMILIES, SENTENCE, WEIGHTS_ONLY_FAMILIES

from attnviz.models import load_model


def reference(folder, ids):
    """transformers' own eager attention with output_attentions: the reference nobody here wrote
    (a .gguf file: transformers' GGUF loading)."""
    from pathlib import Path

    from transformers import AutoModel

    path = Path(folder)
    source = (dict(pretrained_model_name_or_path=path.parent, gguf_file=path.name) if path.is_file()
              else dict(pretrained_model_name_or_path=path))
    model = AutoModel.from_pretrained(**source, attn_implementation="eager", dtype=torch.float32).eval()
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_attentions=True)
    return out.last_hidden_state, out.attentions


def logits_reference(folder, ids):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    with torch.no_grad():
        return model(torch.tensor([ids])).logits


def _compare(folder, model):
    enc = model.encode(SENTENCE)
    hidden, traces = model.forward(torch.tensor([enc.ids]), record={"weights"})
    ref_hidden, ref_attn = reference(folder, list(enc.ids))
    assert len(traces) == len(ref_attn) == model.info.layers
    for layer, (trace, ref) in enumerate(zip(traces, ref_attn)):
        assert trace.weights.shape == ref.shape == (1, model.info.heads, len(enc.ids), len(enc.ids))
        torch.testing.assert_close(trace.weights, ref, atol=1e-4, rtol=0, msg=f"layer {layer}")
    torch.testing.assert_close(hidden, ref_hidden, atol=1e-4, rtol=0)
    # not trivially uniform: the weights carry information the comparison could miss
    assert float(traces[-1].weights.std()) > 0.01
    return enc, traces


@pytest.mark.parametrize("family", INTERFACE_FAMILIES)
def test_every_layer_matches_transformers(tiny_models, family):
    folder = tiny_models(family)
    model = load_model(folder)
    assert model.attention_modules, "the family's attention ran on attnviz's kernel"
    _compare(folder, model)
    shared = family == "albert"  # one module for every layer: a trace per call, not per module
    assert len(set(model.attention_modules)) == (1 if shared else model.info.layers)
    assert {"q", "k", "v", "qk", "scaled", "scores", "weights", "context", "x", "output"} <= set(model.info.stages)


@pytest.mark.parametrize("family", WEIGHTS_ONLY_FAMILIES)
def test_weights_only_family_matches_transformers(tiny_models, family):
    folder = tiny_models(family)
    model = load_model(folder)
    assert model.info.stages == ("x", "weights", "dropped", "output")
    assert len(set(model.attention_modules)) == model.info.layers  # one module per layer's weights
    _compare(folder, model)


@pytest.mark.parametrize("family", ["gpt2", "llama3", "gemma2", "gpt_oss"])
def test_logits_through_the_kernel_equal_the_eager_models(tiny_models, family):
    folder = tiny_models(family)
    model = load_model(folder)
    ids = list(model.encode(SENTENCE).ids)
    with torch.inference_mode():
        logits = model.module(input_ids=torch.tensor([ids])).logits
    torch.testing.assert_close(logits, logits_reference(folder, ids), atol=1e-4, rtol=0)


def test_stages_are_the_kernels_own(tiny_models):
    """The recorded stages chain as the kernel computes them: scaled = qk * scaling, weights = softmax(scores),
    context = weights @ v (GQA: query head h reads kv head h // 2), output = o_proj(context)."""
    m = load_model(tiny_models("llama"))
    enc = m.encode(SENTENCE)
    _, traces = m.forward(torch.tensor([enc.ids]), record={"q", "k", "v", "qk", "scaled", "scores", "weights",
                                                           "context", "x", "output"})
    t = traces[1]
    attn = m.attention_modules[1]
    torch.testing.assert_close(t.scaled, t.qk * attn.scaling)
    torch.testing.assert_close(t.qk, t.q @ t.k.repeat_interleave(2, dim=1).transpose(-1, -2))
    torch.testing.assert_close(t.weights, torch.softmax(t.scores, dim=-1))
    heads = t.weights @ t.v.repeat_interleave(2, dim=1)  # (1, H, L, dh)
    torch.testing.assert_close(t.context, heads.transpose(1, 2).flatten(2))
    with torch.no_grad():
        torch.testing.assert_close(t.output, attn.o_proj(t.context.clone()))
    assert t.x.shape == (1, len(enc.ids), 32)


def test_gemma2_soft_cap_is_the_capped_stage(tiny_models):
    m = load_model(tiny_models("gemma2"))  # attn_logit_softcapping 2.0
    enc = m.encode(SENTENCE)
    _, traces = m.forward(torch.tensor([enc.ids]), record={"scaled", "capped"})
    t = traces[0]
    torch.testing.assert_close(t.capped, 2.0 * torch.tanh(t.scaled / 2.0))
    assert float(t.capped.abs().max()) <= 2.0 < float(t.scaled.abs().max())


def test_gpt_oss_sinks_leave_rows_below_one(tiny_models):
    m = load_model(tiny_models("gpt_oss"))
    enc = m.encode(SENTENCE)
    _, traces = m.forward(torch.tensor([enc.ids]), record={"weights"})
    sums = traces[0].weights.sum(-1)  # the sink's share of each row is what is missing
    assert float(sums.max()) <= 1 + 1e-6 and float(sums.mean()) < 0.99


def test_gemma3_alternates_sliding_and_full_layers(tiny_models):
    m = load_model(tiny_models("gemma3_text"))  # window 4, then full
    enc = m.encode(SENTENCE)
    _, traces = m.forward(torch.tensor([enc.ids]), record={"weights"})
    local, full = traces[0].weights[0, 0].numpy(), traces[1].weights[0, 0].numpy()
    i, j = np.indices(local.shape)
    assert np.all(local[(i - j) >= 4] == 0) and np.all(local[(i - j >= 0) & (i - j < 4)] > 0)
    assert np.all(full[i >= j] > 0) and np.all(full[j > i] == 0)


def test_an_unknown_keyword_runs_the_familys_eager_attention(tiny_models, monkeypatch):
    """A keyword attnviz's kernel does not know is never dropped: that call runs the family's own
    eager function (so the numbers stay transformers'), and the run says so."""
    import transformers.models.llama.modeling_llama as llama

    m = load_model(tiny_models("llama"))
    enc = m.encode(SENTENCE)
    original = llama.LlamaAttention.forward

    def forward(self, *args, **kwargs):
        return original(self, *args, **{**kwargs, "novel_bias": 0.0})
    monkeypatch.setattr(llama.LlamaAttention, "forward", forward)
    calls = []
    eager = llama.eager_attention_forward
    monkeypatch.setattr(llama, "eager_attention_forward", lambda *a, **k: calls.append(k) or eager(*a, **k))
    hidden, traces = m.forward(torch.tensor([enc.ids]), record={"weights", "scores"})
    assert len(calls) == m.info.layers and all(c["novel_bias"] == 0.0 for c in calls)
    ref_hidden, ref_attn = reference(tiny_models("llama"), list(enc.ids))
    torch.testing.assert_close(hidden, ref_hidden, atol=1e-4, rtol=0)
    torch.testing.assert_close(traces[1].weights, ref_attn[1], atol=1e-4, rtol=0)
    assert "scores" not in traces[0] and traces[0].weights.shape[-1] == len(enc.ids)
    assert any("novel_bias" in n and "eager" in n for n in m.notes)


def test_info_reads_the_config(tiny_models):
    m = load_model(tiny_models("llama"))
    info = m.info
    assert (info.model_type, info.architecture, info.layers, info.heads, info.kv_heads, info.d_model) == \
        ("llama", "LlamaForCausalLM", 2, 4, 2, 32)
    assert info.causal and info.stacks == ("decoder",) and info.dtype == "float32"
    assert not load_model(tiny_models("bert")).info.causal
    assert info.max_positions == 64 and info.vocab_size == m.tokenizer._tok.get_vocab_size()


def test_mistral_window_masks_far_keys(tiny_models):
    m = load_model(tiny_models("mistral"))
    enc = m.encode(SENTENCE)
    _, traces = m.forward(torch.tensor([enc.ids]), record={"weights"})
    w = traces[0].weights[0, 0].numpy()
    i, j = np.indices(w.shape)
    assert np.all(w[(i - j) >= 4] == 0) and np.all(w[j > i] == 0)
    assert np.all(w[(i - j >= 0) & (i - j < 4)] > 0)


def test_ids_are_the_tokenizers_own_without_padding(tiny_models):
    from tokenizers import Tokenizer

    folder = tiny_models("bert")
    raw = Tokenizer.from_file(str(folder / "tokenizer.json"))
    assert len(raw.encode(SENTENCE).ids) == 32  # the file pads
    raw.no_padding()
    enc = load_model(folder).encode(SENTENCE)
    assert list(enc.ids) == raw.encode(SENTENCE).ids
    assert enc.tokens[0] == "[CLS]" and enc.tokens[-1] == "[SEP]" and "cat" in enc.tokens


def test_second_load_comes_from_the_cache(tiny_models):
    folder = tiny_models("gpt2")
    assert load_model(folder) is load_model(folder)


@pytest.mark.skipif(not os.environ.get("ATTNVIZ_TEST_MODEL"),
                    reason="set ATTNVIZ_TEST_MODEL to a model folder or .gguf file")
def test_real_model_folder_matches_transformers():
    folder = os.environ["ATTNVIZ_TEST_MODEL"]
    model = load_model(folder)
    enc = model.encode("The quick brown fox jumps over the lazy dog.")
    hidden, traces = model.forward(torch.tensor([enc.ids]), record={"weights"})
    ref_hidden, ref_attn = reference(folder, list(enc.ids))
    for trace, ref in zip(traces, ref_attn):
        torch.testing.assert_close(trace.weights, ref.float(), atol=1e-4, rtol=0)
    torch.testing.assert_close(hidden, ref_hidden.float(), atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("family", ["t5", "bart"])
def test_encoder_decoder_every_stack_matches_transformers(tiny_models, family):
    """Encoder self-attention, decoder self-attention and cross-attention (with T5's position bias as
    the biased stage) against transformers' eager encoder_/decoder_/cross_attentions."""
    from transformers import AutoModel

    folder = tiny_models(family)
    m = load_model(folder)
    assert m.info.stacks == ("encoder", "decoder", "cross") and m.info.layers == 2
    view = m.view("cross", "the cat sat")
    enc = view.encode(SENTENCE)
    dec = torch.tensor([list(view.decoder.ids)])
    ref = AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    with torch.no_grad():
        out = ref(input_ids=torch.tensor([enc.ids]), decoder_input_ids=dec, output_attentions=True)
    shapes = {"encoder": (len(enc.ids), len(enc.ids)), "decoder": (dec.shape[1],) * 2,
              "cross": (dec.shape[1], len(enc.ids))}
    for stack, refs in (("encoder", out.encoder_attentions), ("decoder", out.decoder_attentions),
                        ("cross", out.cross_attentions)):
        hidden, traces = m.forward(torch.tensor([enc.ids]), {"weights"}, stack=stack, decoder_ids=dec)
        assert len(traces) == len(refs) == 2
        for trace, r in zip(traces, refs):
            assert trace.weights.shape[-2:] == shapes[stack]
            torch.testing.assert_close(trace.weights, r, atol=1e-4, rtol=0, msg=stack)
        assert float(traces[-1].weights.std()) > 0.01
    torch.testing.assert_close(hidden, out.last_hidden_state, atol=1e-4, rtol=0)
    if family == "t5":  # the relative position bias is recorded as its own stage
        _, traces = m.forward(torch.tensor([enc.ids]), {"scaled", "biased"}, stack="encoder", decoder_ids=dec)
        assert float((traces[0].biased - traces[0].scaled).abs().max()) > 0.01
