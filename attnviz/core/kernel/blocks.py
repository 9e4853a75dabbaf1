"""The whole attention map computed in blocks of query rows, each block's keys trimmed to those it may see.

A (B, H, Lq, Lkv) map passes through several full-size ops (Q·Kᵀ, scale, mask, softmax, @ V); done at once,
each op streams the whole map through memory. In blocks of CACHE_BLOCK_BYTES the scores stay in the CPU's cache
between the ops, and a block only computes the keys that some of its rows may attend (a causal map: the
lower triangle, half the work; a sliding window: its band). The cells left out hold what the whole
computation gives there exactly: -inf scores, 0 weights. The numbers are the whole path's to float32
rounding (the same ops on the same values; only the matmul's blocking differs).

Stages defined at masked cells as well (qk, scaled, biased, capped) keep every key of every block, so a run
that records them sees them whole.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

import torch
from torch import Tensor

from attnviz.core.kernel import buffers
from attnviz.core.kernel.block_mask import BlockMask, block_cells
from attnviz.core.kernel.buffers import Scratch
from attnviz.core.kernel.context import ForwardContext
from attnviz.core.kernel.stages import OPERAND_STAGES, PRE_MASK_STAGES

# One block of float32 scores on the whole-map path: a few of them fit the caches of a desktop CPU (the pooled
# path's blocks are pooling.POOLED_BLOCK_BYTES, a memory bound rather than a cache fit).
CACHE_BLOCK_BYTES = 4 << 20
PRE_MASK = PRE_MASK_STAGES  # defined where masked too: computed for every key
FILL = {"scores": -math.inf}  # what a left-out (masked) cell holds; every other map stage holds 0 there
INPUT_STAGES = OPERAND_STAGES  # kept by the caller, not per block
_held = threading.local()  # each thread's block scratch (_scratch): memory kept from run to run, not a steer


def block_rows(q: Tensor, lkv: int, block_bytes: int | None = None) -> int:
    """Query rows per block: the block's scores within block_bytes (CACHE_BLOCK_BYTES; at least one row)."""
    b, h, _, _ = q.shape
    return max(1, (CACHE_BLOCK_BYTES if block_bytes is None else block_bytes) // max(1, b * h * lkv * q.element_size()))


def model_block_bytes() -> int:
    """A model forward's block (its weights go to the slab, its scores are scratch): CACHE_BLOCK_BYTES on two or more
    torch threads, half of it on one, as the window runs a model: on one thread the half block was faster, for a
    SmolLM2-shaped model and for a seed forward, which also keeps its scores (benchmarks/README.md, Behind the
    code)."""
    return CACHE_BLOCK_BYTES if torch.get_num_threads() > 1 else CACHE_BLOCK_BYTES // 2


def blocked_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, trace: dict, map_rows: Callable,
                      repeat: Callable[[Tensor, int], Tensor], bias_of: Callable, ctx: ForwardContext,
                      heads_apart: bool = False) -> Tensor | None:
    """The context (B, H', Lq, dv) of `attention`, in blocks of query rows (or of whole heads where rows would
    leave no key out, _by_heads); the kept map stages are written whole into `trace`. None when one block would
    hold every row (the whole path is then the same work).

    map_rows(q_rows, mask=, trace=, row0=, col0=, keys_t=, scratch=, bias=) -> (map, mask): kernel._map on a block.
    repeat(x, heads): kernel.repeat_kv; bias_of(mask, dtype): kernel.mask_bias. ctx: the forward's context (its
    slab, its analysed masks, its Cancel). heads_apart: each head's map is its own q and k's
    alone, q's heads in order (no per-head sink or score mod, no differential pair), so a block may hold some
    heads."""
    b, h, lq, _ = q.shape
    lkv = k.shape[2]
    rows = block_rows(q, lkv, model_block_bytes() if ctx.slab is not None else None)
    if rows >= lq:
        return None
    record = frozenset(getattr(trace, "record", ())) - INPUT_STAGES
    work = ctx.block_mask(mask, lkv)  # shared by every call of the forward given that very mask
    trimmed = not record & PRE_MASK
    keys_t = repeat(k, h).transpose(-2, -1)
    if heads_apart and _by_heads(q, lkv, mask, record, ctx) and not work.trims(rows, lq, trimmed):
        return _head_blocks(q, keys_t, repeat(v, h), mask, trace, record, map_rows, work, ctx, bias_of)
    values = context = None
    whole: dict[str, Tensor] = {}
    scratch = _scratch() if buffers.reusable() else None  # (a learnable score mod needs grad, q and k not)
    for r0 in range(0, lq, rows):
        ctx.checkpoint()  # Cancel stops within one attention call
        r1 = min(lq, r0 + rows)
        k0, k1 = work.keys(r0, r1, trimmed)
        cells = block_cells(mask, r0, r1, k0, k1)
        block_trace = type(trace)(record)
        dropped, _ = map_rows(q[:, :, r0:r1], mask=None if mask is None else mask[cells], trace=block_trace,
                              row0=r0, col0=k0, keys_t=keys_t[..., k0:k1], scratch=scratch,
                              **work.narrow_bias(cells, q.dtype, bias_of))
        if context is None:  # the map's head count is known now (differential attention halves it)
            values = repeat(v, dropped.shape[1])
            context = q.new_empty((b, dropped.shape[1], lq, v.shape[-1]))
        context[:, :, r0:r1] = torch.matmul(dropped, values[:, :, k0:k1])
        _write_block(whole, block_trace, (lq, lkv), (r0, r1, k0, k1), ctx)
    trace.update(whole)
    return context




