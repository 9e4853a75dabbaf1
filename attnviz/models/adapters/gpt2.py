"""GPT-2: pre-norm blocks, learned positions, GELU (tanh), causal.

Keys (nanoGPT's from_pretrained copies the same ones): wte, wpe, h.N.ln_1, h.N.attn.c_attn (Conv1D:
weight stored (in, out), so transposed here; q, k, v side by side), h.N.attn.c_proj, h.N.ln_2,
h.N.mlp.c_fc, h.N.mlp.c_proj, ln_f. The h.N.attn.bias buffers of old files (the causal mask) are unused.
"""

from __future__ import annotations

import math

from torch import Tensor

from ..folder import ModelError
from ..model import ModelShape

MODEL_TYPES = ("gpt2",)
ACTS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu", "silu": "silu"}


def shape(config: dict) -> ModelShape:
    from . import need

    act = config.get("activation_function", "gelu_new")
    if act not in ACTS:
        raise ModelError(act, "unsupported activation", f"supported: {', '.join(ACTS)}",
                         field_name="activation_function")
    d, heads, layers = need(config, "n_embd", "hidden_size"), need(config, "n_head"), need(config, "n_layer")
    head_dim = d // heads
    scale = 1 / math.sqrt(head_dim) if config.get("scale_attn_weights", True) else 1.0
    by_layer = config.get("scale_attn_by_inverse_layer_idx", False)
    return ModelShape(
        family="gpt2", model_type=config["model_type"], layers=layers, heads=heads, kv_heads=heads, d_model=d,
        head_dim=head_dim, d_ff=config.get("n_inner") or 4 * d, vocab_size=need(config, "vocab_size"),
        max_positions=need(config, "n_positions", "n_ctx"), causal=True, norm="layer",
        norm_eps=config.get("layer_norm_epsilon", 1e-5), prenorm=True, act=ACTS[act],
        scales=tuple(scale / (i + 1) for i in range(layers)) if by_layer or scale != 1 / math.sqrt(head_dim) else (),
    )


def convert(state: dict, shape: ModelShape) -> dict[str, Tensor]:
    from . import strip_prefix

    src = strip_prefix(state, "wte.weight")
    out = {"embed.tokens.weight": src.get("wte.weight"), "embed.positions.weight": src.get("wpe.weight"),
           "norm.weight": src.get("ln_f.weight"), "norm.bias": src.get("ln_f.bias")}
    d = shape.d_model
    for i in range(shape.layers):
        h, ours = f"h.{i}.", f"blocks.{i}."
        for name, theirs in (("norm1", "ln_1"), ("norm2", "ln_2")):
            out[f"{ours}{name}.weight"], out[f"{ours}{name}.bias"] = src.get(f"{h}{theirs}.weight"), \
                src.get(f"{h}{theirs}.bias")
        qkv_w, qkv_b = src.get(f"{h}attn.c_attn.weight"), src.get(f"{h}attn.c_attn.bias")
        for j, name in enumerate("qkv"):
            out[f"{ours}attn.{name}.weight"] = None if qkv_w is None else qkv_w[:, j * d:(j + 1) * d].t().contiguous()
            out[f"{ours}attn.{name}.bias"] = None if qkv_b is None else qkv_b[j * d:(j + 1) * d]
        for name, theirs in (("attn.o", "attn.c_proj"), ("mlp.up", "mlp.c_fc"), ("mlp.down", "mlp.c_proj")):
            w = src.get(f"{h}{theirs}.weight")
            out[f"{ours}{name}.weight"] = None if w is None else w.t().contiguous()  # Conv1D (in, out)
            out[f"{ours}{name}.bias"] = src.get(f"{h}{theirs}.bias")
    return out
