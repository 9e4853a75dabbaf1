"""RunResult -> display-ready images. NumPy/torch only (no Qt): runs on the worker thread.

Each map is normalised to its levels, max-pooled down to at most the on-screen size (so a single
peak survives), and quantised to uint8 indices into a 256-entry LUT (see colormaps). The GUI thread
only swaps these images in; hover reads exact values from the full-resolution result.
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from attnviz import colormaps
from attnviz.core.kernel.maxpool import ceil_div, max_pool
from attnviz.core.kernel.stages import STAGE_NAMES, STAGES
from attnviz.core.runs.config import RunConfig
from attnviz.core.runs.lru import LRU
from attnviz.core.runs.runner import RunResult
from attnviz.core.runs.saved import opened_note
from attnviz.style import COMPACT_DIGITS, number

# The map views: "weights" draws the map that multiplied V (after dropout in train mode; the signed
# softmax₁ − λ·softmax₂ of differential attention); the others draw the pre-softmax stages.
MAP_VIEWS = {
    "weights": "Attention weights: the map that multiplied V (after dropout in train mode; signed for "
               "differential attention)",
    "scores": "Pre-softmax scores (scaled QK^T / sqrt(d_head), biased, capped, masked)",
    **{s.name: s.description[0].upper() + s.description[1:] for s in STAGES
       if s.is_map and STAGE_NAMES.index(s.name) < STAGE_NAMES.index("scores")},
    "value_weighted": "Value-weighted attention: weights · ‖v_j W_O,h‖, rows renormalised (where each head's "
                      "output comes from)",
}


def view_stage(view: str) -> str:
    """The stage a map view draws."""
    return "dropped" if view == "weights" else view


# views of softmax weights (and their value-weighted norms): never negative, except a differential variant's
UNSIGNED_VIEWS = ("weights", "value_weighted")


def view_signed(view: str, config) -> bool:
    """Whether a view's values have a sign (diverging colours): all but softmax weights."""
    return view not in UNSIGNED_VIEWS or config.spec.head_factor > 1

# Colour scales: how a map's values become colours (view only: never a re-run).
SCALE_MODES = {
    "linear": "linear: colour proportional to the value",
    "log": "logarithmic: equal colour steps per factor of ten (signed maps: symmetric log around 0)",
    "row": "row: each query row divided by its own maximum (largest magnitude for signed maps)",
    "rank": "rank: colour by quantile among the shown values (every colour used equally often)",
}
# what shows structure: long causal maps are flat under linear
DEFAULT_SCALES = dict.fromkeys(UNSIGNED_VIEWS, "log")
LOG_DECADES = 6  # log scale: at most this many factors of ten below the maximum
SYMLOG_DECADES = 2  # signed maps: linear within max / 10^this of zero, logarithmic beyond


def default_scale(view: str, config=None) -> str:
    """The colour scale a view starts with: log for the (unsigned) weights of random modules, whose
    maps are nearly flat; linear for signed maps and for trained models, whose maps are peaked."""
    if config is not None and (view_signed(view, config) or config.spec.backed):
        return "linear"
    return DEFAULT_SCALES.get(view, "linear")


TENSOR_NAMES = {"output": "Output", "context": "Context", "q": "Q", "k": "K", "v": "V"}
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
    mean: bool = False  # also render the mean-over-heads tile (one more pass over the maps)
    tensor_px: tuple[int, int] | None = (512, 1024)  # the tensor view's pooling target; None = full
    scale_mode: str = "linear"  # a key of SCALE_MODES, for the maps (the tensor view stays linear)
    grid_pixels: bool = False  # also each map's ARGB pixels (argb_pixels), for the window's head grid
    # the explaining views (explain.py); each costs nothing unless asked for
    pipeline_head: int | None = None  # the head the pipeline view walks through (None: not shown)
    pipeline_stage: str | None = None  # the pipeline stage shown large
    stats: bool = False  # per-head statistics (and the layer x head overview for models)
    focus_row: int | None = None  # token focus: every head's attention of this query row
    rollout: bool = False  # attention rollout over the layers (models)
    patch_query: int | None = None  # the patch view: this query token's attention over the picture (vision)
    pinned: RunResult | None = field(default=None, compare=False, repr=False)  # compare: the pinned result
    compare_head: int = 0  # compare: which head is shown beside the pinned one
    # compare against the same config without its ablation (run on the worker, cached with the result)
    unablated: RunConfig | None = None  # the shown config with ablate=() (None: not compared so)
    predictions: bool = False  # the predictions strip: top-k, target probability, before/after an ablation
    lens: bool = False  # the logit lens panel
    head_scores: bool = False  # head types (a probe forward per model; the model view's badges, statistics)


