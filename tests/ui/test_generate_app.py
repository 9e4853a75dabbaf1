"""Watching a model write, on the live window (offscreen): Generate and Stop, partial results streamed in
order, newer requests and Stop cutting a generation off, the step slider, bad input, and every build and
render off the GUI thread. The trained induction toy writes "ackm" after "pophijackmehij"."""

from __future__ import annotations

import threading
import time

import pytest
from PySide6.QtCore import QSettings, Qt
from uihelpers import CountingRun, drain, wait_shown

from attnviz.core import load_preset, run
from attnviz.core.runs.runner import Cancelled
from attnviz.session import session as session_module
from attnviz.ui import MainWindow

PROMPT = "pophijackmehij"


class SlowSteps(CountingRun):
    """The real engine, each generated token taking `step_s` longer (so a short generation streams several
    partial results), recording every step and build with the thread it ran on."""

    def __init__(self, step_s: float = 0.03):
        super().__init__()
        self.step_s = step_s
        self.steps: list[tuple[str, int, bool]] = []  # (text, tokens so far, on the GUI thread)
        self.builds: list[bool] = []  # on the GUI thread, per build() call
        self.cancelled: list[str] = []  # the texts whose generation was cancelled
        self.window = None

    def __call__(self, config, cancel=None, on_step=None, **kwargs):
        self.calls.append(config)

        def step(n, build):
            self.steps.append((config.text, n, threading.current_thread() is threading.main_thread()))
            time.sleep(self.step_s)

            def spied():
                self.builds.append(threading.current_thread() is threading.main_thread())
                return build()
            if on_step is not None:
                on_step(n, spied)
        try:
            return run(config, cancel=cancel, on_step=step if config.generate else on_step, **kwargs)
        except Cancelled:
            self.cancelled.append(config.text)
            raise


@pytest.fixture
def slow():
    return SlowSteps()


@pytest.fixture
def toy(qtbot, slow):
    w = MainWindow(compute=slow)
    qtbot.addWidget(w)
    w.resize(1200, 800)
    w.show()
    wait_shown(qtbot, w)
    w.panel.set_config(load_preset("toy-induction").replace(text=PROMPT))
    wait_shown(qtbot, w)
    yield w
    w.close()


def record_partials(window) -> list[tuple[int, int]]:
    seen: list[tuple[int, int]] = []
    window.sigPartialShown.connect(lambda rid, n: seen.append((rid, n)))
    return seen


def test_generate_writes_the_continuation_and_pressed_again_writes_again(toy, qtbot, slow):
    spin, button = toy.panel.widgets["generate"], toy.panel.generateButton
    assert (spin.objectName(), button.objectName(), toy.panel.stopButton.objectName()) == \
        ("generateSpin", "generateButton", "stopButton")
    spin.setValue(4)  # the count on: the text is continued at once
    wait_shown(qtbot, toy)
    assert "".join(toy.result.tokens) == "pophijackmehijackm" and toy.result.prompt_length == 14
    calls, before = len(slow.calls), toy.shown_id
    qtbot.mouseClick(button, Qt.LeftButton)  # the same count again: written again, not merely re-shown
    qtbot.waitUntil(lambda: toy.shown_id > before and toy.is_settled(), timeout=15000)
    assert len(slow.calls) == calls + 1 and "".join(toy.result.tokens) == "pophijackmehijackm"
    assert toy.panel.generatedLabel.isVisible() and "ackm" in toy.panel.generatedLabel.text().replace("\u200b", "")
    assert toy.statusLabel.text().startswith("14 prompt + 4 generated tokens · ")
    assert not toy.panel.stopButton.isEnabled()


def test_generate_with_the_count_off_writes_what_fits(toy, qtbot):
    toy.generateAction.trigger()  # Ctrl+G: 20 tokens, or what the toy's 32 positions leave after 14
    wait_shown(qtbot, toy)
    assert toy.panel.widgets["generate"].value() == 18
    assert len(toy.result.tokens) == 32 and toy.result.prompt_length == 14 and toy.last_error is None


def test_partials_arrive_in_order_and_grow(toy, qtbot, slow):
    seen = record_partials(toy)
    toy.panel.widgets["generate"].setValue(10)
    rid = toy.request()
    wait_shown(qtbot, toy)
    assert len(seen) >= 2 and all(r == rid for r, _ in seen)
    counts = [n for _, n in seen]
    assert counts == sorted(set(counts)) and counts[-1] < 10  # each shows more than the one before
    assert len(toy.result.tokens) == 24 and toy.shown_id == rid  # then the final result, all 10


