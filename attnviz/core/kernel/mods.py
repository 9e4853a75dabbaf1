"""Position encodings and score modifiers: small functions plus one registry entry each.

Score mods use flex_attention's score_mod signature, (score, b, h, q_idx, kv_idx) -> score, so the
same function runs on whole index grids inside the kernel and on a single cell for hover.
Each declares the stage it produces ("biased" or "capped", see stages.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from attnviz.core.kernel.kinds import POSITIONS


@dataclass(frozen=True)
class ScoreMod:
    stage: str  # the stage this mod produces: "biased" (added bias) or "capped"
    fn: Callable[..., Tensor]  # (score, b, h, q_idx, kv_idx) -> score


@dataclass(frozen=True)
class ScoreRecipe:
    """How a model's attention call made its scores from q·k, which hover recomputes one cell with
    (core/analysis/cells.py): the scale, the logit cap, and whether a bias (a position bias, a float mask) was
    added. One cell of an added bias cannot be recomputed without the bias itself."""

    scale: float
    softcap: float | None = None
    biased: bool = False


def rope(x: Tensor, base: float = 10000.0, interleaved: bool = False, positions: Tensor | None = None) -> Tensor:
    """Rotary position embedding of x (..., L, d) at positions 0..L-1 (or `positions`).

    interleaved=False rotates halves (GPT-NeoX, Llama, Mistral, Qwen2: cat(-x2, x1));
    interleaved=True rotates adjacent pairs (GPT-J). Frequencies base^(-2i/d), computed in float32
    as Hugging Face's implementations do.
    """
    length, d = x.shape[-2], x.shape[-1]
    if d % 2:
        raise ValueError(f"RoPE needs an even head width, got {d}")
    pos = torch.arange(length, device=x.device) if positions is None else positions.to(x.device)
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.int64, device=x.device).float() / d))
    freqs = pos.float()[:, None] * inv_freq[None, :]  # (L, d/2)
    if interleaved:
        cos, sin = freqs.cos().repeat_interleave(2, -1), freqs.sin().repeat_interleave(2, -1)
        rotated = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
    else:
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        rotated = torch.cat((-x[..., d // 2:], x[..., : d // 2]), dim=-1)
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)


def alibi_slopes(heads: int) -> Tensor:
    """ALiBi's per-head slopes, as the paper's reference code: 2^(-8k/n) for n a power of two;
    otherwise the slopes of the power of two below, then every other slope of twice that."""
    def power_of_two(n: int) -> list[float]:
        return [2.0 ** (-8.0 * k / n) for k in range(1, n + 1)]

    if heads & (heads - 1) == 0:
        return torch.tensor(power_of_two(heads))
    c = 2 ** math.floor(math.log2(heads))
    return torch.tensor(power_of_two(c) + power_of_two(2 * c)[0::2][: heads - c])


def alibi(heads: int) -> ScoreMod:
    """ALiBi: score - m_h * |i - j| (the causal form -m_h (i - j) wherever a causal mask lets j <= i)."""
    slopes = alibi_slopes(heads)

    def fn(score, b, h, q_idx, kv_idx):
        distance = (q_idx - kv_idx).abs()
        return score - (slopes.to(score.device)[h] * distance).to(score.dtype)
    return ScoreMod("biased", fn)


def softcap(cap: float) -> ScoreMod:
    """Gemma 2's logit soft cap: cap * tanh(score / cap), before the mask."""
    return ScoreMod("capped", lambda score, b, h, q_idx, kv_idx: cap * torch.tanh(score / cap))


@dataclass(frozen=True)
class AttentionOptions:
    """The knobs of an attention call that are not weights: position, scale, cap."""

    position: str = "none"  # a key of POSITIONS
    rope_base: float = 10000.0
    qk_scale: float = 0.0  # 0 = 1/sqrt(d_head), divided as the seeds do
    softcap: float = 0.0  # 0 = off

    def rotate(self) -> Callable[[Tensor], Tensor] | None:
        kind = POSITIONS[self.position]
        if kind.interleaved is None:
            return None
        return lambda x: rope(x, self.rope_base, kind.interleaved)

    def score_mods(self, heads: int) -> list[ScoreMod]:
        mods = [alibi(heads)] if self.position == "alibi" else []
        return mods + ([softcap(self.softcap)] if self.softcap > 0 else [])

    def kernel_args(self, heads: int) -> dict:
        """Keyword arguments for kernel.attention for `heads` query heads (score maps)."""
        return dict(scale=self.qk_scale or None, rotate=self.rotate(), score_mods=self.score_mods(heads))
