"""The registry of attention variants: one spec per seed module.

A spec says how to build the module from a run config, which inputs to draw and in what order
(the order the seed scripts use, so seeded runs reproduce them), and which config fields apply.
Adding a variant means adding one spec here; the parameter panel and the CLI are generated from it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from attnviz.core.variants.differential import DifferentialAttention
from attnviz.core.variants.modules import CausalSelfAttention, ContextCrossAttention, CrossAttention, SelfAttention


class Registry(dict):
    """The variants by id. The model-backed ones (attnviz.VARIANT_MODULES) add theirs when the registry is
    first read, so core never imports the packages that build on it and start-up imports neither."""

    _loaded = False

    def _load(self) -> None:
        if not Registry._loaded:
            Registry._loaded = True
            for name in getattr(sys.modules.get("attnviz"), "VARIANT_MODULES", ()):
                importlib.import_module(name)

    def __getitem__(self, key):
        self._load()
        return super().__getitem__(key)

    def __contains__(self, key) -> bool:
        self._load()
        return super().__contains__(key)

    def __iter__(self):
        self._load()
        return super().__iter__()

    def __len__(self) -> int:
        self._load()
        return super().__len__()

    def get(self, key, default=None):
        self._load()
        return super().get(key, default)

    def keys(self):
        self._load()
        return super().keys()

    def values(self):
        self._load()
        return super().values()

    def items(self):
        self._load()
        return super().items()


# Fields every variant has; a spec lists the extra ones it uses.
COMMON_FIELDS = frozenset(
    {"variant", "d_model", "heads", "batch", "seq_q", "mask", "window", "sinks", "kv_lengths",
     "safe_softmax", "seed", "device", "dtype", "kv_heads", "qk_scale", "softcap", "weights", "inputs",
     "ablate", "ablation", "pool"}
)
# What self-attention adds: positions exist only when queries and keys are the same sequence.
POSITION_FIELDS = frozenset({"position", "rope_base"})


@dataclass(frozen=True)
class VariantSpec:
    id: str
    label: str
    seed: str  # where it comes from
    description: str
    build: Callable[[Any], nn.Module]  # config -> module (float32, CPU, fresh init)
    inputs: Callable[[Any], tuple[Tensor, ...]]  # config -> positional inputs, drawn with torch.randn
    extra_fields: frozenset[str] = frozenset()
    head_width: str = "d_model"  # the config field the heads must divide
    labels: dict[str, str] = field(default_factory=dict)  # variant-specific names for fields
    default_mask: str = "none"
    head_factor: int = 1  # score maps per head (differential attention: 2)
    # A model-backed variant (see backed.py): (config, memory_budget) -> a loaded model with
    # info, encode(text) and a traced multi-layer forward. Shapes then come from the model and the text.
    load: Callable[[Any, int | None], Any] | None = None
    # A variant whose result is read, not computed (saved.py: maps opened from a file): config -> RunResult
    read: Callable[[Any], Any] | None = None
    own_fields: frozenset[str] | None = None  # when set: exactly the fields this variant uses
    defaults: dict[str, Any] = field(default_factory=dict)  # field values a fresh config of it starts from
    caption: str = ""  # one line above the maps: what to look for
    # Your own weights and inputs (userfiles.py): the forward's tensor arguments as (name, length field,
    # width field), in call order; which weight (state_dict key, dim) gives each width field; which
    # key's presence sets each bias flag.
    layout: tuple[tuple[str, str, str], ...] = ()
    file_widths: dict[str, tuple[str, int]] = field(default_factory=dict)
    file_biases: dict[str, str] = field(default_factory=dict)

    @property
    def fields(self) -> frozenset[str]:
        if self.own_fields is not None:
            return self.own_fields
        return COMMON_FIELDS | self.extra_fields

    @property
    def backed(self) -> bool:
        """Whether a trained model computes this variant (one forward, every layer)."""
        return self.load is not None

    @property
    def cross(self) -> bool:
        return "seq_kv" in self.extra_fields

    def out_width(self, config: Any) -> int:
        return config.d_out if self.id == "cross" else config.d_model


def _attn(c):
    return c.attention_options()


def no_inputs(c) -> tuple[Tensor, ...]:
    """A model-backed variant's inputs: none (it reads its text)."""
    return ()


def not_a_module(c) -> nn.Module:
    raise TypeError(f"variant {c.variant!r} is model-backed: run it through attnviz.core.runs.backed")


# What a model-backed variant's configuration holds; heads, widths and lengths come from the model and the text.
HEAD_FIELDS = frozenset({"ablate", "ablation", "top_k"})  # ablation and the predictions of a model's output head
GENERATE_FIELDS = frozenset({"generate", "temperature", "sample_top_k", "seed"})  # a model writing after the text
BACKED_FIELDS = HEAD_FIELDS | GENERATE_FIELDS | {"variant", "model", "text", "chat", "decoder_text", "stack", "layer",
                                                 "device", "image", "pool"}
TOY_FIELDS = HEAD_FIELDS | GENERATE_FIELDS | {"variant", "text", "layer"}  # toys ship with attnviz and run on the CPU


