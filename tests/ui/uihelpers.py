"""Helpers shared by the UI tests."""

from __future__ import annotations

from PySide6.QtCore import QCoreApplication

from attnviz.core import run


class CountingRun:
    """The real engine, counting how often it is asked to compute (view-only changes must not)."""

    def __init__(self, **kwargs):
        self.calls = []
        self.kwargs = kwargs

    def __call__(self, config, cancel=None, **kwargs):
        self.calls.append(config)
        return run(config, cancel=cancel, **self.kwargs, **kwargs)


def wait_shown(qtbot, window, timeout=15000):
    """Wait until the window shows the newest request it sent, and deliver what that posted (its paints)."""
    qtbot.waitUntil(lambda: window.is_settled() and window.shown_id > 0, timeout=timeout)
    QCoreApplication.sendPostedEvents()
    QCoreApplication.processEvents()


def drain(qtbot, window) -> None:
    """Stop the window's worker, then deliver every signal it sent: after this nothing more can arrive, so a
    test asserts what was shown without waiting a while to see that nothing else comes."""
    assert window.worker.stop(timeout=10)
    QCoreApplication.sendPostedEvents()
    QCoreApplication.processEvents()
    qtbot.waitUntil(window.is_settled)


def open_dock(window, qtbot, name):
    """Open an explaining panel's dock, its tab in front, and wait for the view it asks for."""
    dock = window.explain.docks[name]
    dock.show()
    dock.raise_()
    qtbot.waitUntil(lambda: window.explain.shown(name))
    wait_shown(qtbot, window)


def drop(window, path) -> None:
    """A file dragged onto the window and dropped there, as Qt delivers it."""
    from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
    from PySide6.QtGui import QDragEnterEvent, QDropEvent
    from PySide6.QtWidgets import QApplication

    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path))])
    enter = QDragEnterEvent(QPoint(10, 10), Qt.CopyAction, mime, Qt.LeftButton, Qt.NoModifier)
    QApplication.sendEvent(window, enter)
    assert enter.isAccepted()
    QApplication.sendEvent(window, QDropEvent(QPointF(10, 10), Qt.CopyAction, mime, Qt.LeftButton, Qt.NoModifier))
