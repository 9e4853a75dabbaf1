"""Token focus (bertviz's head view, natively): pick a query token and every head's attention of
that token is drawn as one line over the keys, coloured per head. Click the token again to clear.
The rows are read on the worker (explain.focus_frames); this widget only draws them.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QListView, QListWidget, QPushButton, QVBoxLayout, QWidget

from attnviz import style
from attnviz.explain import FocusFrames
from attnviz.ui.widgets.basic import OverlayBanner, named

MAX_KEY_TICKS = 48  # more keys than this: numeric ticks instead of token labels
LEGEND_ROWS = 4  # the legend's entries per column
TOKEN_ROWS = 3  # the token strip's rows at most (more scroll)
HINT = ("Click a query token above (or a row of a map while this panel is open) to see where every head sends "
        "it: one line per head over the keys")


def head_colour(m: int, n: int):
    return pg.intColor(m, hues=max(n, 1), values=1, maxValue=220, sat=230)


class FocusView(QWidget):
    """focusView: the token strip (click = focus, click again = clear) and one line per head."""

    sigChanged = Signal()
    sigExport = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        named(self, "focusView")
        self.row: int | None = None
        self.frames: FocusFrames | None = None
        self.tokenList = named(QListWidget(), "focusTokenList")
        self._labels: list[str] = []  # what tokenList holds
        self.tokenList.setToolTip("The query tokens: click one to see where every head sends it; click it again "
                                  "to clear. While this panel is open a click on a map row picks that token too.")
        self.tokenList.setFlow(QListView.LeftToRight)
        self.tokenList.setWrapping(True)
        self.tokenList.setResizeMode(QListView.Adjust)
        self.tokenList.setSpacing(2)
        self.tokenList.itemClicked.connect(self._item_clicked)
        self.plot = pg.PlotWidget()
        named(self.plot, "focusPlot")
        self.plot.setBackground(style.BACKGROUND)
        self.plot.setMenuEnabled(False)
        self.plot.setLabel("bottom", "key")
        self.plot.setLabel("left", "weight")
        self.plot.showGrid(x=False, y=True, alpha=0.2)
        self.plot.getPlotItem().getAxis("left").enableAutoSIPrefix(False)
        self.legend = self.plot.addLegend(offset=(-10, 10), labelTextSize="8pt", brush=style.LABEL_FILL)
        self.curves: list[pg.PlotDataItem] = []
        # until a query is picked: this hint where the lines go, and no axes (empty axes read as a plot of nothing)
        self.hint = named(OverlayBanner(self.plot), "focusHint")
        self.hint.setText(HINT)
        self.hint.setAlignment(Qt.AlignCenter)
        self.hint.setStyleSheet(f"color: {style.TICK_INK}; padding: 24px 12px;")
        self.exportButton = named(QPushButton("Export…"), "focusExportButton")
        self.exportButton.setToolTip("Save the focused query's row of every head as CSV, or as a PNG or SVG "
                                     "figure (pick a token first)")
        self.exportButton.clicked.connect(self.sigExport)
        self.exportButton.setEnabled(False)
        self.infoLabel = QLabel()
        top = QHBoxLayout()
        top.addWidget(self.infoLabel, 1)
        top.addWidget(self.exportButton)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.tokenList)
        layout.addLayout(top)
        layout.addWidget(self.plot, 1)
        self._show_plot(False)

    def _show_plot(self, shown: bool) -> None:
        """The axes, grid and legend of a focused query's lines, or (none focused) the hint alone."""
        plot = self.plot.getPlotItem()
        for side in ("left", "bottom"):
            plot.showAxis(side, shown)
        plot.showGrid(x=False, y=shown, alpha=0.2)
        self.legend.setVisible(shown)
        self.hint.setVisible(not shown)

    def set_tokens(self, labels: list[str]) -> None:
        if labels == self._labels:
            return
        self._labels = list(labels)
        self.tokenList.clear()
        self.tokenList.addItems(labels)
        for i in range(self.tokenList.count()):
            self.tokenList.item(i).setSizeHint(QSize(max(28, 8 * len(labels[i]) + 10), 20))
            self.tokenList.item(i).setTextAlignment(Qt.AlignCenter)
        if self.row is not None and self.row >= len(labels):
            self.toggle(self.row)
        self._fit_token_rows()

    def _fit_token_rows(self) -> None:
        """The token strip as tall as its rows of tokens (at most TOKEN_ROWS; more scroll): the plot keeps
        the rest of a short panel."""
        widths = [self.tokenList.item(i).sizeHint().width() + 2 * self.tokenList.spacing()
                  for i in range(self.tokenList.count())]
        room, rows, used = max(self.tokenList.viewport().width(), 1), 1, 0
        for w in widths:
            if used and used + w > room:
                rows, used = rows + 1, 0
            used += w
        row_px = 20 + 2 * self.tokenList.spacing()
        self.tokenList.setFixedHeight(min(rows, TOKEN_ROWS) * row_px + 2 * self.tokenList.frameWidth() + 2)

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        self._fit_token_rows()

    def _item_clicked(self, item) -> None:
        self.toggle(self.tokenList.row(item))

    def toggle(self, row: int) -> None:
        """Focus query `row`; the focused one again clears the focus."""
        self.row = None if row == self.row else row
        self.tokenList.clearSelection()
        if self.row is not None and self.row < self.tokenList.count():
            self.tokenList.item(self.row).setSelected(True)
        if self.row is None:
            self.show_frames(None)
        self.sigChanged.emit()

    def show_frames(self, frames: FocusFrames | None) -> None:
        self.frames = frames
        self.exportButton.setEnabled(frames is not None)  # nothing focused: nothing to export
        self._show_plot(frames is not None)
        if frames is None:
            for c in self.curves:
                c.setVisible(False)
            self.infoLabel.clear()  # the hint says it
            return
        n, keys = frames.values.shape
        if len(self.curves) != n:
            self.plot.clear()
            self.legend.clear()
            self.legend.setColumnCount(max(1, math.ceil(n / LEGEND_ROWS)))  # 12 heads' entries fit a short plot
            self.curves = [self.plot.plot(pen=pg.mkPen(head_colour(m, n), width=2), name=frames.titles[m],
                                          symbol="o", symbolSize=4, symbolBrush=head_colour(m, n))
                           for m in range(n)]
        x = np.arange(keys)
        for m, curve in enumerate(self.curves):
            curve.setData(x, frames.values[m])
            curve.setVisible(True)
        axis = self.plot.getPlotItem().getAxis("bottom")
        axis.setTicks([list(enumerate(frames.key_labels))] if keys <= MAX_KEY_TICKS else None)
        top = float(np.nanmax(frames.values)) if np.isfinite(frames.values).any() else 1.0
        self.plot.setXRange(-0.5, keys - 0.5, padding=0)  # the keys, not autoRange's margins around them
        self.plot.setYRange(0.0, max(top, 1e-6) * 1.05, padding=0)
        self.infoLabel.setText(f"query {frames.label}: each head's attention over the {keys} keys "
                               f"({n} lines, one colour per head)")
