"""A single map drawn with square cells and its axes spanning the data alone.

pyqtgraph's locked aspect keeps cells square by widening the view range past the data (a 13-token rollout
ran from -5 to 20 on its key axis). Instead the plot itself is sized: as large as its room allows while its
view box holds rows x cols square cells, with the range exactly the data's.
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import QEvent, QObject, QSizeF


def fit_cells(plot: pg.PlotItem, rows: int, cols: int, room: QSizeF) -> float | None:
    """Bound `plot`'s size (inside `room`) so its view box shows rows x cols square cells; returns a cell's
    side in px (None: the plot is not laid out yet)."""
    vb = plot.getViewBox()
    if rows <= 0 or cols <= 0 or vb.width() <= 0 or vb.height() <= 0:
        return None
    extra_w, extra_h = plot.size().width() - vb.width(), plot.size().height() - vb.height()  # axes, title
    if extra_w < 0 or extra_h < 0:
        return None  # the view box not laid out inside the plot yet: its next resize fits it
    cell = max(min((room.width() - extra_w) / cols, (room.height() - extra_h) / rows), 1.0)
    plot.setMaximumSize(cell * cols + extra_w, cell * rows + extra_h)
    return cell


class SquareCells(QObject):
    """Keeps a plot's cells square in a pyqtgraph widget (`view`) as the widget resizes and maps change."""

    def __init__(self, view, plot: pg.PlotItem):
        super().__init__(view)
        self.view, self.plot, self.shape = view, plot, (0, 0)
        self.cell = 1.0  # a cell's side on screen, px
        view.installEventFilter(self)
        plot.getViewBox().sigResized.connect(self.fit)  # the axes' room known once the plot is laid out

    def show(self, rows: int, cols: int) -> None:
        """The map now has rows x cols cells: its range is the data's, its cells square."""
        self.shape = (rows, cols)
        self.plot.setRange(xRange=(-0.5, cols - 0.5), yRange=(-0.5, rows - 0.5), padding=0)
        self.fit()

    def fit(self, *_) -> None:
        if self.shape != (0, 0):
            self.cell = fit_cells(self.plot, *self.shape, self._room()) or self.cell

    def _room(self) -> QSizeF:
        """The view's size less the margins of the layout holding the plot (a GraphicsLayoutWidget's)."""
        size = QSizeF(self.view.size())
        layout = getattr(getattr(self.view, "ci", None), "layout", None)
        if layout is not None:
            left, top, right, bottom = layout.getContentsMargins()
            size -= QSizeF(left + right, top + bottom)
        return size

    def eventFilter(self, watched, event) -> bool:  # noqa: N802 (Qt's name)
        if event.type() == QEvent.Resize:
            self.fit()
        return False
