"""The shipped toys as run variants: presets, token labels on both axes, layers from one forward, the
CLI and the window."""

from __future__ import annotations

import numpy as np
import pytest

from attnviz.cli import main
from attnviz.core import ConfigError, RunConfig, load_preset, run
from attnviz.toys import TOYS


@pytest.mark.parametrize("name", list(TOYS))
def test_each_toy_has_a_preset_of_its_name_that_runs_with_labels(name):
    config = load_preset(name)
    assert config.variant == name and config.text == TOYS[name].default_text
    result = run(config)
    assert len(result.tokens) == result.weights.shape[2] and result.layer_weights.shape[0] == TOYS[name].layers


def test_reverse_cross_attention_labels_outputs_over_inputs_and_is_anti_diagonal():
    result = run(RunConfig.for_variant("toy-reverse", text="12345678"))
    assert result.config.layer == 2  # the decoder's cross-attention first
    assert "".join(result.tokens) == "87654321" and "".join(result.key_tokens) == "12345678"
    argmax = result.weights[0].mean(0).argmax(-1)
    assert argmax.tolist() == list(range(7, -1, -1))
    encoder = result.source.result(0)  # another layer of the same forward: the input over itself
    assert encoder.tokens == tuple("12345678") and encoder.key_tokens == ()


def test_induction_layer_one_attends_after_the_earlier_copy():
    text = "xqabcdefgabcdefg"[2:]  # abcdefg twice
    result = run(RunConfig.for_variant("toy-induction", text=text, layer=1))
    w = result.weights[0].max(0)  # the strongest head per cell
    for i in range(8, 14):  # second copy: query i, its token's earlier copy at i - 7, next token i - 6
        assert w[i, i - 6] >= 0.4


def test_bad_toy_text_is_a_config_error_naming_the_allowed_characters():
    with pytest.raises(ConfigError) as info:
        run(RunConfig.for_variant("toy-sort", text="12ab5678"))
    assert info.value.field == "text" and "0123456789" in str(info.value)


def test_cli_writes_tokens_and_key_tokens_and_exits_2_on_bad_text(qapp, tmp_path, capsys):  # qapp: widgets later
    out = tmp_path / "rev.npz"
    assert main(["render", "--preset", "toy-reverse", "-o", str(out)]) == 0
    with np.load(out) as data:
        assert "".join(data["tokens"]) == "62951413" and "".join(data["key_tokens"]) == "31415926"
    png = tmp_path / "ind.png"
    assert main(["render", "--variant", "toy-induction", "--text", "abcabc", "--layer", "0", "-o", str(png)]) == 0
    assert png.stat().st_size > 0
    bad = tmp_path / "bad.png"
    assert main(["render", "--variant", "toy-sort", "--text", "12", "-o", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "8 characters" in err[0] and not bad.exists()


def wait_shown(qtbot, window):
    qtbot.waitUntil(lambda: window.is_settled() and window.shown_id > 0, timeout=15000)


def test_the_window_shows_a_toy_with_its_caption_and_token_axes(qtbot):
    from attnviz.ui import MainWindow

    window = MainWindow()
    qtbot.addWidget(window)
    window.resize(1200, 900)  # every key token labelled under the maps, with the predictions strip
    window.show()
    wait_shown(qtbot, window)
    window.panel.set_config(load_preset("toy-reverse"))
    wait_shown(qtbot, window)
    assert window.captionLabel.isVisibleTo(window) and "anti-diagonal" in window.captionLabel.text()
    cores = window.worker.session.share.cores  # a model forward leaves a core to the window (model_threads)
    assert window.worker.threads_used <= max(1, cores - 1)
    assert window.scaleCombo.currentData() == "linear"  # trained maps are peaked: linear by default
    text = window.headGrid.cell_text(0, 0, 7)
    assert "'6' → '6'" in text  # output 0 ('6') reads the last input ('6')
    bottom = window.headGrid.mosaic.tick_labels(0)[1]  # the key tokens under the first map
    assert [label for _, label in bottom][:3] == ["3", "1", "4"]
    window.panel.widgets["layer"].setValue(0)
    wait_shown(qtbot, window)
    assert "the pattern is in layer 2" in window.captionLabel.text()
    window.close()
