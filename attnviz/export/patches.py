"""A vision model's attention over its picture as a file: the overlay of one query token's row (a head, the
mean or rollout; models/patches.py computes it) on the picture, as the patch panel shows it. PNG: the blend
enlarged by whole pixels (crisp patch edges); SVG: the picture under one vector rectangle per patch, each
naming its token and value. Atomic, as every export."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import numpy as np

from attnviz.atomic import write_bytes
from attnviz.export.qt import encode_png, qimage
from attnviz.export.svg import xml_text
from attnviz.models.patches import ALPHA, PatchFrames, composite, overlay_rgba

EXPORT_PX = 448  # the picture's longer side is enlarged by whole pixels to at least this


def export_scale(picture: np.ndarray, target: int = EXPORT_PX) -> int:
    return max(1, -(-target // max(picture.shape[:2])))


def _png(rgb: np.ndarray) -> bytes:
    """(h, w, 3) uint8 pixels as opaque PNG bytes."""
    from PySide6.QtGui import QImage

    rgba = np.ascontiguousarray(np.dstack([rgb, np.full(rgb.shape[:2], 255, np.uint8)]))
    return encode_png(qimage(rgba).convertToFormat(QImage.Format.Format_RGB32))  # opaque: an RGB file


def patch_png(frames: PatchFrames, mode: str = "head", head: int = 0, alpha: float = ALPHA) -> bytes:
    """The overlay on the picture as PNG bytes, enlarged by whole pixels (crisp patch edges)."""
    return _png(composite(frames.picture, frames.values(mode, head), frames.lut, alpha, export_scale(frames.picture)))


def patch_svg(frames: PatchFrames, mode: str = "head", head: int = 0, alpha: float = ALPHA) -> str:
    """The picture (embedded PNG, drawn pixelated) under one vector rectangle per patch, and a title."""
    s = export_scale(frames.picture)
    height, width = frames.picture.shape[0] * s, frames.picture.shape[1] * s
    data = base64.b64encode(_png(frames.picture)).decode("ascii")
    values = frames.values(mode, head)
    rgba = overlay_rgba(values, frames.lut, alpha)
    rows, cols = values.shape
    ph, pw = height / rows, width / cols
    rects = [f'<rect x="{c * pw:g}" y="{r * ph:g}" width="{pw:g}" height="{ph:g}" fill="#{rgba[r, c, 0]:02x}'
             f'{rgba[r, c, 1]:02x}{rgba[r, c, 2]:02x}"><title>{xml_text(frames.tokens[frames.prefix + r * cols + c])}: '
             f'{values[r, c]:.4g}</title></rect>' for r in range(rows) for c in range(cols)]
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + 24}" '
            f'viewBox="0 0 {width} {height + 24}">\n'
            f'<text x="4" y="16" font-family="sans-serif" font-size="13">{xml_text(frames.title(mode, head))}</text>\n'
            f'<g transform="translate(0 24)"><image width="{width}" height="{height}" image-rendering="pixelated" '
            f'style="image-rendering:pixelated" href="data:image/png;base64,{data}"/>\n'
            f'<g shape-rendering="crispEdges" fill-opacity="{alpha:g}">\n' + "\n".join(rects) + "\n</g></g>\n</svg>\n")


def export_patch(frames: PatchFrames | None, path: str | os.PathLike, mode: str = "head", head: int = 0,
                 alpha: float = ALPHA) -> Path:
    """The shown overlay on the picture as .png or .svg (by the extension), atomically; ValueError where no
    picture is shown or for another extension."""
    if frames is None or frames.message:
        raise ValueError("nothing to export: no picture is shown")
    ext = Path(path).suffix.lower()
    if ext not in (".png", ".svg"):
        raise ValueError(f"the patch overlay is a picture: export it as .png or .svg, not {ext}")
    data = patch_png(frames, mode, head, alpha) if ext == ".png" else patch_svg(frames, mode, head, alpha).encode()
    write_bytes(path, data)
    return Path(path)
