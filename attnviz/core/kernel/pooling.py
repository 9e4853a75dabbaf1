"""The pooled path of a long run: every attention map computed in blocks of query rows, each block reduced
at once into what the views need, then dropped. Nothing of size heads x L x L is ever held.

Per attention call (`PooledCall`): the map max-pooled to at most `target` cells a side (uniform blocks of
f = ceil(L / target) positions: the pooling frames.py does, so a short run looks the same either way; a
signed map keeps the value of largest magnitude), which blocks hold a key that may be attended, the
per-head statistics (stats.StatSums: exact), and optionally one exact region of the map. The layer's output
is exact: each block's weights multiply V before they are dropped.

A pooled forward holds its Pooling in its ForwardContext (context.py); the kernel takes this path for every
call of a forward that has one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from attnviz.core.kernel.block_mask import PooledBlock
from attnviz.core.kernel.buffers import Scratch, reusable
from attnviz.core.kernel.maxpool import max_pool
from attnviz.core.kernel.stat_sums import StatSums

TARGET = 1024  # pooled cells per axis at most: wider than any map on screen
POOLED_BYTES = 384 << 20  # every call's pooled maps together at most (the target halves until they fit)
MIN_TARGET = 256  # ... but a map keeps at least this many cells a side (a grid tile's width)
# A pooled block of float32 scores at most: it bounds the pooled path's transient memory (a block and its
# temporaries, a few more blocks; the budgets count 4 of them). Not blocks.CACHE_BLOCK_BYTES, which sizes the
# whole-map path's blocks to the CPU's caches: a pooled block is reduced and dropped, never kept.
POOLED_BLOCK_BYTES = 16 << 20
AUTO_BYTES = 1 << 30  # auto pools past this much of every layer's maps

def factor(length: int, target: int = 0) -> int:
    """The pooling block of a map side: the fewest positions per cell that fit `target` (TARGET) cells."""
    return max(1, -(-length // (target or TARGET)))


def side(length: int, target: int = 0) -> int:
    """Cells a pooled map side has."""
    return -(-length // factor(length, target))


def fitting_target(maps: int, lq: int, lkv: int) -> int:
    """The pooled side for `maps` maps of Lq x Lkv kept together (a model: layers x batch x heads): TARGET,
    halved while they would need more than POOLED_BYTES (270 heads at 1,024² are 1.1 GiB; the head grid's
    tiles are a few hundred pixels wide), never below MIN_TARGET."""
    target = TARGET
    while target > MIN_TARGET and maps * side(lq, target) * side(lkv, target) * 4 > POOLED_BYTES:
        target //= 2
    return target


def pooled_bytes(calls: int, maps: int, lq: int, lkv: int, target: int = 0) -> int:
    """Bytes of `calls` attention calls' pooled maps (`maps` each: batch x heads, float32) and block masks."""
    cells = side(lq, target) * side(lkv, target)
    return calls * (maps * cells * 4 + cells)


@dataclass
class PooledCall:
    """One attention call's maps, reduced (see the module docstring)."""

    shape: tuple[int, int]  # the map's (Lq, Lkv)
    factors: tuple[int, int]
    weights: Tensor  # (B, H, ceil(Lq / fq), ceil(Lkv / fk)) max-pooled
    allowed: Tensor  # (B, 1, ...) bool: the block holds a key that may be attended
    stats: StatSums  # per B x H map
    region: Tensor | None = None  # (B, H, q1 - q0, k1 - k0): that part of the map, exact
    slab: Tensor | None = field(default=None, repr=False)  # the (calls, ...) tensor `weights` is a row of, if any

    def stat_arrays(self) -> dict[str, np.ndarray]:
        b, h = self.weights.shape[:2]
        return {name: values.reshape(b, h) for name, values in self.stats.result().items()}