@dataclass
class HeatImage:
    """One quantised map: uint8 indices into `lut`, its full-resolution shape and its levels."""

    image: np.ndarray  # (h, w) uint8, h <= rows, w <= cols
    shape: tuple[int, int]  # full-resolution (rows, cols)
    levels: tuple[float, float]  # value at index 0 and at index 253
    lut: np.ndarray  # (256, 4) uint8 RGBA
    title: str = ""
    argb: np.ndarray | None = field(default=None, repr=False, compare=False)  # argb_pixels, for the grid


def argb_table(lut: np.ndarray) -> np.ndarray:
    """A (256, 4) RGBA LUT as 256 uint32 premultiplied 0xAARRGGBB entries."""
    c = lut.astype(np.uint32)
    a = c[:, 3]
    r, g, b = ((c[:, i] * a + 127) // 255 for i in range(3))
    return (a << 24) | (r << 16) | (g << 8) | b


def argb_pixels(heat: HeatImage, table: np.ndarray | None = None) -> np.ndarray:
    """(h, w) uint32 premultiplied 0xAARRGGBB: the map through its LUT, the pixels Qt draws as they
    are. The worker makes them for the grid: converting on the GUI thread stalled it (benchmarks/README.md, Behind the
    code).
    `table`: argb_table(heat.lut), when many maps share the LUT."""
    return np.take(argb_table(heat.lut) if table is None else table, heat.image)  # faster than table[image]


@dataclass(frozen=True)
class ColourScale:
    """How the colour bar reads: its ticks as (fraction of the bar from the bottom, label in the map's
    own units); no ticks = a plain linear axis over the levels."""

    mode: str = "linear"
    ticks: tuple[tuple[float, str], ...] = ()
    unit: str = ""  # appended to the bar's caption, e.g. "/ row max"


@dataclass
class Frames:
    heads: list[HeatImage]
    mean: HeatImage | None  # None unless options.mean
    tensor: HeatImage | None  # None: the result does not hold that stage (frames.tensor_kept)
    options: ViewOptions
    levels: tuple[float, float]  # the shared levels (what the colour bar shows with shared scale)
    lut: np.ndarray
    render_time_s: float = 0.0
    signed: bool = False  # diverging colours centred on 0
    scale: ColourScale = ColourScale()
    extras: dict = field(default_factory=dict)  # what the explaining views asked for (see explain.py)


def tensor_data(result: RunResult, name: str, b: int, head: int) -> np.ndarray:
    """The 2-D tensor the output view shows: rows are positions, columns features."""
    if name in ("q", "k", "v"):  # head h reads kv head h // (H / Hkv); differential: its first sub-head
        per_head = getattr(result, name)
        return per_head[b, head * per_head.shape[1] // result.config.heads]
    return getattr(result, name)[b]


def head_title(index: int, maps: int, heads: int) -> str:
    """'head 3', or 'head 1.2' for the second of head 1's two maps (differential attention)."""
    per = maps // heads
    return f"head {index}" if per == 1 else f"head {index // per}.{index % per + 1}"


def _pool(x: torch.Tensor, max_px: tuple[int, int] | None, signed: bool = False) -> torch.Tensor:
    """Max-pool (N, h, w) to at most max_px; `signed` keeps the larger magnitude instead of the max."""
    if max_px is None:
        return x
    return max_pool(x, ceil_div(x.shape[-2], max_px[0]), ceil_div(x.shape[-1], max_px[1]), signed)


def _pool_any(flags: torch.Tensor, max_px: tuple[int, int] | None) -> torch.Tensor:
    """Pooled 'any' of a bool (N, h, w) map."""
    return _pool(flags.to(torch.uint8), max_px) > 0


def _levels(x: torch.Tensor, data: torch.Tensor, signed: bool, dims=None) -> list[tuple[float, float]]:
    """Colour levels from pooled values (pooling keeps the extremes, so these are exact):
    0..max for weights, -m..m (centred at zero) for signed data. One pair, or one per head."""
    if not _all(data):  # no-data blocks (masked, no key) do not set the levels
        x = torch.where(data, x, torch.zeros((), dtype=x.dtype))
    per = [x] if dims is None else list(x)
    out = []
    for t in per:
        if signed:
            m = float(max(-(ends := torch.aminmax(t))[0], ends[1])) if t.numel() else 0.0  # |t|'s max, one pass
            m = m if np.isfinite(m) and m > 0 else 1.0
            out.append((-m, m))
        else:
            m = float(t.max()) if t.numel() else 0.0
            out.append((0.0, m if np.isfinite(m) and m > 0 else 1.0))
    return out


def _indices(x: torch.Tensor, data: torch.Tensor, hidden: torch.Tensor, levels: tuple[float, float],
             scratch: bool = False) -> np.ndarray:
    """Pooled values -> uint8 LUT indices: data 0..253, masked 254, no key / NaN 255. scratch: x may be
    overwritten (a temporary of the caller's). In place where it can: each pass over the pooled maps counts."""
    lo, hi = levels
    scale = (colormaps.DATA_LEVELS - 1) / ((hi - lo) or 1.0)
    idx = x.sub_(lo) if scratch else x - lo
    idx.mul_(scale).nan_to_num_(nan=0.0).round_().clamp_(0, colormaps.DATA_LEVELS - 1)
    out = idx.to(torch.uint8).numpy()
    if _all(data):
        return out
    # the marks in NumPy: torch.where on uint8 and bool maps is several times slower than a masked copy
    data, hidden = _unexpanded(data).numpy(), _unexpanded(hidden).numpy()  # flags shared by every map: broadcast
    marks = np.where(hidden, colormaps.MASKED_INDEX, colormaps.NAN_INDEX).astype(np.uint8)
    np.copyto(out, np.broadcast_to(marks, out.shape), where=~np.broadcast_to(data, out.shape))
    return out


def _all(flags: torch.Tensor) -> bool:
    """Whether every block holds data (NumPy's all: torch's bool reductions are slower; Behind the code)."""
    return bool(_unexpanded(flags).numpy().all())


def _unexpanded(flags: torch.Tensor) -> torch.Tensor:
    """The one map behind flags expanded over maps (stride 0), else the flags."""
    return flags[:1] if flags.dim() == 3 and flags.shape[0] > 1 and flags.stride(0) == 0 else flags


@dataclass
class PooledMaps:
    """Maps pooled to screen size, before levels and colours: what view-only changes reuse."""

    values: torch.Tensor  # (N, h, w) pooled values
    data: torch.Tensor  # (N or 1, h, w) bool: the block holds a cell that may attend
    hidden: torch.Tensor  # (N or 1, h, w) bool: else the block holds a masked cell (not a no-key row)
    signed: bool


def pool_maps(
    values: np.ndarray | torch.Tensor,
    allowed: np.ndarray | None,
    empty_rows: np.ndarray | None,
    max_px: tuple[int, int] | None,
    signed: bool,
    row: bool = False,
) -> PooledMaps:
    """Pool (N, h, w) maps to at most max_px, keeping which blocks hold data, masked or no-key cells.

    allowed: bool (1 or N, h, w), True = may attend; empty_rows: bool (1 or N, h), rows with no key.
    A pooled block shows data if any of its cells is data (the max, or for signed data the value of
    largest magnitude, so single peaks survive), else masked if any cell is masked, else no-key.
    The full maps are read once (twice for signed data); everything after runs on pooled arrays.
    row: divide each query row by its maximum (largest magnitude if signed) before the rows are
    pooled: columns are pooled first (a row's maximum is the maximum of its pooled row), then each
    row is normalised, then rows are pooled, so a block shows max over its rows of w_ij / max_j w_ij.
    """
    x = values if isinstance(values, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(values, np.float32))
    h, w = x.shape[-2:]
    data = torch.ones((1, h, w), dtype=torch.bool) if allowed is None else torch.from_numpy(allowed.copy())
    if empty_rows is not None and empty_rows.any():
        data = data & ~torch.from_numpy(empty_rows.copy())[..., None]
        x = torch.nan_to_num(x, nan=0.0)  # seed-math NaN rows: flagged, drawn as no-key
    if signed and allowed is not None and not bool(data.all()):
        x = x.masked_fill(~data, 0.0)  # -inf scores must not win the magnitude pooling
    # weights are 0 at masked cells already, so they never win the max over a block with data
    if row:
        columns = _pool(x, None if max_px is None else (x.shape[-2], max_px[1]), signed)
        x = _row_normalised(columns, signed, in_place=columns is not x)  # the pooled copy is ours to change
    pooled = _pool(x, max_px, signed)
    data_p, hidden_p = _pooled_flags(data, allowed, empty_rows, max_px)
    return PooledMaps(pooled, data_p, hidden_p, signed)


# Pooled flags by the mask they come from: a seed or text change keeps the mask, and pooling a 1,024² mask's
# flags again costs several times more than the key (its bits hashed, under a millisecond).
_FLAGS: LRU[tuple[torch.Tensor, torch.Tensor]] = LRU(8)


def _digest(flags: np.ndarray | None) -> bytes | None:
    return None if flags is None else hashlib.blake2b(np.packbits(flags), digest_size=16).digest()


def _pooled_flags(data: torch.Tensor, allowed: np.ndarray | None, empty_rows: np.ndarray | None,
                  max_px) -> tuple[torch.Tensor, torch.Tensor]:
    """(data, hidden) pooled to max_px: blocks holding a cell that may attend, blocks holding a masked cell of
    a row that has keys (no-key rows get their own colour). `data` is made of allowed and empty_rows."""
    def make() -> tuple[torch.Tensor, torch.Tensor]:
        data_p = _pool_any(data, max_px)
        if allowed is None:
            return data_p, torch.zeros_like(data_p)
        return data_p, _pool_any(~torch.from_numpy(allowed.copy()) & data.any(-1, keepdim=True), max_px)

    key = (tuple(data.shape), max_px, None if allowed is None else allowed.shape, _digest(allowed),
           None if empty_rows is None else empty_rows.shape, _digest(empty_rows))
    return _FLAGS.get_or_make(key, make)


def _row_normalised(x: torch.Tensor, signed: bool, in_place: bool = False) -> torch.Tensor:
    """Each row of (N, h, w) over its maximum (largest magnitude when signed); all-zero rows stay 0. in_place:
    x may be overwritten (a fresh full-size result is mapped page by page: benchmarks/README.md, Behind the code)."""
    top = (x.abs() if signed else x).amax(-1, keepdim=True)
    positive = top > 0
    divisor = torch.where(positive, top, 1.0)
    out = x.div_(divisor) if in_place else x / divisor
    # a row whose maximum is 0 is 0 already; one whose maximum is NaN becomes 0 (a pass only when there is one)
    return out if bool(positive.all()) else out.masked_fill_(~positive, 0.0)


def _tick(value: float) -> str:
    return number(value, COMPACT_DIGITS, typeset=True)  # a colour bar tick: compact, a real minus sign


def _masked(x: torch.Tensor, where: torch.Tensor, op: str) -> float:
    """max or min of x where `where` holds: -inf / inf when it holds nowhere."""
    if op == "max":
        return float(torch.where(where, x, -math.inf).amax()) if x.numel() else -math.inf
    return float(torch.where(where, x, math.inf).amin()) if x.numel() else math.inf


def _log_fraction(x: torch.Tensor, data: torch.Tensor, signed: bool):
    """Fractions 0..1 of the LUT on a log scale, the levels (data units) and the bar's ticks.
    The levels come from the finite values where `data` holds; masked reductions, not boolean
    indexing (a copy of every value on every render: benchmarks/README.md, Behind the code)."""
    valid = data & torch.isfinite(x)
    if signed:  # symmetric log: linear within m / 10^SYMLOG_DECADES of zero, log beyond
        m = _masked(x.abs(), valid, "max")
        m = m if m > 0 else 1.0
        c = m * 10.0 ** -SYMLOG_DECADES

        def f(t):
            return torch.sign(t) * torch.log1p(t.abs() / c) / math.log1p(m / c)

        frac = (f(x.clamp(-m, m)) + 1) / 2
        marks = [m * 10.0 ** -k for k in range(SYMLOG_DECADES + 1)]
        ticks = [(0.5, "0")] + [(float((f(torch.tensor(s * v)) + 1) / 2), _tick(s * v)) for v in marks for s in (-1, 1)]
        return frac, (-m, m), tuple(sorted(ticks))
    shown = torch.where(valid, x, -math.inf)
    hi = float(shown.amax()) if x.numel() else -math.inf
    hi = hi if hi > 0 else 1.0
    smallest = float(shown.masked_fill_(shown <= 0, math.inf).amin()) if x.numel() else math.inf  # > 0 only
    lo = max(smallest if math.isfinite(smallest) else hi, hi * 10.0 ** -LOG_DECADES)
    lo = lo if lo < hi else hi / 10
    span = math.log(hi / lo)
    frac = x.clamp(lo, hi).log_().sub_(math.log(lo)).div_(span)  # one temporary, the rest in place
    decades = range(math.ceil(math.log10(lo) - 1e-9), math.floor(math.log10(hi) + 1e-9) + 1)
    ticks = [((k * math.log(10) - math.log(lo)) / span, _tick(10.0**k)) for k in decades]
    ends = [(0.0, _tick(lo)), (1.0, _tick(hi))]
    ticks = ends + [t for t in ticks if all(abs(t[0] - e[0]) > 0.08 for e in ends)]
    return frac, (lo, hi), tuple(sorted(ticks))


RANK_KNOTS = 1025  # quantile knots a rank scale interpolates between
RANK_SAMPLE = 1 << 18  # at most this many values are sorted to find them


def _rank_fraction(x: torch.Tensor, data: torch.Tensor):
    """Fractions 0..1 = the empirical quantile of each shown value (where `data` holds) among the shown values;
    0 elsewhere (cells drawn as masked or no-key whatever their fraction). The shown values are sorted once:
    the knots are read off that order, and each value's place among them counted along it."""
    data = data.expand_as(x)
    shown = x[data].numpy()
    if shown.size == 0:
        return torch.zeros_like(x), (0.0, 1.0), ()
    order = np.argsort(shown)  # NaN last
    ordered = shown[order]
    knots = _knots(shown, ordered)
    frac = torch.zeros_like(x).masked_scatter_(data, torch.from_numpy(_knot_fractions(knots, ordered, order)))
    ticks = tuple((q, _tick(float(knots[round(q * (RANK_KNOTS - 1))]))) for q in (0.0, 0.25, 0.5, 0.75, 1.0))
    return frac, (float(knots[0]), float(knots[-1])), ticks


def _knots(shown: np.ndarray, ordered: np.ndarray) -> np.ndarray:
    """RANK_KNOTS quantiles of the shown values (NaN and -inf read as 0, +inf as the largest float), found among
    at most RANK_SAMPLE of them; `ordered`: the shown values sorted, which serve as they are when all are finite."""
    if shown.size <= RANK_SAMPLE and np.isfinite(ordered[[0, -1]]).all():
        sample = ordered
    else:
        values = torch.nan_to_num(torch.from_numpy(shown), nan=0.0, neginf=0.0).numpy()
        sample = np.sort(values[:: values.size // RANK_SAMPLE + 1] if values.size > RANK_SAMPLE else values)
    return sample[torch.linspace(0, sample.size - 1, RANK_KNOTS).round().long().numpy()]


def _knot_fractions(knots: np.ndarray, ordered: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Each value's place among the sorted knots as a fraction 0..1 (float32): the middle of the knots equal
    to it, else between its neighbours (a NaN past the last). `ordered` = values[order], sorted. Along it the
    counts of knots below and up to a value change only where a knot falls: the knots are searched in it, and
    each run between two such places gets its one fraction (2 x 1,025 runs, not a search per value)."""
    n = ordered.size
    right = np.searchsorted(ordered, knots, side="right")  # knot k < ordered[i] exactly for i >= right[k]
    left = np.searchsorted(ordered, knots, side="left")  # knot k <= ordered[i] exactly for i >= left[k]
    starts = np.unique(np.concatenate(([0], left, right)))
    starts = starts[starts < n]
    below = np.searchsorted(right, starts, side="right")  # knots < the run's values
    upto = np.searchsorted(left, starts, side="right")  # knots <= the run's values
    top = np.float32(RANK_KNOTS - 1)
    fraction = ((below + upto).astype(np.float32) / np.float32(2) - np.float32(0.5)).clip(0, top) / top
    part = np.empty(n, np.float32)
    part[order] = np.repeat(fraction, np.diff(np.append(starts, n)))
    return part


def quantise_scaled(p: PooledMaps, shared: bool = True, mode: str = "linear"):
    """Pooled maps -> uint8 LUT-index images, their levels (data units) and the colour scale.

    linear: as quantise_pooled. row: the maps were row-normalised when pooled (pool_maps(row=True)),
    so the levels are 0..1 (-1..1 signed). log and rank map each group's values to fractions of the LUT.
    """
    if mode not in SCALE_MODES:
        raise ValueError(f"scale mode {mode!r}: unknown; use one of {', '.join(SCALE_MODES)}")
    if mode == "linear":
        images, levels = quantise_pooled(p, shared)
        return images, levels, ColourScale()
    n = p.values.shape[0]
    data, hidden = p.data.expand_as(p.values), p.hidden.expand_as(p.values)
    if mode == "row":
        lv = (-1.0, 1.0) if p.signed else (0.0, 1.0)
        fracs = [(-1.0, "−1"), (-0.5, "−0.5")] if p.signed else []
        ticks = tuple(((v - lv[0]) / (lv[1] - lv[0]), label) for v, label in
                      fracs + [(0.0, "0"), (0.25, "0.25"), (0.5, "0.5"), (0.75, "0.75"), (1.0, "1")])
        images = list(_indices(p.values, data, hidden, lv))  # one pass: every map has the same levels
        return images, [lv] * n, ColourScale("row", ticks, "/ row max")
    images: list = [None] * n
    levels: list = [None] * n
    scale = ColourScale(mode)
    for g in [slice(0, n)] if shared else [slice(i, i + 1) for i in range(n)]:  # the colour groups
        if mode == "log":
            frac, lv, ticks = _log_fraction(p.values[g], data[g], p.signed)
        else:
            frac, lv, ticks = _rank_fraction(p.values[g], data[g])
        indices = _indices(frac, data[g], hidden[g], (0.0, 1.0), scratch=True)  # the whole group at once
        for k, i in enumerate(range(n)[g]):
            images[i], levels[i] = indices[k], lv
        if g.start == 0:
            scale = ColourScale(mode, ticks, "(log scale)" if mode == "log" else "(rank scale)")
    return images, levels, scale


def quantise_pooled(p: PooledMaps, shared: bool = True) -> tuple[list[np.ndarray], list[tuple[float, float]]]:
    """Pooled maps -> uint8 LUT-index images and their levels (shared, or one pair per map)."""
    n = p.values.shape[0]
    data, hidden = p.data.expand_as(p.values), p.hidden.expand_as(p.values)
    if shared:  # one set of levels: every map quantised at once
        levels = _levels(p.values, data, p.signed) * n
        return list(_indices(p.values, data, hidden, levels[0])), levels
    levels = _levels(p.values, data, p.signed, dims=0)
    return [_indices(p.values[i], data[i], hidden[i], levels[i]) for i in range(n)], levels


def quantise_maps(values, allowed, empty_rows, max_px, signed, shared=True):
    """pool_maps then quantise_pooled: (N, h, w) maps -> N uint8 index images and their levels."""
    return quantise_pooled(pool_maps(values, allowed, empty_rows, max_px, signed), shared)


class PoolCache:
    """The pooled maps of the last result, so a colormap or scale change only requantises.

    Used by the one worker thread only; keyed by what pooling depends on.
    """

    def __init__(self) -> None:
        self.result: RunResult | None = None
        self.entries: dict[tuple, PooledMaps] = {}

    def clear(self) -> None:
        self.result, self.entries = None, {}

    def entries_for(self, result: RunResult) -> dict[tuple, object]:
        """The entries of `result` (emptied when another result comes): what explain keeps beside the maps."""
        if result is not self.result:
            self.result, self.entries = result, {}
        return self.entries

    def get(self, result: RunResult, key: tuple, make) -> PooledMaps:
        entries = self.entries_for(result)
        if key not in entries:
            entries[key] = make()
        return entries[key]


def allowed_maps(result: RunResult, b: int) -> np.ndarray | None:
    """Batch item b's mask as (1 or H, Lq, Lkv) bool (a view), or None when every cell may attend."""
    c = result.config
    allowed = result.mask[min(b, result.mask.shape[0] - 1)] if result.mask.ndim == 4 else result.mask[None]
    shape = result.stages["dropped"].shape[-2:] if result.pool_factor else (c.seq_q, c.lkv)  # pooled: its cells
    allowed = np.broadcast_to(allowed, (allowed.shape[0], *shape))
    return None if allowed.all() else allowed


def render(result: RunResult, options: ViewOptions, cache: PoolCache | None = None) -> Frames:
    """The maps of one result: one tile per head, the mean tile, the tensor (the explaining views' extras are
    explain's: session.present makes both)."""
    t0 = time.perf_counter()
    cache = cache or PoolCache()
    c = result.config
    b = min(max(options.batch_index, 0), c.batch - 1)
    signed = view_signed(options.view, c)
    map_lut = colormaps.lut(options.diverging if signed else options.colormap)
    stage = view_stage(options.view)
    values = getattr(result, stage)[b]  # (H, Lq, Lkv); 2H for differential pre-softmax
    allowed = allowed_maps(result, b)
    empty = result.fully_masked_rows[b][:1]  # (1, Lq): masks carry no head dimension
    mode = options.scale_mode
    row = mode == "row"
    key = (options.view, b, options.max_px, row)
    pooled = cache.get(result, ("heads", *key),
                       lambda: _pooled_heads(result, stage, b, options, allowed, empty, signed))
    images, levels, scale = quantise_scaled(pooled, options.shared_scale, mode)
    shape = (c.seq_q, c.lkv)
    heads = [HeatImage(im, shape, lv, map_lut, head_title(h, len(images), c.heads))
             for h, (im, lv) in enumerate(zip(images, levels))]

    mean = None
    if options.mean:
        def mean_maps() -> PooledMaps:
            # NaN (no-key rows) and -inf (masked scores) are the same in every head: flagged, then 0
            m = torch.from_numpy(values).mean(0, keepdim=True)
            return pool_maps(torch.nan_to_num(m, nan=0.0, neginf=0.0), allowed, empty, options.max_px, signed,
                             row=row)

        (image,), (mean_levels,), _ = quantise_scaled(cache.get(result, ("mean", *key), mean_maps), True, mode)
        mean = HeatImage(image, shape, mean_levels, map_lut, "mean over heads")
    if options.grid_pixels:  # made here, on the worker, for the grid's maps only (not for exports)
        table = argb_table(map_lut)
        for heat in heads + ([mean] if mean else []):
            heat.argb = argb_pixels(heat, table)

    tensor = _tensor_frame(result, options, b, cache)
    shared = levels[0] if options.shared_scale else _levels(torch.tensor([lv[1] for lv in levels]),
                                                            torch.tensor(True), signed)[0]
    return Frames(heads, mean, tensor, options, shared, map_lut, time.perf_counter() - t0, signed, scale)


def _pooled_heads(result: RunResult, stage: str, b: int, options: ViewOptions, allowed, empty,
                  signed: bool) -> PooledMaps:
    """Batch item b's maps of `stage` pooled for the view."""
    return pool_maps(getattr(result, stage)[b], allowed, empty, options.max_px, signed,
                     row=options.scale_mode == "row")


def tensor_kept(result: RunResult, name: str) -> bool:
    """Whether the result holds the tensor view's stage (a long pooled model forward keeps the per-token
    stages of the layer it ran for only: another layer's result has its maps alone)."""
    return name in result.stages


def not_kept_note(result: RunResult, name: str, sep: str = " ") -> str:
    """Why a layer's result has no `name` tensor (sep: between the two sentences, e.g. a line break)."""
    if result.opened:
        return opened_note(result, TENSOR_NAMES[name].lower())
    return (f"{TENSOR_NAMES[name]} is not kept for this layer: a long (pooled) run keeps the per-token "
            f"tensors of the layer it ran for only.{sep}Edit the input, or open the pipeline view, to run this layer.")


def _tensor_frame(result: RunResult, options: ViewOptions, b: int, cache: PoolCache) -> HeatImage | None:
    """The output view's tensor, pooled to its size; None when the result does not hold it (tensor_kept)."""
    if not tensor_kept(result, options.tensor):
        return None
    head = min(max(options.tensor_head, 0), result.config.heads - 1)
    t = tensor_data(result, options.tensor, b, head)
    t_key = ("tensor", options.tensor, b, head, options.tensor_px)
    nan_rows = ~np.isfinite(t).all(-1)[None]  # rows of queries with no key carry NaN (seed math)
    (t_img,), (t_levels,) = quantise_pooled(
        cache.get(result, t_key, lambda: pool_maps(t[None], None, nan_rows, options.tensor_px, True)))
    t_title = TENSOR_NAMES[options.tensor] + (f", head {head}" if options.tensor in ("q", "k", "v") else "")
    return HeatImage(t_img, t.shape, t_levels, colormaps.lut(options.diverging), t_title)
