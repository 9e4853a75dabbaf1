"""Two small figures the panels export, drawn from their data as every export is (never a screenshot):
a heat table (labelled cells coloured by a value, its number or token written in each) and a strip of
heat maps side by side (e.g. pinned, current and their difference). Plus the writers every panel file
goes through: a figure as PNG or SVG, a table as CSV, arrays as NPZ, each atomic (attnviz.atomic).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from attnviz import colormaps
from attnviz.atomic import atomic_writer, write_bytes
from attnviz.export.colourbar import colour_bar
from attnviz.export.figure import GAP, MARGIN
from attnviz.export.items import Box, Layout, Raster, Text, check_size, hex_colour
from attnviz.export.qt import Metrics
from attnviz.export.titles import title_items, title_lines
from attnviz.frames import HeatImage
from attnviz.style import FRAME, LABEL_PX, TICK_INK, TICK_PX, TILE_PX, ink_on

CELL_PAD = 6  # around a cell's text
MAX_CELL_CHARS = 14  # a longer cell text (a token) is cut, with an ellipsis
STRIP_TILE_PX = 240  # a strip's tiles: the longer side scaled up to about this (whole pixels per cell)


def value_index(values: np.ndarray, levels: tuple[float, float]) -> np.ndarray:
    """LUT indices of `values` over `levels` (0 .. DATA_LEVELS-1; NaN gets NAN_INDEX), as HeatImage holds them."""
    lo, hi = levels
    span = hi - lo if hi > lo else 1.0
    scaled = np.clip((np.nan_to_num(values, nan=lo) - lo) / span, 0.0, 1.0)
    index = np.rint(scaled * (colormaps.DATA_LEVELS - 1)).astype(np.uint8)
    index[np.isnan(values)] = colormaps.NAN_INDEX
    return index


def _cut(text: str) -> str:
    return text if len(text) <= MAX_CELL_CHARS else text[:MAX_CELL_CHARS - 1] + "\u2026"


def heat_table_layout(heading: str, parts: list[str], rows: list[str], cols: list[str], texts: list[list[str]],
                      index: np.ndarray, lut: np.ndarray, bar: tuple[str, tuple[float, float]] | None = None,
                      cut_cols: bool = True) -> Layout:
    """A table of len(rows) x len(cols) cells, each filled with lut[index] and showing its text; row labels
    left, column labels above (standing where they are wider than a cell); `bar`: (caption, levels) adds
    the colour bar of one scale shared by every cell. Column labels are cut as the cells' texts (tokens) are,
    unless cut_cols is False: a few short names (the statistics', "duplicate token") stand whole."""
    m = Metrics()
    texts = [[_cut(t) for t in row] for row in texts]
    cols = [_cut(c) for c in cols] if cut_cols else list(cols)
    widest = max((m.width(t, TICK_PX) for row in texts for t in row), default=0.0)
    cell_w = math.ceil(max(widest, m.width("0.000", TICK_PX))) + 2 * CELL_PAD
    cell_h = m.height(TICK_PX) + CELL_PAD
    col_w = max((m.width(c, TICK_PX) for c in cols), default=0.0)
    standing = col_w > cell_w - 2
    head_h = math.ceil(col_w) + 6 if standing else m.height(TICK_PX) + 4
    row_w = math.ceil(max((m.width(r, TICK_PX) for r in rows), default=0.0)) + 8
    items: list = []
    lines = title_lines(m, heading, parts, max(520, row_w + len(cols) * cell_w))
    right, bottom = title_items(items, m, lines, MARGIN, MARGIN)
    x0, y0 = MARGIN + row_w, bottom + 8 + head_h
    check_size(x0 + len(cols) * cell_w + MARGIN, y0 + len(rows) * cell_h + MARGIN)
    ta = m.ascent(TICK_PX)
    for c, label in enumerate(cols):
        cx = x0 + (c + 0.5) * cell_w
        if standing:
            items.append(Text(cx + ta * 0.36, y0 - 4, label, TICK_PX, anchor="start", color=TICK_INK, rotated=True))
        else:
            items.append(Text(cx, y0 - 4, label, TICK_PX, anchor="middle", color=TICK_INK))
    for r, label in enumerate(rows):
        y = y0 + r * cell_h
        items.append(Text(x0 - 6, y + cell_h / 2 + ta * 0.36, label, TICK_PX, anchor="end", color=TICK_INK))
        for c, text in enumerate(texts[r]):
            rgba = lut[int(index[r, c])]
            items.append(Box(x0 + c * cell_w, y, cell_w, cell_h, fill=hex_colour(rgba)))
            items.append(Text(x0 + (c + 0.5) * cell_w, y + cell_h / 2 + ta * 0.36, text, TICK_PX, anchor="middle",
                              color=ink_on(*(float(v) for v in rgba[:3]))))
    grid_w, grid_h = len(cols) * cell_w, len(rows) * cell_h
    items.append(Box(x0, y0, grid_w, grid_h, stroke=FRAME))
    right, content_bottom = max(right, x0 + grid_w), y0 + grid_h
    if bar is not None:
        caption, levels = bar
        right, bar_bottom = colour_bar(items, m, right + 24, (y0, y0, y0 + grid_h), caption, lut, levels, (), [])
        content_bottom = max(content_bottom, bar_bottom)
    width, height = int(right + MARGIN), int(content_bottom + MARGIN)
    check_size(width, height)
    return Layout(width, height, items, [(x0, y0, grid_w, grid_h)], 1, heading + " \u2014 " + " \u00b7 ".join(parts))


def strip_layout(heading: str, parts: list[str], tiles: list[HeatImage]) -> Layout:
    """Heat maps side by side, each under its title (tile.title), cells upscaled by whole pixels so each is a
    crisp square of the panel's colours."""
    m = Metrics()
    longest = max(max(t.image.shape) for t in tiles)
    s = max(1, STRIP_TILE_PX // max(longest, 1))
    title_h = m.height(TILE_PX, True) + 4
    tile_w = max(max(t.image.shape[1] * s for t in tiles),
                 max(math.ceil(m.width(t.title, TILE_PX, True)) for t in tiles))
    items: list = []
    lines = title_lines(m, heading, parts, max(520, len(tiles) * (tile_w + GAP)))
    right, bottom = title_items(items, m, lines, MARGIN, MARGIN)
    top, rects = bottom + 8, []
    for n, tile in enumerate(tiles):
        x = MARGIN + n * (tile_w + GAP)
        items.append(Text(x + tile_w / 2, top + m.ascent(TILE_PX, True), tile.title, TILE_PX, True, "middle"))
        rgba = np.repeat(np.repeat(tile.lut[tile.image], s, axis=0), s, axis=1)
        ix, iy = int(x + (tile_w - rgba.shape[1]) // 2), top + title_h
        items.append(Raster(ix, iy, np.ascontiguousarray(rgba)))
        items.append(Box(ix, iy, rgba.shape[1], rgba.shape[0], stroke=FRAME))
        rects.append((ix, iy, rgba.shape[1], rgba.shape[0]))
    width = max(right, MARGIN + len(tiles) * (tile_w + GAP) - GAP) + MARGIN
    height = top + title_h + max(r[3] for r in rects) + m.height(LABEL_PX) + MARGIN
    check_size(width, height)
    return Layout(int(width), int(height), items, rects, s, heading + " \u2014 " + " \u00b7 ".join(parts))


def write_figure(lay: Layout, path: str | os.PathLike) -> Path:
    """A composed figure as PNG or SVG (by the extension), atomically."""
    from attnviz.export.png import paint
    from attnviz.export.qt import encode_png
    from attnviz.export.svg import svg_document

    ext = Path(path).suffix.lower()
    if ext not in (".png", ".svg"):
        raise ValueError(f"cannot draw a figure as {ext or 'a file without an extension'}: use .png or .svg")
    write_bytes(path, encode_png(paint(lay)) if ext == ".png" else svg_document(lay).encode("utf-8"))
    return Path(path)


def write_csv(path: str | os.PathLike, text: str) -> Path:
    """CSV text as a UTF-8 file, atomically."""
    write_bytes(path, text.encode("utf-8"))
    return Path(path)


def write_arrays(path: str | os.PathLike, **arrays: np.ndarray) -> Path:
    """Named arrays as a compressed NPZ, atomically."""
    with atomic_writer(path) as f:
        np.savez_compressed(f, **arrays)
    return Path(path)
