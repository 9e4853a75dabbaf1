"""The pretrained variant in the live window: chooser, typing, layers without a second forward, hover,
the model view, and a bad folder keeping the last view."""

from __future__ import annotations

import os

import numpy as np
import pytest
from PySide6.QtCore import QPointF
from tiny import SENTENCE

from attnviz.core import run
from attnviz.models.discover import find_model_folders


class Counting:
    def __init__(self):
        self.calls = []

    def __call__(self, config, cancel=None, **kw):
        self.calls.append(config)
        return run(config, cancel=cancel, **kw)


def settle(qtbot, w, timeout=20000):
    qtbot.waitUntil(lambda: w.is_settled() and w.shown_id > 0, timeout=timeout)
    qtbot.wait(20)


@pytest.fixture
def model_window(qtbot, tiny_models, monkeypatch, tmp_path):
    monkeypatch.setenv("ATTNVIZ_MODELS", os.pathsep.join(str(tiny_models(kind)) for kind in ("bert", "gpt2")))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    from attnviz.ui import MainWindow

    compute = Counting()
    w = MainWindow(compute=compute)
    w.compute = compute
    qtbot.addWidget(w)
    w.resize(1200, 860)
    w.show()
    settle(qtbot, w)
    combo = w.panel.widgets["variant"]
    combo.setCurrentIndex(combo.findData("pretrained"))
    w.panel.widgets["model"].combo.setCurrentIndex(1)  # the first model found
    settle(qtbot, w)
    yield w
    w.close()


def test_generate_is_off_on_an_encoder_and_on_for_a_causal_model(model_window, qtbot):
    w = model_window  # the tiny bert, an encoder
    button = w.panel.generateButton
    assert not button.isEnabled() and not w.generateAction.isEnabled()
    assert "not a causal language model" in button.toolTip()
    assert w.panel.widgets["generate"].value() == 0 and w.last_error is None
    w.panel.widgets["model"].combo.setCurrentIndex(2)  # the tiny gpt2
    settle(qtbot, w)
    assert w.result.source.info.causal and button.isEnabled() and w.generateAction.isEnabled()


def test_choosing_the_variant_shows_a_model_on_a_sentence(model_window, tiny_models):
    w = model_window
    chooser = w.panel.widgets["model"]
    assert chooser.objectName() == "modelEdit" and chooser.combo.objectName() == "modelCombo"
    assert chooser.folder() == str(tiny_models("bert"))  # the first found, sorted, as chosen
    r = w.result
    assert r.config.variant == "pretrained" and r.tokens[0] == "[CLS]" and len(w.headGrid.tiles) == 4
    assert not w.panel.widgets["heads"].isVisible()
    left = w.headGrid.mosaic.tick_labels(0)[0]  # the query tokens beside the first map
    assert (0, "[CLS]") in left


def test_typing_updates_and_a_layer_change_reuses_the_forward(model_window, qtbot):
    w = model_window
    text = w.panel.widgets["text"]
    text.clear()
    qtbot.keyClicks(text, SENTENCE)
    settle(qtbot, w)
    assert "chased" in w.result.tokens
    n = len(w.compute.calls)
    w.panel.widgets["layer"].setValue(1)
    settle(qtbot, w)
    assert len(w.compute.calls) == n  # no second forward
    assert w.result.config.layer == 1
    np.testing.assert_array_equal(w.result.weights, w.result.layer_weights[1])
    assert w.panel.widgets["layer"].maximum() == 1
    caption = w.captionLabel.text()
    assert f"Pretrained {w.result.source.info.name}" in caption and "layer 1 of 2" in caption
    i, j = w.result.tokens.index("cat"), w.result.tokens.index("the")
    text = w.headGrid.cell_text(2, i, j)
    assert text.startswith(f"L1 H2  'cat' → 'the'  {w.result.weights[0, 2, i, j]:.2f}")


