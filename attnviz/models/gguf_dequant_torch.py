"""GGUF blocks to float32 with torch, on whatever device the uint8 blocks live on.

The same block formulas as gguf_dequant.py (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K), operation for
operation: float16 scales upcast to float32, integers converted to float32, each product and sum one float32
operation of its own (no fused multiply-add), so the values are bit for bit NumPy's and the gguf package's.
Compact weights use these where their blocks sit on an accelerator, so the blocks stay compact there and
never cross the bus; on the CPU NumPy's formulas are faster (benchmarks/README.md, Behind the code).
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnviz.models.gguf_dequant import Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K, Q8_0

CHUNK_VALUES = 1 << 24  # values dequantised at once: bounds the temporaries (a few bytes a value)


def _shifts(device: torch.device, step: int) -> Tensor:
    """0, step, 2 step ... below 8, made on the device (no copy from the host)."""
    return torch.arange(0, 8, step, dtype=torch.uint8, device=device)


def _f16(raw: Tensor) -> Tensor:
    """(n, 2) bytes -> float32 (n, 1)."""
    return raw.contiguous().view(torch.float16).float()


def _nibbles(qs: Tensor) -> Tensor:
    """(n, k) bytes -> (n, 2k): the low nibbles first, then the high ones (ggml's order in a block)."""
    return torch.cat((qs & 0x0F, qs >> 4), dim=1)


def _bits(qh: Tensor) -> Tensor:
    """(n, 4) bytes of a little-endian uint32 -> its 32 bits, lowest first."""
    return ((qh[:, :, None] >> _shifts(qh.device, 1)) & 1).reshape(qh.shape[0], 32)


def _q4_0(b: Tensor, out: Tensor) -> None:
    torch.mul(_f16(b[:, :2]), _nibbles(b[:, 2:]).view(torch.int8) - 8, out=out)


def _q4_1(b: Tensor, out: Tensor) -> None:
    torch.mul(_f16(b[:, :2]), _nibbles(b[:, 4:]), out=out)
    out.add_(_f16(b[:, 2:4]))


def _q5_0(b: Tensor, out: Tensor) -> None:
    q = (_nibbles(b[:, 6:]) | (_bits(b[:, 2:6]) << 4)).view(torch.int8) - 16
    torch.mul(_f16(b[:, :2]), q, out=out)


def _q5_1(b: Tensor, out: Tensor) -> None:
    torch.mul(_f16(b[:, :2]), _nibbles(b[:, 8:]) | (_bits(b[:, 4:8]) << 4), out=out)
    out.add_(_f16(b[:, 2:4]))


def _q8_0(b: Tensor, out: Tensor) -> None:
    torch.mul(b[:, 2:].view(torch.int8), _f16(b[:, :2]), out=out)


def _k_scales(scales: Tensor) -> tuple[Tensor, Tensor]:
    """Q4_K / Q5_K's 12 bytes of packed 6-bit scales and mins -> (n, 8) each (gguf's Q4_K.get_scale_min)."""
    s = scales.reshape(-1, 3, 4)
    d, m, m_d = s[:, 0], s[:, 1], s[:, 2]
    sc = torch.cat((d & 0x3F, (m_d & 0x0F) | ((d >> 2) & 0x30)), dim=1)
    mn = torch.cat((m & 0x3F, (m_d >> 4) | ((m >> 2) & 0x30)), dim=1)
    return sc, mn


def _k_low(qs: Tensor) -> Tensor:
    """(n, 128) bytes -> (n, 8, 32): per 32-byte group its low nibbles, then its high nibbles."""
    return ((qs.reshape(-1, 4, 1, 32) >> _shifts(qs.device, 4).reshape(1, 1, 2, 1)) & 0x0F).reshape(-1, 8, 32)


def _k_affine(b: Tensor, q: Tensor, out: Tensor) -> None:
    """out = d * q - dm, with Q4_K / Q5_K's per-32 scales and mins."""
    sc, mn = _k_scales(b[:, 4:16])
    d = (_f16(b[:, :2]) * sc.float()).reshape(-1, 8, 1)
    dm = (_f16(b[:, 2:4]) * mn.float()).reshape(-1, 8, 1)
    view = out.view(-1, 8, 32)
    torch.mul(d, q, out=view)
    view.sub_(dm)


def _q4_k(b: Tensor, out: Tensor) -> None:
    _k_affine(b, _k_low(b[:, 16:]), out)


def _q5_k(b: Tensor, out: Tensor) -> None:
    qh = (b[:, 16:48].reshape(-1, 1, 1, 32) >> _shifts(b.device, 1).reshape(1, 1, 8, 1)) & 0x01
    _k_affine(b, _k_low(b[:, 48:]) | (qh.reshape(-1, 8, 32) << 4), out)


def _q6_k(b: Tensor, out: Tensor) -> None:
    d = (_f16(b[:, 208:210]) * b[:, 192:208].view(torch.int8).float()).reshape(-1, 16, 1)
    ql = (b[:, :128].reshape(-1, 2, 1, 64) >> _shifts(b.device, 4).reshape(1, 1, 2, 1)) & 0x0F
    qh = (b[:, 128:192].reshape(-1, 2, 1, 32) >> _shifts(b.device, 2).reshape(1, 1, 4, 1)) & 0x03
    q = (ql.reshape(-1, 8, 32) | (qh.reshape(-1, 8, 32) << 4)).view(torch.int8) - 32
    torch.mul(d, q.reshape(-1, 16, 16), out=out.view(-1, 16, 16))


# type -> (values per block, bytes per block, the function): gguf_dequant.BLOCKS's types and sizes
BLOCKS = {Q4_0: (32, 18, _q4_0), Q4_1: (32, 20, _q4_1), Q5_0: (32, 22, _q5_0), Q5_1: (32, 24, _q5_1),
          Q8_0: (32, 34, _q8_0), Q4_K: (256, 144, _q4_k), Q5_K: (256, 176, _q5_k), Q6_K: (256, 210, _q6_k)}


def dequantize_rows(raw: Tensor, qtype: int, columns: int) -> Tensor:
    """(rows, bytes per row) uint8 blocks of ggml type `qtype` -> (rows, columns) float32 on their device."""
    values, size, fn = BLOCKS[qtype]
    blocks = raw.reshape(-1, size)
    out = torch.empty((blocks.shape[0], values), dtype=torch.float32, device=raw.device)
    step = max(CHUNK_VALUES // values, 1)
    for start in range(0, blocks.shape[0], step):
        fn(blocks[start:start + step], out[start:start + step])
    return out.reshape(raw.shape[0], columns)
