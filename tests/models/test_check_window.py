"""Run > Check against transformers in the live window: off the GUI thread, one status line, a column of each
head's max |diff| in the Statistics table that follows the layer shown, gone with a run the check is not
about; a transformers copy that would not fit says so in one line."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest
from PySide6.QtCore import Qt
from tiny import SENTENCE

from attnviz.core import RunConfig
from attnviz.core.runs.device import format_bytes
from attnviz.models.check import check_against_transformers

SHOTS = os.environ.get("ATTNVIZ_SHOTS")  # a folder to keep the screenshots in, for looking at them


def settle(qtbot, w, timeout=30000):
    qtbot.waitUntil(lambda: w.is_settled() and w.shown_id > 0, timeout=timeout)
    qtbot.wait(20)


@pytest.fixture
def window(qtbot, tiny_models):
    from attnviz.ui import MainWindow

    w = MainWindow()
    qtbot.addWidget(w)
    w.resize(1280, 800)
    w.show()
    settle(qtbot, w)
    w.panel.set_config(RunConfig(variant="pretrained", model=str(tiny_models("llama")), text=SENTENCE, layer=1))
    settle(qtbot, w)
    dock = w.explain.docks["statsDock"]
    dock.show()
    dock.raise_()
    qtbot.waitUntil(lambda: w.explain.shown("statsDock"))
    settle(qtbot, w)
    yield w
    w.close()


def _column(w) -> dict[str, float] | None:
    """The Statistics table's "vs transformers" column: head label -> value (None: no such column)."""
    model = w.explain.stats.model
    headers = [model.horizontalHeaderItem(c).text() for c in range(model.columnCount())]
    if "vs transformers" not in headers:
        return None
    col = headers.index("vs transformers")
    return {model.item(r, 0).text(): float(model.item(r, col).text()) for r in range(model.rowCount())}


def test_the_check_shows_a_status_line_and_a_column_per_head(window, qtbot):
    w = window
    threads = []

    def check(result, **kwargs):
        threads.append(threading.current_thread())
        return check_against_transformers(result, **kwargs)

    w.transformersCheck.check = check
    action = w.checkAction
    assert action.objectName() == "checkAction" and action.shortcut().toString() == "Ctrl+Shift+J"
    assert action.toolTip() and action in w.menuBar().actions()[2].menu().actions()  # the Run menu
    assert _column(w) is None
    action.trigger()
    qtbot.waitUntil(lambda: w.statusBar().currentMessage().startswith("checked against"), timeout=60000)
    assert threads and threads[0] is not threading.main_thread()
    report = w.transformersCheck.report
    line = w.statusBar().currentMessage()
    assert line == report.line() and f"over 2 layers × {w.result.config.heads} heads, logits" in line
    assert report.maximum < 1e-5
    assert not w.transformersCheck.progress.isVisible() and not w.transformersCheck.cancelButton.isVisible()
    shown = _column(w)
    assert shown is not None and len(shown) == w.result.config.heads
    np.testing.assert_allclose(list(shown.values()), report.per_head[1], atol=1e-9)
    stats = w.explain.stats
    first = next(iter(stats.frames.columns))  # the statistics stay where column() finds them
    np.testing.assert_allclose(stats.column(first), stats.frames.columns[first], rtol=1e-6)
    if SHOTS:
        w.grab().save(os.path.join(SHOTS, "check-tiny-window.png"))
        stats.grab().save(os.path.join(SHOTS, "check-tiny-stats.png"))
    w.panel.widgets["layer"].setValue(0)  # another layer of the same forward: its heads' values
    settle(qtbot, w)
    np.testing.assert_allclose(list(_column(w).values()), report.per_head[0], atol=1e-9)
    assert w.statusBar().currentMessage() == line
    w.panel.widgets["text"].setText("Another text entirely.")  # a run the check is not about
    settle(qtbot, w)
    assert _column(w) is None and w.statusBar().currentMessage() == ""


def test_a_copy_that_would_not_fit_says_so_and_runs_nothing(window, qtbot):
    w = window
    w.transformersCheck.check = lambda result, **kw: check_against_transformers(result, memory_budget=1 << 20, **kw)
    w.checkAction.trigger()
    qtbot.waitUntil(lambda: "not checked" in w.statusBar().currentMessage(), timeout=30000)
    line = w.statusBar().currentMessage()
    assert line.startswith("transformers' float32 copy would need ")
    assert line.endswith(f"{format_bytes(1 << 20)} free for it (the memory_budget given): not checked")
    assert w.transformersCheck.report is None and _column(w) is None

    def failing(result, **kwargs):
        raise ValueError("text = 9000 tokens: too long; use a shorter text")

    w.transformersCheck.check = failing  # any other failure: one line, said to be the check's
    w.checkAction.trigger()
    qtbot.waitUntil(lambda: w.statusBar().currentMessage() != line, timeout=30000)
    assert w.statusBar().currentMessage() == "not checked: text = 9000 tokens: too long; use a shorter text"


def test_without_a_model_it_says_what_it_needs(qtbot):
    from attnviz.ui import MainWindow

    w = MainWindow()
    qtbot.addWidget(w)
    w.show()
    settle(qtbot, w)
    w.checkAction.trigger()
    assert w.statusBar().currentMessage().startswith("Check against transformers needs a pretrained model")
    w.close()


def test_progress_shows_the_layers_and_cancel_stops_the_check(window, qtbot):
    from attnviz.core.runs.result import Cancelled

    w, check = window, window.transformersCheck
    cancelled = threading.Event()

    def slow_check(result, *, cancel, progress):
        progress("layers", 1, 2)
        for _ in range(1000):  # a long forward, polling cancel between its layers
            if cancel():
                cancelled.set()
                raise Cancelled
            threading.Event().wait(0.01)
        raise AssertionError("never cancelled")

    check.check = slow_check
    w.checkAction.trigger()
    qtbot.waitUntil(lambda: check.progress.format() == "transformers: layer 1 / 2", timeout=10000)
    assert check.progress.isVisible() and check.cancelButton.isVisible()
    assert check.progress.value() == 1 and check.progress.maximum() == 2
    qtbot.mouseClick(check.cancelButton, Qt.LeftButton)
    qtbot.waitUntil(cancelled.is_set, timeout=10000)
    assert not check.progress.isVisible() and not check.cancelButton.isVisible()
    assert w.statusBar().currentMessage() == "Check against transformers cancelled"
    assert check.report is None and _column(w) is None
