"""Per-row statistics summed over blocks of query rows: what the kernel's pooled path accumulates while each
block of a map is in the cache, so a map never held whole has the same exact numbers as one that was
(core.analysis.stats turns the sums into the per-head table).

Every statistic is a mean over the query rows that have a choice to make: at least two keys they may
attend to. A row with no key is NaN in the seed math (or 0 with safe softmax) and carries no distribution;
a row with one key (a causal map's first row) is 1.0 on that key whatever the head does, and counted it
would make every causal head's max weight 1.0. Positions i (query) and j (key) are the map's own row and
column indices.
"""

from __future__ import annotations

import numpy as np
import torch

from attnviz.core.kernel.buffers import Scratch

ROWS = " (rows with a single allowed key left out: a causal map's first row has no choice)"
# column -> (header, tooltip); the order is the table's
STATS: dict[str, tuple[str, str]] = {
    "entropy": ("entropy (nats)",
                "mean over query rows of −Σ_j w_ij ln w_ij: 0 = one key, ln(n) = uniform over n keys" + ROWS),
    "max_weight": ("max weight", "the largest weight in a row that has more than one key"),
    "distance": ("mean distance",
                 "mean over query rows of Σ_j w_ij·|i − j|: how far back (or ahead) a head looks" + ROWS),
    "sink": ("first key", "mean share of attention on key 0 (an attention sink)" + ROWS),
    "previous": ("previous token", "mean share on key i − 1 (a previous-token head), over rows i >= 1" + ROWS),
    "diagonal": ("diagonal", "mean share on key i itself" + ROWS),
}
STAT_NAMES: tuple[str, ...] = tuple(STATS)


class StatSums:
    """Running sums of the per-row statistics of N maps, fed in blocks of query rows: the exact head_stats of
    maps never held whole (a pooled long run), and of whole maps in one block."""

    def __init__(self, n: int, lkv: int, dtype: torch.dtype = torch.float64, names: tuple[str, ...] = STAT_NAMES,
                 scratch: Scratch | None = None):
        self.lkv, self.dtype = lkv, dtype  # float32 elementwise (a long run's blocks): sums stay float64
        self.names = tuple(name for name in STAT_NAMES if name in names)  # those kept (entropy costs a log a cell)
        self.sums = {name: np.zeros(n) for name in self.names if name != "max_weight"}
        self.counts = {name: np.zeros(n) for name in self.sums}
        self.top = np.full(n, -np.inf)
        self.scratch = scratch or Scratch()  # shared by a pooled forward's calls (pooling.Pooling.scratch)

    def add(self, weights, row0: int = 0, empty_rows=None, keys=None, col0: int = 0, row_max=None,
            given: dict | None = None) -> None:
        """weights (N, R, K) (NumPy or torch): query rows row0 .. row0 + R - 1 and keys col0 .. col0 + K - 1 (the
        keys left out hold weight 0); empty_rows (N or 1, R) bool, rows with no key; keys (N or 1, R) int, the
        keys each row may attend to (rows with fewer than two are left out); row_max (N, R): each row's largest
        weight where the caller has it (the pooled path's max-pool); given: name -> f(row sums or None) -> (N, R),
        a statistic the caller computes its own way (the pooled path's entropy from the scores). On torch (many
        threads), in self.dtype (float64: the logs of tiny weights)."""
        w = torch.as_tensor(weights)
        per_row, row_sums = self._per_row(w, row0, col0, w.shape[:-1], given or {})
        # a NaN or inf anywhere in a row makes its sum one (the distance's pieces summed the rows already)
        valid = torch.isfinite(row_sums if row_sums is not None else w.sum(-1))
        if empty_rows is not None:
            valid &= ~torch.as_tensor(np.ascontiguousarray(empty_rows)).broadcast_to(valid.shape)
        if keys is not None:
            valid &= (torch.as_tensor(np.ascontiguousarray(keys)) >= 2).broadcast_to(valid.shape)
        # rows left out need no zeroing: each statistic sums only its counted rows (torch.where below)
        for name, (values, ok) in per_row.items():
            counted = valid if ok is None else valid & ok
            self.sums[name] += torch.where(counted, values, 0.0).double().sum(-1).numpy()
            self.counts[name] += counted.sum(-1).numpy()
        if "max_weight" in self.names and w.shape[-2]:
            top = torch.where(valid, w.amax(-1) if row_max is None else row_max, float("-inf")).amax(-1)
            self.top = np.maximum(self.top, top.double().numpy())

    def _per_row(self, w, row0: int, col0: int, shape, given: dict) -> tuple[dict, torch.Tensor | None]:
        """(name -> ((N, R) per-row values in self.dtype, (R,) bool rows the statistic counts or None: all),
        the (N, R) row sums where the distance made them, else None)."""
        out, row_sums = {}, None
        i = row0 + torch.arange(w.shape[-2])
        if {"entropy", "distance"} & set(self.names):  # whole-block arithmetic in self.dtype
            wd = w.to(self.dtype)
            # per-row sums in the blocks' own dtype (torch sums pairwise: float32 keeps ~1e-7 over 10^4 keys);
            # the running sums across rows are float64
            if "entropy" in self.names and "entropy" not in given:
                # -w ln w, 0 at w = 0: a vectorised log of the weights raised to the smallest normal number
                # (xlogy runs slower, benchmarks/README.md, Behind the code; a subnormal's w ln w is below 1e-36)
                tiny = torch.finfo(self.dtype).smallest_normal
                logs = torch.clamp_min(wd, tiny, out=self.scratch.like(wd)).log_()
                out["entropy"] = (-logs.mul_(wd).sum(-1), None)
            if "distance" in self.names:
                distance, row_sums = distance_sums(wd, row0, col0)
                out["distance"] = (distance, None)
        for name, compute in given.items():
            out[name] = (compute(row_sums), None)
        if "sink" in self.names:
            out["sink"] = ((w[..., 0] if col0 == 0 else torch.zeros(shape)).to(self.dtype), None)
        for name, offset in (("previous", -1), ("diagonal", 0)):
            if name not in self.names:
                continue
            j = i + offset
            ok = (j >= 0) & (j < self.lkv)  # the rows this statistic counts
            # key j of row r is column r + d of the block: a diagonal (rows whose key is outside it: weight 0)
            d = row0 + offset - col0
            held = torch.diagonal(w, offset=d, dim1=-2, dim2=-1)
            values = torch.zeros(shape, dtype=self.dtype)
            values[:, max(0, -d):max(0, -d) + held.shape[-1]] = held
            out[name] = (values, ok)
        return out, row_sums

    def result(self) -> dict[str, np.ndarray]:
        """Column name (STAT_NAMES) -> (N,) float64: each statistic's mean over its rows (NaN for none)."""
        out = {}
        for name in self.names:
            if name == "max_weight":
                out[name] = np.where(np.isfinite(self.top), self.top, np.nan)
                continue
            with np.errstate(invalid="ignore", divide="ignore"):
                out[name] = np.where(self.counts[name] > 0, self.sums[name] / np.maximum(self.counts[name], 1), np.nan)
        return out


