"""The head grid's maps drawn by one graphics item: per map an image and a title, placed by arithmetic.

The grid used to be one pyqtgraph PlotItem per map. A result with another head count, or a resized
window, then added and removed scene items, laid out nested layouts and re-rendered title HTML on the GUI
thread per swap, and painted up to 33 PlotItems (benchmarks/README.md, Behind the code). Here a swap
wraps the worker's ARGB pixels (frames.argb_pixels) in QImages and a paint draws them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QImage, QPainter, QPen
from PySide6.QtWidgets import QGraphicsWidget, QSizePolicy

from attnviz import style
from attnviz.frames import HeatImage, argb_pixels
from attnviz.style import STALE_OPACITY
from attnviz.ui.maps.labels import (
    LABEL_GAP_PX,
    LABEL_SIZES_PX,
    AxisFit,
    fit_flat,
    fit_lines,
    flat_room,
    label_font,
    scaled_width,
    upright_room,
    widest_label_px,
)

TITLE_ROW_PX = 22  # the row above each map that holds its title
TOKEN_ROW_PX = 18  # the height a token label needs on a pyqtgraph axis, with spacing
AXIS_NAME_PX = 16  # the strip for "query token" / "key token"
TOKEN_AXES = ("query token", "key token")
POSITION_AXES = ("query position i", "key position j")
# style's colours as Qt paints them
INK, SOFT_INK, ROW_MARK = QColor(style.INK), QColor(style.SOFT_INK), QColor(style.ROW_MARK)
GENERATED_INK, FADE = QColor(style.GENERATED_INK), QColor(*style.FADE)


@dataclass
class MapTile:
    """One map the grid shows."""

    head: int  # head (or map) index; -1 = the mean over heads
    heat: HeatImage
    title: str


def grid_shape(n: int, rows: int, cols: int, width: float, height: float) -> tuple[int, int]:
    """(grid rows, grid cols) that make n maps of rows x cols cells as large as possible in width x height px."""
    w, h = max(width, 50.0), max(height, 50.0)
    best, best_scale = (1, max(n, 1)), -1.0
    for gc in range(1, n + 1):
        gr = math.ceil(n / gc)
        scale = min(w / gc / cols, (h / gr - TITLE_ROW_PX) / rows)
        if scale > best_scale:
            best, best_scale = (gr, gc), scale
    return best


def image_rects(n: int, rows: int, cols: int, area: QRectF, square: bool = False) -> list[QRectF]:
    """Where each of n maps is drawn inside `area`, row by row, centred in its box. Square cells when `square`
    or the map is at most 8x longer than wide (else it fills its box): the title sits right above each image."""
    gr, gc = grid_shape(n, rows, cols, area.width(), area.height())
    box_w, box_h = area.width() / gc, area.height() / gr
    square = square or max(rows, cols) <= 8 * min(rows, cols)
    rects = []
    for k in range(n):
        box = QRectF(area.left() + (k % gc) * box_w + 2, area.top() + (k // gc) * box_h + TITLE_ROW_PX,
                     box_w - 4, max(box_h - TITLE_ROW_PX - 2, 1.0))
        if square:
            scale = min(box.width() / cols, box.height() / rows)
            w, h = cols * scale, rows * scale
            box = QRectF(box.center().x() - w / 2, box.top() + (box.height() - h) / 2, w, h)
        rects.append(box)
    return rects


def picture(heat: HeatImage) -> QImage:
    """The map's pixels as a QImage over them, no copy (the QImage holds a reference to the array)."""
    pixels = np.ascontiguousarray(heat.argb if heat.argb is not None else argb_pixels(heat))
    rows, cols = pixels.shape
    return QImage(pixels.data, cols, rows, pixels.strides[0], QImage.Format_ARGB32_Premultiplied)


def _font(points: float) -> QFont:
    font = QFont()
    font.setPointSizeF(points)
    return font


