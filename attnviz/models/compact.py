"""Compact weights: a GGUF model whose float32 weights would not fit keeps its matrices compact and computes
in float32, one matrix (or a slice of one) at a time.

Two forms, chosen per model by `storage_plan`: float32 where it fits the budget, else "blocks": the file's
own quantised blocks (memory-mapped, nothing copied but the llama family's permuted Q/K rows), dequantised
per call where they live: on the CPU with gguf_dequant.py's NumPy formulas, on an accelerator (the blocks are
buffers, so moving the model moves them, still uint8) with gguf_dequant_torch.py's, the same arithmetic on
that device, so every value equals the float32 path's either way; matrices of a type without a formula
are kept as float16. "float16" (ATTNVIZ_COMPACT=float16, for measuring) keeps every matrix in half
precision (bfloat16 where the file stores bfloat16 or float16 would overflow), upcast per call.

The weights are never changed in place: CompactLinear and CompactEmbedding replace nn.Linear and nn.Embedding
and build a float32 copy inside each call, so forwards on several threads never race. Code that reads a
weight directly (the output projection W_O, the logit lens's head, the circuits) reads it through
`float_weight`, which gives float32 for every module; `.weight` on a compact module gives the same float32
copy, built at each read.
"""

from __future__ import annotations

import os
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnviz.models.gguf_dequant import BF16, BLOCKS, FLOATS
from attnviz.models.gguf_dequant_torch import dequantize_rows

STORAGES = ("float32", "float16", "blocks")
COMPACT_ENV = "ATTNVIZ_COMPACT"  # "float16": compact weights as float16 rather than the file's blocks
CHUNK_VALUES = 1 << 24  # a matrix is dequantised this many values at a time (64 MB of float32)
PIECE_VALUES = 1 << 20  # ... in pieces of this many on the pool's threads (each piece stays in the cache)
# devices whose blocks NumPy's formulas dequantise (faster than torch's on the CPU: benchmarks/README.md,
# Behind the code); blocks on any other device are dequantised there by gguf_dequant_torch's
NUMPY_DEVICES = ("cpu",)
# where each quantised type keeps its float16 scales in a block (the values are finite where these are)
SCALE_BYTES = {2: (0, 2), 3: (0, 4), 6: (0, 2), 7: (0, 4), 8: (0, 2), 12: (0, 4), 13: (0, 4), 14: (208, 210)}


