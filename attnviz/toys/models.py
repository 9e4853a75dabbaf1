"""The toys' networks, nanoGPT-sized, built from the seed modules of attnviz.core.variants.modules.

- EncoderDecoder (toy-reverse, toy-sort): an encoder of pre-norm blocks (seed 001 SelfAttention +
  MLP) and a decoder whose queries are learned position embeddings reading the encoder through
  one seed 000 CrossAttention, so each output position must *look up* the input it copies.
- AttentionOnly (toy-induction): token + position embeddings and two seed 002
  CausalSelfAttention layers (pre-norm residual), no MLPs, so all the work shows in attention.

forward(ids, return_trace=True) also returns the seed modules' traces, one per attention layer.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from attnviz.core.kernel.context import ForwardContext
from attnviz.core.kernel.masks import generate_mask
from attnviz.core.variants.modules import CausalSelfAttention, CrossAttention, SelfAttention


class Block(nn.Module):
    """Pre-norm encoder block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = SelfAttention(heads, width)  # seed 001: (n_heads, d_embed)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: Tensor, record: Any = True, ctx: ForwardContext | None = None) -> tuple[Tensor, Any]:
        a, trace = self.attn(self.ln_1(x), return_trace=record, ctx=ctx)
        x = x + a
        return x + self.mlp(self.ln_2(x)), trace


class EncoderDecoder(nn.Module):
    """Digits (B, L) -> logits (B, L, vocab) for the L output positions."""

    def __init__(self, vocab: int, length: int, width: int, heads: int, layers: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(length, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_enc = nn.LayerNorm(width)
        self.query = nn.Embedding(length, width)  # decoder queries: one learned vector per output
        self.cross = CrossAttention(width, width, 0.0, heads)  # seed 000: (d_in, d_out, dropout, num_heads)
        self.ln_dec = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab)

    def forward(self, ids: Tensor, return_trace: Any = False, ctx: ForwardContext | None = None
                ) -> Tensor | tuple[Tensor, list]:
        """return_trace: False, True (the default stages) or the stage names each layer keeps; ctx: the forward's
        context, passed to every attention layer."""
        record = return_trace or True
        b, length = ids.shape
        pos = torch.arange(length, device=ids.device)
        x = self.tok(ids) + self.pos(pos)  # (B, L, width)
        traces = []
        for block in self.blocks:
            x, trace = block(x, record, ctx)
            traces.append(trace)
        memory = self.ln_enc(x)  # what the decoder reads: keys and values
        q = self.query(pos).expand(b, length, -1)  # (B, L, width)
        a, trace = self.cross(q, memory, memory, return_trace=record, ctx=ctx)
        traces.append(trace)
        y = q + a
        y = y + self.mlp(self.ln_dec(y))
        logits = self.head(self.ln_f(y))  # (B, L, vocab)
        return (logits, traces) if return_trace else logits


class AttentionOnly(nn.Module):
    """Tokens (B, L) -> next-token logits (B, L, vocab), causal, attention layers only."""

    def __init__(self, vocab: int, max_len: int, width: int, heads: int, layers: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(max_len, width)
        self.lns = nn.ModuleList(nn.LayerNorm(width) for _ in range(layers))
        self.attns = nn.ModuleList(CausalSelfAttention(width, heads) for _ in range(layers))  # seed 002
        # Where the residual stream enters each layer, for hooks (activation patching); no weights, so the
        # state_dict and the shipped checkpoints are unchanged
        self.entering = nn.ModuleList(nn.Identity() for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab)

    def forward(self, ids: Tensor, return_trace: Any = False, ctx: ForwardContext | None = None
                ) -> Tensor | tuple[Tensor, list]:
        """return_trace: False, True (the default stages) or the stage names each layer keeps; ctx: the forward's
        context, passed to every attention layer."""
        record = return_trace or True
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        mask = generate_mask(x, causal=True)  # (1, 1, L, L), the seed's helper
        traces = []
        for ln, attn, entering in zip(self.lns, self.attns, self.entering):
            x = entering(x)
            a, trace = attn(ln(x), mask, return_trace=record, ctx=ctx)
            x = x + a
            traces.append(trace)
        logits = self.head(self.ln_f(x))
        return (logits, traces) if return_trace else logits


ARCHITECTURES = {"encoder-decoder": EncoderDecoder, "attention-only": AttentionOnly}


def build(architecture: dict[str, Any]) -> nn.Module:
    """The network a card's "architecture" entry describes (kind + constructor arguments)."""
    args = dict(architecture)
    return ARCHITECTURES[args.pop("kind")](**args)
