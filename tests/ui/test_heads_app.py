"""What heads do, on the live window (offscreen): the predictions strip, ablation from the model view,
which heads matter, head types and the logit lens, driven through their widgets on the trained toy."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from PySide6.QtCore import QPointF, Qt
from uihelpers import open_dock, wait_shown

from attnviz import colormaps
from attnviz.core import RunConfig, head_effects, head_scores, load_preset, run
from attnviz.core.analysis.heads import THRESHOLDS
from attnviz.core.runs import predictions as predictions_module
from attnviz.explain import HeadScoreFrames, LensFrames, PredictionFrames, probability_index
from attnviz.ui.maps.model_view import ablated_heads, toggle_head
from attnviz.ui.panels.lens_view import LensView
from attnviz.ui.panels.predictions_view import PredictionStrip


@pytest.fixture
def toy(window, qtbot):
    window.panel.set_config(load_preset("toy-induction"))
    wait_shown(qtbot, window)
    qtbot.waitUntil(lambda: window.modelView.tile > 0, timeout=10000)
    return window


def tile_click(qtbot, view, layer, head, modifier=Qt.NoModifier):
    x = view.columns[head] + view.tile / 2
    y = view.tops[view.rows.index((view.source.stack, layer))] + view.tile / 2
    pos = view.mapFromScene(view.plot.getViewBox().mapViewToScene(QPointF(x, y)))
    qtbot.mouseClick(view.viewport(), Qt.LeftButton, modifier, pos)


def test_the_strip_shows_the_toys_top1_tokens_coloured_by_the_target(toy):
    strip, r = toy.predictionStrip, toy.result
    assert strip.objectName() == "predictionStrip"
    assert strip.top1() == [row[0] for row in r.top_tokens] and len(strip.top1()) == len(r.tokens)
    repeat = int(np.nanargmax(r.target_probs))  # a position the model gets right
    expected = colormaps.lut(toy.colormapCombo.currentData())[round(float(r.target_probs[repeat]) * 253)]
    assert strip.colour(repeat).getRgb() == tuple(int(v) for v in expected)
    last = len(r.tokens) - 1  # the last position has no target: grey, and the tooltip says so
    assert "no target" in strip.tooltip(last)
    tip = strip.tooltip(repeat)
    assert all(repr(t) in tip for t in r.top_tokens[repeat]) and "target" in tip
    assert strip.cell_lines(repeat)[1].split()[0] == r.top_tokens[repeat][0]


def test_alt_click_on_a_tile_ablates_that_head_and_again_restores_it(toy, qtbot):
    view, edit = toy.modelView, toy.panel.widgets["ablate"]
    tile_click(qtbot, view, 1, 2, Qt.AltModifier)
    assert edit.objectName() == "ablateEdit" and edit.text() == "1.2"
    wait_shown(qtbot, toy)
    assert toy.result.config.ablate == ("1.2",)
    qtbot.waitUntil(lambda: view.crosses.xData is not None and len(view.crosses.xData) == 4)  # composed off
    # the GUI thread: the model view draws its crosses when its mosaic is ready
    assert view.ablated == {(1, 2)} and len(view.crosses.xData) == 4  # one cross: two strokes
    strip = toy.predictionStrip.frames
    assert strip.kl is not None and strip.before_probs is not None and "KL" in toy.predictionStrip.header()
    assert "→" in toy.predictionStrip.cell_lines(5)[1]
    tile_click(qtbot, view, 1, 2, Qt.AltModifier)
    wait_shown(qtbot, toy)
    assert edit.text() == "" and toy.result.config.ablate == () and view.ablated == set()
    assert toy.predictionStrip.frames.kl is None


def test_a_plain_click_still_opens_the_head(toy, qtbot):
    tile_click(qtbot, toy.modelView, 0, 3)
    wait_shown(qtbot, toy)
    assert toy.panel.widgets["ablate"].text() == "" and toy.headGrid.focus == 3
    assert toy.result.config.layer == 0


def test_the_context_menu_ablates_and_restores(toy, qtbot):
    view = toy.modelView
    menu = view.context_menu(("", 0, 1))
    ablate, restore_all = menu.actions()
    assert ablate.text() == "Ablate L0 H1" and not restore_all.isEnabled()
    ablate.trigger()
    wait_shown(qtbot, toy)
    assert toy.result.config.ablate == ("0.1",)
    menu = view.context_menu(("", 0, 1))
    assert menu.actions()[0].text() == "Restore L0 H1" and menu.actions()[1].isEnabled()
    menu.actions()[1].trigger()
    wait_shown(qtbot, toy)
    assert toy.result.config.ablate == ()


def test_toggling_a_head_of_a_wholly_ablated_layer_keeps_the_others():
    assert toggle_head(("1.*",), 1, 2, 4) == ("1.0", "1.1", "1.3")
    assert toggle_head(("0.1", "1.2"), 1, 2, 4) == ("0.1",)
    assert toggle_head((), 0, 3, 4) == ("0.3",)
    assert ablated_heads(("1.*", "0.2", "bad", "9.1"), 2, 4) == {(1, 0), (1, 1), (1, 2), (1, 3), (0, 2)}


def test_badges_mark_the_toys_known_heads(toy, qtbot):
    view = toy.modelView
    qtbot.waitUntil(lambda: view.head_types is not None)
    scores = head_scores(toy.panel.config())
    for layer in range(2):
        for head in range(4):
            expected = {n for n, v in scores.items() if v[layer, head] >= THRESHOLDS[n]}
            assert set(view.types_of(layer, head)) == expected
    assert all("induction" in view.types_of(1, h) for h in range(4))  # layer 1: the induction heads
    best = int(np.argmax(scores["previous_token"][0]))
    assert "previous_token" in view.types_of(0, best)
    assert len(view.badges.data) == sum(len(view.types_of(n, h)) for n in range(2) for h in range(4))
    legend = toy.modelPanel.legend.text()
    assert "ind" in legend and "prev" in legend and "ablated" in legend
    assert toy.modelPanel.legend.isVisible()


def test_random_weights_leave_the_model_view_its_note_alone(toy, qtbot):
    """No model: the view says so, and no key of badges or Alt+click under it (nothing there to click)."""
    combo = toy.panel.widgets["variant"]
    combo.setCurrentIndex(combo.findData("causal"))
    wait_shown(qtbot, toy)
    qtbot.waitUntil(lambda: toy.result.source is None and not toy.modelPanel.legend.isVisible())
    combo.setCurrentIndex(combo.findData("toy-induction"))
    wait_shown(qtbot, toy)
    qtbot.waitUntil(toy.modelPanel.legend.isVisible)


def test_a_larger_models_head_types_on_the_tiles_still_shown_raise_nothing(toy, qtbot):
    """A 12-head model's head types arriving while the toy's 4-head tiles are still on screen (its own are
    being composed) mark only heads those tiles have, then its own tiles once they are in."""
    view = toy.modelView
    qtbot.waitUntil(lambda: view.drawn is toy.result.source)
    passed = np.ones((2, 12), dtype=bool)
    view.set_head_types(HeadScoreFrames(passed={"previous_token": passed}))
    assert len(view.badges.data) == 8  # on the toy's 2 x 4 tiles only, none past its columns
    other = run(toy.panel.config()).source  # another forward: its tiles are composed on a thread
    view.show_source(other, 1, "viridis")  # (delivered to this thread only when events run)
    view.set_head_types(HeadScoreFrames(passed={"induction": passed}))
    assert view.drawn is not other and len(view.badges.data) == 8
    qtbot.waitUntil(lambda: view.drawn is other)
    assert len(view.badges.data) == 8


def test_statistics_gain_the_probe_head_types_without_repeating_the_others(toy, qtbot):
    open_dock(toy, qtbot, "statsDock")
    stats = toy.explain.stats
    qtbot.waitUntil(lambda: "induction" in stats.frames.columns)
    scores = head_scores(toy.panel.config())
    layer = toy.result.config.layer
    np.testing.assert_allclose(stats.column("induction"), scores["induction"][layer])
    np.testing.assert_allclose(stats.column("duplicate_token"), scores["duplicate_token"][layer])
    headers = [stats.model.horizontalHeaderItem(c).text() for c in range(stats.model.columnCount())]
    assert headers.count("previous token") == 1 and "prev" not in headers and "self" not in headers
    np.testing.assert_allclose(stats.column("previous"), scores["previous_token"][layer], atol=1e-6)


def test_which_heads_matter_shows_the_core_effects_and_opens_a_head(toy, qtbot):
    open_dock(toy, qtbot, "headEffectsDock")
    effects = toy.explain.effects
    assert effects.objectName() == "headEffects"
    qtbot.waitUntil(lambda: effects.effects is not None, timeout=30000)
    expected = head_effects(toy.panel.config())
    np.testing.assert_allclose(effects.effects, expected, rtol=1e-5, atol=1e-6)
    assert effects.table.cell_text(0, 1) == f"{expected[0, 1]:.2f}"
    top = np.unravel_index(np.argmax(effects.effects), effects.effects.shape)
    prev = head_scores(toy.panel.config())["previous_token"]
    assert top == np.unravel_index(np.argmax(prev), prev.shape)  # the previous-token head matters most
    effects.positionCombo.setCurrentIndex(effects.positionCombo.findData(14))  # a position in the repeat
    qtbot.waitUntil(lambda: effects.shown_key is not None and effects.shown_key[1] == 14, timeout=30000)
    np.testing.assert_allclose(effects.effects, head_effects(toy.panel.config(), position=14), atol=1e-6)
    index = effects.table.model().index(1, 2)
    effects.table.clicked.emit(index)
    wait_shown(qtbot, toy)
    assert toy.result.config.layer == 1 and toy.headGrid.focus == 2


def test_head_effects_are_cached_per_config_and_run_off_the_gui_thread(toy, qtbot):
    effects = toy.explain.effects
    calls = []
    real = effects.compute

    def counting(config, *args, **kwargs):
        calls.append((config.text, threading.current_thread() is threading.main_thread()))
        return real(config, *args, **kwargs)

    effects.compute = counting
    open_dock(toy, qtbot, "headEffectsDock")
    qtbot.waitUntil(lambda: effects.effects is not None, timeout=30000)
    assert len(calls) == 1 and not calls[0][1]
    toy.colormapCombo.setCurrentIndex(2)  # view only: the same config, nothing computed
    wait_shown(qtbot, toy)
    text = toy.panel.widgets["text"]
    original = text.text()
    text.setText(original[:-1])
    wait_shown(qtbot, toy)
    qtbot.waitUntil(lambda: len(calls) == 2 and effects.job.key is None, timeout=30000)
    text.setText(original)  # back: from the cache
    wait_shown(qtbot, toy)
    assert len(calls) == 2 and effects.shown_key[0].text == original


def test_head_effects_show_progress_and_cancel(toy, qtbot):
    from attnviz.core.runs.runner import Cancelled

    effects = toy.explain.effects
    started = threading.Event()

    def slow(config, position=None, ablation="zero", *, cancel=None, progress=None):
        progress(1, 8)
        started.set()
        while not cancel():
            threading.Event().wait(0.01)
        raise Cancelled

    effects.compute = slow
    open_dock(toy, qtbot, "headEffectsDock")
    qtbot.waitUntil(lambda: effects.progress.value() == 1 and effects.progress.maximum() == 8)
    assert effects.progress.isVisible() and effects.cancelButton.text() == "Cancel"
    qtbot.mouseClick(effects.cancelButton, Qt.LeftButton)
    assert not effects.progress.isVisible() and effects.cancelButton.text() == "Compute"
    assert "Cancelled" in effects.infoLabel.text() and effects.effects is None


def test_the_lens_table_holds_the_runs_lens_tokens(toy, qtbot):
    open_dock(toy, qtbot, "lensDock")
    lens, expected = toy.explain.lens, toy.result.lens
    table = lens.table
    assert lens.objectName() == "lensView"
    assert (table.model().rowCount(), table.model().columnCount()) == expected.probs.shape
    for layer, row in enumerate(expected.tokens):
        assert [table.cell_text(layer, i) for i in range(len(row))] == list(row)
    assert list(expected.tokens[-1]) == [row[0] for row in toy.result.top_tokens]  # the last row: the prediction
    header = table.model().headerData(3, Qt.Horizontal)
    assert header == f"3 {toy.result.tokens[3]}"
    assert f"{expected.probs[1, 3]:.3g}" in table.model().data(table.model().index(1, 3), Qt.ToolTipRole)


def test_the_lens_shows_a_space_or_newline_token_as_the_axes_do(qtbot):
    view = LensView()
    qtbot.addWidget(view)
    probs = np.array([[0.5, 0.2, 0.9]])
    view.show_frames(LensFrames("", ((" ", "\n", "cat"),), probs, probability_index(probs),
                                colormaps.lut("viridis"), ["0 a", "1 b", "2 c"]))
    assert [view.table.cell_text(0, i) for i in range(3)] == ["␣", "↵", "cat"]  # not blank cells
    assert "' '" in view.table.model().data(view.table.model().index(0, 0), Qt.ToolTipRole)  # the tip: the token


def test_the_strip_shows_a_space_or_newline_token_as_the_axes_do(qtbot):
    view = PredictionStrip()
    qtbot.addWidget(view)
    probs = np.array([[0.6], [0.3]])
    view.show_frames(PredictionFrames(tokens=["a", " "], top_tokens=((" ",), ("\n",)), top_probs=probs,
                                      target_tokens=["", ""], target_probs=np.full(2, np.nan)), "viridis")
    assert view.cell_lines(0) == ("0 a", "␣ .60") and view.cell_lines(1) == ("1 ␣", "↵ .30")


def test_seed_variants_say_why_there_are_no_predictions_or_lens(window, qtbot):
    open_dock(window, qtbot, "lensDock")
    assert "no output head" in window.predictionStrip.header()
    assert window.predictionStrip.top1() == []
    assert "No lens" in window.explain.lens.infoLabel.text()
    assert window.explain.lens.table.model().rowCount() == 0


def test_compare_against_unablated_diffs_the_downstream_maps(toy, qtbot):
    open_dock(toy, qtbot, "compareDock")
    compare = toy.explain.compare
    compare.unablatedButton.click()
    wait_shown(qtbot, toy)
    assert "Nothing is ablated" in compare.infoLabel.text()
    toy.panel.widgets["ablate"].setText("0.1")  # the previous-token head; layer 1's maps are downstream
    wait_shown(qtbot, toy)
    frames = toy.frames.extras["compare"]
    intact = run(RunConfig.for_variant("toy-induction", **{k: getattr(toy.panel.config(), k)
                                                            for k in ("text", "layer")}))
    expected = np.nan_to_num(toy.result.weights[0] - intact.weights[0])
    assert frames.max_abs == pytest.approx(float(np.abs(expected).max()), rel=1e-5) and frames.max_abs > 0.05
    assert "unablated" in compare.infoLabel.text()
    titles = [tile.plot.titleLabel.text for tile in compare.tiles]  # the run compared with is named
    assert titles[0].startswith("unablated") and titles[2].startswith("current − unablated"), titles


def test_predictions_and_head_types_are_read_on_the_worker_only(toy, qtbot, monkeypatch):
    seen = []
    original = predictions_module.Outputs._once

    def spy(self, name, compute):
        seen.append((name, threading.current_thread() is threading.main_thread()))
        return original(self, name, compute)

    monkeypatch.setattr(predictions_module.Outputs, "_once", spy)
    open_dock(toy, qtbot, "lensDock")
    toy.panel.widgets["ablate"].setText("1.*")
    wait_shown(qtbot, toy)
    assert {"parts", "lens"} <= {name for name, _ in seen}  # predictions, kl (with the ablation) and the lens
    assert not any(on_gui for _, on_gui in seen)


def test_hidden_panels_and_strip_ask_for_nothing(toy, qtbot):
    options = toy.view_options(toy.panel.config())
    assert not options.lens and options.unablated is None and options.predictions
    toy.stripAction.trigger()  # View menu: the strip off
    wait_shown(qtbot, toy)
    assert toy.predictionStrip.isHidden() and "predictions" not in toy.frames.extras
    toy.modelDock.hide()
    toy.colormapCombo.setCurrentIndex(1)  # the next render (view only)
    wait_shown(qtbot, toy)
    assert "head_scores" not in toy.frames.extras and "lens" not in toy.frames.extras


def test_the_new_panels_are_in_the_view_menu_with_shortcuts(window):
    actions = {a.text(): a for a in window.menuBar().actions()[1].menu().actions()}
    for title in ("Which heads matter", "Logit lens", "Predictions strip"):
        assert title in actions and not actions[title].shortcut().isEmpty() and actions[title].toolTip()


def arrivals(window, monkeypatch) -> list:
    """The worker's outcomes as they reach the window's delivery, in order."""
    outcomes = []
    arrived = window.delivery.arrived
    monkeypatch.setattr(window.delivery, "arrived", lambda o: (outcomes.append(o), arrived(o)))
    window.worker.sigDone.disconnect(arrived)
    window.worker.sigDone.connect(window.delivery.arrived)
    return outcomes


def test_the_maps_come_first_and_the_predictions_follow(toy, qtbot, monkeypatch):
    # The output head over every position is computed after the maps are on screen: the outcome that brings
    # the maps has no predictions, the strip says they are coming, the window is not settled till they are in
    import attnviz.explain as explain

    release = threading.Event()
    original = explain.prediction_frames

    def held(result):
        assert threading.current_thread() is not threading.main_thread()
        release.wait(10)
        return original(result)

    monkeypatch.setattr(explain, "prediction_frames", held)
    outcomes = arrivals(toy, monkeypatch)
    before = toy.latest_id
    toy.panel.widgets["ablate"].setText("0.1")  # a new forward
    qtbot.waitUntil(lambda: toy.latest_id > before and toy.shown_id == toy.latest_id, timeout=15000)
    shown = outcomes[-1]
    assert "predictions" in shown.late and "predictions" not in shown.frames.extras
    assert "head_scores" in shown.late and "head_scores" not in shown.frames.extras  # the badges follow too
    assert toy.result is shown.result and not toy.is_settled()
    assert "computing" in toy.predictionStrip.infoLabel.text()
    release.set()
    wait_shown(qtbot, toy)
    expected = run(toy.result.config).top_tokens  # the same forward computed apart
    assert toy.predictionStrip.top1() == [row[0] for row in expected]
    assert toy.frames.extras["predictions"] is toy.predictionStrip.frames
    assert toy.modelView.head_types is toy.frames.extras["head_scores"]
    for name, values in head_scores(toy.result.config).items():  # the same probe computed apart
        np.testing.assert_array_equal(toy.modelView.head_types.scores[name], np.asarray(values, np.float64))


def test_what_is_not_computed_yet_for_the_shown_input_says_so_never_the_last_values(toy, qtbot, monkeypatch):
    import attnviz.explain as explain

    release = threading.Event()
    release.set()
    original = explain.prediction_frames
    monkeypatch.setattr(explain, "prediction_frames", lambda result: (release.wait(10), original(result))[1])
    toy.explain.docks["lensDock"].toggleViewAction().trigger()
    wait_shown(qtbot, toy)
    lens = toy.explain.lens
    qtbot.waitUntil(lambda: lens.table.heat.rowCount() > 0, timeout=10000)
    release.clear()
    before = toy.latest_id
    toy.panel.widgets["text"].setText("abcdabcdponm")  # a new input: its predictions and lens follow its maps
    qtbot.waitUntil(lambda: toy.latest_id > before and toy.shown_id == toy.latest_id, timeout=15000)
    assert "".join(toy.result.tokens) == "abcdabcdponm"
    strip = toy.predictionStrip
    assert strip.top1() == [] and "computing" in strip.infoLabel.text()  # not the last input's predictions
    assert lens.table.heat.rowCount() == 0 and "computing" in lens.infoLabel.text()
    release.set()
    wait_shown(qtbot, toy)
    qtbot.waitUntil(lambda: lens.table.heat.rowCount() > 0, timeout=10000)
    assert strip.top1() == [row[0] for row in run(toy.result.config).top_tokens]
    assert lens.frames is toy.frames.extras["lens"] and len(lens.frames.positions) == len(toy.result.tokens)


def test_a_view_only_change_brings_the_predictions_with_the_maps(toy, qtbot, monkeypatch):
    outcomes = arrivals(toy, monkeypatch)
    toy.colormapCombo.setCurrentIndex(2)  # the same result, shown again
    wait_shown(qtbot, toy)
    assert not outcomes[-1].recomputed and not outcomes[-1].late
    assert "predictions" in outcomes[-1].frames.extras


def test_a_seed_variant_without_an_output_head_brings_its_strip_message_with_the_maps(window, qtbot, monkeypatch):
    outcomes = arrivals(window, monkeypatch)
    window.panel.widgets["seed"].setValue(window.panel.widgets["seed"].value() + 1)  # a new run
    wait_shown(qtbot, window)
    assert outcomes[-1].recomputed and not outcomes[-1].late  # nothing follows: no logits to make
    assert "no output head" in outcomes[-1].frames.extras["predictions"].message
