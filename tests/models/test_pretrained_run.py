"""The pretrained variant through the run API and the CLI: shapes, tokens, every layer from one forward."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tiny import SENTENCE

from attnviz.cli import main
from attnviz.core import RunConfig, run
from attnviz.core.runs.config import field_applies
from attnviz.models import load_model


def test_result_is_the_chosen_layer_with_tokens(tiny_models):
    folder = tiny_models("llama")
    result = run(RunConfig(variant="pretrained", model=str(folder), text=SENTENCE, layer=1))
    model = load_model(folder)
    enc = model.encode(SENTENCE)
    n, heads = len(enc.ids), model.info.heads
    assert result.weights.shape == result.scores.shape == (1, heads, n, n)
    assert result.layer_weights.shape == (model.info.layers, 1, heads, n, n)
    assert result.tokens == enc.tokens and list(result.token_ids) == list(enc.ids)
    _, traces = model.forward(torch.tensor([enc.ids]), record={"weights", "scores"})
    np.testing.assert_allclose(result.weights, traces[1].weights.numpy(), atol=1e-6)
    np.testing.assert_allclose(result.scores, traces[1].scores.numpy(), atol=1e-5)
    assert (result.config.heads, result.config.seq_q, result.config.mask) == (heads, n, "causal")
    np.testing.assert_allclose(result.weights.sum(-1), 1.0, atol=1e-5)


def test_another_layer_needs_no_second_forward(tiny_models, monkeypatch):
    folder = tiny_models("gpt2")
    result = run(RunConfig(variant="pretrained", model=str(folder), text=SENTENCE, layer=0))
    calls = []
    monkeypatch.setattr(type(load_model(folder)), "forward", lambda *a, **k: calls.append(a))
    config = result.source.key.replace(layer=2)
    assert result.source.serves(config)
    other = result.source.result(2)
    assert not calls
    np.testing.assert_array_equal(other.weights, result.layer_weights[2])
    assert other.config.layer == 2


def test_fields_that_come_from_the_model_do_not_apply():
    for name in ("d_model", "heads", "seq_q", "batch", "mask", "kv_heads"):
        assert not field_applies(name, "pretrained", "none")
    for name in ("model", "text", "layer", "device"):
        assert field_applies(name, "pretrained", "none")


def test_layer_out_of_range_names_the_layers(tiny_models):
    from attnviz.core import ConfigError

    with pytest.raises(ConfigError, match="has 2 layers") as info:
        run(RunConfig(variant="pretrained", model=str(tiny_models("bert")), text=SENTENCE, layer=5))
    assert info.value.field == "layer" and info.value.suggestions == (1,)


def test_sharded_and_pickle_checkpoints_load_the_same_numbers(tiny_models, tmp_path):
    from transformers import AutoModel

    folder = tiny_models("gpt2")
    ref = AutoModel.from_pretrained(folder)
    for name in ("sharded", "pickle"):
        out = tmp_path / name
        if name == "sharded":
            ref.save_pretrained(out, max_shard_size="20KB")
        else:  # a plain state dict of GPT2Model: keys without the "transformer." prefix
            out.mkdir()
            torch.save(ref.state_dict(), out / "pytorch_model.bin")
            (out / "config.json").write_bytes((folder / "config.json").read_bytes())
        (out / "tokenizer.json").write_bytes((folder / "tokenizer.json").read_bytes())
        r = run(RunConfig(variant="pretrained", model=str(out), text=SENTENCE))
        base = run(RunConfig(variant="pretrained", model=str(folder), text=SENTENCE))
        np.testing.assert_allclose(r.layer_weights, base.layer_weights, atol=1e-6)
    assert (tmp_path / "sharded" / "model.safetensors.index.json").exists()
    assert (tmp_path / "pickle" / "pytorch_model.bin").exists()


def test_cli_render_png_svg_npz(tiny_models, tmp_path, capsys):
    folder = str(tiny_models("bert"))
    for ext in ("png", "svg"):
        assert main(["render", "--model", folder, "--text", SENTENCE, "--layer", "1", "--head", "3",
                     "-o", str(tmp_path / f"m.{ext}")]) == 0
    svg = (tmp_path / "m.svg").read_text()
    assert ">chased<" in svg and ">[CLS]<" in svg and "key token" in svg
    assert main(["render", "--model", folder, "--text", SENTENCE, "--all-layers", "-o", str(tmp_path / "m.npz")]) == 0
    data = np.load(tmp_path / "m.npz")
    model = load_model(folder)
    n = len(model.encode(SENTENCE).ids)
    assert data["layer_weights"].shape == (2, 4, n, n) and data["weights"].shape == (1, 4, n, n)
    assert list(data["tokens"]) == list(model.encode(SENTENCE).tokens)
    assert list(data["token_ids"]) == list(model.encode(SENTENCE).ids)


def test_cli_head_beyond_the_model_exits_2(tiny_models, tmp_path, capsys):
    out = tmp_path / "m.png"
    assert main(["render", "--model", str(tiny_models("bert")), "--text", "a cat", "--head", "9", "-o", str(out)]) == 2
    assert "head 9" in capsys.readouterr().err and not out.exists()


class ToyLike:
    """The smallest model-backed object (backed.py's protocol): info, encode, a traced forward."""

    def __init__(self):
        from types import SimpleNamespace

        self.info = SimpleNamespace(layers=3, heads=2, kv_heads=2, d_model=8, max_positions=16, name="toy")
        self.calls = 0

    def encode(self, text):
        from types import SimpleNamespace

        words = text.split()
        return SimpleNamespace(ids=[len(w) for w in words], tokens=words)

    def forward(self, ids, record, ctx=None):
        from attnviz.core.kernel.kernel import attention
        from attnviz.core.kernel.masks import causal_mask

        self.calls += 1
        g = torch.Generator().manual_seed(0)
        n = ids.shape[1]
        traces = []
        for _ in range(self.info.layers):
            q, k, v = (torch.randn(1, 2, n, 4, generator=g) for _ in range(3))
            out, trace = attention(q, k, v, mask=causal_mask(n), record=record, ctx=ctx)
            trace.keep("output", out)
            traces.append(trace)
        return None, traces


def test_any_object_with_the_protocol_is_a_model_backed_variant(monkeypatch):
    from attnviz.core.variants.registry import BACKED_FIELDS, VARIANTS, VariantSpec

    toy = ToyLike()
    spec = VariantSpec(id="toy-like", label="Toy", seed="test", description="", build=None, inputs=None,
                       load=lambda config, budget: toy, own_fields=BACKED_FIELDS)
    monkeypatch.setitem(VARIANTS, "toy-like", spec)
    result = run(RunConfig(variant="toy-like", model="toy", text="a bb ccc dddd", layer=2))
    assert result.weights.shape == (1, 2, 4, 4) and result.layer_weights.shape == (3, 1, 2, 4, 4)
    assert result.tokens == ("a", "bb", "ccc", "dddd") and list(result.token_ids) == [1, 2, 3, 4]
    assert result.config.mask == "causal" and result.config.heads == 2
    assert np.all(np.triu(result.weights[0, 0], 1) == 0)
    assert result.source.result(0).config.layer == 0 and toy.calls == 1
    with pytest.raises(Exception, match="toy has 3 layers"):
        run(RunConfig(variant="toy-like", model="toy", text="a b", layer=3))


def test_weights_only_family_runs_everywhere_and_says_so(tiny_models, tmp_path):
    """gpt_neo's code does not call the attention interface: its weights come from transformers'
    output_attentions, the result says what it lacks, and the CLI draws and saves it."""
    folder = tiny_models("gpt_neo")
    result = run(RunConfig(variant="pretrained", model=str(folder), text=SENTENCE, layer=1))
    assert "weights only" in " ".join(result.notes) and "scores" not in result.stages
    np.testing.assert_allclose(result.weights.sum(-1), 1.0, atol=1e-5)
    assert main(["render", "--model", str(folder), "--text", SENTENCE, "-o", str(tmp_path / "neo.png")]) == 0
    assert main(["render", "--model", str(folder), "--text", SENTENCE, "-o", str(tmp_path / "neo.npz")]) == 0
    with np.load(tmp_path / "neo.npz") as saved:
        np.testing.assert_array_equal(saved["weights"], result.source.result(0).weights)


def test_a_soft_capped_family_keeps_its_capped_stage(tiny_models):
    folder = tiny_models("gemma2")
    result = run(RunConfig(variant="pretrained", model=str(folder), text=SENTENCE), record={"scaled", "capped"})
    np.testing.assert_allclose(result.capped, 2.0 * np.tanh(result.scaled / 2.0), atol=1e-5)


def test_opening_the_app_does_not_import_transformers():
    """transformers is imported when a model is opened, never at start-up."""
    import subprocess
    import sys

    code = ("import sys; from PySide6.QtWidgets import QApplication; app = QApplication([]); "
            "from attnviz.ui.window.main_window import MainWindow; w = MainWindow(); "
            "from attnviz.ui.window.model_chooser import ModelChooser; "
            "print('transformers' in sys.modules)")
    env = {**__import__("os").environ, "QT_QPA_PLATFORM": "offscreen"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == "False"


def test_cross_attention_rows_are_decoder_tokens_and_columns_the_encoders(tiny_models, tmp_path):
    folder = tiny_models("t5")
    config = RunConfig(variant="pretrained", model=str(folder), text=SENTENCE, decoder_text="the cat", stack="cross",
                       layer=1)
    result = run(config)
    model = load_model(folder)
    enc, dec = model.encode(SENTENCE), model.view("cross", "the cat").decoder
    assert result.weights.shape == (1, model.info.heads, len(dec.ids), len(enc.ids))
    assert result.tokens == dec.tokens and result.key_tokens == enc.tokens
    assert result.layer_weights.shape == (2, 1, model.info.heads, len(dec.ids), len(enc.ids))
    np.testing.assert_allclose(result.weights.sum(-1), 1.0, atol=1e-5)
    decoder = run(config.replace(stack="decoder"))
    assert decoder.weights.shape[-2:] == (len(dec.ids),) * 2 and decoder.config.mask == "causal"
    out = tmp_path / "cross.png"
    argv = ["render", "--model", str(folder), "--text", SENTENCE, "--decoder-text", "the cat", "--stack", "cross"]
    assert main([*argv, "-o", str(out)]) == 0 and out.stat().st_size > 0
    assert main([*argv, "-o", str(tmp_path / "cross.npz")]) == 0
    with np.load(tmp_path / "cross.npz") as saved:
        assert saved["weights"].shape == (1, model.info.heads, len(dec.ids), len(enc.ids))
        assert list(saved["token_ids"]) == list(dec.ids) and list(saved["key_token_ids"]) == list(enc.ids)


def test_each_stack_s_token_ids_are_its_rows_and_its_keys(tiny_models):
    """token_ids are the ids of the rows' tokens; key_token_ids the keys', where they are not the rows'."""
    folder = tiny_models("t5")
    model = load_model(folder)
    enc, dec = model.encode(SENTENCE), model.view("cross", "the cat").decoder
    config = RunConfig(variant="pretrained", model=str(folder), text=SENTENCE, decoder_text="the cat")
    expected = {"encoder": (enc.ids, None), "decoder": (dec.ids, None), "cross": (dec.ids, enc.ids)}
    for stack, (rows, keys) in expected.items():
        result = run(config.replace(stack=stack))
        assert list(result.token_ids) == list(rows), stack
        assert (result.key_token_ids is None) if keys is None else list(result.key_token_ids) == list(keys), stack
        assert len(result.token_ids) == result.weights.shape[-2]


@pytest.mark.parametrize(("family", "changes", "field", "match"), [
    ("bert", {"decoder_text": "hello"}, "decoder_text", "not an encoder-decoder"),
    ("llama", {"stack": "cross"}, "stack", "has the stacks decoder"),
    ("t5", {"stack": "upstairs"}, "stack", "has the stacks encoder, decoder, cross"),
])
def test_a_stack_or_decoder_text_the_model_lacks(tiny_models, tmp_path, family, changes, field, match):
    from attnviz.core import ConfigError

    folder = tiny_models(family)
    with pytest.raises(ConfigError, match=match) as info:
        run(RunConfig(variant="pretrained", model=str(folder), text=SENTENCE, **changes))
    assert info.value.field == field
    out = tmp_path / "never.png"
    flag, value = next(iter(changes.items()))
    argv = ["render", "--model", str(folder), "--text", SENTENCE, f"--{flag.replace('_', '-')}", value, "-o", str(out)]
    assert main(argv) == 2 and not out.exists()


CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def test_chat_wraps_the_text_as_one_user_turn(tiny_models, tmp_path):
    """--chat: the ids are what transformers' apply_chat_template gives for one user turn."""
    import shutil

    from transformers import AutoTokenizer

    folder = tmp_path / "chat-llama"
    shutil.copytree(tiny_models("llama"), folder)
    (folder / "tokenizer_config.json").write_text(__import__("json").dumps({"chat_template": CHAT_TEMPLATE}))
    result = run(RunConfig(variant="pretrained", model=str(folder), text="the cat sat", chat=True))
    reference = AutoTokenizer.from_pretrained(folder).apply_chat_template(
        [{"role": "user", "content": "the cat sat"}], tokenize=True, add_generation_prompt=True)
    reference = reference["input_ids"] if hasattr(reference, "keys") else reference
    assert list(result.token_ids) == list(reference)
    plain = run(RunConfig(variant="pretrained", model=str(folder), text="the cat sat"))
    assert len(result.tokens) > len(plain.tokens) + 4 and result.weights.shape[-1] == len(result.tokens)
    assert main(["render", "--model", str(folder), "--text", "the cat sat", "--chat",
                 "-o", str(tmp_path / "chat.png")]) == 0


def test_chat_for_a_model_without_a_template(tiny_models, tmp_path):
    from attnviz.core import ConfigError

    with pytest.raises(ConfigError, match="has no chat template") as info:
        run(RunConfig(variant="pretrained", model=str(tiny_models("gpt2")), text="the cat", chat=True))
    assert info.value.field == "chat"
    out = tmp_path / "never.png"
    assert main(["render", "--model", str(tiny_models("gpt2")), "--text", "x", "--chat", "-o", str(out)]) == 2
    assert not out.exists()


@pytest.mark.parametrize(("family", "view"), [("gpt_neo", "scores"), ("llama", "capped")])
def test_a_view_of_a_stage_the_model_does_not_record(tiny_models, tmp_path, family, view, capsys):
    out = tmp_path / "never.png"
    argv = ["render", "--model", str(tiny_models(family)), "--text", SENTENCE, "--view", view, "-o", str(out)]
    assert main(argv) == 2 and not out.exists()
    assert f"records no {view} stage" in capsys.readouterr().err


def test_a_fallback_on_some_layers_keeps_the_layers_aligned(tiny_models, monkeypatch):
    """Layer 1 alone passes a keyword the kernel does not know: that layer records only the weights, so no
    layer offers scores (a layer's scores never stand in for another's), and every layer's weights stay its own."""
    import transformers.models.gpt2.modeling_gpt2 as gpt2

    original = gpt2.GPT2Attention.forward

    def forward(self, *args, **kwargs):
        return original(self, *args, **({**kwargs, "novel_bias": 0.0} if self.layer_idx == 1 else kwargs))
    folder = tiny_models("gpt2")
    reference = run(RunConfig(variant="pretrained", model=str(folder), text=SENTENCE))
    monkeypatch.setattr(gpt2.GPT2Attention, "forward", forward)
    result = run(RunConfig(variant="pretrained", model=str(folder), text=SENTENCE), record={"scores", "weights"})
    assert "scores" not in result.stages and any("novel_bias" in n for n in result.notes)
    np.testing.assert_allclose(result.layer_weights, reference.layer_weights, atol=1e-6)
    for layer in range(3):
        assert result.source.result(layer).weights.shape == reference.weights.shape


def test_chat_with_truncate_cuts_the_users_text_not_the_template(tiny_models, tmp_path):
    import json
    import shutil

    folder = tmp_path / "chat-short"
    shutil.copytree(tiny_models("bert"), folder)  # 40 positions
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHAT_TEMPLATE}))
    long = " ".join(["the cat sat on the mat"] * 10)
    out = tmp_path / "chat.npz"
    assert main(["render", "--model", str(folder), "--text", long, "--chat", "--truncate", "-o", str(out)]) == 0
    with np.load(out) as saved:
        tokens = list(saved["tokens"])
    assert len(tokens) <= 40 and tokens.count("[CLS]") == 0  # wrapped once, no template specials added again


