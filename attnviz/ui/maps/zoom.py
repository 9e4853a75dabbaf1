"""Zoom to exact: a block of query rows and keys dragged on a map, shown exactly at full resolution.

The window turns a drag into a region (q0, q1, k0, k1) in token indices (`drag_region`: on a pooled map it
covers whole pooled cells) and asks the worker for it (`ZoomAsk` on the Request). On the worker `Zoomer`
finds the block's exact values: cut from the shown result when that holds the exact map (a short run), else
from a run that keeps that region exact (core.run(region=...): its rows are computed over every key for the
softmax and the block kept), then renders every head of the block (`ZoomFrames`). Only the blocks of that
run are kept (per layer for a model), so a layer change while zoomed needs no new forward. The GUI thread
only swaps the finished images in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from attnviz import colormaps
from attnviz.core import RunConfig, RunResult
from attnviz.frames import (
    ColourScale,
    HeatImage,
    ViewOptions,
    argb_pixels,
    argb_table,
    head_title,
    pool_maps,
    quantise_scaled,
    view_signed,
    view_stage,
)
from attnviz.models.tokens import display

ZOOM_MAX = 256  # tokens a side at most: a cell per token on a tile, and a model keeps the block per layer


@dataclass(frozen=True)
class ZoomAsk:
    """What a zoom request asks the worker for: the region and the size of one tile on screen."""

    region: tuple[int, int, int, int]  # q0, q1, k0, k1 (end exclusive), token indices
    px: tuple[int, int]  # one tile's (rows, cols) in device pixels


@dataclass
class ZoomFrames:
    """Every head of one block, exact, display-ready (the head grid shows it in place of the maps)."""

    region: tuple[int, int, int, int]
    heads: list[HeatImage]
    values: np.ndarray  # (maps, q1 - q0, k1 - k0) the block's exact values (hover reads them)
    tokens: tuple[tuple[str, ...], tuple[str, ...]]  # the block's query and key labels (positions if none)
    options: ViewOptions
    levels: tuple[float, float]
    lut: np.ndarray
    signed: bool = False
    scale: ColourScale = field(default_factory=ColourScale)

    @property
    def title(self) -> str:
        q0, q1, k0, k1 = self.region
        return f"rows {q0}–{q1 - 1}, keys {k0}–{k1 - 1}, exact"


def drag_region(start: tuple[float, float], end: tuple[float, float], shape: tuple[int, int],
                pool_factor: tuple[int, int] | None = None) -> tuple[int, int, int, int]:
    """The region (q0, q1, k0, k1) a drag covers: start and end are (x, y) cell coordinates of one map (cell
    (i, j) spans y, x in i +- 0.5, j +- 0.5) of `shape` (rows, cols) tokens. A pooled map's cells are whole
    blocks of (fq, fk) tokens: the region covers every pooled cell the drag touches. At most ZOOM_MAX a side,
    kept from the corner where the drag started."""
    rows, cols = shape
    fq, fk = pool_factor or (1, 1)

    def span(a: float, b: float, n: int, f: int) -> tuple[int, int]:
        lo, hi = (min(n - 1, max(0, math.floor(v + 0.5))) for v in (min(a, b), max(a, b)))
        lo, hi = lo // f * f, min(n, (hi // f + 1) * f)
        if hi - lo > ZOOM_MAX:
            lo, hi = (lo, lo + ZOOM_MAX) if a <= b else (hi - ZOOM_MAX, hi)
        return lo, hi

    (q0, q1), (k0, k1) = span(start[1], end[1], rows, fq), span(start[0], end[0], cols, fk)
    return q0, q1, k0, k1


def block_labels(result: RunResult, region: tuple[int, int, int, int]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The block's query and key labels: its tokens where the run has them, else its positions."""
    q0, q1, k0, k1 = region
    axes = result.axis_tokens()
    if axes is None:
        return tuple(str(i) for i in range(q0, q1)), tuple(str(j) for j in range(k0, k1))
    return tuple(display(t) for t in axes[0][q0:q1]), tuple(display(t) for t in axes[1][k0:k1])


