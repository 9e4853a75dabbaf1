"""Ending cleanly: any way a script or the app ends, the process exits with its own status.

Measured before this module (2 cores, offscreen): a script that opened MainWindow and simply ended
segfaulted in ~1 of 3 exits (Qt objects torn down by the interpreter in arbitrary order, after
the QApplication); ending while a forward ran aborted ("terminate called without an active
exception": torch was still computing on the worker thread while the process was torn down).

So at interpreter exit, before module teardown, `shutdown` (1) stops every window's worker and
waits for the forward in flight (cancellation is polled between stages), then (2) deletes the
windows' C++ objects while the QApplication is still alive. Ctrl+C in the terminal closes the
windows (settings saved) and quits the event loop: Python only sees a signal when it runs, so a
timer hands it the GUI thread a few times a second.
"""

from __future__ import annotations

import atexit
import signal
import threading
import weakref

from PySide6.QtCore import QCoreApplication, QEvent, QTimer
from PySide6.QtWidgets import QApplication

SIGNAL_POLL_MS = 200  # how often Python gets the GUI thread to notice Ctrl+C
_windows: weakref.WeakSet = weakref.WeakSet()
_registered = False


def track(window) -> None:
    """Remember `window` (a MainWindow) so that exiting the interpreter ends it cleanly."""
    global _registered
    _windows.add(window)
    if not _registered:
        atexit.register(shutdown)  # after pyqtgraph's own handler in registration order: runs first
        _registered = True


def _valid(obj) -> bool:
    import shiboken6

    return shiboken6.isValid(obj)


def shutdown() -> None:
    """Stop the workers (waiting for a forward in flight) and delete the windows before Python's
    module teardown. Idempotent; also safe after the windows were closed or deleted."""
    import shiboken6

    windows = [w for w in list(_windows) if _valid(w)]
    for w in windows:
        w.worker.stop(timeout=None)
    if QApplication.instance() is None or threading.current_thread() is not threading.main_thread():
        return
    for w in windows:
        if _valid(w):
            shiboken6.delete(w)
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    _windows.clear()


def _interrupted(*_) -> None:
    app = QApplication.instance()
    if app is not None:
        app.closeAllWindows()  # each window saves its settings and stops its worker
        QTimer.singleShot(0, app.quit)  # a quit() before exec() is ignored; a queued one ends it at once


def install_sigint_handler(app: QApplication) -> QTimer:
    """Ctrl+C quits the app cleanly. Returns the timer that lets Python see the signal (keep it)."""
    signal.signal(signal.SIGINT, _interrupted)
    timer = QTimer(app)
    timer.timeout.connect(lambda: None)  # runs Python bytecode: pending signal handlers run here
    timer.start(SIGNAL_POLL_MS)
    return timer