def _by_heads(q: Tensor, lkv: int, mask: Tensor | None, record: frozenset[str], ctx: ForwardContext) -> bool:
    """Whether a call runs in blocks of whole heads: in a model's forward (its weights go to the slab) of one
    batch item, where one head's whole map fits a block and the kept map stages are those written in place."""
    b, _, lq, _ = q.shape
    return (ctx.slab is not None and b == 1 and buffers.reusable() and "weights" in record
            and not record & (PRE_MASK | {"combined"}) and lq * lkv * q.element_size() <= CACHE_BLOCK_BYTES
            and (mask is None or mask.dim() < 3 or mask.shape[-3] == 1))


def _head_blocks(q: Tensor, keys_t: Tensor, values: Tensor, mask: Tensor | None, trace: dict,
                 record: frozenset[str], map_rows: Callable, work: BlockMask, ctx: ForwardContext,
                 bias_of: Callable) -> Tensor:
    """blocked_attention in blocks of whole heads, every row and key: for one batch item a block's place in a
    whole map is one contiguous run, so the scores and the softmax are written straight there (the weights into
    the model's slab). Blocks of rows were copied there instead, and their left-out keys filled: a large part of a
    forward without a mask (benchmarks/README.md, Behind the code). The masked cells are computed too (-inf, 0), as in
    the whole path, so a mask that lets blocks of rows leave keys out keeps those: computing a causal map's lower
    triangle alone saves time (Behind the code, as above). keys_t, values: k and v repeated to q's heads (keys
    transposed); the rest as blocked_attention's."""
    b, h, lq, _ = q.shape
    lkv = keys_t.shape[-1]
    whole = {name: _whole_map(name, (b, h, lq, lkv), q.dtype, q.device, ctx) for name in record & {"scores", "weights"}}
    per = max(1, CACHE_BLOCK_BYTES // (lq * lkv * q.element_size()))
    context = q.new_empty((b, h, lq, values.shape[-1]))
    bias = work.narrow_bias(block_cells(mask, 0, lq, 0, lkv), q.dtype, bias_of)
    scores_at = _scratch()[0]
    for h0 in range(0, h, per):
        ctx.checkpoint()  # Cancel stops within one attention call
        h1 = min(h, h0 + per)
        at = {name: t[:, h0:h1] for name, t in whole.items()}
        block_trace = type(trace)(record)
        scratch = (buffers.Into(at["scores"]) if "scores" in at else scores_at, buffers.Into(at["weights"]))
        dropped, _ = map_rows(q[:, h0:h1], mask=mask, trace=block_trace, row0=0, col0=0, keys_t=keys_t[:, h0:h1],
                              scratch=scratch, **bias)
        context[:, h0:h1] = torch.matmul(dropped, values[:, h0:h1])
        for name, place in at.items():  # a stage made elsewhere (staged scores, a safe softmax) is copied
            if block_trace[name].data_ptr() != place.data_ptr():
                place.copy_(block_trace[name])
    if "dropped" in record:  # dropout is off in the blocked path: the same map as the weights
        whole["dropped"] = whole["weights"]
    trace.update(whole)
    return context


def _whole_map(name: str, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device,
               ctx: ForwardContext) -> Tensor:
    """The memory a stage's whole map is written into: a model's weights' place in its every-layer slab
    (slab.py), else a buffer of its own."""
    held = ctx.slab.take(shape, dtype, device) if name == "weights" and ctx.slab is not None else None
    return held if held is not None else buffers.empty(shape, dtype, device)


def _scratch() -> tuple[Scratch, Scratch]:
    """This thread's memory for a block's scores and weights, kept from run to run: fresh block-sized tensors
    are mapped page by page whenever the allocator has handed their pages back (a 4 MiB block: ~1,000 page
    faults; benchmarks/README.md, Behind the code)."""
    if not hasattr(_held, "scratch"):
        _held.scratch = (Scratch(), Scratch())
    return _held.scratch


def _write_block(whole: dict[str, Tensor], block_trace: dict, shape: tuple[int, int],
                 cells: tuple[int, int, int, int], ctx: ForwardContext) -> None:
    """Copy a block's kept stages into the whole maps (made at the first block), filling its left-out keys.
    A stage that is another stage's very tensor (dropped = weights in eval mode) stays one tensor."""
    r0, r1, k0, k1 = cells
    names: dict[int, list[str]] = {}
    for name, t in block_trace.items():
        names.setdefault(id(t), []).append(name)
    for twins in names.values():
        name, t = twins[0], block_trace[twins[0]]
        if name not in whole:  # every cell is written; a model's weights into its every-layer slab (slab.py)
            whole[name] = _whole_map(name, (*t.shape[:2], *shape), t.dtype, t.device, ctx)
            for twin in twins[1:]:
                whole[twin] = whole[name]
        out = whole[name][:, :, r0:r1]
        out[..., k0:k1] = t
        fill = FILL.get(name, 0.0)
        out[..., :k0] = fill
        out[..., k1:] = fill
