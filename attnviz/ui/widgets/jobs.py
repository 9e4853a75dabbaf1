"""One function on a short-lived thread, its result or its failure reported to the GUI thread by signals: a
heavy export or any one-off job that must not block the window."""

from __future__ import annotations

import threading

from PySide6.QtCore import QObject, Signal

from attnviz.export import ExportError


class BackgroundJob(QObject):
    """Runs one function on a short-lived thread and reports to GUI-thread slots through signals.

    Connect the signals to bound methods of GUI-thread QObjects (a lambda would run on the thread).
    """

    sigDone = Signal(object)  # what the function returned
    sigFailed = Signal(str)  # a message naming the problem

    def start(self, function) -> None:
        threading.Thread(target=self._run, args=(function,), name="attnviz-job", daemon=True).start()

    def _run(self, function) -> None:
        try:
            self.sigDone.emit(function())
        except (ExportError, ValueError) as exc:  # unwritable target, bad option, image too large
            self.sigFailed.emit(str(exc))
        except Exception as exc:  # never take the app down for a figure
            self.sigFailed.emit(f"{type(exc).__name__}: {exc}")
