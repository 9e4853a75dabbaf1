"""GGUF blocks to float tensors, in bulk with vectorised NumPy.

One function per common type (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K), each the
gguf package's NumPy formula (gguf/quants.py) operation for operation, so the values are bit for bit the
same; they run in chunks that stay in the cache, writing into the output in place, and NumPy lets go of
the GIL meanwhile, so several tensors dequantise at once on several cores. (torch's uint8 kernels measured
slower than NumPy's here: benchmarks/README.md, Behind the code.) Every other type the gguf package can read
goes through its own dequantisation.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

CHUNK_VALUES = 1 << 23  # values dequantised at once (few GIL hand-overs while a tokenizer builds beside)
F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, BF16 = 0, 1, 2, 3, 6, 7, 8, 12, 13, 14, 30
SHIFT_4 = np.array([0, 4], dtype=np.uint8)
SHIFT_8 = np.arange(8, dtype=np.uint8)


def _f16(raw: np.ndarray) -> np.ndarray:
    """(n, 2) bytes -> float32 (n, 1)."""
    return np.ascontiguousarray(raw).view(np.float16).astype(np.float32)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """(n, k) bytes -> (n, 2k): the low nibbles first, then the high ones (ggml's order in a block)."""
    return np.concatenate((qs & np.uint8(0x0F), qs >> np.uint8(4)), axis=1)


def _bits(qh: np.ndarray) -> np.ndarray:
    """(n, 4) bytes of a little-endian uint32 -> its 32 bits, lowest first."""
    return ((qh[:, :, None] >> SHIFT_8) & np.uint8(1)).reshape(qh.shape[0], 32)


def _q4_0(b, out):
    np.multiply(_f16(b[:, :2]), _nibbles(b[:, 2:]).view(np.int8) - np.int8(8), out=out, dtype=np.float32)


def _q4_1(b, out):
    np.multiply(_f16(b[:, :2]), _nibbles(b[:, 4:]), out=out, dtype=np.float32)
    np.add(out, _f16(b[:, 2:4]), out=out)


def _q5_0(b, out):
    q = (_nibbles(b[:, 6:]) | (_bits(b[:, 2:6]) << np.uint8(4))).view(np.int8) - np.int8(16)
    np.multiply(_f16(b[:, :2]), q, out=out, dtype=np.float32)


def _q5_1(b, out):
    np.multiply(_f16(b[:, :2]), _nibbles(b[:, 8:]) | (_bits(b[:, 4:8]) << np.uint8(4)), out=out, dtype=np.float32)
    np.add(out, _f16(b[:, 2:4]), out=out)


def _q8_0(b, out):
    np.multiply(b[:, 2:].view(np.int8), _f16(b[:, :2]), out=out, dtype=np.float32)


def _k_scales(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K / Q5_K's 12 bytes of packed 6-bit scales and mins -> (n, 8) each (gguf's Q4_K.get_scale_min)."""
    s = scales.reshape(-1, 3, 4)
    d, m, m_d = s[:, 0], s[:, 1], s[:, 2]
    sc = np.concatenate((d & 0x3F, (m_d & 0x0F) | ((d >> 2) & 0x30)), axis=1)
    mn = np.concatenate((m & 0x3F, (m_d >> 4) | ((m >> 2) & 0x30)), axis=1)
    return sc, mn


def _k_low(qs: np.ndarray) -> np.ndarray:
    """(n, 128) bytes -> (n, 8, 32): per 32-byte group its low nibbles, then its high nibbles."""
    return ((qs.reshape(-1, 4, 1, 32) >> SHIFT_4.reshape(1, 1, 2, 1)) & np.uint8(0x0F)).reshape(-1, 8, 32)


def _k_affine(b, q, out):
    """out = d * q - dm, with Q4_K / Q5_K's per-32 scales and mins."""
    sc, mn = _k_scales(b[:, 4:16])
    d = (_f16(b[:, :2]) * sc.astype(np.float32)).reshape(-1, 8, 1)
    dm = (_f16(b[:, 2:4]) * mn.astype(np.float32)).reshape(-1, 8, 1)
    view = out.reshape(-1, 8, 32)
    np.multiply(d, q, out=view, dtype=np.float32)
    np.subtract(view, dm, out=view)


def _q4_k(b, out):
    _k_affine(b, _k_low(b[:, 16:]), out)


def _q5_k(b, out):
    qh = (b[:, 16:48].reshape(-1, 1, 1, 32) >> SHIFT_8.reshape(1, 1, 8, 1)) & np.uint8(0x01)
    _k_affine(b, _k_low(b[:, 48:]) | (qh.reshape(-1, 8, 32) << np.uint8(4)), out)


def _q6_k(b, out):
    d = (_f16(b[:, 208:210]) * b[:, 192:208].view(np.int8).astype(np.float32)).reshape(-1, 16, 1)
    ql = (b[:, :128].reshape(-1, 2, 1, 64) >> SHIFT_4.reshape(1, 1, 2, 1)) & np.uint8(0x0F)
    qh = (b[:, 128:192].reshape(-1, 2, 1, 32) >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)) \
        & np.uint8(0x03)
    q = (ql.reshape(-1, 8, 32) | (qh.reshape(-1, 8, 32) << np.uint8(4))).view(np.int8) - np.int8(32)
    np.multiply(d, q.reshape(-1, 16, 16), out=out.reshape(-1, 16, 16), dtype=np.float32)


# type -> (values per block, bytes per block, the function)
BLOCKS = {Q4_0: (32, 18, _q4_0), Q4_1: (32, 20, _q4_1), Q5_0: (32, 22, _q5_0), Q5_1: (32, 24, _q5_1),
          Q8_0: (32, 34, _q8_0), Q4_K: (256, 144, _q4_k), Q5_K: (256, 176, _q5_k), Q6_K: (256, 210, _q6_k)}
FLOATS = {F32: torch.float32, F16: torch.float16, BF16: torch.bfloat16}


def dequantize(raw: np.ndarray, qtype: int, shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> Tensor:
    """The tensor of `shape` (torch order) stored as `raw` bytes of ggml type `qtype`, as a new `dtype` tensor."""
    if qtype in FLOATS:
        return torch.from_numpy(raw).view(FLOATS[qtype]).reshape(shape).to(dtype, copy=True)
    if qtype not in BLOCKS:
        return _gguf_dequantize(raw, qtype, shape).to(dtype)
    values, size, fn = BLOCKS[qtype]
    blocks = raw.reshape(-1, size)
    out = np.empty((blocks.shape[0], values), dtype=np.float32)
    step = max(CHUNK_VALUES // values, 1)
    for start in range(0, blocks.shape[0], step):
        fn(blocks[start:start + step], out[start:start + step])
    result = torch.from_numpy(out.reshape(shape))
    return result if dtype == torch.float32 else result.to(dtype)


def _gguf_dequantize(raw: np.ndarray, qtype: int, shape: tuple[int, ...]) -> Tensor:
    """A type without a formula here (IQ*, Q2_K, Q3_K, TQ*): the gguf package's own NumPy."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
    from gguf.quants import dequantize as gguf_dequantize

    kind = GGMLQuantizationType(qtype)
    block, size = GGML_QUANT_SIZES[kind]
    values = gguf_dequantize(raw.reshape(-1, shape[-1] // block * size), kind)
    return torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32)).reshape(shape)
