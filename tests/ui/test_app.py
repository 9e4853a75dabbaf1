"""Launching: `attnviz` / `python -m attnviz` end in run_app, which restores the last session."""

from __future__ import annotations

from PySide6.QtCore import QSettings, QTimer
from PySide6.QtWidgets import QApplication

from attnviz.core import RunConfig
from attnviz.ui import MainWindow
from attnviz.ui.window.app import run_app


def _close_when_shown(seen: list) -> None:
    def poll():
        windows = [w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow) and w.isVisible()]
        if windows and windows[0].shown_id > 0:
            seen.append(windows[0].result.config)
            windows[0].close()
        else:
            QTimer.singleShot(50, poll)

    QTimer.singleShot(50, poll)


def test_run_app_opens_the_default_view_and_remembers_it(qapp, tmp_path):
    QSettings.setPath(QSettings.NativeFormat, QSettings.UserScope, str(tmp_path))
    QSettings.setPath(QSettings.IniFormat, QSettings.UserScope, str(tmp_path))
    seen = []
    _close_when_shown(seen)
    assert run_app([]) == 0
    # a first launch shows a trained toy: learned attention with labelled tokens
    assert seen and seen[0].variant == "toy-reverse" and seen[0].layer == 2 and seen[0].seq_q == 8
    saved = QSettings()
    assert "toy-reverse" in str(saved.value("config"))
    saved.setValue("config", RunConfig(heads=8).to_json())
    saved.sync()
    _close_when_shown(seen)
    assert run_app([]) == 0
    assert seen[-1].variant == "causal" and seen[-1].heads == 8  # the next launch starts where the last one left off
