"""The SVG backend: a composed Layout as an SVG 1.1 document, each heat map an embedded crisp PNG,
all text vector <text>. No widgets; Qt (QtGui) only encodes the embedded PNGs."""

from __future__ import annotations

import base64
import re
from xml.sax.saxutils import escape

import numpy as np

from attnviz import colormaps
from attnviz.core.runs.runner import RunResult
from attnviz.export.figure import layout
from attnviz.export.items import Bar, Box, Layout, Line, Raster, Text, hex_colour
from attnviz.export.options import ExportOptions
from attnviz.export.qt import encode_png, qimage
from attnviz.style import BACKGROUND, SVG_FONT

# What XML 1.0 forbids in a document (C0 controls but tab, newline and return; lone surrogates; U+FFFE/FFFF), plus
# DEL: a label holding one (a token of a text with control characters) would make the file unreadable
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff\ufffe\uffff]")


def _visible(match: re.Match) -> str:
    code = ord(match.group())
    if code < 0x20:
        return chr(0x2400 + code)  # the control pictures: U+0001 is shown as ␁
    return "\u2421" if code == 0x7F else "\ufffd"


def xml_text(text: str) -> str:
    """`text` as XML character data: escaped, and every character XML cannot hold drawn as its picture."""
    return escape(_NOT_XML.sub(_visible, text))


def _png_data_uri(rgba: np.ndarray) -> str:
    return "data:image/png;base64," + base64.b64encode(encode_png(qimage(rgba))).decode("ascii")


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
        f"<title>{xml_text(lay.summary)}</title>",
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
            out += _bar(it, f"bar{n_bars}")
            n_bars += 1
        elif isinstance(it, Box):
            out += _box(it)
        elif isinstance(it, Line):
            out.append(_line(it))
        elif isinstance(it, Text):
            out.append(_text(it))
    out += ["</g>", "</svg>", ""]
    return "\n".join(out)


def _line(it: Line) -> str:
    dashes = f' stroke-dasharray="{_n(4 * it.width)} {_n(2 * it.width)}"' if it.dashed else ""
    return (f'<line x1="{_n(it.x1)}" y1="{_n(it.y1)}" x2="{_n(it.x2)}" y2="{_n(it.y2)}" '
            f'stroke="{it.color}" stroke-width="{_n(it.width)}"{dashes}/>')


def _bar(it: Bar, gid: str) -> list[str]:
    """The colour bar: a gradient of hard steps, each LUT colour over its own 1/254 of the bar."""
    levels = colormaps.DATA_LEVELS
    stops = []
    for i in range(levels):
        c = hex_colour(it.lut[i])
        stops.append(f'<stop offset="{i / levels:.6f}" stop-color="{c}"/>')
        stops.append(f'<stop offset="{(i + 1) / levels:.6f}" stop-color="{c}"/>')
    return [f'<defs><linearGradient id="{gid}" x1="0" y1="1" x2="0" y2="0">{"".join(stops)}'
            "</linearGradient></defs>",
            f'<rect x="{it.x}" y="{it.y}" width="{it.w}" height="{it.h}" fill="url(#{gid})"/>']


def _box(it: Box) -> list[str]:
    fill = it.fill or "none"
    if not it.stroke:
        return [f'<rect x="{it.x}" y="{it.y}" width="{it.w}" height="{it.h}" fill="{fill}"/>']
    # the PNG's 1-px frame lies just outside the box
    out = [f'<rect x="{_n(it.x - 0.5)}" y="{_n(it.y - 0.5)}" width="{it.w + 1}" height="{it.h + 1}" '
           f'fill="none" stroke="{it.stroke}" stroke-width="1"/>']
    if it.fill:
        out.append(f'<rect x="{it.x}" y="{it.y}" width="{it.w}" height="{it.h}" fill="{fill}"/>')
    return out


def _text(it: Text) -> str:
    attrs = f'x="{_n(it.x)}" y="{_n(it.y)}" font-size="{it.px}" fill="{it.color}" text-anchor="{it.anchor}"'
    if it.bold:
        attrs += ' font-weight="bold"'
    if it.rotated:
        attrs += f' transform="rotate(-90 {_n(it.x)} {_n(it.y)})"'
    return f"<text {attrs}>{xml_text(it.text)}</text>"