def test_a_new_text_cancels_the_generation_and_runs_the_plain_forward(toy, qtbot, slow):
    seen = record_partials(toy)
    toy.panel.widgets["generate"].setValue(16)
    first = toy.request()
    qtbot.waitUntil(lambda: bool(seen), timeout=15000)
    toy.panel.widgets["text"].setText("abcdefabc")
    second = toy.request()
    steps_before = sum(1 for text, _, _ in slow.steps if text == PROMPT)
    shown_at_edit = len(seen)
    wait_shown(qtbot, toy)
    assert not seen[shown_at_edit:]  # no late partial of the old run, and the edit writes nothing
    assert PROMPT in slow.cancelled and sum(1 for text, _, _ in slow.steps if text == PROMPT) <= steps_before + 1
    assert "".join(toy.result.tokens) == "abcdefabc" and toy.result.prompt_length is None
    assert slow.calls[-1].generate == 0 and first < second == toy.shown_id


def test_generate_acts_once_edits_and_panels_run_the_plain_forward(toy, qtbot, slow):
    qtbot.mouseClick(toy.panel.generateButton, Qt.LeftButton)  # the count off: it writes what fits, once
    wait_shown(qtbot, toy)
    assert toy.result.prompt_length == 14 and toy.panel.widgets["generate"].value() == 18
    generations = sum(1 for c in slow.calls if c.generate)
    toy.colormapCombo.setCurrentIndex(2)  # a view change shows the generation, run again for nothing
    wait_shown(qtbot, toy)
    assert toy.result.prompt_length == 14 and len(toy.result.tokens) == 32
    toy.explain.docks["pipelineDock"].toggleViewAction().trigger()  # a panel that reads every stage
    qtbot.waitUntil(lambda: toy.explain.pipeline.frames is not None, timeout=15000)
    wait_shown(qtbot, toy)
    toy.panel.widgets["text"].setText("abcdefabc")  # an edit: the plain forward of the new text
    wait_shown(qtbot, toy)
    assert "".join(toy.result.tokens) == "abcdefabc" and toy.result.prompt_length is None
    assert sum(1 for c in slow.calls if c.generate) == generations  # no generation after the one asked for
    assert not toy.panel.stopButton.isEnabled()


def test_stop_keeps_what_was_written_and_shows_no_later_partial(toy, qtbot, slow):
    seen = record_partials(toy)
    toy.panel.widgets["generate"].setValue(18)
    qtbot.waitUntil(lambda: bool(seen), timeout=15000)
    assert toy.panel.stopButton.isEnabled()
    qtbot.mouseClick(toy.panel.stopButton, Qt.LeftButton)
    at_stop = len(seen)
    wait_shown(qtbot, toy)
    drain(qtbot, toy)  # every partial the worker sent is in
    assert len(seen) == at_stop  # nothing streamed after Stop
    written = len(toy.result.tokens) - toy.result.prompt_length
    assert seen[-1][1] <= written < 18 and "stopped after" in toy.statusLabel.text()
    assert PROMPT in slow.cancelled and not toy.panel.stopButton.isEnabled()
    calls = len(slow.calls)
    toy.colormapCombo.setCurrentIndex(2)  # a view change after Stop shows what was written, with no rerun
    wait_shown(qtbot, toy)
    assert len(slow.calls) == calls and len(toy.result.tokens) - toy.result.prompt_length == written


def test_escape_stops_a_generation(toy, qtbot):
    seen = record_partials(toy)
    toy.panel.widgets["generate"].setValue(18)
    qtbot.waitUntil(lambda: bool(seen), timeout=15000)
    toy.activateWindow()
    qtbot.keyClick(toy.headGrid, Qt.Key_Escape)
    wait_shown(qtbot, toy)
    assert len(toy.result.tokens) - toy.result.prompt_length < 18 and "stopped after" in toy.statusLabel.text()


def test_the_step_slider_marks_a_token_and_its_prediction_without_recomputing(toy, qtbot, slow):
    slider = toy.stepSlider
    assert slider.objectName() == "stepSlider" and not slider.isEnabled()  # not a generation yet
    toy.panel.widgets["generate"].setValue(4)
    wait_shown(qtbot, toy)
    r, calls, latest = toy.result, len(slow.calls), toy.latest_id
    assert slider.isEnabled() and (slider.minimum(), slider.maximum()) == (0, 4)
    assert toy.headGrid.mosaic.prompt_length == 14 and toy.headGrid.mosaic.step_row is None
    slider.setValue(2)  # the second generated token, 'c' at position 15
    mosaic, strip = toy.headGrid.mosaic, toy.predictionStrip
    assert mosaic.step_row == 15 and "'c' at 15" in toy.steps.label.text()
    assert strip.step_cell() == 14  # position 14 predicts the token at 15
    assert all(repr(t) in strip.infoLabel.text() for t in r.top_tokens[14]) and r.top_tokens[14][0] == "c"
    assert toy.is_settled()  # view only: no request scheduled (the window's request timer is idle) ...
    assert (len(slow.calls), toy.latest_id) == (calls, latest)  # ... and nothing asked of the worker
    slider.setValue(0)
    assert mosaic.step_row is None and strip.step_cell() is None
    toy.panel.widgets["generate"].setValue(0)  # the text alone: no steps
    wait_shown(qtbot, toy)
    assert not slider.isEnabled() and toy.headGrid.mosaic.prompt_length is None