def distance_sums(w: torch.Tensor, row0: int, col0: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, R) Σ_j w_ij·|i − j| and (N, R) Σ_j w_ij of a block (rows row0.., keys col0..). The keys left of the
    rows (j < row0: |i − j| = (i − row0) + (row0 − j)) and right of them (j >= row1: (row1 − i) + (j − row1))
    go through one matmul each, against the columns [1, offset]: one read of the weights, no block-sized
    temporary, every term >= 0 (no cancellation); only the keys among the rows' own positions (a causal
    block's diagonal square) are weighted cell by cell."""
    n_rows, width = w.shape[-2:]
    row1, end, dtype = row0 + n_rows, col0 + width, w.dtype
    i = torch.arange(row0, row1, dtype=dtype)
    distance = torch.zeros(w.shape[:-1], dtype=dtype)
    sums = torch.zeros(w.shape[:-1], dtype=dtype)
    for a, b, near, far in ((col0, min(end, row0), i - row0, lambda j: row0 - j),
                            (max(col0, row1), end, row1 - i, lambda j: j - row1)):
        if a >= b:
            continue
        j = torch.arange(a, b, dtype=dtype)
        part = w[..., a - col0:b - col0].reshape(-1, b - a)  # a view: rows of the block, keys a..b
        # (2, k) @ (k, rows): the weights' rows as the wide operand, BLAS's fastest shape here (3x (rows, k) @ (k, 2))
        both = torch.mm(torch.stack([torch.ones_like(j), far(j)]), part.t()).view(2, *w.shape[:-1])
        sums += both[0]
        distance += both[0] * near + both[1]
    a, b = max(col0, row0), min(end, row1)
    if a < b:
        part = w[..., a - col0:b - col0]
        cells = (i[:, None] - torch.arange(a, b, dtype=dtype)[None, :]).abs_()
        distance += (part * cells).sum(-1)
        sums += part.sum(-1)
    return distance, sums