def test_model_view_click_opens_a_layer_and_head(model_window, qtbot):
    w = model_window
    view = w.modelView
    assert w.modelDock.isVisible()
    qtbot.waitUntil(lambda: view.tile > 0, timeout=5000)
    vb = view.plot.getViewBox()
    step = view.tile + 2
    scene = vb.mapViewToScene(QPointF(view.columns[3] + view.tile / 2, 1 * step + view.tile / 2))
    assert view.tile_at(scene) == ("", 1, 3)
    mean = vb.mapViewToScene(QPointF(view.columns[-1] + 1, 0.5))
    assert view.tile_at(mean) == ("", 0, -1)
    with qtbot.waitSignal(w.sigShown, timeout=10000):
        view.sigOpen.emit("", 1, 3)
    assert w.headGrid.focus == 3 and w.result.config.layer == 1


def test_a_bad_folder_keeps_the_last_view(model_window, qtbot, tmp_path):
    w = model_window
    shown = w.result
    w.panel.widgets["model"].set_folder(str(tmp_path / "missing"))
    qtbot.waitUntil(lambda: w.last_error is not None, timeout=10000)
    assert "no such folder" in w.last_error and w.result is shown and w.staleLabel.isVisible()


def test_discovery_reads_the_hf_cache_and_attnviz_models(tmp_path):
    hub = tmp_path / "hub"
    snap = hub / "models--org--tiny-bert" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    (hub / "models--org--no-config" / "snapshots" / "x").mkdir(parents=True)
    one, many = tmp_path / "one", tmp_path / "many"
    (one).mkdir()
    (one / "config.json").write_text("{}")
    for name in ("a", "b"):
        (many / name).mkdir(parents=True)
        (many / name / "config.json").write_text("{}")
    env = {"HF_HOME": str(tmp_path), "ATTNVIZ_MODELS": os.pathsep.join([str(one), str(many)])}
    found = find_model_folders(env)
    assert [label for label, _ in found] == ["one", "a", "b", "org/tiny-bert"]
    assert found[-1][1] == snap


def test_with_the_pipeline_open_a_view_change_runs_no_second_forward(model_window, qtbot):
    """The pipeline asks for every stage a configuration has; a model records only what its family
    exposes (bert: no soft cap, no bias), so the stages it lacks must not make every request stale."""
    w = model_window
    dock = w.explain.docks["pipelineDock"]
    dock.show()
    dock.raise_()
    qtbot.waitUntil(lambda: w.explain.shown("pipelineDock"))
    settle(qtbot, w)
    assert {"qk", "scaled"} <= w.result.stages.keys() and "capped" not in w.result.stages
    n = len(w.compute.calls)
    w.colormapCombo.setCurrentIndex((w.colormapCombo.currentIndex() + 1) % w.colormapCombo.count())
    settle(qtbot, w)
    w.panel.widgets["layer"].setValue(1)
    settle(qtbot, w)
    assert len(w.compute.calls) == n and w.result.config.layer == 1
    dock.hide()


def test_the_model_view_shows_every_stack_of_an_encoder_decoder(model_window, qtbot, tiny_models):
    """T5: encoder, decoder and cross-attention blocks of square tiles (cross maps are 3 x 13 tokens); a
    click on a cross tile opens that stack, layer and head."""
    from attnviz.core import RunConfig

    w = model_window
    w.panel.set_config(RunConfig(variant="pretrained", model=str(tiny_models("t5")), text=SENTENCE,
                                 decoder_text="the cat"))
    settle(qtbot, w)
    view = w.modelView
    qtbot.waitUntil(lambda: view.source is w.result.source and view.tile > 0 and len(view.rows) == 6, timeout=10000)
    assert view.rows == [(s, r) for s in ("encoder", "decoder", "cross") for r in (0, 1)]
    labels = [text for _, text in view.plot.getAxis("left")._tickLevels[0]]
    assert labels == ["enc L0", "enc L1", "dec L0", "dec L1", "cross L0", "cross L1"]
    assert view.image.image.shape[0] == view.tops[-1] + view.tile  # every tile square, whatever its map's shape
    vb = view.plot.getViewBox()
    cross = vb.mapViewToScene(QPointF(view.columns[2] + view.tile / 2, view.tops[5] + view.tile / 2))
    assert view.tile_at(cross) == ("cross", 1, 2)
    with qtbot.waitSignal(w.sigShown, timeout=20000):
        view.sigOpen.emit(*view.tile_at(cross))
    settle(qtbot, w)
    r = w.result
    assert r.config.stack == "cross" and r.config.layer == 1 and w.headGrid.focus == 2
    assert r.weights.shape[-2:] == (len(r.tokens), len(r.key_tokens)) and len(r.tokens) < len(r.key_tokens)
    assert w.modelView.source.stack == "cross"


