"""The Circuits, Logit attribution and Patching panels on the live window (offscreen), driven through their
widgets on toy-induction: what they show equals the core API's numbers, clicks open heads, Cancel stops."""

from __future__ import annotations

import os

import numpy as np
import pytest
from PySide6.QtCore import QPoint, Qt
from uihelpers import open_dock, wait_shown

from attnviz.core import composition_scores, copying_scores, head_circuits, head_logit_attribution, load_preset
from attnviz.core import patch_heads as core_patch_heads
from attnviz.ui.panels.circuits_view import top_composition

CLEAN, CORRUPTED = "pophijackmehijackm", "pophijackmehijacbm"
SHOTS = os.environ.get("ATTNVIZ_SHOTS")  # a folder: save each state's picture there to look at


def shot(widget, name: str) -> None:
    if SHOTS:
        widget.grab().save(os.path.join(SHOTS, f"{name}.png"))


@pytest.fixture
def toy(window, qtbot):
    window.panel.set_config(load_preset("toy-induction").replace(text=CLEAN))
    wait_shown(qtbot, window)
    qtbot.waitUntil(lambda: window.modelView.tile > 0, timeout=10000)
    return window


def test_circuits_panel_shows_the_open_heads_circuits_and_marks_its_composition(toy, qtbot):
    toy.headGrid.set_focus(2)
    toy.schedule()
    wait_shown(qtbot, toy)
    open_dock(toy, qtbot, "circuitsDock")
    view = toy.explain.circuits
    qtbot.waitUntil(lambda: view.bundle is not None, timeout=20000)
    config = toy.result.source.key
    expected = head_circuits(config, toy.result.config.layer, 2)
    c = view.bundle.circuits
    assert (c.layer, c.head) == (1, 2) and c.over == "vocabulary"
    np.testing.assert_allclose(c.qk, expected.qk)
    assert view.qkTable.heat.rowCount() == view.ovTable.heat.columnCount() == 16
    assert view.qkTable.heat.headerData(3, Qt.Horizontal) == "d"
    assert "copying score 0.99" in view.infoLabel.text()
    marks = top_composition(composition_scores(config), 1, 2)
    assert marks[0][:3] == (0, 1, "K")  # the previous-token head, by K-composition
    assert 'href="0.1"' in view.compositionLabel.text()
    np.testing.assert_allclose(toy.modelView.copying, copying_scores(config))
    assert toy.modelView.composition == marks and len(toy.modelView.compositionTexts) == len(marks)
    shot(toy, "circuits-panel")
    toy.modelDock.raise_()  # the Circuits tab behind: the model view keeps the marks of the open head
    qtbot.waitUntil(lambda: not toy.explain.shown("circuitsDock"))
    wait_shown(qtbot, toy)
    assert toy.modelView.composition == marks
    shot(toy, "model-view-composition")
    open_dock(toy, qtbot, "circuitsDock")
    view.compositionLabel.linkActivated.emit("0.1")  # a composition link opens that head
    qtbot.waitUntil(lambda: toy.result.config.layer == 0 and toy.headGrid.focus == 1, timeout=10000)
    qtbot.waitUntil(lambda: view.bundle.circuits.layer == 0, timeout=10000)
    assert toy.modelView.composition == ()  # layer 0 reads no earlier head


def test_logit_attribution_panel_equals_the_api_and_a_click_shows_a_heads_sources(toy, qtbot):
    open_dock(toy, qtbot, "attributionDock")
    view = toy.explain.attribution
    qtbot.waitUntil(lambda: view.attribution is not None, timeout=20000)
    expected = head_logit_attribution(toy.result.source.key)
    np.testing.assert_allclose(view.attribution.heads, expected.heads, atol=1e-6)
    assert view.table.cell_text(1, 0) == f"{expected.heads[1, 0]:.2f}"
    baseline = view.baselineCombo.findData(int(toy.result.top_ids[-1][1]))
    view.baselineCombo.setCurrentIndex(baseline)  # logit(top-1) - logit(top-2)
    qtbot.waitUntil(lambda: view.attribution.baseline == int(toy.result.top_ids[-1][1]), timeout=20000)
    assert view.sources.isHidden()  # no head clicked yet: the layer x head table takes the room
    index = view.table.heat.index(1, 2)
    view.table.clicked.emit(index)
    a = view.attribution
    assert not view.sources.isHidden() and view.sources.heat.columnCount() == len(a.tokens)
    assert view.sources.cell_text(0, 10) == f"{a.sources[1, 2, 10]:.2f}"
    shot(toy, "logit-attribution-panel")
    qtbot.waitUntil(lambda: toy.headGrid.focus == 2, timeout=10000)