@dataclass
class Pooling:
    """What a pooled forward keeps: one PooledCall per attention call, in call order.

    `calls_expected` (a model: its layers): the pooled maps of that many same-shaped calls are written into one
    (calls, B, H, Lq', Lk') tensor (`stacked()`), so the model view's every-layer array is no second copy.
    `token_calls`: the calls whose per-token stages (x, q, k, v, context, output) a forward keeps (None: all);
    the others drop them as they finish (keeps_tokens): a pooled 4,096-token forward of 30 layers would
    otherwise hold 1.3 GB of stages the window shows for one layer at a time."""

    target: int = 0  # pooled cells a side at most; 0: TARGET (read when pooling, so tests may lower it)
    region: tuple[int, int, int, int] | None = None  # q0, q1, k0, k1 kept exact
    calls: list[PooledCall] = field(default_factory=list)
    calls_expected: int = 0
    token_calls: frozenset[int] | None = None
    _slab: Tensor | None = field(default=None, repr=False)
    scratch: Scratch = field(default_factory=Scratch, repr=False)  # every call's statistics' temporary
    # every block's scores and map (kernel._pooled_map)
    blocks: tuple[Scratch, Scratch] = field(default_factory=lambda: (Scratch(), Scratch()), repr=False)

    def stacked(self) -> Tensor | None:
        """Every call's pooled map as one (calls, B, H, Lq', Lk') tensor when they were written into one."""
        return stacked(self.calls)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, map_rows: Callable,
               repeat: Callable[[Tensor, int], Tensor], bias_of: Callable, ctx, signed: bool = False) -> Tensor:
        """q (B, H, Lq, dh) in blocks of rows, each against the keys some of its rows may see (blocks.KeySpans,
        widened to whole pooled cells), as blocks.blocked_attention (map_rows: kernel._pooled_map, which also
        returns the softmax's SoftmaxStats, or None; repeat: kernel.repeat_kv; bias_of: kernel.mask_bias).
        Keys and values keep their own heads (grouped-query attention: each key head's query heads go through
        one matmul). ctx: the forward's ForwardContext (its analysed masks, its Cancel). Returns the whole context
        (B, H', Lq, dv); appends the PooledCall."""
        lq, lkv = q.shape[2], k.shape[2]
        masks = ctx.block_mask(mask, lkv)  # the mask's blocks, shared by every call given that very mask
        fq, fk = factor(lq, self.target or TARGET), factor(lkv, self.target or TARGET)
        keys_t = k.transpose(-2, -1).contiguous()  # (B, Hkv, dh, Lkv): BLAS reads it fastest laid out so
        scratch = self.blocks if reusable() else (None, None)
        for held in filter(None, scratch):  # the largest block's size at once: blocks growing one by one (a
            # causal map's) would leave a trail of freed sizes in the heap (benchmarks/README.md, Behind the code)
            held.reserve(q.shape[0] * q.shape[1] * self._rows(q, lkv) * lkv, torch.float32, q.device)
        call, context, r0 = None, None, 0
        while r0 < lq:
            ctx.checkpoint()  # Cancel stops within one attention call
            r1 = min(lq, r0 + self._rows(q, lkv))
            cells = masks.pooled(r0, r1, fq, fk, q.shape[0])
            k0, k1 = cells.keys
            bias = {} if mask is None else {"bias": bias_of(mask[cells.cells][..., slice(*cells.masked)], q.dtype),
                                            "bias_col": cells.masked[0]}
            block, _, softmax = map_rows(q[:, :, r0:r1], mask=None if mask is None else mask[cells.cells], row0=r0,
                                         col0=k0, keys_t=keys_t[..., k0:k1], scratch=scratch, **bias)
            if call is None:
                call = self._start(block, lq, lkv)
                # one tensor written block by block: small blocks kept alive between the block-sized
                # temporaries would pin the heap and grow it (benchmarks/README.md, Behind the code)
                context = q.new_empty((q.shape[0], block.shape[1], lq, v.shape[-1]))
            self._add(call, block, cells, r0, signed, softmax)
            context[:, :, r0:r1] = grouped_matmul(block, v[:, :, k0:k1], repeat)
            r0 = r1
        self.calls.append(call)
        return context

    def _rows(self, q: Tensor, lkv: int) -> int:
        """Query rows per block: a multiple of the row factor, the block's scores within POOLED_BLOCK_BYTES."""
        fq = factor(q.shape[2], self.target or TARGET)
        fit = POOLED_BLOCK_BYTES // max(1, q.shape[0] * q.shape[1] * lkv * 4)
        return max(fq, fit // fq * fq)

    def _start(self, block: Tensor, lq: int, lkv: int) -> PooledCall:
        b, h = block.shape[:2]
        fq, fk = factor(lq, self.target or TARGET), factor(lkv, self.target or TARGET)
        shape = (b, h, -(-lq // fq), -(-lkv // fk))
        weights = self._weights(shape).fill_(float("nan"))
        slab = self._slab if self._slab is not None and weights.data_ptr() == self._slab[len(self.calls)].data_ptr() \
            else None
        return PooledCall((lq, lkv), (fq, fk), weights, torch.zeros((b, 1, *shape[2:]), dtype=torch.bool),
                          StatSums(b * h, lkv, torch.float32, scratch=self.scratch), slab=slab)

    def _weights(self, shape: tuple[int, ...]) -> Tensor:
        """The next call's pooled map: its place in the slab where it fits there, else its own tensor."""
        index = len(self.calls)
        if self._slab is None and index == 0 and self.calls_expected > 1:
            self._slab = torch.empty((self.calls_expected, *shape))  # pages are mapped as calls write them
        if self._slab is not None and index < self._slab.shape[0] and tuple(self._slab.shape[1:]) == shape:
            return self._slab[index]
        return torch.empty(shape)

    def release_scratch(self) -> None:
        """Let go of the statistics' and the blocks' temporaries (the forward has ended)."""
        for scratch in (self.scratch, *self.blocks):
            scratch.release()

    def keeps_tokens(self, done: bool = False) -> bool:
        """Whether the attention call now running (done: the one that has just returned) keeps its per-token
        stages."""
        return self.token_calls is None or len(self.calls) - int(done) in self.token_calls

    def _add(self, call: PooledCall, block: Tensor, cells: PooledBlock, r0: int, signed: bool,
             softmax: SoftmaxStats | None = None) -> None:
        """Pool a block of rows r0.. (its keys and mask: `cells`) into the call; the keys it left out hold 0
        (masked). softmax: what the softmax that made the block gives its statistics (the entropy, each row's
        largest weight)."""
        b, h, n, width = block.shape
        fq, fk = call.factors
        k0 = cells.keys[0]
        out, c0, c1 = slice(r0 // fq, -(-(r0 + n) // fq)), k0 // fk, -(-(k0 + width) // fk)
        values = block.detach().float().cpu()
        rows = call.weights[:, :, out]
        rows[..., c0:c1] = max_pool(values, fq, fk, signed)
        rows[..., :c0], rows[..., c1:] = 0.0, 0.0
        call.allowed[:, :, out, c0:c1] = cells.allowed
        empty = cells.empty  # (B, n): rows with no key
        row_max, given = None, {}
        if softmax is not None:
            softmax = softmax.flat_cpu(b * h, n)
            row_max = softmax.row_max
            if "entropy" in call.stats.names:
                given["entropy"] = softmax.entropy
        choices = torch.broadcast_to(cells.choices, (b, h, n)).reshape(b * h, n)  # rows of < 2 keys left out
        call.stats.add(values.reshape(b * h, n, width), r0, empty.repeat_interleave(h, dim=0), choices, col0=k0,
                       row_max=row_max, given=given)
        self._keep_region(call, values, r0, k0)

    def _keep_region(self, call: PooledCall, values: Tensor, r0: int, col0: int) -> None:
        if self.region is None:
            return
        q0, q1, k0, k1 = self.region
        lo, hi = max(q0, r0), min(q1, r0 + values.shape[2])
        if lo >= hi:
            return
        if call.region is None:
            call.region = torch.full((*values.shape[:2], q1 - q0, k1 - k0), float("nan"))
        rows = call.region[:, :, lo - q0:hi - q0]
        rows[...] = 0.0  # keys the block left out are masked: weight 0
        a, z = max(k0, col0), min(k1, col0 + values.shape[3])
        if a < z:
            rows[..., a - k0:z - k0] = values[:, :, lo - r0:hi - r0, a - col0:z - col0]


def grouped_matmul(weights: Tensor, v: Tensor, repeat: Callable[[Tensor, int], Tensor]) -> Tensor:
    """weights (B, H, n, w) @ v (B, Hkv, w, dv) -> (B, H, n, dv), query head h reading value head h // (H / Hkv):
    the H / Hkv heads of a value head as one (H / Hkv * n, w) matrix (one larger matmul, v never repeated)."""
    b, h, n, w = weights.shape
    kv = v.shape[1]
    if kv == h or h % kv or v.shape[0] != b:
        return torch.matmul(weights, repeat(v, h))
    return torch.bmm(weights.reshape(b * kv, h // kv * n, w), v.reshape(b * kv, w, v.shape[-1])).view(b, h, n, -1)


@dataclass
class SoftmaxStats:
    """What softmax_stats' passes give the statistics of a block of rows (N, R): the entropy as its two terms
    (entropy = spread + log_total · Σ_j w_ij, exact for rows that sum to 1 to rounding) and each row's
    largest weight."""

    spread: Tensor  # −Σ_j w_ij (s_ij − m_i) >= 0
    log_total: Tensor  # ln Σ_j exp(s_ij − m_i)
    row_max: Tensor  # max_j w_ij = 1 / Σ_j exp(s_ij − m_i)

    def entropy(self, row_sums: Tensor | None) -> Tensor:
        return self.spread + self.log_total * (1.0 if row_sums is None else row_sums)

    def flat_cpu(self, n: int, rows: int) -> SoftmaxStats:
        """The same as (n, rows) float32 tensors on the CPU (where the statistics are summed)."""
        return SoftmaxStats(*(t.detach().float().cpu().reshape(n, rows) for t in (self.spread, self.log_total,
                                                                                 self.row_max)))


def softmax_stats(scores: Tensor, masked: tuple[int, int], dtype: torch.dtype, scratch: Scratch | None = None
                  ) -> tuple[Tensor, SoftmaxStats]:
    """The softmax of (B, H, n, K) scores (in float32 at least, then as `dtype`) and its SoftmaxStats from the
    same passes: with m_i = max_j s_ij and Z_i = Σ_j exp(s_ij − m_i), w_ij = exp(s_ij − m_i) / Z_i, the largest
    weight is 1 / Z_i and ln w_ij = (s_ij − m_i) − ln Z_i, so the entropy −Σ w ln w is −Σ_j w_ij (s_ij − m_i)
    + ln Z_i: one product with the shifted scores, no logarithm of the block, every term >= 0 (never a
    difference of two large numbers). The scores are overwritten. `masked`: the columns that may hold -inf
    scores (weight 0, which count 0). scratch: the memory the weights are written to."""
    s = scores if scores.dtype in (torch.float32, torch.float64) else scores.float()
    s = s.sub_(s.amax(-1, keepdim=True))  # <= 0; -inf where masked; NaN in a row with no key (as softmax)
    weights = torch.exp(s, out=None if scratch is None else scratch.like(s))
    total = weights.sum(-1, keepdim=True)
    weights.div_(total)
    m0, m1 = masked
    if m1 > m0:  # 0 · -inf is NaN: those cells weigh nothing
        s[..., m0:m1].clamp_min_(torch.finfo(s.dtype).min)
    spread = s.mul_(weights).sum(-1).neg_()
    stats = SoftmaxStats(spread, total.log().squeeze(-1), total.reciprocal().squeeze(-1))
    return weights.to(dtype), stats


def stacked(calls) -> Tensor | None:
    """The one (calls, B, H, Lq', Lk') tensor holding every call's pooled map in order (Pooling.calls_expected),
    else None. (Inference mode keeps no view's base: the calls say which tensor they are a row of.)"""
    slab = calls[0].slab if calls else None
    if slab is None or slab.shape[0] != len(calls) or any(c.slab is not slab for c in calls):
        return None
    return slab


def pool_note(call: PooledCall) -> str:
    """What the status line says of a pooled run."""
    return pooled_text(call.shape, call.factors)


def pooled_text(shape: tuple[int, int], factors: tuple[int, int]) -> str:
    """'maps max-pooled 8,192 → 1,024 inside the kernel (statistics exact)' for an (Lq, Lkv) map pooled by
    (fq, fk)."""
    (lq, lkv), (fq, fk) = shape, factors
    rows, cols = -(-lq // fq), -(-lkv // fk)
    if lq == lkv and fq == fk:
        return f"maps max-pooled {lq:,} → {rows:,} inside the kernel (statistics exact)"
    return f"maps max-pooled {lq:,} x {lkv:,} → {rows:,} x {cols:,} inside the kernel (statistics exact)"


def pooled_parts(stages: dict[str, np.ndarray], call: PooledCall, heads: int) -> tuple:
    """A pooled call as RunResult parts: (stages with the pooled map as weights and dropped, the pooled mask
    (B, 1, Lq', Lk'), the pooled rows with no key (B, H, Lq'), the RunResult fields pool_factor, exact_stats
    and region)."""
    weights = call.weights.numpy()
    allowed = call.allowed.numpy()
    rows = np.broadcast_to(~allowed.any(-1), (allowed.shape[0], heads, allowed.shape[2])).copy()
    pooled = {"pool_factor": call.factors, "exact_stats": call.stat_arrays(),
              "region": None if call.region is None else call.region.numpy()}
    return {**stages, "weights": weights, "dropped": weights}, allowed, rows, pooled
