"""One head's attention pipeline as one figure: every stage in order with its shape and value range,
arrows between them (PNG or SVG), or that head's stages as NPZ."""

from __future__ import annotations

import math
import os
from dataclasses import replace
from pathlib import Path

import numpy as np

from attnviz.atomic import atomic_writer, write_bytes
from attnviz.core.runs.runner import RunResult
from attnviz.explain import pipeline_frames
from attnviz.export.figure import GAP, MARGIN
from attnviz.export.items import Box, Layout, Raster, Text, check_size
from attnviz.export.npz import file_arrays
from attnviz.export.options import ExportOptions, format_of
from attnviz.export.png import paint
from attnviz.export.qt import Metrics, encode_png
from attnviz.export.svg import svg_document
from attnviz.export.titles import title_items, title_lines, title_parts
from attnviz.frames import ViewOptions
from attnviz.style import COMPACT_DIGITS, FRAME, SOFT_INK, TICK_INK, TICK_PX, TILE_PX, number

PIPELINE_PER_ROW = 5
PIPELINE_TILE_PX = 150  # each stage's longer side is scaled up to about this (whole pixels per cell)
ARROW_W = 34


def pipeline_layout(result: RunResult, view: ViewOptions | None = None, head: int = 0) -> Layout:
    """One head's pipeline as one figure: every stage in order with its shape and value range, arrows
    between them. ValueError for a head that does not exist or a result that kept too few stages."""
    c = result.config
    if not 0 <= head < c.heads:
        raise ValueError(f"head {head} does not exist: the run has {c.heads} head(s), use 0..{c.heads - 1}")
    frames = pipeline_frames(result, replace(view or ViewOptions(), pipeline_head=head, pipeline_stage=None))
    if len(frames.stages) < 2:
        raise ValueError("the result kept too few stages for a pipeline: run it with every stage recorded")
    m = Metrics()
    blocks = _stage_blocks(frames.stages)
    cell_w = max(max(b[1].shape[1] for b in blocks),
                 max(math.ceil(max(m.width(b[0].title, TILE_PX, True), m.width(b[2], TICK_PX))) for b in blocks))
    heading = f"Attention pipeline \u00b7 head {head} of {c.heads}"
    _, parts = title_parts(result, ExportOptions(what="head", head=head, batch_index=frames.batch_index),
                           [blocks[0][0].image])
    items: list = []
    row_w = PIPELINE_PER_ROW * (cell_w + ARROW_W)
    right, bottom = title_items(items, m, title_lines(m, heading, parts, row_w), MARGIN, MARGIN)
    width = max(MARGIN * 2 + row_w, right + MARGIN)
    rects, height = _stage_items(items, m, blocks, cell_w, bottom + 8)
    check_size(width, height)
    summary = heading + " \u2014 " + " \u00b7 ".join(s.name for s in frames.stages)
    return Layout(int(width), int(height), items, rects, 1, summary)


def _stage_blocks(stages) -> list[tuple]:
    """(stage, its image scaled up to about PIPELINE_TILE_PX, caption "rows×cols · lo … hi") per stage."""
    blocks = []
    for st in stages:
        h, w = st.image.image.shape
        scale = max(1, PIPELINE_TILE_PX // max(h, w))
        rgba = st.image.lut[st.image.image]
        rgba = np.repeat(np.repeat(rgba, scale, axis=0), scale, axis=1)
        rows, cols = st.data.shape
        lo, hi = (number(v, COMPACT_DIGITS, typeset=True) for v in st.value_range)
        blocks.append((st, rgba, f"{rows}\u00d7{cols} \u00b7 {lo} \u2026 {hi}"))
    return blocks


def _stage_items(items: list, m: Metrics, blocks: list[tuple], cell_w: int, top: int) -> tuple[list, int]:
    """Each stage's title, caption, framed image and the arrow from the one before, PIPELINE_PER_ROW
    a row from `top`; returns the images' rectangles and the figure's height."""
    head_h = m.height(TILE_PX, True) + m.height(TICK_PX) + 6
    row_h = head_h + max(b[1].shape[0] for b in blocks) + GAP * 2
    rects = []
    for n, (st, rgba, caption) in enumerate(blocks):
        r, col = divmod(n, PIPELINE_PER_ROW)
        bx = MARGIN + ARROW_W + col * (cell_w + ARROW_W)
        by = top + r * row_h
        cx = bx + cell_w / 2
        items.append(Text(cx, by + m.ascent(TILE_PX, True), st.title, TILE_PX, True, "middle"))
        items.append(Text(cx, by + m.height(TILE_PX, True) + 2 + m.ascent(TICK_PX), caption, TICK_PX,
                          anchor="middle", color=SOFT_INK))
        ix, iy = int(bx + (cell_w - rgba.shape[1]) // 2), int(by + head_h)
        items.append(Raster(ix, iy, np.ascontiguousarray(rgba)))
        items.append(Box(ix, iy, rgba.shape[1], rgba.shape[0], stroke=FRAME))
        rects.append((ix, iy, rgba.shape[1], rgba.shape[0]))
        if n:
            items.append(Text(bx - ARROW_W / 2, iy + rgba.shape[0] / 2 + 6, "\u2192", 20, anchor="middle",
                              color=TICK_INK))
    rows = -(-len(blocks) // PIPELINE_PER_ROW)
    return rects, top + rows * row_h + MARGIN


def export_pipeline(result: RunResult, path: str | os.PathLike, view: ViewOptions | None = None,
                    head: int = 0) -> Path:
    """Write one head's pipeline as a PNG or SVG figure, or its stages (that head's slices) as NPZ."""
    ext = format_of(path)
    if ext == ".npz":
        frames = pipeline_frames(result, replace(view or ViewOptions(), pipeline_head=head))
        with atomic_writer(path) as f:
            np.savez_compressed(f, config=np.array(result.config.to_json(files=result.file_dicts())),
                                head=np.array(head), **file_arrays(result),
                                **{s.name: np.asarray(s.data) for s in frames.stages})
        return Path(path)
    lay = pipeline_layout(result, view, head)
    data = encode_png(paint(lay)) if ext == ".png" else svg_document(lay).encode("utf-8")
    write_bytes(path, data)
    return Path(path)
