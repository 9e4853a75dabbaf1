"""Per-head statistics of attention maps, and attention rollout. NumPy only (no Qt, no torch).

Every statistic is a mean over the query rows that have a key to attend to (rows with no key are
NaN in the seed math, or 0 with safe softmax: they carry no distribution). Positions i (query) and
j (key) are the map's own row and column indices.
"""

from __future__ import annotations

import numpy as np

# column -> (header, tooltip); the order is the table's
STATS: dict[str, tuple[str, str]] = {
    "entropy": ("entropy (nats)",
                "mean over query rows of −Σ_j w_ij ln w_ij: 0 = one key, ln(n) = uniform over n keys"),
    "max_weight": ("max weight", "the largest weight anywhere in the map"),
    "distance": ("mean distance", "mean over query rows of Σ_j w_ij·|i − j|: how far back (or ahead) a head looks"),
    "sink": ("first key", "mean share of attention on key 0 (an attention sink)"),
    "previous": ("previous token", "mean share on key i − 1 (a previous-token head), over rows i >= 1"),
    "diagonal": ("diagonal", "mean share on key i itself"),
}
STAT_NAMES: tuple[str, ...] = tuple(STATS)


def _rows_with_keys(weights: np.ndarray, empty_rows: np.ndarray | None) -> np.ndarray:
    """(H, Lq) bool: rows that carry a distribution."""
    finite = np.isfinite(weights).all(-1)
    if empty_rows is not None:
        finite &= ~np.broadcast_to(empty_rows, finite.shape)
    return finite


def _row_mean(per_row: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Mean over the valid rows of (H, Lq) values; NaN for a head with none."""
    count = valid.sum(-1)
    total = np.where(valid, per_row, 0.0).sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def _band(weights: np.ndarray, offset: int, valid: np.ndarray) -> np.ndarray:
    """Mean over valid rows of w[i, i + offset] (rows whose key i + offset exists)."""
    lq, lkv = weights.shape[-2:]
    i = np.arange(lq)
    j = i + offset
    ok = (j >= 0) & (j < lkv)
    values = np.zeros(weights.shape[:-1], np.float64)
    values[:, ok] = np.nan_to_num(weights[:, i[ok], j[ok]])
    return _row_mean(values, valid & ok[None])


def head_stats(weights: np.ndarray, empty_rows: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Statistics of each map of (H, Lq, Lkv) weights: column name (STAT_NAMES) -> (H,) float64.

    empty_rows: (Lq,) or (H, Lq) bool, rows with no key (excluded from every mean).
    """
    w = np.asarray(weights)
    if w.ndim != 3:
        raise ValueError(f"weights must be (heads, Lq, Lkv), got shape {w.shape}")
    valid = _rows_with_keys(w, empty_rows)
    lq, lkv = w.shape[-2:]
    distance = np.abs(np.arange(lq)[:, None] - np.arange(lkv)[None, :]).astype(np.float64)
    entropy, dist, top = (np.zeros(w.shape[:2]) for _ in range(3))
    for h in range(w.shape[0]):  # one head at a time: a few maps' worth of temporaries, not 3 x H
        wh = np.where(valid[h][:, None], w[h], 0).astype(np.float64)  # float64: the logs of tiny weights
        with np.errstate(divide="ignore", invalid="ignore"):
            logs = np.log(np.where(wh > 0, wh, 1))
        entropy[h] = -np.einsum("ij,ij->i", wh, logs, dtype=np.float64)
        dist[h] = np.einsum("ij,ij->i", wh, distance, dtype=np.float64)
        top[h] = wh.max(-1)
    clean = np.where(valid[..., None][..., :1], w[..., :1], 0).astype(np.float64)
    return {
        "entropy": _row_mean(entropy, valid),
        "max_weight": np.where(valid.any(-1), np.where(valid, top, -np.inf).max(-1), np.nan),
        "distance": _row_mean(dist, valid),
        "sink": _row_mean(clean[..., 0], valid),
        "previous": _band(w, -1, valid),
        "diagonal": _band(w, 0, valid),
    }


def layer_stats(layer_weights: np.ndarray, b: int = 0) -> dict[str, np.ndarray]:
    """head_stats of every layer of (layers, B, H, Lq, Lkv) weights for batch item b:
    column name -> (layers, H)."""
    per_layer = [head_stats(layer_weights[n, b]) for n in range(layer_weights.shape[0])]
    return {name: np.stack([s[name] for s in per_layer]) for name in STAT_NAMES}


def stats_csv(columns: dict[str, np.ndarray], labels: list[str] | None = None) -> str:
    """The per-head table as CSV text: a header row, then one row per head."""
    n = len(next(iter(columns.values())))
    labels = labels or [f"head {h}" for h in range(n)]
    lines = ["head," + ",".join(STATS[name][0] for name in columns)]
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
