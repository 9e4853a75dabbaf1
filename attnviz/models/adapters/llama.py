"""Llama-style decoders (llama, mistral, qwen2): pre-norm RMSNorm blocks, RoPE rotating halves, GQA,
SwiGLU; Qwen2's q/k/v biases; Mistral's (and Qwen2's, when on) sliding window.

Keys: [model.]embed_tokens, layers.N.input_layernorm, layers.N.self_attn.{q,k,v,o}_proj,
layers.N.post_attention_layernorm, layers.N.mlp.{gate,up,down}_proj, norm. The lm_head is not needed.
"""

from __future__ import annotations

from torch import Tensor

from ..folder import ModelError
from ..model import ModelShape

MODEL_TYPES = ("llama", "mistral", "qwen2")
ACTS = {"silu": "silu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}


def _rope_base(config: dict) -> float:
    params = config.get("rope_parameters") or {}  # transformers >= 5 keeps it here
    scaling = config.get("rope_scaling") or {}
    kind = params.get("rope_type") or scaling.get("rope_type") or scaling.get("type") or "default"
    if kind != "default":
        raise ModelError(kind, "this RoPE scaling is not supported yet", "use a model with plain RoPE (rope_type "
                         "default)", field_name="rope_scaling")
    return float(params.get("rope_theta") or config.get("rope_theta") or 10000.0)


def _windows(config: dict, layers: int) -> tuple[int, ...]:
    """Per layer: the sliding window (keys a query sees, itself included), 0 = full attention."""
    window = config.get("sliding_window") or 0
    kinds = config.get("layer_types")
    if config["model_type"] == "qwen2" and not config.get("use_sliding_window", False):
        return ()
    if kinds:
        return tuple(window if k == "sliding_attention" else 0 for k in kinds)
    if config["model_type"] == "qwen2":
        first = config.get("max_window_layers", layers)
        return tuple(window if i >= first else 0 for i in range(layers))
    return (window,) * layers if window else ()


def shape(config: dict) -> ModelShape:
    from . import need

    act = config.get("hidden_act", "silu")
    if act not in ACTS:
        raise ModelError(act, "unsupported activation", f"supported: {', '.join(ACTS)}", field_name="hidden_act")
    d, heads, layers = need(config, "hidden_size"), need(config, "num_attention_heads"), need(config,
                                                                                               "num_hidden_layers")
    qwen = config["model_type"] == "qwen2"
    bias = bool(config.get("attention_bias", False))
    return ModelShape(
        family="llama", model_type=config["model_type"], layers=layers, heads=heads,
        kv_heads=config.get("num_key_value_heads") or heads, d_model=d, head_dim=config.get("head_dim") or d // heads,
        d_ff=need(config, "intermediate_size"), vocab_size=need(config, "vocab_size"),
        max_positions=need(config, "max_position_embeddings"), causal=True, norm="rms",
        norm_eps=config.get("rms_norm_eps", 1e-6), prenorm=True, act=ACTS[act], gated=True,
        qkv_bias=qwen or bias, out_bias=bias, mlp_bias=bool(config.get("mlp_bias", False)),
        learned_positions=False, rope_base=_rope_base(config), windows=_windows(config, layers),
    )


def convert(state: dict, shape: ModelShape) -> dict[str, Tensor]:
    from . import strip_prefix

    src = strip_prefix(state, "embed_tokens.weight")
    out = {"embed.tokens.weight": src.get("embed_tokens.weight"), "norm.weight": src.get("norm.weight")}
    parts = {"attn.q": "self_attn.q_proj", "attn.k": "self_attn.k_proj", "attn.v": "self_attn.v_proj",
             "attn.o": "self_attn.o_proj", "mlp.gate": "mlp.gate_proj", "mlp.up": "mlp.up_proj",
             "mlp.down": "mlp.down_proj", "norm1": "input_layernorm", "norm2": "post_attention_layernorm"}
    for i in range(shape.layers):
        for ours, theirs in parts.items():
            for p in ("weight", "bias"):
                key = f"layers.{i}.{theirs}.{p}"
                if key in src or p == "weight":
                    out[f"blocks.{i}.{ours}.{p}"] = src.get(key)
    return out
