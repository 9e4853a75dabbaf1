"""toy-induction's weights and modules as circuits read them (core/analysis/circuit_parts.py); the encoder-decoder toys
have no residual stream ending in one next-token head, so they have none."""

from __future__ import annotations

import torch
from torch import nn

from attnviz.core.analysis.circuit_parts import APPLIES, CircuitParts, LayerParts, Norm
from attnviz.core.runs.config import ConfigError


def _norm(ln: nn.LayerNorm) -> Norm:
    return Norm(ln, ln.weight.detach(), ln.bias.detach(), centred=True)


def _heads(linear: nn.Linear, heads: int) -> torch.Tensor:
    """(H, d_in, dh) of a Linear whose outputs are the heads' slices, side by side."""
    w = linear.weight.detach().T  # (d_in, H·dh)
    return w.reshape(w.shape[0], heads, -1).permute(1, 0, 2)


def toy_parts(toy) -> CircuitParts:
    """The CircuitParts of a loaded toy (attnviz.toys.ToyModel)."""
    module, spec = toy.module, toy.spec
    if spec.task != "induction":
        raise ConfigError("variant", spec.name, f"{spec.name} is an encoder-decoder: {APPLIES} read a decoder-only "
                          "model's residual stream", "choose toy-induction")
    heads, layers = spec.heads, []
    for ln, attn, entering in zip(module.lns, module.attns, module.entering):
        w_o = attn.output.weight.detach().T  # (H·dv, d)
        layers.append(LayerParts(
            w_q=_heads(attn.query, heads), w_k=_heads(attn.key, heads), w_v=_heads(attn.value, heads),
            w_o=w_o.reshape(heads, -1, w_o.shape[1]), norm=_norm(ln), attention=attn, out_proj=attn.output,
            block=entering))
    vocab = spec.vocabulary
    return CircuitParts(
        embed=module.tok.weight.detach(), unembed=module.head.weight.detach().T, unembed_bias=module.head.bias.detach(),
        final_norm=_norm(module.ln_f), layers=tuple(layers),
        tokenize=lambda text: [vocab.find(c) for c in text])  # -1: not in the vocabulary
