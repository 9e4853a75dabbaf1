"""Every layer's attention weights and the last hidden state against transformers' eager attention."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from tiny import SENTENCE

from attnviz.models import load_model

FAMILIES = ["bert", "gpt2", "llama", "qwen2", "mistral"]


def reference(folder, ids):
    from transformers import AutoModel

    model = AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_attentions=True)
    return out.last_hidden_state, out.attentions


@pytest.mark.parametrize("family", FAMILIES)
def test_every_layer_matches_transformers(tiny_models, family):
    folder = tiny_models(family)
    model = load_model(folder)
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


def test_info_reads_the_config(tiny_models):
    m = load_model(tiny_models("llama"))
    info = m.info
    assert (info.family, info.model_type, info.layers, info.heads, info.kv_heads, info.d_model) == \
        ("llama", "llama", 2, 4, 2, 32)
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


@pytest.mark.skipif(not os.environ.get("ATTNVIZ_TEST_MODEL"), reason="set ATTNVIZ_TEST_MODEL to a model folder")
def test_real_model_folder_matches_transformers():
    folder = os.environ["ATTNVIZ_TEST_MODEL"]
    model = load_model(folder)
    enc = model.encode("The quick brown fox jumps over the lazy dog.")
    hidden, traces = model.forward(torch.tensor([enc.ids]), record={"weights"})
    ref_hidden, ref_attn = reference(folder, list(enc.ids))
    for trace, ref in zip(traces, ref_attn):
        torch.testing.assert_close(trace.weights, ref.float(), atol=1e-4, rtol=0)
    torch.testing.assert_close(hidden, ref_hidden.float(), atol=1e-3, rtol=1e-3)
