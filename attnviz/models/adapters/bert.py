"""BERT-style encoders (bert-base, all-MiniLM-L6-v2): post-norm blocks, learned positions, GELU.

Keys: embeddings.{word,position,token_type}_embeddings, embeddings.LayerNorm (old files: gamma/beta),
encoder.layer.N.attention.self.{query,key,value}, attention.output.{dense,LayerNorm},
intermediate.dense, output.{dense,LayerNorm}.
"""

from __future__ import annotations

from torch import Tensor

from ..folder import ModelError
from ..model import ModelShape

MODEL_TYPES = ("bert",)
ACTS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu", "silu": "silu"}


def shape(config: dict) -> ModelShape:
    from . import need

    if config.get("position_embedding_type", "absolute") != "absolute":
        raise ModelError(config["position_embedding_type"], "only absolute position embeddings are supported",
                         "use a BERT model with position_embedding_type absolute", field_name="position_embedding_type")
    act = config.get("hidden_act", "gelu")
    if act not in ACTS:
        raise ModelError(act, "unsupported activation", f"supported: {', '.join(ACTS)}", field_name="hidden_act")
    d, heads = need(config, "hidden_size"), need(config, "num_attention_heads")
    return ModelShape(
        family="bert", model_type=config["model_type"], layers=need(config, "num_hidden_layers"), heads=heads,
        kv_heads=heads, d_model=d, head_dim=d // heads, d_ff=need(config, "intermediate_size"),
        vocab_size=need(config, "vocab_size"), max_positions=need(config, "max_position_embeddings"),
        causal=False, norm="layer", norm_eps=config.get("layer_norm_eps", 1e-12), prenorm=False, act=ACTS[act],
        type_vocab=config.get("type_vocab_size", 2), embed_norm=True, final_norm=False,
    )


def _norm(src: dict, name: str) -> dict[str, Tensor]:
    """A LayerNorm's weight and bias, under the new (weight/bias) or old (gamma/beta) names."""
    weight = src.get(f"{name}.weight", src.get(f"{name}.gamma"))
    bias = src.get(f"{name}.bias", src.get(f"{name}.beta"))
    return {"weight": weight, "bias": bias}


def convert(state: dict, shape: ModelShape) -> dict[str, Tensor]:
    from . import strip_prefix

    src = strip_prefix(state, "embeddings.word_embeddings.weight")
    out = {
        "embed.tokens.weight": src.get("embeddings.word_embeddings.weight"),
        "embed.positions.weight": src.get("embeddings.position_embeddings.weight"),
        "embed.types.weight": src.get("embeddings.token_type_embeddings.weight"),
        **{f"embed.norm.{k}": v for k, v in _norm(src, "embeddings.LayerNorm").items()},
    }
    parts = {"attn.q": "attention.self.query", "attn.k": "attention.self.key", "attn.v": "attention.self.value",
             "attn.o": "attention.output.dense", "mlp.up": "intermediate.dense", "mlp.down": "output.dense"}
    for i in range(shape.layers):
        layer = f"encoder.layer.{i}."
        for ours, theirs in parts.items():
            for p in ("weight", "bias"):
                out[f"blocks.{i}.{ours}.{p}"] = src.get(f"{layer}{theirs}.{p}")
        for ours, theirs in (("norm1", "attention.output.LayerNorm"), ("norm2", "output.LayerNorm")):
            out.update({f"blocks.{i}.{ours}.{k}": v for k, v in _norm(src, layer + theirs).items()})
    return out
