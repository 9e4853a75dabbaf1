"""Starting the application: `attnviz` and `python -m attnviz` end up here."""

from __future__ import annotations

import os
import sys
from importlib import resources

from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication


def run_app(argv: list[str] | None = None, open_path: str | None = None) -> int:
    """Open the main window (restoring the last session, or on `open_path`: see MainWindow) and run until it
    closes."""
    from attnviz.ui.panels.circuit_job import cancel_all_jobs, wait_for_jobs
    from attnviz.ui.window.lifecycle import install_sigint_handler
    from attnviz.ui.window.main_window import MainWindow
    from attnviz.ui.window.settings import open_settings

    app = QApplication.instance() or QApplication([sys.argv[0], *(argv or [])])
    app.setOrganizationName("attnviz")
    app.setApplicationName("attnviz")
    sigint_timer = install_sigint_handler(app)  # from here Ctrl+C closes the windows (settings saved), quits
    app.setWindowIcon(QIcon(str(resources.files("attnviz.resources") / "icons" / "attnviz.png")))
    settings, note = open_settings()  # scratch settings (and why) when the user's are a FIFO, a device, huge
    window = MainWindow(settings=settings, open_path=open_path)
    window.show()
    if window.refused:  # `attnviz PATH` with PATH no model, maps or file it opens (or the last session's model
        # gone): the last good view, and why
        print(f"attnviz: not opened: {window.refused}", file=sys.stderr)
        window.refuse_start()
    if note:
        print(f"attnviz: {note}", file=sys.stderr)
        window.statusBar().showMessage(note, 30000)
    code = app.exec()
    if note:  # the scratch settings the window saved at closing: this session is not remembered
        settings.scratch.remove()
    sigint_timer.stop()
    # the window stopped the worker when it closed, but an event handled after that (a late result's
    # re-render) may have started it again: stop it once more before deciding how to leave
    cancel_all_jobs()
    # the panels' jobs too (circuits, attribution, patching ...): a thread still inside torch as Python
    # finalises aborts the process ("terminate called without an active exception", exit 134)
    if not window.worker.stop(timeout=1.5) or not wait_for_jobs(timeout=1.5):
        # A forward pass cannot be interrupted mid-matmul. Settings are saved; leave now
        # rather than make the user wait for a result nobody will see.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
