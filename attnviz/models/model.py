"""nanoGPT-sized transformer blocks around the project's one attention kernel.

Three things differ between the families we load, and each is chosen once, when the model is
built from its ModelShape (never by a branch inside the kernel):
  - where the norm sits: PostNormBlock (BERT: x = norm(x + f(x))) or PreNormBlock (GPT-2, Llama:
    x = x + f(norm(x)));
  - the norm (LayerNorm, or RMSNorm) and the MLP (two matrices with GELU, or SwiGLU's three);
  - positions: learned embeddings added to the tokens (BERT, GPT-2) or RoPE inside attention.
Every layer's attention is one `attention(...)` call, so it yields the same Trace as the seed
modules (stages.py), plus `x` (the attention's input), `context` and `output`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..core.kernel import Trace, attention, merge_heads
from ..core.mods import rope


@dataclass(frozen=True)
class ModelShape:
    """What an adapter reads from config.json: everything the blocks need."""

    family: str  # adapter: bert, gpt2, llama
    model_type: str  # config.json's model_type
    layers: int
    heads: int
    kv_heads: int
    d_model: int
    head_dim: int
    d_ff: int
    vocab_size: int
    max_positions: int
    causal: bool
    norm: str = "layer"  # "layer" or "rms"
    norm_eps: float = 1e-5
    prenorm: bool = True
    act: str = "gelu"  # gelu, gelu_tanh, silu, relu
    gated: bool = False  # SwiGLU-style gate_proj / up_proj / down_proj
    qkv_bias: bool = True
    out_bias: bool = True
    mlp_bias: bool = True
    learned_positions: bool = True
    type_vocab: int = 0  # BERT's token types (0 for the text's only segment)
    embed_norm: bool = False  # BERT: LayerNorm after the embeddings
    final_norm: bool = True  # GPT-2, Llama: a norm after the last block
    rope_base: float = 0.0  # > 0: RoPE (rotating halves) with this base
    windows: tuple[int, ...] = ()  # per layer: sliding window (keys a query sees, itself included); 0 = full
    scales: tuple[float, ...] = ()  # per layer score scale; () = 1/sqrt(head_dim)

    def window(self, layer: int) -> int:
        return self.windows[layer] if self.windows else 0

    def scale(self, layer: int) -> float | None:
        return self.scales[layer] if self.scales else None


ACTIVATIONS = {
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "relu": F.relu,
}


def make_norm(shape: ModelShape) -> nn.Module:
    if shape.norm == "rms":
        return nn.RMSNorm(shape.d_model, eps=shape.norm_eps)
    return nn.LayerNorm(shape.d_model, eps=shape.norm_eps)


class SelfAttention(nn.Module):
    """q, k, v, o projections around one kernel call; GQA and RoPE as the shape says."""

    def __init__(self, shape: ModelShape, layer: int):
        super().__init__()
        s = shape
        self.heads, self.kv_heads, self.head_dim = s.heads, s.kv_heads, s.head_dim
        self.q = nn.Linear(s.d_model, s.heads * s.head_dim, bias=s.qkv_bias)
        self.k = nn.Linear(s.d_model, s.kv_heads * s.head_dim, bias=s.qkv_bias)
        self.v = nn.Linear(s.d_model, s.kv_heads * s.head_dim, bias=s.qkv_bias)
        self.o = nn.Linear(s.heads * s.head_dim, s.d_model, bias=s.out_bias)
        self.scale = s.scale(layer)
        base = s.rope_base
        self.rotate = (lambda t: rope(t, base)) if base > 0 else None

    def forward(self, x: Tensor, mask: Tensor | None, record) -> tuple[Tensor, Trace]:
        b, length, _ = x.shape  # (B, L, d)

        def heads(t: Tensor, n: int) -> Tensor:  # (B, L, n * dh) -> (B, n, L, dh)
            return t.view(b, length, n, self.head_dim).transpose(1, 2)

        q, k, v = heads(self.q(x), self.heads), heads(self.k(x), self.kv_heads), heads(self.v(x), self.kv_heads)
        context, trace = attention(q, k, v, mask=mask, scale=self.scale, rotate=self.rotate, record=record)
        trace.keep("x", x)
        context = trace.keep("context", merge_heads(context))
        return trace.keep("output", self.o(context)), trace


class MLP(nn.Module):
    def __init__(self, shape: ModelShape):
        super().__init__()
        self.up = nn.Linear(shape.d_model, shape.d_ff, bias=shape.mlp_bias)
        self.down = nn.Linear(shape.d_ff, shape.d_model, bias=shape.mlp_bias)
        self.act = ACTIVATIONS[shape.act]

    def forward(self, x: Tensor) -> Tensor:
        return self.down(self.act(self.up(x)))


class GatedMLP(MLP):
    """SwiGLU (Llama): down(act(gate(x)) * up(x))."""

    def __init__(self, shape: ModelShape):
        super().__init__(shape)
        self.gate = nn.Linear(shape.d_model, shape.d_ff, bias=shape.mlp_bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(self.act(self.gate(x)) * self.up(x))


class PreNormBlock(nn.Module):
    """GPT-2, Llama: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, shape: ModelShape, layer: int):
        super().__init__()
        self.norm1, self.attn = make_norm(shape), SelfAttention(shape, layer)
        self.norm2, self.mlp = make_norm(shape), (GatedMLP if shape.gated else MLP)(shape)

    def forward(self, x: Tensor, mask: Tensor | None, record) -> tuple[Tensor, Trace]:
        a, trace = self.attn(self.norm1(x), mask, record)
        x = x + a
        return x + self.mlp(self.norm2(x)), trace


