"""Per-head statistics of attention maps, and attention rollout (NumPy). The per-row sums they come from are
core.kernel.stat_sums.StatSums (the pooled path of a long run accumulates the same sums block by block); the
rows counted are those with a choice (see there)."""

from __future__ import annotations

import numpy as np

from attnviz.core.kernel.stat_sums import STAT_NAMES, STATS, StatSums


def row_keys(mask: np.ndarray, lq: int) -> np.ndarray:
    """(Lq,) int: how many keys each query row may attend to under `mask` (bool, True = may attend,
    (..., Lq or 1, Lkv)); where heads' masks differ, the fewest any head has."""
    counts = np.asarray(mask, dtype=bool).sum(-1)
    counts = counts.reshape(-1, counts.shape[-1]).min(0) if counts.ndim > 1 else counts
    return np.broadcast_to(counts, (lq,))


def head_stats(weights: np.ndarray, empty_rows: np.ndarray | None = None,
               keys: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Statistics of each map of (H, Lq, Lkv) weights: column name (STAT_NAMES) -> (H,) float64.

    empty_rows: (Lq,) or (H, Lq) bool, rows with no key; keys: (Lq,) or (H, Lq) int, the keys each row may
    attend to (row_keys). Rows with no key, or with one, are excluded from every statistic.
    """
    w = np.asarray(weights)
    if w.ndim != 3:
        raise ValueError(f"weights must be (heads, Lq, Lkv), got shape {w.shape}")
    return maps_stats(w, empty_rows, keys)


# Cells of one block of query rows (over every map at once) that maps_stats hands StatSums: a few float64
# temporaries of this size, whatever the number of maps (a model's 270 small maps take one or two blocks,
# not one call each).
STAT_BLOCK_CELLS = 1 << 21


def maps_stats(w: np.ndarray, empty_rows: np.ndarray | None = None, keys: np.ndarray | None = None,
               names: tuple[str, ...] = STAT_NAMES) -> dict[str, np.ndarray]:
    """head_stats of (..., Lq, Lkv) maps: column name (those of `names`) -> w.shape[:-2] float64. empty_rows
    and keys broadcast to (..., Lq)."""
    lead, (lq, lkv) = w.shape[:-2], w.shape[-2:]
    n = int(np.prod(lead))
    empty = None if empty_rows is None else np.broadcast_to(empty_rows, (*lead, lq)).reshape(n, lq)
    allowed = None if keys is None else np.broadcast_to(keys, (*lead, lq)).reshape(n, lq)
    sums = StatSums(n, lkv, names=names)
    rows = max(1, STAT_BLOCK_CELLS // max(1, n * lkv))
    for r0 in range(0, lq, rows):
        r1 = min(lq, r0 + rows)
        sums.add(w[..., r0:r1, :].reshape(n, r1 - r0, lkv), r0, None if empty is None else empty[:, r0:r1],
                 None if allowed is None else allowed[:, r0:r1])
    return {name: values.reshape(lead) for name, values in sums.result().items()}


def layer_stats(layer_weights: np.ndarray, b: int = 0, keys: np.ndarray | None = None,
                names: tuple[str, ...] = STAT_NAMES) -> dict[str, np.ndarray]:
    """head_stats of every layer of (layers, B, H, Lq, Lkv) weights for batch item b (keys: as head_stats',
    the same for every layer): column name (of `names`) -> (layers, H)."""
    return maps_stats(np.asarray(layer_weights)[:, b], keys=keys, names=names)


def stat_label(name: str) -> str:
    """A column's header: the statistic's own, else the name spelled out (a probe's head type, e.g. induction)."""
    return STATS[name][0] if name in STATS else name.replace("_", " ")


def stats_csv(columns: dict[str, np.ndarray], labels: list[str] | None = None) -> str:
    """The per-head table as CSV text: a header row, then one row per head."""
    n = len(next(iter(columns.values())))
    labels = labels or [f"head {h}" for h in range(n)]
    lines = ["head," + ",".join(stat_label(name) for name in columns)]
    for h in range(n):
        lines.append(labels[h] + "," + ",".join(f"{float(columns[name][h]):.6g}" for name in columns))
    return "\n".join(lines) + "\n"


def rollout(layer_weights: np.ndarray, residual: float = 0.5) -> np.ndarray:
    """Attention rollout (Abnar & Zuidema, 2020) of (layers, B, H, L, L) weights -> (B, L, L).

    Each layer's head-averaged map A is mixed with the residual connection, Â = (1 − r)·A + r·I,
    its rows renormalised to sum to 1; the rollout is Â_L · … · Â_2 · Â_1 (the last layer on the left):
    row i says how much of token i's final representation comes from each input token.
    """
    lw = np.asarray(layer_weights, dtype=np.float64)
    if lw.ndim != 5:
        raise ValueError(f"layer weights must be (layers, B, H, L, L), got shape {lw.shape}")
    if lw.shape[-1] != lw.shape[-2]:
        raise ValueError(f"rollout needs self-attention (square maps), got {lw.shape[-2]} x {lw.shape[-1]}")
    eye = np.eye(lw.shape[-1])
    out = None
    for layer in np.nan_to_num(lw, nan=0.0):
        a = (1.0 - residual) * layer.mean(1) + residual * eye  # (B, L, L)
        a = a / a.sum(-1, keepdims=True)
        out = a if out is None else a @ out
    return out
