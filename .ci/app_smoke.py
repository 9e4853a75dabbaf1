"""The installed app, offscreen: start the window as `attnviz` does (its first view computed), export that view
through the Export dialog's own code, close, and exit 0. Any failure exits 1 with the reason.

Usage: python .ci/app_smoke.py OUT.png   (run with the installed package, from outside the checkout)
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QSettings  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402


def wait(app: QApplication, until, seconds: float, what: str) -> None:
    end = time.monotonic() + seconds
    while not until():
        if time.monotonic() > end:
            raise SystemExit(f"app smoke: waited {seconds:.0f} s for {what}")
        app.processEvents()
        time.sleep(0.02)


def main(out: str) -> int:
    from attnviz.ui import MainWindow

    app = QApplication([sys.argv[0]])
    settings = QSettings(os.path.join(os.path.dirname(out), "settings.ini"), QSettings.IniFormat)
    window = MainWindow(settings=settings)
    window.show()
    wait(app, lambda: window.is_settled() and window.shown_id > 0, 120, "the first view")
    window.exportAction.trigger()  # the toolbar button, File > Export… and Ctrl+E
    dialog = window.exportDialog
    finished = []
    dialog.sigFinished.connect(lambda ok, text: finished.append((ok, text)))
    dialog.pathEdit.setText(out)
    dialog.exportButton.click()
    wait(app, lambda: finished, 120, "the export")
    ok, text = finished[0]
    if not ok or not os.path.getsize(out):
        raise SystemExit(f"app smoke: the export failed: {text}")
    window.close()
    app.processEvents()
    print(f"app smoke: the window started, showed {window.result.config.variant} and exported {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
