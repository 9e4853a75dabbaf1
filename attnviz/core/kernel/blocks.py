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
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import Tensor

from attnviz.core.kernel import buffers, progress, screen, slab
from attnviz.core.kernel.buffers import Scratch
from attnviz.core.kernel.current import ThreadCurrent
from attnviz.core.kernel.stages import OPERAND_STAGES, PRE_MASK_STAGES

# One block of float32 scores on the whole-map path: a few of them fit the caches of a desktop CPU (the pooled
# path's blocks are pooling.POOLED_BLOCK_BYTES, a memory bound rather than a cache fit).
CACHE_BLOCK_BYTES = 4 << 20
PRE_MASK = PRE_MASK_STAGES  # defined where masked too: computed for every key
FILL = {"scores": -math.inf}  # what a left-out (masked) cell holds; every other map stage holds 0 there
INPUT_STAGES = OPERAND_STAGES  # kept by the caller, not per block
_held = threading.local()  # each thread's block scratch (_scratch)


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


class KeySpans:
    """For each query row, the first and last key some batch item and head may attend, found once for the
    whole mask; span(r0, r1) is then a block's keys [k0, k1)."""

    def __init__(self, mask: Tensor | None, lkv: int):
        self.lkv = lkv
        if mask is None:
            self.first = None
            return
        rows = mask.reshape(-1, *mask.shape[-2:]).cpu().numpy()  # NumPy: torch's bool reductions are slower
        union = rows[0] if rows.shape[0] == 1 else rows.any(0)  # (Lq or 1, Lkv): some item and head may attend
        self.every_row_has_a_key = rows.any(-1).all(0).tolist()
        self.first = union.argmax(-1).tolist()
        self.last = (lkv - 1 - union[:, ::-1].argmax(-1)).tolist()

    def span(self, r0: int, r1: int) -> tuple[int, int]:
        """The keys [k0, k1) that some row of r0..r1 may attend; every key where a row has none (its
        softmax over all -inf gives NaN in every cell, which trimmed keys would not show)."""
        if self.first is None:
            return 0, self.lkv
        rows = slice(0, 1) if len(self.first) == 1 else slice(r0, r1)
        if not all(self.every_row_has_a_key[rows]):
            return 0, self.lkv
        return min(self.first[rows]), max(self.last[rows]) + 1

    def trims(self, rows: int, lq: int) -> bool:
        """Whether some block of `rows` query rows leaves keys out (a causal or windowed mask)."""
        return any(self.span(r0, min(lq, r0 + rows)) != (0, self.lkv) for r0 in range(0, lq, rows))


def masked_columns(mask: Tensor | None) -> tuple[int, int]:
    """The columns [m0, m1) of a block's mask that hold a masked cell (m0 == m1: none): only they need the
    -inf bias (a causal block's diagonal square, a window's two edges), not the whole block."""
    if mask is None:
        return 0, 0
    flat = mask.reshape(-1, mask.shape[-1]).cpu().numpy()  # NumPy: torch's bool reductions are slower
    partial = ~flat.all(0)
    if not partial.any():
        return 0, 0
    where = partial.nonzero()[0]
    return int(where[0]), int(where[-1]) + 1


def block_cells(mask: Tensor | None, r0: int, r1: int, k0: int, k1: int) -> tuple:
    """The index of a block's cells in a mask (or its bias) that may have one row for every query."""
    return (..., slice(r0, r1) if mask is not None and mask.shape[-2] > 1 else slice(None), slice(k0, k1))


def narrow_bias(mask: Tensor | None, bias: Tensor | None, cells: tuple) -> dict:
    """map_rows' bias keywords for a block: the bias of its masked columns alone, and where they start."""
    if bias is None:
        return {}
    m0, m1 = masked_columns(mask[cells])
    rows, keys = cells[-2], cells[-1]
    return {"bias": bias[..., rows, keys.start + m0:keys.start + m1], "bias_col": m0}


