"""A change that takes away the shown stage (ALiBi off while "+ bias" is shown, Reset) falls back to the weights
with a note instead of refusing the change: the new maps come, not an error over the old ones."""

from __future__ import annotations

from uihelpers import wait_shown

from attnviz.core import RunConfig


def show(window, qtbot, config: RunConfig) -> None:
    window.panel.set_config(config)
    qtbot.waitUntil(lambda: window.shown_id == window.latest_id and window.result.config == config, timeout=15000)


def test_turning_alibi_off_while_biased_is_shown_falls_back_to_the_weights(window, qtbot):
    alibi = RunConfig(position="alibi", mask="causal", seq_q=8, d_model=16, heads=2)
    show(window, qtbot, alibi)
    window.viewCombo.setCurrentIndex(window.viewCombo.findData("biased"))
    qtbot.waitUntil(lambda: window.shown_id == window.latest_id and "biased" in window.result.stages, timeout=15000)
    show(window, qtbot, alibi.replace(position="none"))
    assert window.viewCombo.currentData() == "weights"
    assert window.last_error is None and window.failed_id < window.latest_id
    assert "no biased stage" in window.statusBar().currentMessage()


def test_reset_resets_the_view_too_and_shows_the_defaults(window, qtbot):
    show(window, qtbot, RunConfig(position="alibi", mask="causal", seq_q=8, d_model=16, heads=2))
    window.viewCombo.setCurrentIndex(window.viewCombo.findData("biased"))
    window.headGrid.set_focus(1)  # a head enlarged
    wait_shown(qtbot, window)
    window.resetAction.trigger()
    qtbot.waitUntil(lambda: window.shown_id == window.latest_id and window.result.config == RunConfig(),
                    timeout=15000)
    assert window.viewCombo.currentData() == "weights" and window.last_error is None
    assert window.headGrid.focus is None  # the grid of every head again
