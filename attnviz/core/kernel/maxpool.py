"""Max-pooling of maps over uniform blocks of cells (the last ones partial), as max_pool2d's ceil mode: what a
map shows at a size smaller than its own, in the kernel's pooled path and in frames.py alike."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def ceil_div(n: int, d: int) -> int:
    """ceil(n / d): the pooling factor that fits n cells into d, or the pooled cells of n at factor d."""
    return -(-n // d)


def reduce_blocks(t: Tensor, dim: int, factor: int, op) -> Tensor:
    """Reduce runs of `factor` along `dim` with op (torch.amax / torch.amin); a short last run too."""
    n = t.shape[dim]
    if dim in (-1, t.dim() - 1) and t.dtype.is_floating_point and op in (torch.amax, torch.amin):
        # along the last dim torch's reductions run elementwise: max_pool1d is faster (Behind the code), same
        # numbers (a NaN wins either way; ceil mode keeps the short last run)
        flat = t.reshape(-1, 1, n)
        pooled = (F.max_pool1d(flat, factor, ceil_mode=True) if op is torch.amax
                  else -F.max_pool1d(-flat, factor, ceil_mode=True))
        return pooled.reshape(*t.shape[:-1], pooled.shape[-1])
    main = (n // factor) * factor
    parts = []
    if main:  # a reshape of the leading rows is a view: no copy of the full maps
        shape = [*t.shape[:dim], n // factor, factor, *t.shape[dim + 1 :]]
        parts.append(op(t.narrow(dim, 0, main).reshape(shape), dim=dim + 1))
    if main < n:
        parts.append(op(t.narrow(dim, main, n - main), dim=dim, keepdim=True))
    return torch.cat(parts, dim) if len(parts) > 1 else parts[0]


def max_pool(x: Tensor, fq: int, fk: int, signed: bool = False) -> Tensor:
    """(..., n, L) -> the max over fq x fk blocks of the last two dims (the last ones partial: max_pool2d's
    ceil mode); signed: the value of largest magnitude. Two block reductions give max_pool2d's numbers faster
    (benchmarks/README.md, Behind the code): the rows first (an elementwise max of whole rows, faster than pooling the
    columns of the full block), then the columns of the fq times smaller result (max_pool1d)."""
    if fq == 1 and fk == 1:
        return x
    hi = _pooled(x, fq, fk, torch.amax)
    if not signed:
        return hi
    lo = _pooled(x, fq, fk, torch.amin)
    return torch.where(hi.abs() >= lo.abs(), hi, lo)


def _pooled(x: Tensor, fq: int, fk: int, op) -> Tensor:
    rows = reduce_blocks(x, x.dim() - 2, fq, op) if fq > 1 else x
    return reduce_blocks(rows, x.dim() - 1, fk, op) if fk > 1 else rows
