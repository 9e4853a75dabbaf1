"""attnviz.show() and bertviz's head_view / model_view from a notebook: the maps someone already has (transformers'
output_attentions, a TransformerLens cache, an array) open in a window of their own process, exactly as given."""

from __future__ import annotations

import inspect
import signal
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from uihelpers import wait_shown

import attnviz
from attnviz.core import ConfigError
from attnviz.notebook import attention_maps, maps_result
from attnviz.ui import MainWindow

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))  # the tiny checkpoints' writers
from tiny import make_gpt2  # noqa: E402


@pytest.fixture(autouse=True)
def show_folders_in_tmp_path(tmp_path, monkeypatch):
    """show() leaves its file in a temporary folder for the window to read: here, the test's own (it was
    /tmp/attnviz-show-*, one more per run)."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


@pytest.fixture(scope="module")
def gpt2_attentions(tmp_path_factory):
    """transformers' own eager attention weights (output_attentions=True) of a tiny GPT-2 and its tokens."""
    from tokenizers import Tokenizer
    from transformers import GPT2LMHeadModel

    folder = tmp_path_factory.mktemp("gpt2")
    make_gpt2(folder)
    model = GPT2LMHeadModel.from_pretrained(folder, local_files_only=True, attn_implementation="eager").eval()
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    encoding = tokenizer.encode("the cat sat on the mat")
    with torch.no_grad():
        out = model(torch.tensor([encoding.ids]), output_attentions=True)
    return out.attentions, encoding.tokens


def shown_in_window(qtbot, path):
    w = MainWindow(open_path=str(path))
    qtbot.addWidget(w)
    w.show()
    wait_shown(qtbot, w)
    return w


def test_show_opens_transformers_attentions_in_a_process_of_its_own(qtbot, gpt2_attentions):
    attentions, tokens = gpt2_attentions
    shown = attnviz.show(attentions, tokens=tokens, layer=1)
    try:
        assert shown.process.args[-1] == str(shown.path) and shown.process.args[1:3] == ["-m", "attnviz"]
        w = shown_in_window(qtbot, shown.path)  # what that window opens, opened here
        assert np.array_equal(w.result.weights[0], attentions[1][0].numpy())  # max diff 0
        assert np.array_equal(w.result.layer_weights[:, 0], torch.stack(attentions)[:, 0].numpy())
        assert w.result.axis_tokens() == (tuple(tokens), tuple(tokens))
        w.panel.widgets["layer"].setValue(2)
        qtbot.waitUntil(lambda: w.shown_id == w.latest_id and w.result.weights is not None
                        and np.array_equal(w.result.weights[0], attentions[2][0].numpy()), timeout=15000)
        w.close()
        assert shown.process.poll() is None  # the window's process still runs; this one went on meanwhile
    finally:
        shown.process.send_signal(signal.SIGTERM)
        shown.process.wait(timeout=30)
    assert shown.process.returncode == -signal.SIGTERM  # it ran until stopped, it did not fail


def test_a_transformerlens_cache_and_plain_arrays(gpt2_attentions):
    attentions, tokens = gpt2_attentions
    cache = {f"blocks.{i}.attn.hook_pattern": a for i, a in enumerate(attentions)}
    cache |= {"blocks.0.hook_resid_pre": torch.zeros(1, 7, 32), "blocks.1.attn.hook_z": torch.zeros(1, 7, 4, 8)}
    expected = torch.stack(attentions)[:, 0].numpy()
    assert np.array_equal(attention_maps(cache), expected)
    assert np.array_equal(attention_maps(expected[1]), expected[1:2])  # (heads, q, k): one layer
    assert np.array_equal(attention_maps(torch.stack(attentions)), expected)  # (layers, batch, heads, q, k)

    class Saved:  # nnsight: a saved proxy's value
        value = attentions[0]
    assert np.array_equal(attention_maps([Saved()]), expected[:1])
    result = maps_result(expected, tokens, layer=2)
    assert np.array_equal(result.weights[0], expected[2]) and result.config.heads == 4
    assert result.config.seq_q == result.config.lkv == len(tokens)


def test_cross_attention_needs_its_key_tokens():
    weights = torch.softmax(torch.randn(2, 3, 5), dim=-1).numpy()
    result = maps_result(attention_maps(weights), ["a", "b", "c"], ["k1", "k2", "k3", "k4", "k5"])
    assert result.axis_tokens() == (("a", "b", "c"), ("k1", "k2", "k3", "k4", "k5"))
    with pytest.raises(ConfigError, match="give key_tokens="):
        maps_result(attention_maps(weights), ["a", "b", "c"])


@pytest.mark.parametrize("bad, words", [
    (np.zeros((2, 3)), "not (layers, heads, q, k)"),
    (np.full((1, 2, 3, 3), np.nan), "NaN or infinite"),
    (np.ones((1, 2, 3, 3)), "sums to 3, not 1"),
    ("attention", "not an array of numbers"),
    ({"blocks.0.hook_resid_pre": np.zeros(3)}, "holds no blocks.N.attn.hook_pattern"),
])
def test_bad_maps_are_one_clear_error(bad, words):
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
        attention_maps(bad)


