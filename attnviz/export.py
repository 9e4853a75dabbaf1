"""PNG, SVG and NPZ export, rendered from the data (never a screenshot); shared by the GUI and the CLI.

QtGui only (QImage, QPainter, QFont), no widgets. One layout is computed per export as a short
list of drawing items (heat map rasters, vector text, tick marks, the colour bar); the PNG backend
paints it with QPainter, the SVG backend writes the same items as SVG 1.1 (each heat map an
embedded, crisp PNG; all text as vector <text>). Heat maps come from frames.render at full
resolution (no pooling), upscaled nearest-neighbour by an integer scale, so every cell is a crisp
square of exactly the view's colours (LUT, masked and no-key colours).

Every write is atomic (see attnviz.atomic): a failed or interrupted export leaves the previous
file, if any, untouched and no temporary file behind.

    export(result, "maps.png", ExportOptions(what="grid"))
    image = compose_image(result, ExportOptions(what="head", head=2))   # e.g. for the clipboard
"""

from __future__ import annotations

import base64
import json
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape

import numpy as np

from . import colormaps
from .atomic import ExportError, MissingFolder, ReadOnlyTarget, atomic_writer, check_target, write_bytes
from .core.config import RunConfig
from .core.runner import RunResult
from .core.stages import BY_NAME
from .explain import render_extras
from .frames import MAP_VIEWS, SCALE_MODES, TENSORS, ColourScale, HeatImage, ViewOptions, render

__all__ = [
    "FORMATS", "WHATS", "ExportError", "ExportOptions", "ImageTooLarge", "Layout", "MissingFolder", "ReadOnlyTarget",
    "auto_scale", "check_target", "compose_image", "default_filename", "ensure_gui_app", "export", "export_pipeline",
    "format_of", "layout", "pipeline_layout", "png_bytes", "svg_document", "svg_text", "write_npz",
]

FORMATS = {".png": "PNG image", ".svg": "SVG 1.1 drawing (crisp embedded rasters, vector text)",
           ".npz": "NumPy arrays and the run configuration"}
WHATS = {
    "grid": "every head, one tile each",
    "head": "one head",
    "mean": "the mean over heads",
    "output": "the output tensor (or another tensor: see `tensor`)",
    "scores": "every head's pre-softmax scores (the grid with view='scores')",
    "rollout": "attention rollout over the layers (multi-layer models)",
}

MIN_TILE_PX = 240  # auto scale: the longer side of a tile reaches at least this ...
MAX_AUTO_SCALE = 32  # ... with at most this many pixels per cell
MIN_SHORT_PX, MAX_AUTO_LONG_PX = 64, 1024  # thin maps: widen the short side, within this long side
MAX_PIXELS = 120_000_000  # a composed image larger than this is refused (QImage and memory limits)
GAP = 10  # between tiles
MARGIN = 16  # around everything, when anything besides the tiles is drawn
FONT_FAMILIES = ["DejaVu Sans", "Helvetica", "Arial"]
SVG_FONT = "'DejaVu Sans', Helvetica, Arial, sans-serif"
TITLE_PX, SUBTITLE_PX, TILE_PX, TICK_PX, LABEL_PX = 16, 12, 13, 11, 12
TICK_LEN = 4  # tick marks, px
INK, SOFT_INK, TICK_INK, FRAME = "#1a1a1a", "#4d4d4d", "#404040", "#808080"
BACKGROUND = "#ffffff"
BAR_WIDTH, BAR_MIN_HEIGHT = 16, 140
PNG_QUALITY = 50  # Qt's zlib effort: 2.4x faster than the default for ~10% larger files (benchmarks/)


class ImageTooLarge(ValueError):
    """The composed image would exceed MAX_PIXELS."""


# --- options ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExportOptions:
    """What to export and how it looks. The colours are exactly the view's (see frames.ViewOptions)."""

    what: str = "grid"  # a key of WHATS
    view: str = "weights"  # for grid/head/mean: "weights" or "scores" (what="scores" implies scores)
    head: int = 0  # for what="head"
    scale: int | None = None  # pixels per cell (nearest-neighbour); None = auto (tiles >= ~240 px)
    title: bool = True  # the title lines and the tile titles
    colorbar: bool = True  # the colour bar with tick labels (and masked / no-key swatches)
    axis_labels: bool = True  # position ticks and "key position j" / "query position i"
    colormap: str = colormaps.DEFAULT_SEQUENTIAL  # for weights
    diverging: str = colormaps.DEFAULT_DIVERGING  # for scores and tensors
    batch_index: int = 0
    shared_scale: bool = True  # one colour scale for all heads (else each head its own)
    tensor: str = "output"  # for what="output": a key of frames.TENSORS
    tensor_head: int = 0  # which head's q, k or v
    scale_mode: str = "linear"  # colour scale of the maps: a key of frames.SCALE_MODES
    all_layers: bool = False  # NPZ of a multi-layer model: also every layer's weights (layer_weights)

    @classmethod
    def from_view(cls, view: ViewOptions, **changes) -> ExportOptions:
        """The options that export what a view with these ViewOptions shows (plus changes)."""
        base = dict(view=view.view, colormap=view.colormap, diverging=view.diverging,
                    batch_index=view.batch_index, shared_scale=view.shared_scale, tensor=view.tensor,
                    tensor_head=view.tensor_head, scale_mode=view.scale_mode)
        return cls(**{**base, **changes})

    @property
    def map_view(self) -> str:
        return "scores" if self.what == "scores" else self.view

    def check(self, config: RunConfig) -> None:
        """Raise ValueError naming the option, the value and the allowed range."""
        if self.what not in WHATS:
            raise ValueError(f"what = {self.what!r}: unknown; use one of {', '.join(WHATS)}")
        if self.view not in MAP_VIEWS:
            raise ValueError(f"view = {self.view!r}: unknown; use one of {', '.join(MAP_VIEWS)}")
        if self.scale_mode not in SCALE_MODES:
            raise ValueError(f"scale mode = {self.scale_mode!r}: unknown; use one of {', '.join(SCALE_MODES)}")
        if self.tensor not in TENSORS:
            raise ValueError(f"tensor = {self.tensor!r}: unknown; use one of {', '.join(TENSORS)}")
        for name in (self.colormap, self.diverging):
            if name not in colormaps.names():
                raise ValueError(f"colormap {name!r}: unknown; use one of {', '.join(colormaps.names())}")
        if self.what == "head" and not 0 <= self.head < config.heads:
            raise ValueError(f"head {self.head} does not exist: the run has {config.heads} head(s), "
                             f"use 0..{config.heads - 1}")
        if self.what == "output" and self.tensor in ("q", "k", "v") and not 0 <= self.tensor_head < config.heads:
            raise ValueError(f"tensor head {self.tensor_head} does not exist: use 0..{config.heads - 1}")
        if not 0 <= self.batch_index < config.batch:
            raise ValueError(f"batch index {self.batch_index} does not exist: the batch has {config.batch} "
                             f"item(s), use 0..{config.batch - 1}")
        if self.scale is not None and (not isinstance(self.scale, int) or self.scale < 1):
            raise ValueError(f"scale = {self.scale!r}: must be a whole number of pixels per cell, 1 or more")