def render_block(block: np.ndarray, allowed: np.ndarray | None, options: ViewOptions, config: RunConfig,
                 px: tuple[int, int]) -> tuple[list[HeatImage], tuple[float, float], np.ndarray, bool, ColourScale]:
    """(maps, n, m) exact values -> the grid's images (as frames.render quantises the maps), the shared levels,
    the LUT, whether signed and the colour scale. allowed: (1 or maps, n, m) bool or None (all may attend)."""
    signed = view_signed(options.view, config)
    lut = colormaps.lut(options.diverging if signed else options.colormap)
    empty = np.isnan(block).all(-1)[:1]  # a row with no key is NaN in every head (seed math)
    if allowed is not None:
        empty = empty & ~allowed.any(-1)[:1]
    pooled = pool_maps(block, allowed, empty, px, signed, row=options.scale_mode == "row")
    images, levels, scale = quantise_scaled(pooled, options.shared_scale, options.scale_mode)
    shape = block.shape[1:]
    table = argb_table(lut)
    heads = [HeatImage(im, shape, lv, lut, head_title(h, len(images), config.heads)) for h, (im, lv)
             in enumerate(zip(images, levels))]
    for heat in heads:
        heat.argb = argb_pixels(heat, table)
    shared = levels[0] if options.shared_scale else ((-1.0, 1.0) if signed else (0.0, 1.0))
    return heads, shared, lut, signed, scale


class Zoomer:
    """The worker's zoom: the exact block of the shown result, from its own maps or from a run that keeps it.
    Used by the worker thread only."""

    def __init__(self) -> None:
        self._kept: tuple | None = None  # (forward key, region, {layer: (B, maps, n, m)}) of the last zoom run

    def keep_for(self, shown: RunResult) -> None:
        """A new result on the worker: the kept blocks go unless they are of its forward (another layer)."""
        if self._kept is not None and self._kept[0] != _forward_key(shown):
            self._kept = None

    def frames(self, shown: RunResult, ask: ZoomAsk, options: ViewOptions, compute) -> ZoomFrames:
        """ZoomFrames of `ask` on `shown` (the result on screen); compute(region) -> RunResult runs the forward
        that keeps the region exact when the shown maps are pooled (or lack the stage shown)."""
        from attnviz.core.runs.backed import check_region

        c = shown.config
        region = check_region(ask.region, c.seq_q, c.lkv)
        b = min(max(options.batch_index, 0), c.batch - 1)
        stage = view_stage(options.view)
        q0, q1, k0, k1 = region
        if shown.pool_factor is None and stage in shown.stages:  # the exact maps are here: cut the block
            block = getattr(shown, stage)[b, :, q0:q1, k0:k1]
            allowed = shown.mask[min(b, shown.mask.shape[0] - 1)] if shown.mask.ndim == 4 else shown.mask[None]
            allowed = np.broadcast_to(allowed, (allowed.shape[0], c.seq_q, c.lkv))[:, q0:q1, k0:k1]
            allowed = None if allowed.all() else allowed
        else:
            block, allowed = self._block(shown, region, compute)[b], None
        block = np.ascontiguousarray(block, np.float32)
        heads, levels, lut, signed, scale = render_block(block, allowed, options, c, ask.px)
        return ZoomFrames(region, heads, block, block_labels(shown, region), options, levels, lut, signed, scale)

    def _block(self, shown: RunResult, region: tuple[int, int, int, int], compute) -> np.ndarray:
        """(B, maps, n, m): the region of the shown layer, from the kept zoom run (a region inside the kept one
        is cut from it) or a new one."""
        key, layer = _forward_key(shown), shown.config.layer
        kept = self._kept
        if kept is not None and kept[0] == key and _inside(region, kept[1]):
            q0, _, k0, _ = kept[1]
            blocks = kept[2]
            if layer in blocks:
                r = region
                return blocks[layer][:, :, r[0] - q0:r[1] - q0, r[2] - k0:r[3] - k0]
        self._kept = None  # its blocks go before the new run's are made
        result = compute(region)
        if result.region is None:
            raise RuntimeError("the run kept no exact region")
        source = result.source
        blocks = ({layer: result.region} if source is None or not source.pooled else
                  {n: call.region.numpy() for n, call in enumerate(source.pooled) if call.region is not None})
        self._kept = (key, region, blocks)
        return blocks[layer]


def _forward_key(result: RunResult):
    """What a result's maps depend on: a model's forward config (every layer), else the config."""
    return result.source.key if result.source is not None else result.config


def _inside(inner: tuple[int, int, int, int], outer: tuple[int, int, int, int]) -> bool:
    return outer[0] <= inner[0] and inner[1] <= outer[1] and outer[2] <= inner[2] and inner[3] <= outer[3]