def blocked_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, trace: dict, map_rows: Callable,
                      repeat: Callable[[Tensor, int], Tensor], bias_of: Callable,
                      heads_apart: bool = False) -> Tensor | None:
    """The context (B, H', Lq, dv) of `attention`, in blocks of query rows (or of whole heads where rows would
    leave no key out, _by_heads); the kept map stages are written whole into `trace`. None when one block would
    hold every row (the whole path is then the same work).

    map_rows(q_rows, mask=, trace=, row0=, col0=, keys_t=, scratch=, bias=) -> (map, mask): kernel._map on a block.
    repeat(x, heads): kernel.repeat_kv; bias_of(mask, dtype): kernel.mask_bias. heads_apart: each head's map
    is its own q and k's alone, q's heads in order (no per-head sink or score mod, no differential pair), so
    a block may hold some heads."""
    b, h, lq, _ = q.shape
    lkv = k.shape[2]
    rows = block_rows(q, lkv, model_block_bytes() if slab.active() else None)
    shown = screen.current()  # the maps a view shows, pooled here as they are made (screen.py)
    rows = rows if shown is None else shown.block_rows(rows, mask, b)
    if rows >= lq:
        return None
    record = frozenset(getattr(trace, "record", ())) - INPUT_STAGES
    work = mask_work(mask, lkv, q.dtype, not record & PRE_MASK, bias_of)
    keys_t = repeat(k, h).transpose(-2, -1)
    if heads_apart and _by_heads(q, lkv, mask, record) and not work.spans.trims(rows, lq):
        return _head_blocks(q, keys_t, repeat(v, h), mask, trace, record, map_rows, work)
    values = context = None
    whole: dict[str, Tensor] = {}
    scratch = _scratch() if buffers.reusable() else None  # (a learnable score mod needs grad, q and k not)
    for r0 in range(0, lq, rows):
        progress.checkpoint()  # Cancel stops within one attention call
        r1 = min(lq, r0 + rows)
        k0, k1 = work.spans.span(r0, r1)
        cells = block_cells(mask, r0, r1, k0, k1)
        block_trace = type(trace)(record)
        dropped, _ = map_rows(q[:, :, r0:r1], mask=None if mask is None else mask[cells], trace=block_trace,
                              row0=r0, col0=k0, keys_t=keys_t[..., k0:k1], scratch=scratch,
                              **work.narrow_bias(mask, cells))
        if context is None:  # the map's head count is known now (differential attention halves it)
            values = repeat(v, dropped.shape[1])
            context = q.new_empty((b, dropped.shape[1], lq, v.shape[-1]))
        context[:, :, r0:r1] = torch.matmul(dropped, values[:, :, k0:k1])
        _write_block(whole, block_trace, (lq, lkv), (r0, r1, k0, k1))
    trace.update(whole)
    return context




def _by_heads(q: Tensor, lkv: int, mask: Tensor | None, record: frozenset[str]) -> bool:
    """Whether a call runs in blocks of whole heads: in a model's forward (its weights go to the slab) of one
    batch item, where one head's whole map fits a block and the kept map stages are those written in place."""
    b, _, lq, _ = q.shape
    return (slab.active() and b == 1 and buffers.reusable() and "weights" in record
            and not record & (PRE_MASK | {"combined"}) and lq * lkv * q.element_size() <= CACHE_BLOCK_BYTES
            and (mask is None or mask.dim() < 3 or mask.shape[-3] == 1))


