"""Token labels beside a map: every row and column whose label fits its cell.

The label font shrinks (LABEL_SIZES_PX, down to about 6 pt) until one line fits a row; column labels stand
upright where they are wider than a column, so a column needs only a line's height too. Only where even the
smallest font is taller than a cell is every k-th label drawn (the hover names every cell's tokens in full).
No Qt widgets here: QFontMetricsF is reentrant, so the worker may measure a result's labels too.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from PySide6.QtGui import QFont, QFontMetricsF

LABEL_SIZES_PX = (11, 10, 9, 8)  # the label font's pixel sizes, largest first (11 px is about 8 pt)
TOKEN_LABEL_MAX_PX = 120  # longer horizontal token labels are elided (the hover names them in full)
UPRIGHT_MAX_PX = 90  # longer upright column labels are elided: the map keeps its height
LABEL_GAP_PX = 4  # between a label and its map, and the least room between two labels side by side


@functools.cache
def label_font(px: int) -> QFont:
    font = QFont()
    font.setPixelSize(px)
    return font


@functools.cache
def line_px(px: int) -> float:
    """The height one label line needs at font size `px` (descenders may touch the next row's top)."""
    metrics = QFontMetricsF(label_font(px))
    return metrics.ascent() + 0.5 * metrics.descent()


@functools.lru_cache(maxsize=8)
def widest_label_px(labels: tuple[str, ...]) -> float:
    """The widest of `labels` at the largest label size, at most TOKEN_LABEL_MAX_PX (a call per label slowed a grid's
    swap, benchmarks/README.md, Behind the code: the worker measures a new result's labels, views.prepare_labels)."""
    metrics = QFontMetricsF(label_font(LABEL_SIZES_PX[0]))
    return min(max((metrics.horizontalAdvance(t) for t in labels), default=0.0), TOKEN_LABEL_MAX_PX)


def scaled_width(widest: float, px: int) -> float:
    """The widest label's width at font size `px`: text widths scale with the font, hinting aside (the margin
    covers it, so a label that fits is never elided)."""
    return widest * (1.0 if px == LABEL_SIZES_PX[0] else 1.08 * px / LABEL_SIZES_PX[0])


@dataclass(frozen=True)
class AxisFit:
    """How one axis is labelled: the font's pixel size, every `step`-th label, column labels upright."""

    size: int = LABEL_SIZES_PX[0]
    step: int = 1
    upright: bool = False


def fit_lines(count: int, cell_px: float, upright: bool = False) -> AxisFit:
    """Labels one line high side by side, one per cell of `cell_px`: the largest font where each fits its
    cell; else the largest font, every k-th label."""
    for size in LABEL_SIZES_PX:
        if line_px(size) <= cell_px:
            return AxisFit(size, 1, upright)
    size = LABEL_SIZES_PX[0]
    return AxisFit(size, _step(line_px(size), count, cell_px), upright)


def fit_flat(count: int, cell_px: float, widest: float) -> AxisFit:
    """Column labels lying flat: the largest font where the widest fits a column; else every k-th one."""
    for size in LABEL_SIZES_PX:
        if scaled_width(widest, size) + LABEL_GAP_PX <= cell_px:
            return AxisFit(size, 1)
    size = LABEL_SIZES_PX[0]
    return AxisFit(size, _step(widest + LABEL_GAP_PX, count, cell_px))


def _step(label_px: float, count: int, cell_px: float) -> int:
    return max(1, math.ceil(label_px / max(cell_px, 1e-6))) if count > 1 else 1


def upright_room(widest: float) -> float:
    """The height upright column labels take under a map."""
    return min(widest, UPRIGHT_MAX_PX) + LABEL_GAP_PX


def flat_room() -> float:
    """The height flat column labels take under a map."""
    return line_px(LABEL_SIZES_PX[0]) + LABEL_GAP_PX
