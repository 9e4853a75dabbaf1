"""Fixtures that drive the real MainWindow offscreen."""

from __future__ import annotations

import pytest
from uihelpers import CountingRun, wait_shown

from attnviz.ui import MainWindow


@pytest.fixture
def counting_run():
    return CountingRun()


@pytest.fixture
def window(qtbot, counting_run):
    w = MainWindow(compute=counting_run)
    qtbot.addWidget(w)
    w.resize(1200, 800)
    w.show()
    wait_shown(qtbot, w)
    yield w
    w.close()