def _head_blocks(q: Tensor, keys_t: Tensor, values: Tensor, mask: Tensor | None, trace: dict,
                 record: frozenset[str], map_rows: Callable, work: MaskWork) -> Tensor:
    """blocked_attention in blocks of whole heads, every row and key: for one batch item a block's place in a
    whole map is one contiguous run, so the scores and the softmax are written straight there (the weights into
    the model's slab). Blocks of rows were copied there instead, and their left-out keys filled: a large part of a
    forward without a mask (benchmarks/README.md, Behind the code). The masked cells are computed too (-inf, 0), as in
    the whole path, so a mask that lets blocks of rows leave keys out keeps those: computing a causal map's lower
    triangle alone saves time (Behind the code, as above). keys_t, values: k and v repeated to q's heads (keys
    transposed); the rest as blocked_attention's."""
    b, h, lq, _ = q.shape
    lkv = keys_t.shape[-1]
    whole = {name: _whole_map(name, (b, h, lq, lkv), q.dtype, q.device) for name in record & {"scores", "weights"}}
    per = max(1, CACHE_BLOCK_BYTES // (lq * lkv * q.element_size()))
    context = q.new_empty((b, h, lq, values.shape[-1]))
    bias = work.narrow_bias(mask, block_cells(mask, 0, lq, 0, lkv))
    scores_at = _scratch()[0]
    shown = screen.current()
    for h0 in range(0, h, per):
        progress.checkpoint()  # Cancel stops within one attention call
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
        if shown is not None:
            shown.write(sorted(record & screen.POOLED_STAGES), at["weights"], (0, lq, 0, lkv), (lq, lkv),
                        heads=(h0, h1, h))
    if "dropped" in record:  # dropout is off in the blocked path: the same map as the weights
        whole["dropped"] = whole["weights"]
    trace.update(whole)
    return context


def _whole_map(name: str, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> Tensor:
    """The memory a stage's whole map is written into: a model's weights' place in its every-layer slab
    (slab.py), else a buffer of its own."""
    held = slab.take(shape, dtype, device) if name == "weights" else None
    return held if held is not None else buffers.empty(shape, dtype, device)


class MaskWork:
    """What the blocks need of one mask: the keys each block may see, the mask's 0 / -inf bias and each block's
    share of it, worked out once for every attention call given that very mask inside sharing_masks() (a model's
    layers share theirs: NumPy reductions and a bias made once a layer otherwise, benchmarks/README.md, Behind the
    code)."""

    def __init__(self, mask: Tensor | None, lkv: int, dtype: torch.dtype, trimmed: bool, bias_of: Callable):
        self.mask = None if mask is None else weakref.ref(mask)
        self.version = _version(mask)
        self.key = (lkv, dtype, trimmed, bias_of)
        self.spans = KeySpans(mask if trimmed else None, lkv)
        self.bias = None if mask is None else bias_of(mask, dtype)
        self._narrowed: dict[tuple, dict] = {}

    def serves(self, mask: Tensor | None, key: tuple) -> bool:
        return (mask is not None and self.mask is not None and self.mask() is mask and self.key == key
                and self.version == _version(mask))

    def narrow_bias(self, mask: Tensor | None, cells: tuple) -> dict:
        """narrow_bias of a block's cells, remembered."""
        at = (cells[-2].start, cells[-2].stop, cells[-1].start, cells[-1].stop)
        if at not in self._narrowed:
            self._narrowed[at] = narrow_bias(mask, self.bias, cells)
        return self._narrowed[at]


def _version(mask: Tensor | None) -> int | None:
    """The mask's in-place change count; an inference-mode tensor keeps none, so inside sharing_masks() a mask is
    taken to stay as it is (transformers builds a forward's masks once, before its layers)."""
    return None if mask is None or mask.is_inference() else mask._version


_sharing = ThreadCurrent()  # this thread's [MaskWork or None] while a forward shares its masks' work


@contextmanager
def sharing_masks() -> Iterator[None]:
    """Inside the block the attention calls of this thread given the very same mask share its MaskWork (a model's
    forward over its layers); after it the work, and the bias it holds, is let go."""
    with _sharing.using([None]):
        yield


def mask_work(mask: Tensor | None, lkv: int, dtype: torch.dtype, trimmed: bool, bias_of: Callable) -> MaskWork:
    """The MaskWork for `mask` (trimmed: the blocks keep only the keys their rows may see): the one the calls
    before made for it inside sharing_masks(), else a new one."""
    held = _sharing.value
    if held is None:
        return MaskWork(mask, lkv, dtype, trimmed, bias_of)
    if held[0] is None or not held[0].serves(mask, (lkv, dtype, trimmed, bias_of)):
        held[0] = MaskWork(mask, lkv, dtype, trimmed, bias_of)
    return held[0]


def _scratch() -> tuple[Scratch, Scratch]:
    """This thread's memory for a block's scores and weights, kept from run to run: fresh block-sized tensors
    are mapped page by page whenever the allocator has handed their pages back (a 4 MiB block: ~1,000 page
    faults; benchmarks/README.md, Behind the code)."""
    if not hasattr(_held, "scratch"):
        _held.scratch = (Scratch(), Scratch())
    return _held.scratch


def _write_block(whole: dict[str, Tensor], block_trace: dict, shape: tuple[int, int],
                 cells: tuple[int, int, int, int]) -> None:
    """Copy a block's kept stages into the whole maps (made at the first block), filling its left-out keys.
    A stage that is another stage's very tensor (dropped = weights in eval mode) stays one tensor. The maps a
    view shows are pooled for it from the block here, while it is in the cache (screen.py)."""
    r0, r1, k0, k1 = cells
    names: dict[int, list[str]] = {}
    for name, t in block_trace.items():
        names.setdefault(id(t), []).append(name)
    shown = screen.current()
    for twins in names.values():
        name, t = twins[0], block_trace[twins[0]]
        if name not in whole:  # every cell is written; a model's weights into its every-layer slab (slab.py)
            whole[name] = _whole_map(name, (*t.shape[:2], *shape), t.dtype, t.device)
            for twin in twins[1:]:
                whole[twin] = whole[name]
        out = whole[name][:, :, r0:r1]
        out[..., k0:k1] = t
        fill = FILL.get(name, 0.0)
        out[..., :k0] = fill
        out[..., k1:] = fill
        pooled = [n for n in twins if n in screen.POOLED_STAGES]
        if shown is not None and pooled:
            shown.write(pooled, t, cells, shape)