def test_scores_are_taken_when_said_to_be_scores():
    scores = np.array([[[[0.0, -np.inf], [1.0, 2.0]]]], dtype=np.float32)
    with pytest.raises(ConfigError, match="NaN or infinite"):
        attention_maps(scores)
    result = maps_result(attention_maps(scores, scores=True), scores=True)
    assert np.array_equal(result.scores, scores[:1])
    assert np.allclose(result.weights[0, 0], [[1, 0], [np.exp(-1) / (1 + np.exp(-1)), 1 / (1 + np.exp(-1))]])


def test_wrong_token_counts_name_the_count():
    weights = attention_maps(torch.softmax(torch.randn(2, 4, 4), dim=-1))
    with pytest.raises(ConfigError, match="3 tokens for maps of 4 query rows"):
        maps_result(weights, ["a", "b", "c"])


def test_bertviz_calls_work_as_they_are():
    bertviz_head = ["attention", "tokens", "sentence_b_start", "prettify_tokens", "layer", "heads",
                    "encoder_attention", "decoder_attention", "cross_attention", "encoder_tokens", "decoder_tokens",
                    "include_layers", "html_action"]
    bertviz_model = ["attention", "tokens", "sentence_b_start", "prettify_tokens", "display_mode",
                     "encoder_attention", "decoder_attention", "cross_attention", "encoder_tokens", "decoder_tokens",
                     "include_layers", "include_heads", "html_action"]
    assert list(inspect.signature(attnviz.head_view).parameters)[:len(bertviz_head)] == bertviz_head
    assert list(inspect.signature(attnviz.model_view).parameters)[:len(bertviz_model)] == bertviz_model


def test_head_view_and_model_view_write_the_maps_bertviz_would_draw(monkeypatch, gpt2_attentions):
    from attnviz import notebook
    from attnviz.core.runs.saved import read_maps

    opened = []
    monkeypatch.setattr(notebook, "open_window", lambda path: opened.append(Path(path)) or path)
    attentions, tokens = gpt2_attentions
    attnviz.head_view(attentions, tokens, layer=2)
    attnviz.model_view(attentions, tokens, include_layers=[0, 2])
    head, model = (read_maps(p) for p in opened)
    assert np.array_equal(head.weights[0], attentions[2][0].numpy()) and head.config.layer == 2
    assert head.tokens == tuple(t.replace("\u0120", " ") for t in tokens)  # bertviz's prettify_tokens
    assert np.array_equal(model.layer_weights[:, 0], torch.stack([attentions[0], attentions[2]])[:, 0].numpy())


def test_save_writes_the_figure_and_the_maps_with_no_window(tmp_path, monkeypatch, gpt2_attentions):
    from attnviz.core.runs.saved import read_maps

    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)  # save() needs no display, unlike show()
    attentions, tokens = gpt2_attentions
    expected = torch.stack(attentions)[:, 0].numpy()
    saved = read_maps(attnviz.save(attentions, tmp_path / "maps.npz", tokens=tokens, layer=2))
    assert np.array_equal(saved.weights[0], expected[2]) and np.array_equal(saved.layer_weights[:, 0], expected)
    assert saved.axis_tokens() == (tuple(tokens), tuple(tokens))
    svg = attnviz.save(attentions, tmp_path / "maps.svg", tokens=tokens, layer=1).read_text()
    assert "attention maps given \u00b7 layer 1 of 3" in svg and "seed" not in svg
    assert all(f">{t}<" in svg for t in tokens if t.isalpha())
    png = attnviz.save(attentions, tmp_path / "mean.png", tokens=tokens, what="mean")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_save_names_a_bad_option_and_writes_nothing(tmp_path, gpt2_attentions):
    attentions, tokens = gpt2_attentions
    with pytest.raises(ConfigError, match="colour.*use ExportOptions' fields: what, view"):
        attnviz.save(attentions, tmp_path / "maps.png", tokens=tokens, colour="red")
    with pytest.raises(ValueError, match="use one of grid, head, mean"):
        attnviz.save(attentions, tmp_path / "maps.png", tokens=tokens, what="everything")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("option, words", [
    (dict(what="scores"), "the view 'scores' is not held by these maps .* view='weights'"),
    (dict(view="value_weighted"), "the view 'value_weighted' is not held"),
    (dict(what="output"), "the tensor 'output' is not held .* what='grid'"),
    (dict(what="head", head="1"), "head = '1': must be a whole number"),
    (dict(layer="1"), "layer = '1': not a whole number"),
    (dict(key_tokens=list("abcdef")), "key_tokens given without tokens"),
])
def test_save_says_what_given_maps_cannot_draw_and_writes_nothing(tmp_path, gpt2_attentions, option, words):
    """Maps given hold their weights alone: a view of what they lack, or a number given as text, is one
    message (it was an AttributeError from deep inside, or a TypeError comparing an int with a str)."""
    attentions, _ = gpt2_attentions
    with pytest.raises(ValueError, match=words):
        attnviz.save(attentions, tmp_path / "maps.png", **option)
    assert list(tmp_path.iterdir()) == []
    wide = attnviz.save(attentions, tmp_path / "wide.png", layer=np.int64(1), scale=np.int64(3))  # NumPy ints
    assert wide.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_save_draws_with_no_display_and_no_qt_platform_named(tmp_path):
    """A headless machine as a script meets it: no DISPLAY and no QT_QPA_PLATFORM (the tests set offscreen)."""
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    script = ("import numpy as np, attnviz; a = np.full((2, 3, 4, 4), 0.25, np.float32); "
              f"print(attnviz.save(a, {str(tmp_path / 'maps.png')!r}, tokens=list('abcd')))")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "maps.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
