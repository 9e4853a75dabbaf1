"""What the explaining panels export, drawn from the frames they show (explain.py), never grabbed from the
screen: each panel's figure (a heat table or a strip of maps, table.py; the rollout and pipeline figures are
the maps' own) and its numbers as CSV or NPZ. The window's panels call these; so can a script.

    figure = stats_figure(result, frames)          # a Layout: write_figure(figure, "stats.svg")
    write_csv("lens.csv", lens_csv(frames))
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from attnviz import colormaps
from attnviz.core.analysis.stats import stat_label, stats_csv
from attnviz.core.runs.runner import RunResult
from attnviz.explain import CompareFrames, FocusFrames, LensFrames, RolloutFrames, StatsFrames, compare_difference
from attnviz.export.figure import layout
from attnviz.export.items import Layout
from attnviz.export.options import ExportOptions
from attnviz.export.table import heat_table_layout, strip_layout, value_index, write_arrays
from attnviz.export.titles import title_parts
from attnviz.frames import ViewOptions
from attnviz.style import COMPACT_DIGITS, number

__all__ = ["compare_arrays", "compare_figure", "focus_csv", "focus_figure", "lens_csv", "lens_figure",
           "rollout_csv", "rollout_figure", "stats_csv", "stats_figure", "write_compare"]


def _parts(result: RunResult, batch_index: int = 0) -> list[str]:
    """The lines under a panel figure's heading: what ran (model or variant, shapes, mask ...)."""
    return title_parts(result, ExportOptions(batch_index=batch_index), [])[1]


def _cell(v: float) -> str:
    return "\u2014" if np.isnan(v) else f"{v:.3g}"


def stats_figure(result: RunResult, frames: StatsFrames, batch_index: int = 0) -> Layout:
    """The statistics table: a row per head, a column per statistic, each column coloured over its own range."""
    names = list(frames.columns)
    values = np.stack([np.asarray(frames.columns[n], dtype=np.float64) for n in names], axis=1)  # (heads, stats)
    index = np.empty(values.shape, np.uint8)
    for c in range(values.shape[1]):
        finite = values[np.isfinite(values[:, c]), c]
        levels = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
        index[:, c] = value_index(values[:, c], levels)
    texts = [[_cell(v) for v in row] for row in values]
    return heat_table_layout(f"Per-head statistics \u00b7 {len(frames.labels)} heads",
                             _parts(result, batch_index) + ["each column coloured over its own range"],
                             list(frames.labels), [stat_label(n) for n in names], texts, index,
                             colormaps.lut(colormaps.DEFAULT_SEQUENTIAL), cut_cols=False)  # read "duplicate tok…"


def focus_figure(result: RunResult, frames: FocusFrames, batch_index: int = 0) -> Layout:
    """Every head's attention of the focused query over the keys: a row per head, a column per key."""
    values = np.asarray(frames.values, dtype=np.float64)
    top = float(np.nanmax(values)) if np.isfinite(values).any() and np.nanmax(values) > 0 else 1.0
    allowed = _focus_allowed(result, batch_index, frames.row, values.shape)
    texts = [[f"{v:.2f}" if ok else "" for v, ok in zip(row, keep)] for row, keep in zip(values, allowed)]
    index = value_index(values, (0.0, top))
    index[~allowed] = colormaps.MASKED_INDEX  # the view's grey: a key the query may not see is no 0.00
    return heat_table_layout(f"Token focus \u00b7 query {frames.label} (position {frames.row})",
                             _parts(result, batch_index), list(frames.titles), list(frames.key_labels), texts,
                             index, colormaps.lut(colormaps.DEFAULT_SEQUENTIAL), ("attention weight", (0.0, top)))