def test_a_decoder_text_longer_than_the_decoders_positions(tiny_models):
    from attnviz.core import ConfigError

    with pytest.raises(ConfigError, match="decoder reads at most 64 positions") as info:
        run(RunConfig(variant="pretrained", model=str(tiny_models("bart")), text=SENTENCE,
                      decoder_text=" ".join(["the cat sat"] * 40), stack="cross"))
    assert info.value.field == "decoder_text" and info.value.suggestions


def test_a_chat_template_that_fails(tiny_models, tmp_path):
    import json
    import shutil

    from attnviz.core import ConfigError

    folder = tmp_path / "chat-raises"
    shutil.copytree(tiny_models("llama"), folder)
    template = "{{ raise_exception('only system turns here') }}"
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    with pytest.raises(ConfigError, match="chat template fails on one user turn") as info:
        run(RunConfig(variant="pretrained", model=str(folder), text="the cat", chat=True))
    assert info.value.field == "chat"


def test_the_memory_check_counts_every_stack_of_an_encoder_decoder(tiny_models):
    """One forward records the encoder's, the decoder's and the cross layers: a budget that fits one stack's
    maps but not all three is refused before the forward."""
    from attnviz.core import ConfigError
    from attnviz.core.runs.backed import forward_bytes

    folder = tiny_models("t5")
    model = load_model(folder)
    n = len(model.encode(SENTENCE).ids)
    keep = frozenset({"weights", "dropped", "output", "x", "q", "k", "v", "scores", "context"})
    one_stack, every_stack = forward_bytes(model.info, n, keep), forward_bytes(
        __import__("dataclasses").replace(model.info, layers=6), n, keep)
    assert one_stack < every_stack
    config = RunConfig(variant="pretrained", model=str(folder), text=SENTENCE, stack="cross")
    with pytest.raises(ConfigError, match="every layer's maps at"):
        run(config, memory_budget=(one_stack + every_stack) // 2)
    assert run(config, memory_budget=every_stack * 2).weights.shape[0] == 1


def test_the_model_view_masks_each_layer_with_its_own_mask(tiny_models):
    """Gemma 3 alternates a sliding window (layer 0) and full attention (layer 1): each layer's tiles are
    masked by that layer's mask, not by the shown layer's."""
    from attnviz.colormaps import MASKED_INDEX
    from attnviz.model_mosaic import _square_tiles

    result = run(RunConfig(variant="pretrained", model=str(tiny_models("gemma3_text")), text=SENTENCE, layer=1))
    ((_, weights, allowed),) = result.source.blocks()
    n = weights.shape[-1]
    tiles = _square_tiles(weights, allowed, n)  # one pixel per cell: per layer, its heads then their mean
    heads = weights.shape[2]
    far = (n - 1, 0)  # the last query and the first key: outside the window of 4, inside full attention
    assert tiles[0][far] == MASKED_INDEX and tiles[heads + 1][far] != MASKED_INDEX


def test_a_bfloat16_checkpoint_computes_in_float32_on_the_cpu(tiny_models, tmp_path):
    import shutil

    from transformers import AutoModel, AutoModelForCausalLM

    folder = tmp_path / "llama-bf16"
    shutil.copytree(tiny_models("llama"), folder)
    AutoModelForCausalLM.from_pretrained(tiny_models("llama"), dtype=torch.bfloat16).save_pretrained(folder)
    model = load_model(folder)
    assert model.info.dtype == "bfloat16" and next(model.module.parameters()).dtype == torch.float32
    result = run(RunConfig(variant="pretrained", model=str(folder), text=SENTENCE))
    assert "bfloat16 checkpoint computed in float32 on the CPU" in result.notes
    ref = AutoModel.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()
    with torch.no_grad():
        attentions = ref(torch.tensor([list(result.token_ids)]), output_attentions=True).attentions
    np.testing.assert_allclose(result.layer_weights[:, 0], torch.stack(attentions)[:, 0].numpy(), atol=1e-5)


@pytest.mark.parametrize("family, layer, expected", [
    ("gemma3_text", 0, ("window", 3)),  # sliding_window 4 counts the query: it and 3 keys before it
    ("gemma3_text", 1, ("causal", 0)),
    ("modernbert", 1, ("window-bidirectional", 2)),  # local_attention 4: 2 keys on each side
    ("modernbert", 0, ("none", 0)),
])
def test_a_layer_s_config_names_the_mask_kind_its_family_built(tiny_models, family, layer, expected):
    result = run(RunConfig(variant="pretrained", model=str(tiny_models(family)), text=SENTENCE, layer=layer))
    assert (result.config.mask, result.config.window) == expected
    n = result.config.seq_q
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    rule = {"window": (i - j >= 0) & (i - j <= 3), "causal": i >= j, "window-bidirectional": abs(i - j) <= 2,
            "none": np.ones((n, n), bool)}[expected[0]]
    np.testing.assert_array_equal(result.mask[0, 0], rule)  # the kind is the mask the model really used
