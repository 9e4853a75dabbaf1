"""The PNG backend: a composed Layout painted with QPainter into a QImage (QtGui only)."""

from __future__ import annotations

import numpy as np

from attnviz import colormaps
from attnviz.core.runs.runner import RunResult
from attnviz.export.figure import layout
from attnviz.export.items import Bar, Box, Layout, Line, Raster, Text
from attnviz.export.options import ExportOptions
from attnviz.export.qt import Metrics, encode_png, qimage
from attnviz.style import BACKGROUND


def _bar_rgba(lut: np.ndarray, w: int, h: int) -> np.ndarray:
    """The colour bar as pixels: row r shows LUT index floor((h-1-r) * 254 / h), high at the top."""
    idx = ((h - 1 - np.arange(h)) * colormaps.DATA_LEVELS // h).clip(0, colormaps.DATA_LEVELS - 1)
    return np.ascontiguousarray(np.repeat(lut[idx][:, None, :], w, axis=1))


def paint(lay: Layout):
    """Any composed Layout as a QImage (RGB32), painted item by item without antialiasing (crisp cells)."""
    from PySide6.QtCore import QPointF, QRectF, Qt
    from PySide6.QtGui import QColor, QImage, QPainter, QPen

    m = Metrics()
    image = QImage(lay.width, lay.height, QImage.Format.Format_RGB32)
    image.fill(QColor(BACKGROUND))
    p = QPainter(image)
    try:
        p.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        p.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform, False)
        p.setRenderHint(QPainter.RenderHint.TextAntialiasing, True)
        for it in lay.items:
            if isinstance(it, Raster):
                p.drawImage(it.x, it.y, qimage(it.rgba))
            elif isinstance(it, Bar):
                p.drawImage(it.x, it.y, qimage(_bar_rgba(it.lut, it.w, it.h)))
            elif isinstance(it, Box):
                if it.fill:
                    p.fillRect(it.x, it.y, it.w, it.h, QColor(it.fill))
                if it.stroke:
                    p.setPen(QPen(QColor(it.stroke), 1))
                    p.setBrush(QColor(0, 0, 0, 0))
                    p.drawRect(QRectF(it.x - 1, it.y - 1, it.w + 1, it.h + 1))
            elif isinstance(it, Line):
                pen = QPen(QColor(it.color), it.width)
                if it.dashed:
                    pen.setStyle(Qt.PenStyle.DashLine)
                p.setPen(pen)
                p.drawLine(QPointF(it.x1, it.y1), QPointF(it.x2, it.y2))
            elif isinstance(it, Text):
                p.setFont(m.font(it.px, it.bold))
                p.setPen(QColor(it.color))
                w = m.width(it.text, it.px, it.bold)
                dx = {"start": 0.0, "middle": -w / 2, "end": -w}[it.anchor]
                if it.rotated:
                    p.save()
                    p.translate(it.x, it.y)
                    p.rotate(-90)
                    p.drawText(QPointF(dx, 0), it.text)
                    p.restore()
                else:
                    p.drawText(QPointF(it.x + dx, it.y), it.text)
    finally:
        p.end()
    return image


def compose_image(result: RunResult, options: ExportOptions | None = None):
    """The export as a QImage (what the PNG holds); e.g. for copying to the clipboard."""
    return paint(layout(result, options))


def png_bytes(result: RunResult, options: ExportOptions | None = None) -> bytes:
    """The export as PNG file bytes."""
    return encode_png(compose_image(result, options))