def _focus_allowed(result: RunResult, b: int, row: int, shape: tuple[int, int]) -> np.ndarray:
    """(maps, Lkv) bool: the keys the focused query may attend to in each map (differential attention's
    sub-maps share their head's mask)."""
    mask = np.asarray(result.mask, dtype=bool)
    mask = mask[min(b, mask.shape[0] - 1)] if mask.ndim == 4 else mask  # (H or 1, Lq or 1, Lkv)
    keys = mask[:, min(row, mask.shape[-2] - 1)] if mask.ndim == 3 else mask[min(row, mask.shape[-2] - 1)][None]
    if keys.shape[0] not in (1, shape[0]):
        keys = np.repeat(keys, shape[0] // keys.shape[0], axis=0)
    return np.broadcast_to(keys, shape)


def lens_figure(result: RunResult, frames: LensFrames) -> Layout:
    """The logit lens: the top-1 token after each layer at each position, coloured by its probability."""
    if frames.message:
        raise ValueError(frames.message)
    from attnviz.models.tokens import display  # token-labelled runs only

    texts = [[display(t) for t in row] for row in frames.tokens]
    rows = [f"L{n}" for n in range(len(frames.tokens))]
    return heat_table_layout(f"Logit lens \u00b7 {len(rows)} layers", _parts(result), rows,
                             [display(p) for p in frames.positions], texts, frames.index, frames.lut,
                             ("top-1 probability", (0.0, 1.0)))


def compare_figure(result: RunResult, frames: CompareFrames, against: str = "pinned") -> Layout:
    """The compared head: the other run's map (`against`: "pinned" or "unablated"), the current one and their
    difference, side by side."""
    if frames.message or frames.difference is None:
        raise ValueError(frames.message or "nothing is compared")
    from dataclasses import replace

    def titled(heat, title: str):  # each map's range beside its name, as the panel shows it
        lo, hi = (number(v, COMPACT_DIGITS, typeset=True) for v in heat.levels)
        return replace(heat, title=f"{title} ({lo} \u2026 {hi})")

    tiles = [titled(frames.pinned, against), titled(frames.current, "current"),
             titled(frames.difference, f"current \u2212 {against}")]
    return strip_layout(f"Compare \u00b7 head {frames.head} \u00b7 max |current \u2212 {against}| over every "
                        f"head {frames.max_abs:.3g}", _parts(result), tiles)


def rollout_figure(result: RunResult, view: ViewOptions | None = None) -> Layout:
    """Attention rollout over the layers: the maps' own rollout figure (export.layout, what="rollout")."""
    return layout(result, ExportOptions.from_view(view or ViewOptions(), what="rollout"))


def focus_csv(frames: FocusFrames | None) -> str:
    """A row per head: the head, then its weight on each key."""
    if frames is None:
        return ""
    lines = ["head," + ",".join(label.replace(",", " ") for label in frames.key_labels)]
    lines += [f"{t}," + ",".join(f"{v:.6g}" for v in row) for t, row in zip(frames.titles, frames.values)]
    return "\n".join(lines) + "\n"


def lens_csv(frames: LensFrames | None) -> str:
    """A row per layer: the layer, then the top-1 token and its probability at each position."""
    if frames is None or frames.message:
        return ""
    lines = ["layer," + ",".join(p.replace(",", " ") for p in frames.positions)]
    lines += [f"{n}," + ",".join(f"{t.replace(',', ' ')} {p:.4g}" for t, p in zip(row, frames.probs[n]))
              for n, row in enumerate(frames.tokens)]
    return "\n".join(lines) + "\n"


def rollout_csv(frames: RolloutFrames | None, tokens: Sequence[str] = ()) -> str:
    """The (L, L) rollout: a header of the key tokens, then a row per query, its token first (positions where the
    run has no token labels)."""
    if frames is None or frames.data is None:
        return ""
    n = len(frames.data)
    labels = [t.replace(",", " ") for t in tokens] if len(tokens) == n else [str(i) for i in range(n)]
    lines = ["query \\ key," + ",".join(labels)]
    lines += [f"{label}," + ",".join(f"{v:.6g}" for v in row) for label, row in zip(labels, frames.data)]
    return "\n".join(lines) + "\n"


def compare_arrays(result: RunResult, pinned: RunResult, view: ViewOptions) -> dict[str, np.ndarray]:
    """Every head's current − pinned of the view (maps, Lq, Lkv), and the view's name."""
    diff = compare_difference(result, pinned, view.view, view.batch_index)
    return {"difference": diff, "view": np.array(view.view)}


def write_compare(result: RunResult, pinned: RunResult, view: ViewOptions, path: str | os.PathLike) -> Path:
    """compare_arrays as NPZ, atomically (every head's difference: heavy, run it off the GUI thread)."""
    return write_arrays(path, **compare_arrays(result, pinned, view))