# --- Qt application --------------------------------------------------------------------------

_app = None  # keeps a QGuiApplication we created alive


def ensure_gui_app():
    """The running QGuiApplication (or QApplication), creating one if there is none.

    Text in a QImage needs one. With no display (no DISPLAY / WAYLAND_DISPLAY on Linux) and no
    QT_QPA_PLATFORM set, the offscreen platform is selected, so headless exports just work.
    """
    global _app
    from PySide6.QtGui import QGuiApplication

    app = QGuiApplication.instance()
    if app is not None:
        if not isinstance(app, QGuiApplication):
            raise RuntimeError("a QCoreApplication is running; exporting images needs a QGuiApplication")
        return app
    headless = sys.platform.startswith(("linux", "freebsd", "openbsd", "netbsd")) and not (
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    if headless and not os.environ.get("QT_QPA_PLATFORM"):
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    _app = QGuiApplication([sys.argv[0] if sys.argv and sys.argv[0] else "attnviz"])
    return _app


# --- layout ----------------------------------------------------------------------------------


@dataclass
class Text:
    x: float
    y: float  # baseline (for rotated text: the baseline point before rotating -90 degrees about it)
    text: str
    px: int
    bold: bool = False
    anchor: str = "start"  # start | middle | end
    color: str = INK
    rotated: bool = False  # reads bottom to top


@dataclass
class Raster:
    x: int
    y: int
    rgba: np.ndarray  # (h, w, 4) uint8, already upscaled: drawn 1:1
    tile: bool = True  # a heat map (else e.g. a swatch)


@dataclass
class Bar:
    x: int
    y: int
    w: int
    h: int
    lut: np.ndarray  # (256, 4): indices 0..253 drawn bottom (low) to top (high)


@dataclass
class Box:
    x: int
    y: int
    w: int
    h: int
    fill: str | None = None
    stroke: str | None = None


@dataclass
class Line:
    x1: float
    y1: float
    x2: float
    y2: float
    color: str = FRAME


@dataclass
class Layout:
    """A composed export: its size, drawing items in paint order, and where each tile's image lies."""

    width: int
    height: int
    items: list = field(default_factory=list)
    tiles: list[tuple[int, int, int, int]] = field(default_factory=list)  # (x, y, w, h), head order
    scale: int = 1
    summary: str = ""


class _Metrics:
    """Text widths and heights from Qt's font metrics (the same fonts the PNG is painted with)."""

    def __init__(self) -> None:
        ensure_gui_app()
        self._cache: dict = {}

    def font(self, px: int, bold: bool = False):
        from PySide6.QtGui import QFont

        key = ("font", px, bold)
        if key not in self._cache:
            f = QFont()
            f.setFamilies(FONT_FAMILIES)
            f.setStyleHint(QFont.StyleHint.SansSerif)
            f.setPixelSize(px)
            f.setBold(bold)
            self._cache[key] = f
        return self._cache[key]

    def fm(self, px: int, bold: bool = False):
        from PySide6.QtGui import QFontMetricsF

        key = ("fm", px, bold)
        if key not in self._cache:
            self._cache[key] = QFontMetricsF(self.font(px, bold))
        return self._cache[key]

    def width(self, text: str, px: int, bold: bool = False) -> float:
        return self.fm(px, bold).horizontalAdvance(text)

    def ascent(self, px: int, bold: bool = False) -> float:
        return self.fm(px, bold).ascent()

    def height(self, px: int, bold: bool = False) -> int:
        return math.ceil(self.fm(px, bold).height())


def _nice_step(span: float, count: int) -> float:
    raw = span / max(count, 1)
    if raw <= 0:
        return 1.0
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if m * mag >= raw:
            return m * mag
    return 10 * mag


def _position_ticks(n: int, length_px: int) -> list[int]:
    """Integer positions 0, step, 2*step ... < n with labels at least ~36 px apart."""
    count = max(1, length_px // 36)
    step = max(1, int(_nice_step(max(n - 1, 1), count)))
    if step not in (1, 2, 5) and step % 5:
        step = int(math.ceil(step / 5) * 5)
    return list(range(0, n, step))


def _value_ticks(lo: float, hi: float, length_px: int) -> tuple[list[float], list[str]]:
    count = max(2, min(6, length_px // 32))
    step = _nice_step(hi - lo, count)
    first = math.ceil(lo / step - 1e-9) * step
    values = [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]
    values = [0.0 if abs(v) < step * 1e-9 else v for v in values]
    big = max(abs(lo), abs(hi))
    if big >= 1e5 or big < 1e-3:
        labels = [f"{v:.2g}" for v in values]
    else:
        decimals = max(0, -math.floor(math.log10(step) + 1e-9))
        labels = [f"{v:.{decimals}f}" for v in values]
    labels = [s.replace("-", "\u2212") for s in labels]  # a real minus sign
    return values, labels


def _wrap(parts: list[str], width: float, measure) -> list[str]:
    lines: list[str] = []
    for part in parts:
        if lines and measure(lines[-1] + " \u00b7 " + part) <= width:
            lines[-1] += " \u00b7 " + part
        else:
            lines.append(part)
    return lines


def _fmt(v: float) -> str:
    return f"{v:.3g}".replace("-", "\u2212")


def _grid_shape(n: int, tile_w: int, tile_h: int) -> tuple[int, int]:
    """(columns, rows) whose overall shape is closest to 3:2, penalising empty slots."""
    best, best_cost = (n, 1), float("inf")
    for cols in range(1, n + 1):
        rows = -(-n // cols)
        if cols > 1 and (cols - 1) * rows >= n:  # a column fewer fits too: not a distinct layout
            continue
        aspect = (cols * tile_w) / max(rows * tile_h, 1)
        cost = abs(math.log(aspect / 1.5)) + 0.3 * (cols * rows - n)
        if cost < best_cost:
            best, best_cost = (cols, rows), cost
    return best


def _mask_text(c: RunConfig) -> str:
    if c.mask == "none":
        return "mask: none"
    if c.mask in ("window", "window-bidirectional"):
        return f"mask: {c.mask} {c.window}"
    if c.mask == "padding":
        return "mask: padding, valid keys " + ", ".join(str(n) for n in c.kv_lengths)
    return f"mask: {c.mask}"


def _title_parts(result: RunResult, options: ExportOptions, tiles: list[HeatImage]) -> tuple[str, list[str]]:
    c = result.config
    b = options.batch_index
    if options.what == "output":
        tile = tiles[0]
        heading = f"{tile.title} \u00b7 {tile.shape[0]} \u00d7 {tile.shape[1]}"
    else:
        view = options.map_view
        if view == "weights":
            heading = ("Attention weights after dropout (train mode)" if c.dropout_active
                       else "Attention weights" + (" (signed, differential)" if c.spec.head_factor > 1 else ""))
        elif view == "scores":
            heading = "Pre-softmax scores QK\u1d40/\u221ad_head"
        else:
            heading = f"Stage {view}: {BY_NAME[view].description}"
        if options.what == "rollout":
            heading = f"Attention rollout \u00b7 {tiles[0].title}"
        elif options.what == "head":
            heading += f" \u00b7 head {options.head} of {c.heads}"
        elif options.what == "mean":
            heading += f" \u00b7 mean over {c.heads} heads"
        else:
            heading += f" \u00b7 {c.heads} head{'s' if c.heads != 1 else ''}"
    if c.spec.backed:  # a trained model on a text: its name, the layer, the tokens
        info = getattr(result.source, "info", None)
        kind = getattr(info, "model_type", c.spec.label)
        name = f"{info.name} ({kind}, {info.layers} layers)" if info else c.model
        if c.text:
            name += f' · "{c.text if len(c.text) <= 40 else c.text[:39] + "…"}"'
        return heading, [name, f"layer {c.layer}", f"{c.seq_q} tokens", c.shapes_text(), _mask_text(c),
                         f"float32 on {result.device}"]
    parts = [f"{c.spec.label} ({c.variant})", c.shapes_text(), _mask_text(c)]
    if c.safe_softmax and c.applies("safe_softmax"):
        parts.append("safe softmax")
    if c.train and c.applies("train"):
        parts.append(f"train mode, dropout {c.dropout:g}")
    parts += [f"batch item {b} of {c.batch}", f"seed {c.seed}", f"{c.dtype} on {result.device}"]
    return heading, parts


def _token_labels(result: RunResult, options: ExportOptions) -> tuple[list[str], list[str]] | None:
    """(row labels, column labels) of a token-labelled map (pretrained models, toys); None for positions."""
    axes = result.axis_tokens()
    if axes is None or options.what == "output":
        return None
    from .models.tokens import display

    return [display(t) for t in axes[0]], [display(t) for t in axes[1]]


def _token_ticks(n: int, scale: int) -> list[int]:
    """Every token whose label fits its cell; every k-th one when the cells are smaller than the text."""
    step = max(1, math.ceil((TICK_PX + 2) / max(scale, 1)))
    return list(range(0, n, step))


def _axis_names(options: ExportOptions, tokens: bool = False) -> tuple[str, str]:
    """(x label, y label)."""
    if options.what != "output":
        return ("key token", "query token") if tokens else ("key position j", "query position i")
    rows = "key position j" if options.tensor in ("k", "v") else "query position i"
    return "feature", rows


def _select(result: RunResult, options: ExportOptions) -> tuple[list[HeatImage], str, bool, ColourScale]:
    """The tiles to draw (full resolution), the colour bar caption, whether levels are shared, and
    the colour scale (non-linear scales label the bar with their own ticks)."""
    view = ViewOptions(view=options.map_view, batch_index=options.batch_index, colormap=options.colormap,
                       diverging=options.diverging, shared_scale=options.shared_scale, tensor=options.tensor,
                       tensor_head=options.tensor_head, max_px=None, tensor_px=None,
                       mean=options.what == "mean", scale_mode=options.scale_mode,
                       rollout=options.what == "rollout")
    frames = render(result, view, extras=render_extras)
    if options.what == "output":
        return [frames.tensor], "value", True, ColourScale()
    if options.what == "rollout":
        rollout = frames.extras["rollout"]
        if rollout.message:
            raise ValueError(rollout.message)
        scale = rollout_scale(rollout, options.scale_mode)
        return [rollout.image], "rollout share" + (f" {scale.unit}" if scale.unit else ""), True, scale
    scale = frames.scale
    caption = {"weights": "attention weight", "scores": "score"}.get(options.map_view, options.map_view)
    if scale.unit:
        caption += f" {scale.unit}"
    if options.what == "mean":
        return [frames.mean], caption, True, scale
    if options.what == "head":
        return [frames.heads[options.head]], caption, True, scale
    return list(frames.heads), caption, options.shared_scale, scale


def rollout_scale(rollout, mode: str) -> ColourScale:
    """The colour scale of a rollout map (it is quantised alone, so its ticks are recomputed here)."""
    from .frames import pool_maps, quantise_scaled

    return quantise_scaled(pool_maps(rollout.data[None], None, None, None, False, row=mode == "row"), True, mode)[2]


def auto_scale(rows: int, cols: int) -> int:
    """Pixels per cell: the longer side of a tile reaches MIN_TILE_PX, and a thin map (say 4 x 300)
    is scaled further so its shorter side reaches MIN_SHORT_PX while the longer stays within
    MAX_AUTO_LONG_PX; never more than MAX_AUTO_SCALE."""
    long, short = max(rows, cols, 1), max(min(rows, cols), 1)
    s = max(math.ceil(MIN_TILE_PX / long), min(math.ceil(MIN_SHORT_PX / short), MAX_AUTO_LONG_PX // long))
    return max(1, min(MAX_AUTO_SCALE, s))


def _legend(tiles, options: ExportOptions) -> list[tuple[int, str]]:
    """The swatches the colour bar explains: masked and no-key cells, where any tile has them."""
    present = {i for i in (colormaps.MASKED_INDEX, colormaps.NAN_INDEX) if any((t.image == i).any() for t in tiles)}
    legend = []
    if colormaps.MASKED_INDEX in present:
        legend.append((colormaps.MASKED_INDEX, "masked"))
    if colormaps.NAN_INDEX in present:
        legend.append((colormaps.NAN_INDEX, "no key (NaN)" if options.what != "output" else "NaN"))
    return legend


def _title_lines(m: _Metrics, heading: str, parts: list[str], wrap_w: float) -> list[tuple[str, int, bool, str]]:
    """(text, px, bold, colour) per title line: the heading, then the parts wrapped to wrap_w."""
    wrapped = _wrap(parts, wrap_w, lambda t: m.width(t, SUBTITLE_PX))
    return [(heading, TITLE_PX, True, INK)] + [(line, SUBTITLE_PX, False, SOFT_INK) for line in wrapped]


def _tick_texts(result: RunResult, options: ExportOptions, rows: int, cols: int,
                s: int) -> tuple[dict[int, str], dict[int, str], bool]:
    """(x, y) tick labels by cell index, and whether they are tokens: positions where labels are
    on; token labels, thinned to what fits, for token-labelled maps."""
    names = _token_labels(result, options)
    fq, fk = result.pool_factor or (1, 1)  # a pooled map's cell j covers positions j*f ..
    if names is not None and (fq, fk) != (1, 1):  # a pooled cell is labelled with its first token
        names = (names[0][::fq], names[1][::fk])
    if not options.axis_labels:  # no ticks, and no room kept for them
        return {}, {}, names is not None
    x_ticks, y_ticks = _position_ticks(cols, cols * s), _position_ticks(rows, rows * s)
    if names is not None:
        y_ticks, x_ticks = _token_ticks(rows, s), _token_ticks(cols, s)
    ytext = {j: names[0][j] if names else str(j * fq) for j in y_ticks}
    xtext = {j: names[1][j] if names else str(j * fk) for j in x_ticks}
    return xtext, ytext, names is not None


def _tick_extent(m: _Metrics, xtext: dict, ytext: dict, rotated: bool) -> tuple[int, int]:
    """(width of a tile block's y tick column, height of its x tick row)."""
    ytick_w = (math.ceil(max(m.width(t, TICK_PX) for t in ytext.values())) + TICK_LEN + 4) if ytext else 0
    if not xtext:
        return ytick_w, 0
    if rotated:  # x labels stand rotated, reading bottom to top
        return ytick_w, math.ceil(max(m.width(t, TICK_PX) for t in xtext.values())) + TICK_LEN + 4
    return ytick_w, m.height(TICK_PX) + TICK_LEN + 2


def _axis_name_items(items: list, m: _Metrics, grid: tuple, margin: int, xname: str, yname: str) -> None:
    """The axis names: x centred below the grid (never left of it), y rotated at the left margin."""
    grid_x, grid_y, grid_w, grid_h = grid
    x_mid = max(grid_x + grid_w / 2, grid_x + m.width(xname, LABEL_PX) / 2)
    items.append(Text(x_mid, grid_y + grid_h + 2 + m.ascent(LABEL_PX), xname, LABEL_PX,
                      anchor="middle", color=SOFT_INK))
    items.append(Text(margin + m.ascent(LABEL_PX), grid_y + grid_h / 2, yname, LABEL_PX,
                      anchor="middle", color=SOFT_INK, rotated=True))


def _title_items(items: list, m: _Metrics, lines: list, x: int, top: int) -> int:
    """Draw the title lines from `top`; returns the right edge of the widest."""
    right, y = 0, top
    for text, px, bold, color in lines:
        items.append(Text(x, y + m.ascent(px, bold), text, px, bold, color=color))
        y += m.height(px, bold) + 2
        right = max(right, x + math.ceil(m.width(text, px, bold)))
    return right


def _tile_items(items: list, m: _Metrics, tiles, titles: list[str] | None, grid: tuple, block: tuple,
                ticks: tuple | None) -> list[tuple[int, int, int, int]]:
    """Each tile's image (cells upscaled s times), title and ticks at its place in the grid
    (x, y, columns); block = (y tick column, inner width, block width and height, title height, s).
    Returns the images' rectangles."""
    grid_x, grid_y, ncols = grid
    ytick_w, inner_w, block_w, block_h, tt_h, s = block
    rects = []
    for i, t in enumerate(tiles):
        r, col = divmod(i, ncols)
        img_h, img_w = (n * s for n in t.image.shape)
        by = grid_y + r * (block_h + GAP)
        ix = grid_x + col * (block_w + GAP) + ytick_w + (inner_w - img_w) // 2
        iy = by + tt_h
        rgba = t.lut[t.image]
        if s > 1:
            rgba = np.repeat(np.repeat(rgba, s, axis=0), s, axis=1)
        items.append(Raster(ix, iy, np.ascontiguousarray(rgba)))
        rects.append((ix, iy, img_w, img_h))
        if titles is not None:
            items.append(Text(ix + img_w / 2, by + m.ascent(TILE_PX, True), titles[i], TILE_PX, True, "middle"))
        if ticks is not None:
            _tick_items(items, m, (ix, iy, img_w, img_h, s), *ticks)
    return rects


def _tick_items(items: list, m: _Metrics, image: tuple, xtext: dict, ytext: dict, rotated: bool) -> None:
    """Tick marks and labels below and left of one tile's image (x, y, width, height, cell px)."""
    ix, iy, img_w, img_h, s = image
    tick_len = TICK_LEN
    ta = m.ascent(TICK_PX)
    for j, text in xtext.items():
        x = ix + (j + 0.5) * s
        items.append(Line(x, iy + img_h, x, iy + img_h + tick_len, FRAME))
        if rotated:  # token labels stand, reading bottom to top
            items.append(Text(x + ta * 0.36, iy + img_h + tick_len + 3, text, TICK_PX, anchor="end",
                              color=TICK_INK, rotated=True))
        else:
            items.append(Text(x, iy + img_h + tick_len + 1 + ta, text, TICK_PX, anchor="middle", color=TICK_INK))
    for j, text in ytext.items():
        y = iy + (j + 0.5) * s
        items.append(Line(ix - tick_len, y, ix, y, FRAME))
        items.append(Text(ix - tick_len - 3, y + ta * 0.36, text, TICK_PX, anchor="end", color=TICK_INK))


def layout(result: RunResult, options: ExportOptions | None = None) -> Layout:
    """Compose the export: sizes, positions and drawing items. ValueError for bad options or a too-large image."""
    options = options or ExportOptions()
    options.check(result.config)
    m = _Metrics()
    tiles, caption, shared, colour_scale = _select(result, options)
    rows, cols = tiles[0].image.shape
    s = options.scale or auto_scale(rows, cols)
    img_w, img_h = cols * s, rows * s
    many = len(tiles) > 1
    show_tile_titles = options.title and many
    decorated = options.title or options.colorbar or options.axis_labels
    margin = MARGIN if decorated else 0

    tile_titles = [t.title if shared else f"{t.title} ({_fmt(t.levels[0])} to {_fmt(t.levels[1])})" for t in tiles]

    xtext, ytext, tokens = _tick_texts(result, options, rows, cols, s)
    tt_h, ytick_w, inner_w, block_w, block_h = _tile_block(m, (xtext, ytext, tokens), img_w, img_h,
                                                           tile_titles if show_tile_titles else None)
    ncols, nrows = _grid_shape(len(tiles), block_w, block_h) if many else (1, 1)
    grid_w = ncols * block_w + (ncols - 1) * GAP
    grid_h = nrows * block_h + (nrows - 1) * GAP
    _check_size(grid_w, grid_h)  # before allocating any upscaled tile

    label_h = m.height(LABEL_PX) + 4 if options.axis_labels else 0  # x label below, y label left
    xname, yname = _axis_names(options, tokens)
    # a grid shorter than the rotated y label gets room above and below so the label never overhangs
    pad = max(0, math.ceil(m.width(yname, LABEL_PX)) + 8 - grid_h) if options.axis_labels else 0
    content_w_left = label_h + grid_w  # y label column + grid

    heading, parts = _title_parts(result, options, tiles)
    summary = heading + " \u2014 " + " \u00b7 ".join(parts)
    top = margin
    title_lines = _title_lines(m, heading, parts, max(content_w_left + 200, 520)) if options.title else []
    title_h = sum(m.height(px, bold) + 2 for _, px, bold, _ in title_lines) + (8 if title_lines else 0)
    grid_x = margin + label_h
    grid_y = top + title_h + pad // 2

    items: list = []
    tile_rects = _tile_items(items, m, tiles, tile_titles if show_tile_titles else None, (grid_x, grid_y, ncols),
                             (ytick_w, inner_w, block_w, block_h, tt_h, s),
                             (xtext, ytext, tokens) if options.axis_labels else None)

    content_bottom = grid_y + grid_h
    if options.axis_labels:
        _axis_name_items(items, m, (grid_x, grid_y, grid_w, grid_h), margin, xname, yname)
        content_bottom = max(content_bottom + label_h, grid_y + grid_h + pad - pad // 2)

    right = grid_x + max(grid_w, math.ceil(m.width(xname, LABEL_PX)) if options.axis_labels else 0)
    if options.colorbar:
        bar_caption = caption if shared else f"{caption} (per-head scale)"
        last_img_bottom = grid_y + (nrows - 1) * (block_h + GAP) + tt_h + img_h
        right, bar_bottom = _colour_bar(items, m, right + 24, (grid_y, grid_y + tt_h, last_img_bottom), bar_caption,
                                        tiles[0].lut, tiles[0].levels if shared else None, colour_scale.ticks,
                                        _legend(tiles, options))
        content_bottom = max(content_bottom, bar_bottom)

    width = max(right + margin, _title_items(items, m, title_lines, margin, top) + margin)
    height = content_bottom + margin
    _check_size(width, height)
    return Layout(int(width), int(height), items, tile_rects, s, summary)


def _tile_block(m: _Metrics, ticks: tuple, img_w: int, img_h: int, titles: list[str] | None) -> tuple:
    """One tile block, [y ticks][image] with its title above and x ticks below:
    (title height, y tick width, inner width, block width, block height)."""
    tt_h = m.height(TILE_PX, True) + 4 if titles else 0
    ytick_w, xtick_h = _tick_extent(m, *ticks)
    title_w = max((math.ceil(m.width(t, TILE_PX, True)) for t in titles), default=0) if titles else 0
    inner_w = max(img_w, title_w)
    return tt_h, ytick_w, inner_w, ytick_w + inner_w, tt_h + img_h + xtick_h


def _colour_bar(items: list, m: _Metrics, bx: float, span: tuple[float, float, float], bar_caption: str,
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
        values, labels = _value_ticks(lo, hi, bar_h)
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
        items.append(Box(bx, y, 12, 12, fill=_hex(lut[index]), stroke=FRAME))
        items.append(Text(bx + 18, y + 6 + ta * 0.36, text, TICK_PX, color=TICK_INK))
        bar_col_w = max(bar_col_w, 18 + math.ceil(m.width(text, TICK_PX)))
        y += 18
    bottom = y if legend else bar_top + bar_h + ta  # room for the lowest tick label
    return bx + bar_col_w, bottom


def _check_size(width: int, height: int) -> None:
    if width * height > MAX_PIXELS:
        raise ImageTooLarge(f"the image would be {width} x {height} pixels, over the limit of {MAX_PIXELS:,}; "
                            "use a smaller scale, one head, or shorter sequences (or export .npz)")


def _hex(rgba) -> str:
    return "#{:02x}{:02x}{:02x}".format(*(int(v) for v in rgba[:3]))


def _bar_rgba(lut: np.ndarray, w: int, h: int) -> np.ndarray:
    """The colour bar as pixels: row r shows LUT index floor((h-1-r) * 254 / h), high at the top."""
    idx = ((h - 1 - np.arange(h)) * colormaps.DATA_LEVELS // h).clip(0, colormaps.DATA_LEVELS - 1)
    return np.ascontiguousarray(np.repeat(lut[idx][:, None, :], w, axis=1))


# --- PNG -------------------------------------------------------------------------------------


def _qimage(rgba: np.ndarray):
    from PySide6.QtGui import QImage

    h, w = rgba.shape[:2]
    return QImage(rgba.data, w, h, w * 4, QImage.Format.Format_RGBA8888).copy()


def _paint(lay: Layout):
    from PySide6.QtCore import QPointF, QRectF
    from PySide6.QtGui import QColor, QImage, QPainter, QPen

    m = _Metrics()
    image = QImage(lay.width, lay.height, QImage.Format.Format_RGB32)
    image.fill(QColor(BACKGROUND))
    p = QPainter(image)
    try:
        p.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        p.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform, False)
        p.setRenderHint(QPainter.RenderHint.TextAntialiasing, True)
        for it in lay.items:
            if isinstance(it, Raster):
                p.drawImage(it.x, it.y, _qimage(it.rgba))
            elif isinstance(it, Bar):
                p.drawImage(it.x, it.y, _qimage(_bar_rgba(it.lut, it.w, it.h)))
            elif isinstance(it, Box):
                if it.fill:
                    p.fillRect(it.x, it.y, it.w, it.h, QColor(it.fill))
                if it.stroke:
                    p.setPen(QPen(QColor(it.stroke), 1))
                    p.setBrush(QColor(0, 0, 0, 0))
                    p.drawRect(QRectF(it.x - 1, it.y - 1, it.w + 1, it.h + 1))
            elif isinstance(it, Line):
                p.setPen(QPen(QColor(it.color), 1))
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
    return _paint(layout(result, options))


def _encode_png(image) -> bytes:
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice

    data = QByteArray()
    buf = QBuffer(data)
    buf.open(QIODevice.OpenModeFlag.WriteOnly)
    if not image.save(buf, "PNG", PNG_QUALITY):
        raise RuntimeError("Qt could not encode the PNG")
    buf.close()
    return bytes(data.data())


def png_bytes(result: RunResult, options: ExportOptions | None = None) -> bytes:
    return _encode_png(compose_image(result, options))


# --- SVG -------------------------------------------------------------------------------------


def _png_data_uri(rgba: np.ndarray) -> str:
    return "data:image/png;base64," + base64.b64encode(_encode_png(_qimage(rgba))).decode("ascii")


def _n(v: float) -> str:
    return f"{v:.2f}".rstrip("0").rstrip(".")


def svg_text(result: RunResult, options: ExportOptions | None = None) -> str:
    """The export as an SVG 1.1 document: crisp embedded rasters for the maps, vector text."""
    return svg_document(layout(result, options))


def svg_document(lay: Layout) -> str:
    """Any composed Layout as an SVG 1.1 document."""
    out = [
        '<?xml version="1.0" encoding="UTF-8" standalone="no"?>',
        f'<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" version="1.1" '
        f'width="{lay.width}" height="{lay.height}" viewBox="0 0 {lay.width} {lay.height}">',
        f"<title>{escape(lay.summary)}</title>",
        f'<rect x="0" y="0" width="{lay.width}" height="{lay.height}" fill="{BACKGROUND}"/>',
        f'<g font-family="{SVG_FONT}">',
    ]
    n_bars = 0
    for it in lay.items:
        if isinstance(it, Raster):
            h, w = it.rgba.shape[:2]
            out.append(
                f'<image class="tile" x="{it.x}" y="{it.y}" width="{w}" height="{h}" preserveAspectRatio="none" '
                'image-rendering="optimizeSpeed" style="image-rendering:crisp-edges;image-rendering:pixelated" '
                f'xlink:href="{_png_data_uri(it.rgba)}"/>')
        elif isinstance(it, Bar):
            gid = f"bar{n_bars}"
            n_bars += 1
            levels = colormaps.DATA_LEVELS
            stops = []
            for i in range(levels):  # hard steps: each LUT colour holds over its own 1/254 of the bar
                c = _hex(it.lut[i])
                stops.append(f'<stop offset="{i / levels:.6f}" stop-color="{c}"/>')
                stops.append(f'<stop offset="{(i + 1) / levels:.6f}" stop-color="{c}"/>')
            out.append(f'<defs><linearGradient id="{gid}" x1="0" y1="1" x2="0" y2="0">{"".join(stops)}'
                       "</linearGradient></defs>")
            out.append(f'<rect x="{it.x}" y="{it.y}" width="{it.w}" height="{it.h}" fill="url(#{gid})"/>')
        elif isinstance(it, Box):
            fill = it.fill or "none"
            stroke = f' stroke="{it.stroke}" stroke-width="1"' if it.stroke else ""
            if it.stroke:  # the PNG's 1-px frame lies just outside the box
                out.append(f'<rect x="{_n(it.x - 0.5)}" y="{_n(it.y - 0.5)}" width="{it.w + 1}" height="{it.h + 1}" '
                           f'fill="none"{stroke}/>')
                if it.fill:
                    out.append(f'<rect x="{it.x}" y="{it.y}" width="{it.w}" height="{it.h}" fill="{fill}"/>')
            else:
                out.append(f'<rect x="{it.x}" y="{it.y}" width="{it.w}" height="{it.h}" fill="{fill}"/>')
        elif isinstance(it, Line):
            out.append(f'<line x1="{_n(it.x1)}" y1="{_n(it.y1)}" x2="{_n(it.x2)}" y2="{_n(it.y2)}" '
                       f'stroke="{it.color}" stroke-width="1"/>')
        elif isinstance(it, Text):
            attrs = (f'x="{_n(it.x)}" y="{_n(it.y)}" font-size="{it.px}" fill="{it.color}" '
                     f'text-anchor="{it.anchor}"')
            if it.bold:
                attrs += ' font-weight="bold"'
            if it.rotated:
                attrs += f' transform="rotate(-90 {_n(it.x)} {_n(it.y)})"'
            out.append(f"<text {attrs}>{escape(it.text)}</text>")
    out += ["</g>", "</svg>", ""]
    return "\n".join(out)


# --- the pipeline figure ---------------------------------------------------------------------

PIPELINE_PER_ROW = 5
PIPELINE_TILE_PX = 150  # each stage's longer side is scaled up to about this (whole pixels per cell)
ARROW_W = 34


def pipeline_layout(result: RunResult, view: ViewOptions | None = None, head: int = 0) -> Layout:
    """One head's pipeline as one figure: every stage in order with its shape and value range, arrows
    between them. ValueError for a head that does not exist or a result that kept too few stages."""
    from dataclasses import replace

    from .explain import pipeline_frames

    c = result.config
    if not 0 <= head < c.heads:
        raise ValueError(f"head {head} does not exist: the run has {c.heads} head(s), use 0..{c.heads - 1}")
    view = replace(view or ViewOptions(), pipeline_head=head, pipeline_stage=None)
    frames = pipeline_frames(result, view)
    if len(frames.stages) < 2:
        raise ValueError("the result kept too few stages for a pipeline: run it with every stage recorded")
    m = _Metrics()
    blocks = []  # (stage, scaled rgba, caption)
    for st in frames.stages:
        h, w = st.image.image.shape
        scale = max(1, PIPELINE_TILE_PX // max(h, w))
        rgba = st.image.lut[st.image.image]
        rgba = np.repeat(np.repeat(rgba, scale, axis=0), scale, axis=1)
        rows, cols = st.data.shape
        lo, hi = st.value_range
        blocks.append((st, rgba, f"{rows}\u00d7{cols} \u00b7 {_fmt(lo)} \u2026 {_fmt(hi)}"))
    cell_w = max(max(b[1].shape[1] for b in blocks),
                 max(math.ceil(max(m.width(b[0].title, TILE_PX, True), m.width(b[2], TICK_PX))) for b in blocks))
    img_h = max(b[1].shape[0] for b in blocks)
    head_h = m.height(TILE_PX, True) + m.height(TICK_PX) + 6
    row_h = head_h + img_h + GAP * 2
    heading = f"Attention pipeline \u00b7 head {head} of {c.heads}"
    _, parts = _title_parts(result, ExportOptions(what="head", head=head, batch_index=frames.batch_index),
                            [blocks[0][0].image])
    items: list = []
    y = MARGIN
    title_lines = [(heading, TITLE_PX, True, INK)] + [
        (line, SUBTITLE_PX, False, SOFT_INK)
        for line in _wrap(parts, PIPELINE_PER_ROW * (cell_w + ARROW_W), lambda t: m.width(t, SUBTITLE_PX))]
    width = MARGIN * 2 + PIPELINE_PER_ROW * (cell_w + ARROW_W)
    for text, px, bold, color in title_lines:
        items.append(Text(MARGIN, y + m.ascent(px, bold), text, px, bold, color=color))
        width = max(width, MARGIN * 2 + math.ceil(m.width(text, px, bold)))
        y += m.height(px, bold) + 2
    top = y + 8
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
    height = top + rows * row_h + MARGIN
    _check_size(width, height)
    summary = heading + " \u2014 " + " \u00b7 ".join(s.name for s in frames.stages)
    return Layout(int(width), int(height), items, rects, 1, summary)


def export_pipeline(result: RunResult, path: str | os.PathLike, view: ViewOptions | None = None,
                    head: int = 0) -> Path:
    """Write one head's pipeline as a PNG or SVG figure, or its stages (that head's slices) as NPZ."""
    ext = format_of(path)
    if ext == ".npz":
        from dataclasses import replace

        from .explain import pipeline_frames

        frames = pipeline_frames(result, replace(view or ViewOptions(), pipeline_head=head))
        with atomic_writer(path) as f:
            np.savez_compressed(f, config=np.array(result.config.to_json(files=result.file_dicts())),
                                head=np.array(head), **file_arrays(result),
                                **{s.name: np.asarray(s.data) for s in frames.stages})
        return Path(path)
    lay = pipeline_layout(result, view, head)
    data = _encode_png(_paint(lay)) if ext == ".png" else svg_document(lay).encode("utf-8")
    write_bytes(path, data)
    return Path(path)


# --- NPZ -------------------------------------------------------------------------------------

def file_arrays(result: RunResult) -> dict[str, np.ndarray]:
    """weights_file, weights_sha256, inputs_file, inputs_sha256 of your own files that produced the run."""
    out = {}
    for record in result.files:
        out[f"{record.field}_file"] = np.array(record.name)
        out[f"{record.field}_sha256"] = np.array(record.sha256)
    return out


def write_npz(result: RunResult, path: str | os.PathLike, all_layers: bool = False, replace_readonly: bool = False,
              **extra: np.ndarray) -> Path:
    """Every stage the run kept (names from core.stages), the mask and row flags, plus `config`
    (the saved-configuration JSON string) and any `extra` arrays, atomically. Token-labelled runs add
    `tokens` (str) and `token_ids`; all_layers adds `layer_weights`, every layer's weights (layers, H, L, L).
    Runs on your own files add their names and sha256s (file_arrays; also under "files" in `config`); a
    generation adds `prompt_length` and always `layer_weights`."""
    arrays = {name: np.asarray(a) for name, a in result.arrays().items()} | file_arrays(result) | extra
    if result.tokens:  # token-labelled runs: the labels, the ids and, if asked, every layer's weights
        arrays["tokens"] = np.array(result.tokens, dtype=str)
    if result.key_tokens:  # keys labelled apart from the queries (cross-attention)
        arrays["key_tokens"] = np.array(result.key_tokens, dtype=str)
    if result.token_ids is not None:
        arrays["token_ids"] = np.asarray(result.token_ids)
    if result.pool_factor is not None:  # a pooled run: its maps are pooled, its statistics exact
        arrays["weights_pooled"] = arrays.pop("weights", arrays.get("dropped"))
        arrays.pop("dropped", None)
        arrays["pool_factor"] = np.asarray(result.pool_factor)
        arrays |= {f"stats_{name}": values for name, values in result.exact_stats.items()}
        if result.region is not None:
            arrays["region"] = result.region
    if result.prompt_length is not None:  # a generation: where the prompt ends, and every layer's maps
        arrays["prompt_length"] = np.asarray(result.prompt_length)
        all_layers = True
    if all_layers and result.layer_weights is not None:
        lw = result.layer_weights  # (layers, B, H, L, L); one text: (layers, H, L, L)
        arrays["layer_weights"] = lw[:, 0] if lw.shape[1] == 1 else lw
    with atomic_writer(path, replace_readonly) as f:
        np.savez_compressed(f, config=np.array(_config_json(result)), **arrays)
    return Path(path)


def _config_json(result: RunResult) -> str:
    """The run's configuration as JSON; a pooled run says so (and by how much) beside it."""
    text = result.config.to_json(files=result.file_dicts())
    if result.pool_factor is None:
        return text
    doc = json.loads(text)
    doc["pooled"] = {"factor": list(result.pool_factor), "maps": "weights_pooled (max-pooled)",
                     "exact": ["output", "stats_*", "region"]}
    return json.dumps(doc, indent=2) + "\n"


# --- the one entry point ---------------------------------------------------------------------


def format_of(path: str | os.PathLike) -> str:
    """'.png', '.svg' or '.npz' from the file name; ValueError naming the extension otherwise."""
    ext = Path(path).suffix.lower()
    if ext not in FORMATS:
        shown = f"extension {ext!r}" if ext else "no extension"
        raise ValueError(f"cannot export {os.fspath(path)!r}: {shown}; use one of {', '.join(FORMATS)}")
    return ext


def export(result: RunResult, path: str | os.PathLike, options: ExportOptions | None = None,
           replace_readonly: bool = False) -> Path:
    """Write the result to `path` as PNG, SVG or NPZ (chosen by the extension); returns the path.

    ValueError for an unknown extension or bad options (nothing written). ExportError when the file
    cannot be written or the image would be too large; any previous file at `path` stays intact.
    A read-only file at `path` is refused (ReadOnlyTarget) unless `replace_readonly`.
    """
    ext = format_of(path)
    options = options or ExportOptions()
    check_target(path, replace_readonly)  # before the image is composed
    if ext == ".npz":
        options.check(result.config)
        return write_npz(result, path, options.all_layers, replace_readonly)
    try:
        data = png_bytes(result, options) if ext == ".png" else svg_text(result, options).encode("utf-8")
    except ImageTooLarge as exc:
        raise ExportError(path, str(exc)) from exc
    write_bytes(path, data, replace_readonly)
    return Path(path)


def default_filename(result: RunResult, options: ExportOptions | None = None, ext: str = ".png") -> str:
    """A descriptive file name such as 'attnviz-causal-weights-grid.png'."""
    options = options or ExportOptions()
    what = options.what
    if what == "head":
        what = f"head{options.head}"
    elif what == "output":
        what = options.tensor
    view = "" if options.what in ("output", "scores") else f"-{options.map_view}"
    return f"attnviz-{result.config.variant}{view}-{what}{ext}"