def test_patching_panel_equals_the_api_and_bad_input_says_why(toy, qtbot):
    open_dock(toy, qtbot, "patchingDock")
    view = toy.explain.patching
    view.corruptedEdit.setText(CORRUPTED[:-1])
    view.answerEdit.setText("e")
    view.wrongEdit.setText("b")
    view.computeButton.click()
    qtbot.waitUntil(lambda: "Not computed" in view.infoLabel.text(), timeout=20000)
    assert "makes 17 tokens where the clean text makes 18" in view.infoLabel.text()
    view.corruptedEdit.setText(CORRUPTED)
    view.computeButton.click()
    qtbot.waitUntil(lambda: view.scores is not None, timeout=20000)
    expected = core_patch_heads(toy.result.source.key, CORRUPTED, "e", "b")
    np.testing.assert_allclose(view.scores, expected, atol=1e-6)
    assert "most: L0 H1" in view.infoLabel.text() and view.computeButton.text() == "Compute"
    shot(toy, "patching-panel")
    view.table.clicked.emit(view.table.heat.index(0, 1))
    qtbot.waitUntil(lambda: toy.result.config.layer == 0 and toy.headGrid.focus == 1, timeout=10000)


def test_cancel_stops_a_patching_run(toy, qtbot):
    open_dock(toy, qtbot, "patchingDock")
    view = toy.explain.patching
    started = []

    def slow(config, corrupted, answer, wrong, cancel, progress):
        started.append(True)
        while not cancel():
            progress(0, 8)
        raise AssertionError("not reached")  # Cancelled is raised by the real computation; nothing arrives
    view.compute = slow
    view.corruptedEdit.setText(CORRUPTED)
    view.answerEdit.setText("e")
    view.wrongEdit.setText("b")
    view.computeButton.click()
    qtbot.waitUntil(lambda: bool(started))
    assert view.computeButton.text() == "Cancel" and view.progress.isVisible()
    view.computeButton.click()
    assert view.job.key is None and "Cancelled" in view.infoLabel.text() and view.computeButton.text() == "Compute"
    assert view.scores is None


def test_a_click_on_the_predictions_strip_splits_that_logit(toy, qtbot):
    """Click a cell: the Logit attribution panel opens on that position's top token; the cell's right-click menu
    sets the baseline among its top k."""
    strip = toy.predictionStrip
    qtbot.waitUntil(lambda: strip.cells.count() == len(CLEAN), timeout=20000)
    width = strip.cells.cell_width()
    qtbot.mouseClick(strip.cells, Qt.LeftButton, pos=QPoint(int(5.5 * width), 10))
    view = toy.explain.attribution
    qtbot.waitUntil(lambda: toy.explain.shown("attributionDock"), timeout=10000)
    assert view.positionCombo.currentData() == 5 and view.tokenCombo.currentIndex() == 0
    minus = [a for a in strip.cells._pick_menu(5).actions() if a.text().startswith("… minus")]
    minus[1].trigger()  # the second most likely token as the baseline
    top = toy.result.top_ids[5]
    qtbot.waitUntil(lambda: view.attribution is not None and view.attribution.baseline == int(top[1]),
                    timeout=20000)
    expected = head_logit_attribution(toy.result.source.key, position=5, token=int(top[0]), baseline=int(top[1]))
    np.testing.assert_allclose(view.attribution.heads, expected.heads, atol=1e-6)
    assert view.attribution.total == pytest.approx(expected.total, abs=1e-5)
