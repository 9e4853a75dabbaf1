"""The building blocks of attnviz's heat map views: a pyqtgraph ImageItem fed a quantised image, lean axes,
one map as a Tile, the colour bar, and the paint counting the window waits on.

Images arrive display-ready from the worker (frames.py): uint8 through a 256-entry LUT, Qt's Indexed8
fast path.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QCoreApplication, QEvent, QRectF

from attnviz import colormaps
from attnviz.frames import HeatImage
from attnviz.models.tokens import display
from attnviz.ui.maps.mosaic import TOKEN_ROW_PX

TOKEN_CHAR_PX = 7  # a token label character's width on the focused map's key axis
TICK_TEXT_PX = 36  # room for numeric tick labels ("0.0307", "-1.5", "4000") on the colour bar and tensor view


def image_item() -> pg.ImageItem:
    item = pg.ImageItem(axisOrder="row-major")
    item.setAutoDownsample(False)  # the worker already pooled to screen size
    return item


def lean_axes(plot: pg.PlotItem) -> None:
    """Axes of a heatmap that draw in about 0.7x the time: ticks and numbers on two levels, not three
    (the third, a tick every few cells, is not readable on a map), and no SI prefix (positions and
    features are whole numbers, and with the prefix on every range change re-rendered the axis label
    as HTML). Axes paint in every view repaint that changed a range: half of the views' paint time in
    the fuzz benchmark (benchmarks/README.md, "A result in two passes")."""
    for name in ("left", "bottom", "top", "right"):
        axis = plot.getAxis(name)
        axis.enableAutoSIPrefix(False)
        axis.setStyle(maxTickLevel=1, maxTextLevel=1)


def set_heat_image(item: pg.ImageItem, heat: HeatImage) -> None:
    """Swap a quantised image in (uint8 + 256-entry LUT: Indexed8) and stretch it over its cells."""
    item.setImage(heat.image, lut=heat.lut, levels=(0, 255), autoLevels=False)
    rows, cols = heat.shape
    item.setRect(QRectF(-0.5, -0.5, cols, rows))  # cell (i, j) centred on (j, i): ticks mark cells


def settle_before_paint(view: pg.GraphicsView) -> None:
    """Lay out and set the view transforms now. Left to the event loop, the layout ran after the first
    paint and each ViewBox set its transform inside the paint, which asked for another paint."""
    QCoreApplication.sendPostedEvents(None, QEvent.LayoutRequest)
    view.scene().prepareForPaint()


class Tile:
    """One heatmap: a PlotItem (axes hidden in the grid) holding one ImageItem."""

    def __init__(self):
        # no context menus built: a tile is made faster (benchmarks/README.md, Behind the code)
        self.plot = pg.PlotItem(enableMenu=False)
        self.plot.setMouseEnabled(False, False)
        self.plot.hideButtons()
        self.plot.invertY(True)
        self.plot.getViewBox().setDefaultPadding(0)
        self.image = image_item()
        self.plot.addItem(self.image)
        self.title = ""
        self._geometry = None  # (rows, cols, aspect locked) last applied
        self._axes_key = None  # what set_axes / set_token_axes last applied
        lean_axes(self.plot)
        self.set_axes(False)

    def set_axes(self, shown: bool) -> None:
        """Position axes ("query position i", "key position j") or none."""
        if self._axes_key == shown:  # labels and ticks re-render as HTML: only on a change
            return
        self._axes_key = shown
        for axis in ("left", "bottom"):
            self.plot.showAxis(axis, shown)
            self.plot.getAxis(axis).setTicks(None)
            self.plot.getAxis(axis).showLabel(shown)
        if shown:
            self.plot.setLabel("left", "query position i")
            self.plot.setLabel("bottom", "key position j")

    def set_token_axes(self, tokens: tuple[tuple[str, ...], tuple[str, ...]], px: tuple[int, int]) -> None:
        """Token labels on the left (queries) and bottom (keys) axes, every k-th one where the cells
        (px: the map's size on screen) are too small for all (the hover always names both in full)."""
        rows, cols = ([display(t) for t in axis] for axis in tokens)
        widest = max((len(t) for t in cols), default=1)
        steps = (max(1, math.ceil(TOKEN_ROW_PX * max(len(rows), 1) / max(px[0], 1))),
                 max(1, math.ceil((widest * TOKEN_CHAR_PX + 8) * max(len(cols), 1) / max(px[1], 1))))
        key = (tokens, steps)
        if key == self._axes_key:
            return
        self._axes_key = key
        for axis, step, name, labels in (("left", steps[0], "query token", rows),
                                         ("bottom", steps[1], "key token", cols)):
            self.plot.showAxis(axis, True)
            self.plot.getAxis(axis).setTicks([[(k, labels[k]) for k in range(0, len(labels), step)], []])
            self.plot.setLabel(axis, name)

    def show(self, heat: HeatImage, title: str, lock_aspect: bool = True) -> None:
        set_heat_image(self.image, heat)
        if title != self.title:
            self.plot.setTitle(title, size="9pt")
            self.title = title
        rows, cols = heat.shape
        geometry = (rows, cols, lock_aspect)
        if geometry == self._geometry:  # each call below re-lays the tile out: only on a change
            return
        self._geometry = geometry
        # Square cells in the grid (axes hidden, so the spare margin is blank); the single-head
        # view fills its area instead, so its axes never run past the map.
        self.plot.setAspectLocked(lock_aspect and max(rows, cols) <= 8 * min(rows, cols))
        self.plot.setRange(xRange=(-0.5, cols - 0.5), yRange=(-0.5, rows - 0.5), padding=0)


class ColourBar(pg.PlotItem):
    """A vertical gradient of the current LUT with its value axis, plus masked/NaN swatches."""

    def __init__(self):
        super().__init__()
        self.setMenuEnabled(False)
        self.setMouseEnabled(False, False)
        self.hideButtons()
        self.hideAxis("bottom")
        self.hideAxis("left")
        self.showAxis("right")
        lean_axes(self)  # also: show 0.12, not 120 (x0.001)
        # A fixed room for tick labels: grown to fit them, the axis resized inside the paint that
        # found them wider and asked for another paint of the whole grid.
        self.getAxis("right").setStyle(autoExpandTextSpace=False, tickTextWidth=TICK_TEXT_PX)
        self.setFixedWidth(72)
        self.gradient = image_item()
        self.addItem(self.gradient)
        ramp = np.arange(colormaps.DATA_LEVELS, dtype=np.uint8)[:, None]
        self._ramp = ramp
        self._lut = None
        self._shown = None
        self.getViewBox().setDefaultPadding(0)

    def show_levels(self, lut: np.ndarray, levels: tuple[float, float], label: str, relative: bool = False,
                    ticks: tuple = ()) -> None:
        """relative: each head has its own range, so the bar shows low..high, not numbers.
        ticks: (fraction of the bar, label) for a non-linear colour scale; the bar then spans 0..1."""
        if ticks and not relative:
            levels = (0.0, 1.0)
        lo, hi = levels
        if lut is not self._lut:
            self.gradient.setImage(self._ramp, lut=lut, levels=(0, 255), autoLevels=False)
            self._lut = lut
        shown = (lo, hi, label, relative, tuple(ticks))
        if shown == self._shown:  # axis ticks and label re-render as HTML: only on a change
            return
        if self._shown is None or label != self._shown[2]:  # a new seed changes the range, not the label
            self.setLabel("right", label)
        self._shown = shown
        if relative:
            self.getAxis("right").setTicks([[(lo, "low"), (hi, "high")]])
        else:
            self.getAxis("right").setTicks([list(ticks)] if ticks else None)
        self.gradient.setRect(QRectF(0, lo, 1, (hi - lo) or 1.0))
        self.setRange(xRange=(0, 1), yRange=(lo, hi), padding=0)


class CountsPaints:
    """A view that counts its paints and says when it painted: the window lets the worker go on once
    a result is painted."""

    paints = 0
    shown_at = 0  # the paint count when the current result was shown
    after_paint: Callable[[], None] | None = None

    def paintEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().paintEvent(event)
        self.paints += 1
        if self.after_paint is not None:
            self.after_paint()

    def mark_shown(self) -> None:
        """A new result is in the view: it is on screen after the next paint."""
        self.shown_at = self.paints

    def painted_shown(self) -> bool:
        """Painted since the current result was shown, or not on screen (nothing to wait for)."""
        return self.paints > self.shown_at or not self.isVisible() or self.viewport().visibleRegion().isEmpty()