def test_generate_is_off_where_the_model_cannot_write_and_a_typed_count_says_why(window, qtbot):
    window.panel.set_config(load_preset("toy-reverse"))  # an encoder-decoder: it reads its input at once
    wait_shown(qtbot, window)
    button = window.panel.generateButton
    assert not button.isEnabled() and not window.generateAction.isEnabled()
    assert button.toolTip().startswith("Off for this model: ") and "not a causal language model" in button.toolTip()
    shown = window.result
    window.panel.widgets["generate"].setValue(5)  # a count typed all the same: refused, the view kept
    qtbot.waitUntil(lambda: window.is_settled() and window.last_error is not None, timeout=15000)
    assert "not a causal language model" in window.panel.errorLabel.text()
    assert window.result is shown and window.staleLabel.isVisible()
    assert window.panel.findChild(type(button), "fixButton_0") is not None
    window.panel.set_config(load_preset("toy-induction"))  # a causal toy: on as soon as the panel names it
    assert button.isEnabled() and window.generateAction.isEnabled() and "Ctrl+G" in button.toolTip()
    wait_shown(qtbot, window)
    assert button.isEnabled()


def test_generate_on_a_seed_variant_points_to_a_model(window):
    window.generateAction.trigger()
    assert "needs a model" in window.statusBar().currentMessage()
    assert window.panel.widgets["generate"].value() == 0


def test_builds_and_renders_run_on_the_worker_only(toy, qtbot, slow, monkeypatch):
    rendered = []
    original = session_module.present

    def spy(*args, **kwargs):
        rendered.append(threading.current_thread() is threading.main_thread())
        return original(*args, **kwargs)

    monkeypatch.setattr(session_module, "present", spy)
    seen = record_partials(toy)
    toy.panel.widgets["generate"].setValue(8)
    wait_shown(qtbot, toy)
    assert seen and slow.builds and rendered and slow.steps
    assert not any(slow.builds) and not any(rendered) and not any(gui for _, _, gui in slow.steps)


def test_the_count_and_the_generate_default_are_remembered(qtbot, tmp_path):
    path = str(tmp_path / "attnviz.ini")
    w = MainWindow(settings=QSettings(path, QSettings.IniFormat))
    qtbot.addWidget(w)
    w.panel.set_config(load_preset("toy-induction").replace(text=PROMPT, generate=3, temperature=0.5))
    wait_shown(qtbot, w)
    w.close()
    again = MainWindow(settings=QSettings(path, QSettings.IniFormat))
    qtbot.addWidget(again)
    c = again.panel.config()
    assert (c.generate, c.temperature) == (3, 0.5) and again._generate_count == 3
    again.close()


def test_switching_to_another_variant_mid_generation_cancels_it(toy, qtbot, slow):
    seen = record_partials(toy)
    toy.panel.widgets["generate"].setValue(18)
    qtbot.waitUntil(lambda: bool(seen), timeout=15000)
    variant = toy.panel.widgets["variant"]
    variant.setCurrentIndex(variant.findData("causal"))
    switched = toy.request()
    at_switch = len(seen)
    wait_shown(qtbot, toy)
    assert PROMPT in slow.cancelled and len(seen) == at_switch
    assert toy.shown_id >= switched and toy.result.prompt_length is None and not toy.stepSlider.isEnabled()
    assert not toy.panel.generatedLabel.isVisible() and not toy.panel.stopButton.isEnabled()


def test_head_types_of_a_generation_are_measured_on_its_text_not_by_generating_again(toy, qtbot, monkeypatch):
    from attnviz import core, explain

    asked = []
    original = core.head_scores
    monkeypatch.setattr(core, "head_scores",
                        lambda config, *forward: (asked.append(config.generate), original(config, *forward))[1])
    explain._SCORES.clear()
    toy.panel.widgets["generate"].setValue(4)
    wait_shown(qtbot, toy)
    assert "head_scores" in toy.frames.extras and asked and set(asked) == {0}


def test_the_written_text_wraps_between_words_and_inside_long_runs_only():
    """Words of ordinary length wrap between words ("jumps", never "jum ps"); a run without spaces longer than the
    label (a toy's letters) gets a break opportunity after each character; the text is escaped either way."""
    from attnviz.ui.panels.generate import LONG_WORD, _breakable

    assert _breakable("The quick brown fox jumps <over>") == "The quick brown fox jumps &lt;over&gt;"
    long = "pophijackmehijackme" + "x" * LONG_WORD
    assert _breakable(f"a {long}") == "a " + "\u200b".join(long)
