"""What the exports need from Qt, QtGui only (no widgets): the application that text needs, font
metrics, and PNG encoding. Qt is imported on first use, so importing attnviz.export stays cheap."""

from __future__ import annotations

import math
import os
import sys

import numpy as np

from attnviz.style import FONT_FAMILIES

# Qt's zlib effort: faster than the default for slightly larger files (benchmarks/README.md, Behind the code)
PNG_QUALITY = 50

_app = None  # keeps a QGuiApplication we created alive


def ensure_gui_app():
    """The running QGuiApplication (or QApplication), creating one if there is none.

    Text in a QImage needs one. With no display (no DISPLAY / WAYLAND_DISPLAY on Linux) and no
    QT_QPA_PLATFORM set, the offscreen platform is selected, so headless exports just work.
    """
    global _app
    from PySide6.QtGui import QGuiApplication

    app = QGuiApplication.instance()
    if app is not None:
        if not isinstance(app, QGuiApplication):
            raise RuntimeError("a QCoreApplication is running; exporting images needs a QGuiApplication")
        return app
    headless = sys.platform.startswith(("linux", "freebsd", "openbsd", "netbsd")) and not (
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    if headless and not os.environ.get("QT_QPA_PLATFORM"):
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    _app = QGuiApplication([sys.argv[0] if sys.argv and sys.argv[0] else "attnviz"])
    return _app


class Metrics:
    """Text widths and heights from Qt's font metrics (the same fonts the PNG is painted with)."""

    def __init__(self) -> None:
        ensure_gui_app()
        self._cache: dict = {}

    def font(self, px: int, bold: bool = False):
        from PySide6.QtGui import QFont

        key = ("font", px, bold)
        if key not in self._cache:
            f = QFont()
            f.setFamilies(FONT_FAMILIES)
            f.setStyleHint(QFont.StyleHint.SansSerif)
            f.setPixelSize(px)
            f.setBold(bold)
            self._cache[key] = f
        return self._cache[key]

    def fm(self, px: int, bold: bool = False):
        from PySide6.QtGui import QFontMetricsF

        key = ("fm", px, bold)
        if key not in self._cache:
            self._cache[key] = QFontMetricsF(self.font(px, bold))
        return self._cache[key]

    def width(self, text: str, px: int, bold: bool = False) -> float:
        return self.fm(px, bold).horizontalAdvance(text)

    def ascent(self, px: int, bold: bool = False) -> float:
        return self.fm(px, bold).ascent()

    def height(self, px: int, bold: bool = False) -> int:
        return math.ceil(self.fm(px, bold).height())


def qimage(rgba: np.ndarray):
    """(h, w, 4) uint8 RGBA pixels as a QImage (a copy: the array may go)."""
    from PySide6.QtGui import QImage

    h, w = rgba.shape[:2]
    return QImage(rgba.data, w, h, w * 4, QImage.Format.Format_RGBA8888).copy()


def encode_png(image) -> bytes:
    """A QImage as PNG bytes, at the export's zlib effort."""
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice

    data = QByteArray()
    buf = QBuffer(data)
    buf.open(QIODevice.OpenModeFlag.WriteOnly)
    if not image.save(buf, "PNG", PNG_QUALITY):
        raise RuntimeError("Qt could not encode the PNG")
    buf.close()
    return bytes(data.data())