def test_a_broken_config_json_is_one_status_message_and_nothing_on_stderr(model_window, qtbot, tiny_models,
                                                                           tmp_path, capfd):
    import json
    import shutil

    w = model_window
    shown = w.result
    broken = tmp_path / "broken"
    shutil.copytree(tiny_models("gpt2"), broken)
    config = json.loads((broken / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps({**config, "layer_norm_epsilon": -1.0}))
    capfd.readouterr()
    w.panel.widgets["model"].set_folder(str(broken))
    qtbot.waitUntil(lambda: w.last_error is not None, timeout=20000)
    assert "config.json's layer_norm_epsilon must be positive" in w.last_error and "\n" not in w.last_error
    assert w.result is shown  # the last good view stays
    err = capfd.readouterr().err
    assert "Traceback" not in err and "layer_norm_epsilon" not in err


def test_a_model_window_leaves_the_scores_out_until_a_view_draws_them(model_window, qtbot):
    """The forward behind the weights view keeps no scores (a 30-layer model at 512 tokens: 283 MB fewer
    written); hover still says each cell's score, the scores view runs the model once more for them, and an
    NPZ export gets them back (complete_stages)."""
    from attnviz.core.analysis.cells import cell_path
    from attnviz.core.kernel.stages import BY_NAME
    from attnviz.session import complete_stages

    w = model_window
    assert "scores" not in w.result.stages and "scores" not in w.result.source.stages
    full = run(w.result.source.key.replace(layer=w.result.config.layer))
    i, j = 3, 2
    assert cell_path(w.result, 0, 1, i, j)["scores"] == pytest.approx(float(full.scores[0, 1, i, j]), abs=1e-5)
    assert f"→ {BY_NAME['scores'].title} " in w.headGrid.cell_text(1, i, j)
    completed = complete_stages(w.result)
    np.testing.assert_array_equal(completed.scores, full.scores)
    np.testing.assert_array_equal(completed.weights, w.result.weights)
    n = len(w.compute.calls)
    w.viewCombo.setCurrentIndex(w.viewCombo.findData("scores"))
    settle(qtbot, w)
    assert len(w.compute.calls) == n + 1
    np.testing.assert_array_equal(w.result.scores, full.scores)
    w.panel.widgets["layer"].setValue(0)  # the forward's other layers have their scores too
    settle(qtbot, w)
    w.viewCombo.setCurrentIndex(w.viewCombo.findData("weights"))
    settle(qtbot, w)
    assert len(w.compute.calls) == n + 1 and w.result.config.layer == 0


def test_pretrained_with_no_model_chosen_is_a_prompt_not_an_error(qtbot, tiny_models, monkeypatch, tmp_path):
    monkeypatch.setenv("ATTNVIZ_MODELS", str(tiny_models("bert")))  # a model is found, but nobody chose it
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    from attnviz.ui import MainWindow
    from attnviz.ui.window.model import MODEL_PROMPT

    compute = Counting()
    w = MainWindow(compute=compute)
    qtbot.addWidget(w)
    w.show()
    settle(qtbot, w)
    calls = len(compute.calls)
    combo = w.panel.widgets["variant"]
    combo.setCurrentIndex(combo.findData("pretrained"))
    qtbot.waitUntil(lambda: w.is_settled() and w.last_error is not None, timeout=10000)
    chooser = w.panel.widgets["model"]
    assert chooser.folder() == "" and len(compute.calls) == calls  # nothing opened unasked
    assert w.captionLabel.text() == MODEL_PROMPT and MODEL_PROMPT in w.statusBar().currentMessage()
    assert not w.staleLabel.isVisible() and w.panel.errorLabel.text() == ""  # no banner, no red message
    assert chooser.styleSheet() == "" and chooser.combo.styleSheet() == ""
    chooser.combo.setCurrentIndex(1)  # chosen: it opens, the prompt goes
    settle(qtbot, w)
    assert w.result.config.variant == "pretrained" and w.last_error is None and not w.headGrid.stale
    w.close()


def test_an_error_marks_the_model_box_not_the_file_dialogs_it_opens(qtbot, tmp_path):
    from attnviz.ui import MainWindow

    w = MainWindow()
    qtbot.addWidget(w)
    chooser = w.panel.widgets["model"]
    w.panel.show_error("not a model folder", "model")
    assert chooser.combo.styleSheet() and not chooser.styleSheet()  # a style sheet is inherited by children
    w.close()


class Gated(Counting):
    """The real engine; a pretrained model's run waits for `gate` (a model that takes long to open)."""

    def __init__(self):
        super().__init__()
        import threading

        self.gate = threading.Event()

    def __call__(self, config, cancel=None, **kw):
        if config.variant == "pretrained":
            self.gate.wait(30)
        return super().__call__(config, cancel=cancel, **kw)


def test_opening_a_model_says_so_until_its_maps_come(qtbot, tiny_models, tmp_path):
    from attnviz.core import RunConfig
    from attnviz.ui import MainWindow

    compute = Gated()
    w = MainWindow(compute=compute)
    qtbot.addWidget(w)
    w.show()
    settle(qtbot, w)
    folder = tiny_models("bert")
    w.panel.set_config(RunConfig(variant="pretrained", model=str(folder), text=SENTENCE))
    qtbot.waitUntil(lambda: f"Opening {folder.name}" in w.captionLabel.text(), timeout=5000)
    assert not w.staleLabel.isVisible() and w.result.config.variant != "pretrained"  # the last maps, said so
    compute.gate.set()
    settle(qtbot, w)
    assert w.result.config.variant == "pretrained" and "Opening" not in w.captionLabel.text()
    w.close()


def test_a_relaunch_on_a_remembered_model_says_it_is_opening_over_the_empty_grid(qtbot, tiny_models, tmp_path):
    from PySide6.QtCore import QSettings

    from attnviz.core import RunConfig
    from attnviz.ui import MainWindow
    from attnviz.ui.window.settings import SETTINGS_VERSION

    folder = tiny_models("bert")
    settings = QSettings(str(tmp_path / "attnviz.ini"), QSettings.IniFormat)
    settings.setValue("version", SETTINGS_VERSION)
    settings.setValue("config", RunConfig(variant="pretrained", model=str(folder), text=SENTENCE).to_json())
    settings.sync()
    compute = Gated()
    w = MainWindow(settings=QSettings(str(tmp_path / "attnviz.ini"), QSettings.IniFormat), compute=compute)
    qtbot.addWidget(w)
    w.show()
    mosaic = w.headGrid.mosaic
    qtbot.waitUntil(lambda: mosaic.message.startswith(f"Opening {folder.name}"), timeout=5000)
    assert w.result is None and mosaic.rects == [] and folder.name in w.captionLabel.text()
    w.grab().save(str(tmp_path / "opening.png"))
    compute.gate.set()
    settle(qtbot, w)
    assert mosaic.message == "" and len(mosaic.rects) == w.result.config.heads
    w.close()