class Mosaic(QGraphicsWidget):
    """Draws the grid's maps with their titles; token labels along the left column and bottom row."""

    def __init__(self):
        super().__init__()
        self.setSizePolicy(QSizePolicy.Expanding, QSizePolicy.Expanding)
        self.tiles: list[MapTile] = []
        self.map_shape = (1, 1)  # full-resolution (rows, cols) of every map
        self.tokens: tuple[tuple[str, ...], tuple[str, ...]] | None = None  # (query labels, key labels)
        self.axis_names = TOKEN_AXES  # what the labels are: tokens, or positions (a focused map without tokens)
        self.square = False  # square cells whatever the map's shape (a focused head, a zoomed block)
        self.stale = False
        self.row: int | None = None  # a query row outlined in every map (token focus)
        self.prompt_length: int | None = None  # a generation: where the prompt ends (a line between)
        self.step_row: int | None = None  # a generation's chosen token: its row marked, the later ones faded
        self.rects: list[QRectF] = []  # where each tile is drawn, in this item's coordinates
        self.pictures: list[QImage] = []  # the tiles' images, ready to draw
        self.fits = (AxisFit(), AxisFit())  # how the query (left) and key (bottom) labels are drawn
        self._area = QRectF()  # the maps' part of this item, the labels' room left out
        self._columns = 1
        self._label_px = (0.0, 0.0)  # widest query and key label at the largest label size
        self.title_font = _font(9)
        self.message = ""  # said in the middle while there are no maps (a model opening)

    # --- content and layout ------------------------------------------------------------------

    def set_tiles(self, tiles: list[MapTile], shape: tuple[int, int],
                  tokens: tuple[tuple[str, ...], tuple[str, ...]] | None, square: bool = False,
                  axis_names: tuple[str, str] = TOKEN_AXES) -> None:
        """Show `tiles` of `shape` (rows, cols) cells, labelled with `tokens` (None: no labels); `square`: square
        cells whatever the shape."""
        self.pictures = [picture(t.heat) for t in tiles]
        self.tiles, self.map_shape, self.square, self.axis_names = tiles, shape, square, axis_names
        if tokens != self.tokens:
            self.tokens = tokens
            self._label_px = self._widest_labels()
        self._place()
        self.update()

    def set_message(self, text: str) -> None:
        if text != self.message:
            self.message = text
            self.update()

    def set_stale(self, stale: bool) -> None:
        if stale != self.stale:
            self.stale = stale
            self.update()

    def set_row(self, row: int | None) -> None:
        if row != self.row:
            self.row = row
            self.update()

    def set_generation(self, prompt_length: int | None, step_row: int | None) -> None:
        """A generation's marks: the prompt / generated boundary, and the chosen step's row (None: none)."""
        if (prompt_length, step_row) != (self.prompt_length, self.step_row):
            self.prompt_length, self.step_row = prompt_length, step_row
            self.update()

    def tile_area(self, rect: QRectF | None = None) -> QRectF:
        """The part of `rect` (this item's) left for the maps once token labels have their room."""
        return self._layout(self.rect() if rect is None else rect)[0]

    def _layout(self, rect: QRectF) -> tuple[QRectF, list[QRectF], tuple[AxisFit, AxisFit]]:
        """(the maps' area, each map's rect, the query and key labels' fits) in `rect`: the key labels lie flat
        where every one fits, else upright when that labels more of them (their room then comes off the maps)."""
        n, (rows, cols) = len(self.tiles), self.map_shape
        if not self.tokens:
            return rect, image_rects(n, rows, cols, rect, self.square), (AxisFit(), AxisFit())
        query_w, key_w = self._label_px
        best = None
        for upright in (False, True):
            room = upright_room(key_w) if upright else flat_room()
            area = rect.adjusted(query_w + LABEL_GAP_PX + AXIS_NAME_PX, 0, 0, -(room + AXIS_NAME_PX))
            rects = image_rects(n, rows, cols, area, self.square)
            cell_w = (rects[0].width() if rects else area.width()) / cols
            fit = fit_lines(cols, cell_w, True) if upright else fit_flat(cols, cell_w, key_w)
            if best is None or fit.step < best[2].step:
                best = (area, rects, fit)
            if fit.step == 1:
                break
        area, rects, key_fit = best
        row_fit = fit_lines(rows, (rects[0].height() if rects else area.height()) / rows)
        return area, rects, (row_fit, key_fit)

    def _widest_labels(self) -> tuple[float, float]:
        if not self.tokens:
            return 0.0, 0.0
        return tuple(widest_label_px(labels) for labels in self.tokens)

    def _place(self) -> None:
        self._area, self.rects, self.fits = self._layout(self.rect())
        self._columns = grid_shape(len(self.tiles), *self.map_shape, self._area.width(), self._area.height())[1]

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        self._place()

    # --- cells -------------------------------------------------------------------------------

    def cell_at(self, pos: QPointF) -> tuple[int, float, float] | None:
        """(tile index, x, y) at `pos` (this item's coordinates): cell (i, j) spans y, x in i +- 0.5, j +- 0.5."""
        rows, cols = self.map_shape
        for k, rect in enumerate(self.rects):
            if rect.contains(pos):
                return (k, (pos.x() - rect.left()) / rect.width() * cols - 0.5,
                        (pos.y() - rect.top()) / rect.height() * rows - 0.5)
        return None

    def cell_xy(self, k: int, pos: QPointF) -> tuple[float, float]:
        """(x, y) of `pos` in tile k's cells, also outside it (where a drag begun on it ends)."""
        rect, (rows, cols) = self.rects[k], self.map_shape
        return (pos.x() - rect.left()) / rect.width() * cols - 0.5, (pos.y() - rect.top()) / rect.height() * rows - 0.5

    def cell_pos(self, k: int, x: float, y: float) -> QPointF:
        """The inverse of cell_at: where (x, y) of tile k lies in this item's coordinates."""
        rect, (rows, cols) = self.rects[k], self.map_shape
        return QPointF(rect.left() + (x + 0.5) * rect.width() / cols, rect.top() + (y + 0.5) * rect.height() / rows)

    # --- painting ----------------------------------------------------------------------------

    def paint(self, painter: QPainter, option, widget=None) -> None:
        if self.message and not self.rects:
            painter.setFont(_font(12))
            painter.setPen(SOFT_INK)
            painter.drawText(self.rect(), Qt.AlignCenter | Qt.TextWordWrap, self.message)
        painter.setRenderHint(QPainter.SmoothPixmapTransform, False)  # a cell is a block of one colour
        painter.setOpacity(STALE_OPACITY if self.stale else 1.0)
        for rect, image in zip(self.rects, self.pictures):
            painter.drawImage(rect, image)
        painter.setOpacity(1.0)
        self._paint_generation(painter)
        self._paint_titles(painter)
        if self.row is not None and 0 <= self.row < self.map_shape[0]:
            painter.setPen(QPen(ROW_MARK, 1.5))
            for rect in self.rects:
                y = rect.top() + (self.row + 0.5) * rect.height() / self.map_shape[0]
                painter.drawLine(QPointF(rect.left(), y), QPointF(rect.right(), y))
        if self.tokens and self.rects:
            self._paint_tokens(painter)

    def _paint_generation(self, painter: QPainter) -> None:
        """A generation: a dashed line after the prompt's last row and column; with a step chosen, its row
        bracketed and the rows after it faded (the map as it stood when that token was written)."""
        rows, cols = self.map_shape
        p, step = self.prompt_length, self.step_row
        if p is None or not 0 < p < rows:
            return
        for rect in self.rects:
            dy, dx = rect.height() / rows, rect.width() / cols
            if step is not None and step + 1 < rows:
                painter.fillRect(QRectF(rect.left(), rect.top() + (step + 1) * dy, rect.width(),
                                        rect.height() - (step + 1) * dy), FADE)
            painter.setPen(QPen(GENERATED_INK, style.GENERATED_LINE_PX, Qt.DashLine))
            y, x = rect.top() + p * dy, rect.left() + p * dx
            painter.drawLine(QPointF(rect.left(), y), QPointF(rect.right(), y))
            painter.drawLine(QPointF(x, rect.top()), QPointF(x, rect.bottom()))
            if step is not None:
                painter.setPen(QPen(ROW_MARK, style.STEP_MARK_PX))
                painter.drawRect(QRectF(rect.left(), rect.top() + step * dy, rect.width(), dy))

    def _paint_titles(self, painter: QPainter) -> None:
        painter.setFont(self.title_font)
        painter.setPen(INK)
        metrics = QFontMetricsF(self.title_font)
        box_w = self._area.width() / self._columns
        for tile, rect in zip(self.tiles, self.rects):
            title_rect = QRectF(rect.center().x() - box_w / 2, rect.top() - TITLE_ROW_PX, box_w, TITLE_ROW_PX)
            text = metrics.elidedText(tile.title, Qt.ElideRight, box_w - 4)
            painter.drawText(title_rect, Qt.AlignHCenter | Qt.AlignVCenter, text)

    def tick_labels(self, k: int) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
        """Token labels drawn beside tile k: (query row, label) on its left if it is in the first column,
        (key column, label) under it if nothing is below; every one whose font fits its cell (labels.py)."""
        if not self.tokens or k >= len(self.rects):
            return [], []
        (queries, keys), (rows, cols) = self.tokens, self.map_shape
        left, bottom = [], []
        if k % self._columns == 0:
            left = [(i, queries[i]) for i in range(0, min(rows, len(queries)), self.fits[0].step)]
        if k + self._columns >= len(self.rects):
            bottom = [(j, keys[j]) for j in range(0, min(cols, len(keys)), self.fits[1].step)]
        return left, bottom

    def _paint_tokens(self, painter: QPainter) -> None:
        (rows, cols), (query_w, key_w), (row_fit, key_fit) = self.map_shape, self._label_px, self.fits
        for k, rect in enumerate(self.rects):
            left, bottom = self.tick_labels(k)
            painter.setFont(label_font(row_fit.size))
            metrics = QFontMetricsF(label_font(row_fit.size))
            line, width = metrics.height(), scaled_width(query_w, row_fit.size)
            for i, label in left:
                y = rect.top() + (i + 0.5) * rect.height() / rows
                painter.setPen(self._label_ink(i))
                painter.drawText(QRectF(rect.left() - width - LABEL_GAP_PX, y - line / 2, width, line),
                                 Qt.AlignRight | Qt.AlignVCenter, metrics.elidedText(label, Qt.ElideRight, width))
            painter.setFont(label_font(key_fit.size))
            metrics = QFontMetricsF(label_font(key_fit.size))
            line = metrics.height()
            width = upright_room(key_w) - LABEL_GAP_PX if key_fit.upright else scaled_width(key_w, key_fit.size)
            for j, label in bottom:
                x = rect.left() + (j + 0.5) * rect.width() / cols
                painter.setPen(self._label_ink(j))
                text = metrics.elidedText(label, Qt.ElideRight, width)
                if key_fit.upright:  # read bottom to top, ending at the map's edge
                    painter.save()
                    painter.translate(x, rect.bottom() + LABEL_GAP_PX)
                    painter.rotate(-90)
                    painter.drawText(QRectF(-width, -line / 2, width, line), Qt.AlignRight | Qt.AlignVCenter, text)
                    painter.restore()
                else:
                    painter.drawText(QRectF(x - width / 2 - 4, rect.bottom() + 2, width + 8, line),
                                     Qt.AlignHCenter | Qt.AlignTop, text)
        self._paint_axis_names(painter)

    def _label_ink(self, position: int) -> QColor:
        """Generated tokens' labels in blue, the prompt's (and every other run's) in the usual grey."""
        return GENERATED_INK if self.prompt_length is not None and position >= self.prompt_length else SOFT_INK

    def _paint_axis_names(self, painter: QPainter) -> None:
        """"query token" left of the labels, "key token" under them, both centred on the maps drawn."""
        maps = self.rects[0].united(self.rects[-1])
        (row_fit, key_fit), (query_w, key_w) = self.fits, self._label_px
        below = upright_room(key_w) if key_fit.upright else flat_room()
        left = maps.left() - scaled_width(query_w, row_fit.size) - LABEL_GAP_PX - AXIS_NAME_PX
        painter.setPen(INK)
        painter.setFont(label_font(LABEL_SIZES_PX[0]))
        query, key = self.axis_names
        painter.drawText(QRectF(maps.left(), maps.bottom() + below, maps.width(), AXIS_NAME_PX), Qt.AlignCenter, key)
        painter.save()
        painter.translate(max(left, self.rect().left()), maps.center().y())
        painter.rotate(-90)
        painter.drawText(QRectF(-maps.height() / 2, 0, maps.height(), AXIS_NAME_PX), Qt.AlignCenter, query)
        painter.restore()
