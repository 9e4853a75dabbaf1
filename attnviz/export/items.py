"""A composed export as plain data: drawing items in paint order (heat map rasters, text, tick marks,
the colour bar), which the PNG and the SVG backends each draw. NumPy only, no Qt."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from attnviz.style import FRAME, INK

MAX_PIXELS = 120_000_000  # a composed image larger than this is refused (QImage and memory limits)


class ImageTooLarge(ValueError):
    """The composed image would exceed MAX_PIXELS."""


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
    width: float = 1.0  # px
    dashed: bool = False  # dashes 4 widths long, 2 apart (Qt's DashLine, as the window draws it)


@dataclass
class Layout:
    """A composed export: its size, drawing items in paint order, and where each tile's image lies."""

    width: int
    height: int
    items: list = field(default_factory=list)
    tiles: list[tuple[int, int, int, int]] = field(default_factory=list)  # (x, y, w, h), head order
    scale: int = 1
    summary: str = ""


def check_size(width: int, height: int) -> None:
    """ImageTooLarge for an image over MAX_PIXELS (checked before anything large is allocated)."""
    if width * height > MAX_PIXELS:
        raise ImageTooLarge(f"the image would be {width} x {height} pixels, over the limit of {MAX_PIXELS:,}; "
                            "use a smaller scale, one head, or shorter sequences (or export .npz)")


def hex_colour(rgba) -> str:
    """'#rrggbb' of an RGB(A) LUT entry."""
    return "#{:02x}{:02x}{:02x}".format(*(int(v) for v in rgba[:3]))
