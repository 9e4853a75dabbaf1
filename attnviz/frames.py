"""RunResult -> display-ready images. NumPy/torch only (no Qt): runs on the worker thread.

Each map is normalised to its levels, max-pooled down to at most the on-screen size (so a single
peak survives), and quantised to uint8 indices into a 256-entry LUT (see colormaps). The GUI thread
only swaps these images in; hover reads exact values from the full-resolution result.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from . import colormaps
from .core.runner import RunResult

MAP_VIEWS = {
    "weights": "Attention weights (softmax; after dropout in train mode)",
    "scores": "Pre-softmax scores (scaled QK^T / sqrt(d_head), masked)",
}
TENSORS = {
    "output": "Output (after the output projection)",
    "context": "Context (heads merged, before the output projection)",
    "q": "Q for one head",
    "k": "K for one head",
    "v": "V for one head",
}


@dataclass(frozen=True)
class ViewOptions:
    """What is shown; changing any of these re-renders from the last result, never recomputes."""

    view: str = "weights"  # a key of MAP_VIEWS
    batch_index: int = 0
    colormap: str = colormaps.DEFAULT_SEQUENTIAL  # for weights; scores and tensors use a diverging map
    diverging: str = colormaps.DEFAULT_DIVERGING
    shared_scale: bool = True  # one colour scale for all heads (else each head its own)
    tensor: str = "output"  # a key of TENSORS, for the output view
    tensor_head: int = 0  # which head's q, k or v
    max_px: tuple[int, int] | None = (512, 512)  # pool maps down to at most (rows, cols); None = full
    mean: bool = True  # also render the mean-over-heads tile


@dataclass
class HeatImage:
    """One quantised map: uint8 indices into `lut`, its full-resolution shape and its levels."""

    image: np.ndarray  # (h, w) uint8, h <= rows, w <= cols
    shape: tuple[int, int]  # full-resolution (rows, cols)
    levels: tuple[float, float]  # value at index 0 and at index 253
    lut: np.ndarray  # (256, 4) uint8 RGBA
    title: str = ""


@dataclass
class Frames:
    heads: list[HeatImage]
    mean: HeatImage | None  # None unless options.mean
    tensor: HeatImage
    options: ViewOptions
    levels: tuple[float, float]  # the shared levels (what the colour bar shows with shared scale)
    lut: np.ndarray
    render_time_s: float = 0.0
    extra: dict = field(default_factory=dict)


def map_data(result: RunResult, view: str, b: int) -> tuple[np.ndarray, np.ndarray]:
    """(H, Lq, Lkv) values shown for batch item b, and the (H, Lq, Lkv) masked-cell map."""
    source = {"weights": result.dropped, "scores": result.scores}[view]
    c = result.config
    masked = ~np.broadcast_to(result.mask, (c.batch, c.heads, c.seq_q, c.lkv))[b]
    return source[b], masked


def tensor_data(result: RunResult, name: str, b: int, head: int) -> np.ndarray:
    """The 2-D tensor the output view shows: rows are positions, columns features."""
    if name in ("q", "k", "v"):
        return getattr(result, name)[b, head]
    return getattr(result, name)[b]


def _pool(x: torch.Tensor, rows: int, cols: int, signed: bool) -> torch.Tensor:
    """Max-pool (N, h, w) to at most (rows, cols); `signed` keeps the larger magnitude instead."""
    fh, fw = -(-x.shape[-2] // rows), -(-x.shape[-1] // cols)
    if fh == 1 and fw == 1:
        return x
    kernel = dict(kernel_size=(fh, fw), stride=(fh, fw), ceil_mode=True)
    hi = F.max_pool2d(x, **kernel)
    if not signed:
        return hi
    lo = -F.max_pool2d(-x, **kernel)
    return torch.where(hi.abs() >= lo.abs(), hi, lo)


def quantise(
    values: np.ndarray,
    masked: np.ndarray | None,
    levels: tuple[float, float],
    max_px: tuple[int, int] | None,
    signed: bool = False,
    empty_rows: np.ndarray | None = None,
) -> list[np.ndarray]:
    """(N, h, w) values -> N uint8 LUT-index images, pooled to at most max_px.

    Cells of `empty_rows` (N, h) (no key to attend to) and NaN cells get NAN_INDEX, other masked
    cells MASKED_INDEX. A pooled block shows data if any of its cells is data, else masked if any
    cell is masked, else NaN.
    """
    x = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32))
    nan = torch.isnan(x)
    if empty_rows is not None:
        nan |= torch.from_numpy(np.ascontiguousarray(empty_rows))[..., None]
    hidden = torch.from_numpy(np.ascontiguousarray(masked)) & ~nan if masked is not None else torch.zeros_like(nan)
    data = ~(nan | hidden)
    x = x.masked_fill(~data, 0.0 if signed else float("-inf"))
    if max_px is not None:
        rows, cols = max_px
        x = _pool(x, rows, cols, signed)
        data = _pool(data.to(torch.uint8), rows, cols, False) > 0
        hidden = _pool(hidden.to(torch.uint8), rows, cols, False) > 0
    lo, hi = levels
    scale = (colormaps.DATA_LEVELS - 1) / ((hi - lo) or 1.0)
    idx = ((x - lo) * scale).round_().clamp_(0, colormaps.DATA_LEVELS - 1).to(torch.uint8)
    marks = torch.where(hidden, colormaps.MASKED_INDEX, colormaps.NAN_INDEX).to(torch.uint8)
    return [im.numpy() for im in torch.where(data, idx, marks)]


def value_levels(values: np.ndarray, masked: np.ndarray | None, signed: bool) -> tuple[float, float]:
    """Colour levels: 0..max for weights, symmetric -m..m for signed data, from unmasked finite cells."""
    x = values if masked is None else np.where(masked, np.nan, values)
    finite = x[np.isfinite(x)]
    if finite.size == 0:
        return (-1.0, 1.0) if signed else (0.0, 1.0)
    if signed:
        m = float(np.abs(finite).max()) or 1.0
        return (-m, m)
    return (0.0, float(finite.max()) or 1.0)


def _mean_tile(values, masked, empty, signed, options: ViewOptions, lut: np.ndarray) -> HeatImage:
    mean_values = np.where(masked, 0.0, values).mean(0, keepdims=True)  # (1, Lq, Lkv)
    mean_masked = masked.all(0, keepdims=True)
    levels = value_levels(mean_values, mean_masked, signed)
    image = quantise(mean_values, mean_masked, levels, options.max_px, signed, empty.all(0, keepdims=True))[0]
    return HeatImage(image, values.shape[1:], levels, lut, "mean over heads")


def render(result: RunResult, options: ViewOptions) -> Frames:
    """Everything the views show for one result: one tile per head, the mean tile, the tensor."""
    import time

    t0 = time.perf_counter()
    c = result.config
    b = min(max(options.batch_index, 0), c.batch - 1)
    signed = options.view == "scores"
    map_lut = colormaps.lut(options.diverging if signed else options.colormap)
    values, masked = map_data(result, options.view, b)
    empty = result.fully_masked_rows[b]  # (H, Lq)
    shared = value_levels(values, masked, signed)
    titles = [f"head {h}" for h in range(c.heads)]
    if options.shared_scale:
        levels = [shared] * c.heads
        images = quantise(values, masked, shared, options.max_px, signed, empty)
    else:
        levels = [value_levels(values[h], masked[h], signed) for h in range(c.heads)]
        images = [quantise(values[h : h + 1], masked[h : h + 1], levels[h], options.max_px, signed,
                           empty[h : h + 1])[0] for h in range(c.heads)]
    heads = [HeatImage(im, (c.seq_q, c.lkv), lv, map_lut, t) for im, lv, t in zip(images, levels, titles)]

    mean = _mean_tile(values, masked, empty, signed, options, map_lut) if options.mean else None

    head = min(max(options.tensor_head, 0), c.heads - 1)
    t = tensor_data(result, options.tensor, b, head)
    t_levels = value_levels(t, None, True)
    t_lut = colormaps.lut(options.diverging)
    t_img = quantise(t[None], None, t_levels, options.max_px, True)[0]
    t_title = TENSORS[options.tensor].split(" (")[0] + (f", head {head}" if options.tensor in "qkv" else "")
    tensor = HeatImage(t_img, t.shape, t_levels, t_lut, t_title)
    return Frames(heads, mean, tensor, options, shared, map_lut, time.perf_counter() - t0)