class CompactWeight(nn.Module):
    """A (rows, columns) matrix kept compact: `stored` is half-precision values, or uint8 quantised blocks of
    ggml type `qtype`, one row of blocks per matrix row."""

    def __init__(self, stored: Tensor, shape: tuple[int, int], qtype: int | None = None):
        super().__init__()
        self.register_buffer("stored", stored)
        self.shape, self.qtype = tuple(shape), qtype

    def rows(self, index: Tensor | slice) -> Tensor:
        """Float32 rows of the matrix (a slice, or a tensor of row indices)."""
        part = self.stored[index]
        if self.qtype is None:
            return part.float()
        raw = part.reshape(-1, self.stored.shape[-1])
        if raw.device.type in NUMPY_DEVICES:
            out = _dequantized(raw.numpy(), self.qtype, self.shape[1])
        else:  # on the blocks' own device: nothing crosses the bus
            out = dequantize_rows(raw, self.qtype, self.shape[1])
        return out.reshape(*part.shape[:-1], self.shape[1])

    def dense(self) -> Tensor:
        return self.rows(slice(None))

    def chunk_rows(self) -> int:
        return max(CHUNK_VALUES // self.shape[1], 1)


class CompactLinear(nn.Module):
    """nn.Linear with a compact weight: the output computed in float32, a slice of rows at a time."""

    def __init__(self, weight: CompactWeight, bias: Tensor | None = None):
        super().__init__()
        self.compact = weight
        self.out_features, self.in_features = weight.shape
        self.bias = None if bias is None else nn.Parameter(bias, requires_grad=False)

    @property
    def weight(self) -> Tensor:
        return self.compact.dense()

    def forward(self, x: Tensor) -> Tensor:
        memo = self.__dict__.get("probe_memo")
        if memo is not None and memo and memo[0].shape == x.shape and torch.equal(memo[0], x):
            return memo[1].clone()
        out = self._output(x)
        if memo is not None:
            self.probe_memo = (x.clone(), out.clone())
        return out

    def _output(self, x: Tensor) -> Tensor:
        step = self.compact.chunk_rows()
        if step >= self.out_features:
            return F.linear(x, self.compact.dense(), self.bias)
        parts = [F.linear(x, self.compact.rows(slice(start, start + step)))
                 for start in range(0, self.out_features, step)]
        out = torch.cat(parts, dim=-1)
        return out if self.bias is None else out + self.bias


class CompactEmbedding(nn.Module):
    """nn.Embedding with a compact table: only the rows looked up are made float32 (then scaled where the
    replaced module scales, as Gemma's embeddings do)."""

    def __init__(self, weight: CompactWeight, embed_scale: Tensor | float | None = None):
        super().__init__()
        self.compact = weight
        self.num_embeddings, self.embedding_dim = weight.shape
        self.embed_scale = embed_scale

    @property
    def weight(self) -> Tensor:
        return self.compact.dense()

    def forward(self, ids: Tensor) -> Tensor:
        out = self.compact.rows(ids)
        return out if self.embed_scale is None else out * torch.as_tensor(self.embed_scale, dtype=out.dtype)


def _dequantized(raw: np.ndarray, qtype: int, columns: int) -> Tensor:
    """(rows, bytes per row) blocks -> (rows, columns) float32, in pieces on a pool of threads (NumPy lets go of
    the GIL): gguf_dequant.py's formulas, each piece written in place."""
    values, size, fn = BLOCKS[qtype]
    blocks = raw.reshape(-1, size)
    out = np.empty((blocks.shape[0], values), dtype=np.float32)
    step = max(PIECE_VALUES // values, 1)
    pieces = [slice(start, start + step) for start in range(0, blocks.shape[0], step)]
    if len(pieces) == 1:
        fn(blocks, out)
    else:
        list(_pool().map(lambda s: fn(blocks[s], out[s]), pieces))
    return torch.from_numpy(out).reshape(raw.shape[0], columns)


_POOL: list[ThreadPoolExecutor] = []


def _pool() -> ThreadPoolExecutor:
    """One pool for every compact weight (its threads only run NumPy over disjoint pieces: no shared state)."""
    if not _POOL:
        _POOL.append(ThreadPoolExecutor(max_workers=min(os.cpu_count() or 1, 8), thread_name_prefix="dequantize"))
    return _POOL[0]


def piece_bytes(model: nn.Module) -> int:
    """The most float32 bytes one call of a compact module makes at once: a Linear's slice of rows (at most
    CHUNK_VALUES values, 64 MB), dequantised or upcast for that call and dropped after it. 0 for a model with
    no compact Linear. An embedding makes only the rows looked up: counted with the forward's tokens."""
    pieces = [min(m.compact.chunk_rows(), m.out_features) * m.in_features * 4
              for m in model.modules() if isinstance(m, CompactLinear)]
    return max(pieces, default=0)


def start_probes(model: nn.Module) -> None:
    """While a model opens, its few-token probes (the attention layers found, W_O, the output side) run the
    same two tokens through it several times: each compact Linear keeps its last input and output meanwhile
    and answers an equal input from them, so the blocks are dequantised once, not once per probe. Only
    while the model is opening, on the opening thread (no other thread has it yet); end_probes ends it."""
    for m in model.modules():
        if isinstance(m, CompactLinear):
            m.probe_memo = ()


def end_probes(model: nn.Module) -> None:
    for m in model.modules():
        m.__dict__.pop("probe_memo", None)


def float_weight(module: nn.Module) -> Tensor:
    """A module's weight as float32: compact ones built for this call, others as they are (no copy where they
    are float32 already)."""
    compact = getattr(module, "compact", None)
    return compact.dense() if isinstance(compact, CompactWeight) else module.weight.float()


def is_compact(module: nn.Module) -> bool:
    return isinstance(getattr(module, "compact", None), CompactWeight)


def replaceable(module: nn.Module) -> bool:
    """Modules whose weight can be kept compact: nn.Linear, nn.Embedding (Gemma's scaled one too)."""
    return type(module) is nn.Linear or (isinstance(module, nn.Embedding) and
                                         (type(module) is nn.Embedding or hasattr(module, "embed_scale")))


def compact_module(module: nn.Module, weight: CompactWeight) -> nn.Module:
    """The compact replacement of a Linear or Embedding module."""
    if isinstance(module, nn.Embedding):
        scale = getattr(module, "embed_scale", None)
        return CompactEmbedding(weight, scale.detach().clone() if isinstance(scale, Tensor) else scale)
    return CompactLinear(weight, None if module.bias is None else module.bias.detach())


def half_weight(values: Tensor, source_qtype: int) -> CompactWeight:
    """A float32 matrix in float16, or bfloat16 where the file stores bfloat16 or float16 would overflow."""
    dtype = torch.bfloat16 if source_qtype == BF16 else torch.float16
    stored = values.to(dtype)
    if dtype == torch.float16 and not bool(torch.isfinite(stored).all()):
        stored = values.to(torch.bfloat16)
    return CompactWeight(stored, tuple(values.shape))


def block_weight(raw: Tensor, qtype: int, shape: tuple[int, int]) -> CompactWeight:
    """The file's own bytes of a matrix, (rows, bytes per row) uint8: a view of the memory map where no row
    moved (only read, never written)."""
    if qtype in FLOATS:  # float32, float16 or bfloat16 as the file stores it
        return CompactWeight(raw.view(FLOATS[qtype]).reshape(shape), shape)
    return CompactWeight(raw, shape, qtype)


def file_rows(raw: np.ndarray, rows: int) -> Tensor:
    """A tensor's bytes from the memory map as (rows, bytes per row) uint8, nothing copied."""
    with warnings.catch_warnings():  # torch warns about any read-only array; these bytes are only read
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(raw).reshape(rows, -1)


def blocks_finite(raw: np.ndarray, qtype: int) -> bool:
    """Whether a quantised tensor's values are all finite: its float16 scales are (each value is a scale
    times a small integer, plus a scaled minimum); float tensors: every value."""
    if qtype in FLOATS:
        return bool(torch.isfinite(torch.from_numpy(raw.copy()).view(FLOATS[qtype]).float()).all())
    start, stop = SCALE_BYTES[qtype]
    size = BLOCKS[qtype][1]
    scales = np.ascontiguousarray(raw.reshape(-1, size)[:, start:stop]).view(np.float16)
    return bool(np.isfinite(scales).all())


def keeps_blocks(qtype: int) -> bool:
    """Types attnviz keeps as the file stores them: the blocks it dequantises itself, per call, and the
    float types (others are kept as float16)."""
    return qtype in BLOCKS or qtype in FLOATS


def storage_sizes(header) -> dict[str, int]:
    """Bytes the file's weights take in each storage: matrices compact, everything else float32."""
    sizes = dict.fromkeys(STORAGES, 0)
    for info in header.tensors:
        n = int(np.prod(info.shape, dtype=np.int64))
        matrix = len(info.shape) == 2
        sizes["float32"] += 4 * n
        sizes["float16"] += 2 * n if matrix else 4 * n
        sizes["blocks"] += (info.nbytes if keeps_blocks(info.qtype) else 2 * n) if matrix else 4 * n
    return sizes


def storage_plan(header, allowed: int) -> tuple[str | None, dict[str, int]]:
    """The storage for weights that must fit `allowed` bytes, None where none does; and each storage's size.
    float32 where it fits; else the file's blocks (exact, and the smallest); float16 where the environment's
    ATTNVIZ_COMPACT=float16 asks for it (faster where a type has no formula here, inexact: for measuring)."""
    sizes = storage_sizes(header)
    compact = "float16" if os.environ.get(COMPACT_ENV) == "float16" else "blocks"
    return next((s for s in ("float32", compact) if sizes[s] <= allowed), None), sizes


def storage_note(storage: str, sizes: dict[str, int], quantization: str) -> str:
    """The line a run's notes show for a compact model."""
    from attnviz.core.runs.device import format_bytes

    how = (f"its {quantization} blocks dequantised per layer as each runs" if storage == "blocks"
           else "in float16, computed in float32 layer by layer")
    return (f"weights kept compact ({format_bytes(sizes[storage])} instead of {format_bytes(sizes['float32'])} as "
            f"float32): {how}")


def gguf_within_budget(folder, memory_budget: int | None) -> tuple[int, str, str | None]:
    """(bytes, storage, the note saying so) for a GGUF file attnviz reads itself: float32 where it fits the
    budget, else the smallest compact form that does; ModelError before any weight is read where none does."""
    from attnviz.core.runs.device import format_bytes
    from attnviz.core.runs.memory import memory_allowance
    from attnviz.models.errors import ModelError
    from attnviz.models.gguf_files import gguf_header, read_gguf

    header = gguf_header(folder.gguf)
    allowed, source = memory_allowance(memory_budget)
    storage, sizes = storage_plan(header, allowed)
    if storage is None:
        raise ModelError(folder.path, f"the weights need about {format_bytes(min(sizes.values()))} even kept "
                         f"compact ({format_bytes(sizes['float32'])} as float32), over {format_bytes(allowed)} "
                         f"({source})", "choose a smaller model, or free memory")
    note = None if storage == "float32" else storage_note(storage, sizes, read_gguf(folder.gguf).quantization)
    return sizes[storage], storage, note