class PostNormBlock(PreNormBlock):
    """BERT: norm(x + attn(x)), then norm(x + mlp(x))."""

    def forward(self, x: Tensor, mask: Tensor | None, record) -> tuple[Tensor, Trace]:
        a, trace = self.attn(x, mask, record)
        x = self.norm1(x + a)
        return self.norm2(x + self.mlp(x)), trace


class Embeddings(nn.Module):
    def __init__(self, shape: ModelShape):
        super().__init__()
        self.tokens = nn.Embedding(shape.vocab_size, shape.d_model)
        self.positions = nn.Embedding(shape.max_positions, shape.d_model) if shape.learned_positions else None
        self.types = nn.Embedding(shape.type_vocab, shape.d_model) if shape.type_vocab else None
        self.norm = make_norm(shape) if shape.embed_norm else None

    def forward(self, ids: Tensor) -> Tensor:
        x = self.tokens(ids)  # (B, L, d)
        if self.positions is not None:
            x = x + self.positions(torch.arange(ids.shape[1], device=ids.device))
        if self.types is not None:
            x = x + self.types(torch.zeros_like(ids))
        return self.norm(x) if self.norm is not None else x


class Transformer(nn.Module):
    """Embeddings, `layers` blocks and the final norm; forward returns the last hidden state and
    one Trace per layer."""

    def __init__(self, shape: ModelShape):
        super().__init__()
        self.shape = shape
        block = PreNormBlock if shape.prenorm else PostNormBlock
        self.embed = Embeddings(shape)
        self.blocks = nn.ModuleList(block(shape, i) for i in range(shape.layers))
        self.norm = make_norm(shape) if shape.final_norm else nn.Identity()

    def masks(self, length: int, device: torch.device) -> list[Tensor | None]:
        """One mask per layer (True = may attend): causal, and inside the window where a layer has one."""
        if not self.shape.causal:
            return [None] * self.shape.layers
        offset = torch.arange(length, device=device)[:, None] - torch.arange(length, device=device)[None, :]
        causal = offset >= 0
        built: dict[int, Tensor] = {}
        return [built.setdefault(w, causal & (offset < w) if w else causal)
                for w in (self.shape.window(i) for i in range(self.shape.layers))]

    def forward(self, ids: Tensor, record=()) -> tuple[Tensor, list[Trace]]:
        x = self.embed(ids)  # ids (B, L) -> (B, L, d)
        traces = []
        for block, mask in zip(self.blocks, self.masks(ids.shape[1], ids.device)):
            x, trace = block(x, mask, record)
            traces.append(trace)
        return self.norm(x), traces