def _random_inputs(c) -> tuple[Tensor, ...]:
    """One torch.randn (batch, length, width) per forward argument, in the spec's layout order."""
    return tuple(torch.randn(c.batch, getattr(c, length), getattr(c, width)) for _, length, width in c.spec.layout)


SELF_LAYOUT = (("x", "seq_q", "d_model"),)


VARIANTS: Registry = Registry({
    spec.id: spec
    for spec in [
        VariantSpec(
            id="causal",
            label="Causal self-attention",
            seed="seed 002 CausalSelfAttention",
            description="Self-attention with separate Q, K, V projections; GPT-style causal mask.",
            build=lambda c: CausalSelfAttention(c.d_model, c.heads, c.dropout, kv_heads=c.kv_heads, attn=_attn(c),
                                                sink_logit=c.sink_logit),
            inputs=_random_inputs,
            extra_fields=frozenset({"dropout", "train", "sink_logit"}) | POSITION_FIELDS,
            labels={"d_model": "hidden_dim"},
            layout=SELF_LAYOUT,
            file_widths={"d_model": ("query.weight", 1)},
            default_mask="causal",
        ),
        VariantSpec(
            id="self",
            label="Self-attention (fused QKV)",
            seed="seed 001 SelfAttention",
            description="One fused in_proj makes Q, K and V (Stable Diffusion style); no dropout.",
            build=lambda c: SelfAttention(c.heads, c.d_model, c.in_bias, c.out_bias, kv_heads=c.kv_heads,
                                          attn=_attn(c), sink_logit=c.sink_logit),
            inputs=_random_inputs,
            extra_fields=frozenset({"in_bias", "out_bias", "sink_logit"}) | POSITION_FIELDS,
            labels={"d_model": "d_embed", "in_bias": "in_proj_bias", "out_bias": "out_proj_bias"},
            layout=SELF_LAYOUT,
            file_widths={"d_model": ("out_proj.weight", 1)},
            file_biases={"in_bias": "in_proj.bias", "out_bias": "out_proj.bias"},
        ),
        VariantSpec(
            id="cross",
            label="Cross-attention",
            seed="seed 000 CrossAttention",
            description="Queries attend to a second sequence; separate Q, K, V projections d_in -> d_out.",
            build=lambda c: CrossAttention(c.d_model, c.d_out, c.dropout, c.heads, c.in_bias, kv_heads=c.kv_heads,
                                           attn=_attn(c)),
            inputs=_random_inputs,
            extra_fields=frozenset({"d_out", "seq_kv", "dropout", "train", "in_bias"}),
            head_width="d_out",
            labels={"d_model": "d_in", "in_bias": "qkv_bias"},
            layout=(("queries", "seq_q", "d_model"), ("keys", "seq_kv", "d_model"), ("values", "seq_kv", "d_model")),
            file_widths={"d_model": ("W_query.weight", 1), "d_out": ("W_query.weight", 0)},
            file_biases={"in_bias": "W_query.bias"},
        ),
        VariantSpec(
            id="cross-context",
            label="Cross-attention over a context",
            seed="seed 001 CrossAttention",
            description="Latent queries (d_embed) attend to a context (d_cross), as in Stable Diffusion.",
            build=lambda c: ContextCrossAttention(c.heads, c.d_model, c.d_cross, c.in_bias, c.out_bias,
                                                  kv_heads=c.kv_heads, attn=_attn(c)),
            inputs=_random_inputs,
            extra_fields=frozenset({"d_cross", "seq_kv", "in_bias", "out_bias"}),
            labels={"d_model": "d_embed", "in_bias": "in_proj_bias", "out_bias": "out_proj_bias"},
            layout=(("x", "seq_q", "d_model"), ("y", "seq_kv", "d_cross")),
            file_widths={"d_model": ("q_proj.weight", 1), "d_cross": ("k_proj.weight", 1)},
            file_biases={"in_bias": "q_proj.bias", "out_bias": "out_proj.bias"},
        ),
        VariantSpec(
            id="differential",
            label="Differential attention",
            seed="Differential Transformer (Ye et al., 2024)",
            description="Two softmax maps per head subtracted with a learned λ: common-mode attention cancels; "
                        "signed weights.",
            build=lambda c: DifferentialAttention(c.d_model, c.heads, c.layer, kv_heads=c.kv_heads, attn=_attn(c)),
            inputs=_random_inputs,
            extra_fields=frozenset({"layer"}) | POSITION_FIELDS,
            layout=SELF_LAYOUT,
            file_widths={"d_model": ("q_proj.weight", 1)},
            labels={"d_model": "embed_dim", "layer": "Layer (λ_init)"},
            default_mask="causal",
            head_factor=2,
        ),
    ]
})


def register(spec: VariantSpec) -> VariantSpec:
    """Add a variant to the registry (attnviz.models and attnviz.toys add theirs: core imports neither)."""
    if dict.__contains__(VARIANTS, spec.id) and dict.__getitem__(VARIANTS, spec.id) is not spec:
        raise ValueError(f"variant {spec.id!r} is registered already")
    dict.__setitem__(VARIANTS, spec.id, spec)
    return spec
