"""An export's colour bar column: caption, bar, tick labels and the masked / no-key swatches."""

from __future__ import annotations

import math

import numpy as np

from attnviz import colormaps
from attnviz.export.items import Bar, Box, Line, Text, hex_colour
from attnviz.export.options import ExportOptions
from attnviz.export.qt import Metrics
from attnviz.export.ticks import value_ticks
from attnviz.style import FRAME, LABEL_PX, SOFT_INK, TICK_INK, TICK_PX

BAR_WIDTH, BAR_MIN_HEIGHT = 16, 140


def legend_swatches(tiles, options: ExportOptions) -> list[tuple[int, str]]:
    """The swatches the colour bar explains: masked and no-key cells, where any tile has them."""
    present = {i for i in (colormaps.MASKED_INDEX, colormaps.NAN_INDEX) if any((t.image == i).any() for t in tiles)}
    swatches = []
    if colormaps.MASKED_INDEX in present:
        swatches.append((colormaps.MASKED_INDEX, "masked"))
    if colormaps.NAN_INDEX in present:
        swatches.append((colormaps.NAN_INDEX, "no key (NaN)" if options.what != "output" else "NaN"))
    return swatches


def colour_bar(items: list, m: Metrics, bx: float, span: tuple[float, float, float], bar_caption: str,
               lut: np.ndarray, levels: tuple[float, float] | None, scale_ticks: tuple,
               legend: list[tuple[int, str]]) -> tuple[float, float]:
    """The colour bar column at x = bx beside the tiles: caption, bar, ticks, then the legend swatches.

    span: (grid top, first image top, last image bottom); levels: the shared levels, or None for
    per-head scales (the bar then reads low..high). Returns (right edge, bottom) of the column.
    """
    grid_y, first_img_top, last_img_bottom = span
    ta = m.ascent(TICK_PX)
    lift = math.ceil(ta * 0.64) + 6  # the caption clears the top tick label
    cap_h = m.height(LABEL_PX) + lift
    bar_top = max(first_img_top, grid_y + cap_h)
    bar_h = max(BAR_MIN_HEIGHT, last_img_bottom - bar_top)
    items.append(Text(bx, bar_top - lift - m.fm(LABEL_PX).descent(), bar_caption, LABEL_PX, color=SOFT_INK))
    items.append(Bar(bx, bar_top, BAR_WIDTH, bar_h, lut))
    items.append(Box(bx, bar_top, BAR_WIDTH, bar_h, stroke=FRAME))
    lo, hi = levels if levels is not None else (0.0, 1.0)
    if levels is not None and scale_ticks:  # a non-linear scale: its ticks sit at fractions of the bar
        lo, hi = 0.0, 1.0
        values, labels = [t[0] for t in scale_ticks], [t[1] for t in scale_ticks]
    elif levels is not None:
        values, labels = value_ticks(lo, hi, bar_h)
    else:
        values, labels = [0.0, 1.0], ["low", "high"]
    label_w = 0.0
    for v, text in zip(values, labels):
        y = bar_top + bar_h - (v - lo) / (hi - lo) * bar_h
        y = min(max(y, bar_top), bar_top + bar_h)
        items.append(Line(bx + BAR_WIDTH, y, bx + BAR_WIDTH + 4, y, FRAME))
        items.append(Text(bx + BAR_WIDTH + 7, y + ta * 0.36, text, TICK_PX, color=TICK_INK))
        label_w = max(label_w, m.width(text, TICK_PX))
    bar_col_w = max(BAR_WIDTH + 7 + math.ceil(label_w), math.ceil(m.width(bar_caption, LABEL_PX)))
    y = bar_top + bar_h + 14
    for index, text in legend:
        items.append(Box(bx, y, 12, 12, fill=hex_colour(lut[index]), stroke=FRAME))
        items.append(Text(bx + 18, y + 6 + ta * 0.36, text, TICK_PX, color=TICK_INK))
        bar_col_w = max(bar_col_w, 18 + math.ceil(m.width(text, TICK_PX)))
        y += 18
    bottom = y if legend else bar_top + bar_h + ta  # room for the lowest tick label
    return bx + bar_col_w, bottom
