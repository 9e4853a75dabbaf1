"""What circuits, logit attribution and patching read from a model: its weights per head and the modules to hook.

A model-backed variant offers them with `circuit_parts()` (the protocol of backed.py, optional): the toys
build theirs from their seed modules, the pretrained models from the family's own modules (models/circuits.py).
Everything here is plain torch: the maths in circuits.py, attribution.py and patching.py hooks these modules
with forward hooks and reads these weights, whatever the family.

Conventions (row vectors, as TransformerLens writes them): a head's query is x·W_Q (d -> dh), its output
context·W_O (dv -> d). A norm's effective scale `scale` is what multiplies the normalised vector (Gemma's
1 + w, LayerNorm's w); `centred` says whether it subtracts the mean first (LayerNorm) or not (RMSNorm).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from torch import Tensor, nn

from attnviz.core.runs.backed import placed_model
from attnviz.core.runs.config import ConfigError, RunConfig
from attnviz.core.runs.model_lock import model_lock

APPLIES = "circuits, logit attribution and activation patching"


@dataclass(frozen=True)
class Norm:
    """A norm module and how it scales: y = centre?(x) · scale · k(x) + bias, k(x) one number per position."""

    module: nn.Module
    scale: Tensor  # (d,)
    bias: Tensor | None
    centred: bool

    def factor(self, x: Tensor, y: Tensor) -> Tensor:
        """k per position of the module's own input x (..., d) and output y: the normalisation it applied there,
        read back from what it computed (so any epsilon or dtype of the family is exactly what it used)."""
        x, y = x.double(), y.double()
        if self.centred:
            x = x - x.mean(-1, keepdim=True)
        if self.bias is not None:
            y = y - self.bias.double()
        xs = x * self.scale.double()
        return (y * xs).sum(-1) / (xs * xs).sum(-1).clamp_min(1e-300)

    def frozen(self, c: Tensor, k: Tensor) -> Tensor:
        """Component c (..., d) of the norm's input as it reaches the output with the normalisation k frozen."""
        c = c.double()
        if self.centred:
            c = c - c.mean(-1, keepdim=True)
        return c * self.scale.double() * k.double()[..., None]


@dataclass(frozen=True)
class LayerParts:
    """One attention layer: its heads' weights (no norm folded in) and the modules hooked around it."""

    w_q: Tensor  # (H, d, dh)
    w_k: Tensor  # (Hkv, d, dh)
    w_v: Tensor  # (Hkv, d, dv)
    w_o: Tensor  # (H, dv, d)
    norm: Norm  # the norm whose output the attention reads
    attention: nn.Module  # reads norm(residual) as its first input (or hidden_states=)
    out_proj: nn.Module  # reads the heads' merged context (B, L, H·dv)
    block: nn.Module  # reads the residual stream entering the layer as its first input (or hidden_states=)
    post_norm: Norm | None = None  # Gemma 2's norm of the attention's output before it joins the residual
    qk_norm: bool = False  # q and k are normalised after the projection: W_Q·W_Kᵀ is not the bilinear form

    def kv_head(self, head: int) -> int:
        return head // (self.w_q.shape[0] // self.w_k.shape[0])  # grouped-query attention


@dataclass(frozen=True)
class CircuitParts:
    """A decoder-only model's residual stream as circuits read it."""

    embed: Tensor  # W_E (vocab, d): the token embeddings
    unembed: Tensor  # W_U (d, vocab)
    unembed_bias: Tensor | None  # (vocab,)
    final_norm: Norm
    layers: tuple[LayerParts, ...]
    tokenize: Callable[[str], list[int]]  # a string's ids without the tokenizer's special tokens
    rotary: bool = False  # positions rotate q and k (RoPE): a QK circuit holds only at the text's positions
    softcap: float | None = None  # Gemma 2's final logit soft cap

    @property
    def vocab_size(self) -> int:
        return self.embed.shape[0]


def model_parts(config: RunConfig):
    """(the config's model on its device, its CircuitParts); ConfigError where the model has none."""
    model = placed_model(config) if config.spec.backed else None
    offer = getattr(model, "circuit_parts", None)
    if offer is None:
        raise ConfigError("variant", config.variant, f"{APPLIES} need a model's weights and residual stream",
                          "choose toy-induction or a pretrained decoder-only model")
    with model_lock(model):  # finding its norms hooks the shared model for one forward
        return model, offer()


def hidden_states(args: tuple, kwargs: dict) -> Tensor:
    """A module's first input: positional, or transformers' hidden_states keyword."""
    return args[0] if args else kwargs["hidden_states"]


def with_hidden_states(args: tuple, kwargs: dict, value: Tensor) -> tuple[tuple, dict]:
    """(args, kwargs) with the first input replaced (a forward pre-hook's return value)."""
    if args:
        return (value, *args[1:]), kwargs
    return args, {**kwargs, "hidden_states": value}


def one_token(parts: CircuitParts, text: str, field_name: str, label=str) -> int:
    """The id of a string the tokenizer makes one token; ConfigError naming what it makes otherwise."""
    ids = parts.tokenize(text) if text else []
    if any(not 0 <= i < parts.vocab_size for i in ids):
        raise ConfigError(field_name, text, "it is not in the model's vocabulary", "give one token of the vocabulary")
    if len(ids) != 1:
        made = " ".join(repr(label(i)) for i in ids) or "no token"
        raise ConfigError(field_name, text, f"the tokenizer makes {len(ids)} tokens of it ({made}), not one",
                          "give a string that is one token (with its leading space where words have one, "
                          "e.g. ' Mary')", suggestions=tuple(label(i) for i in ids[:1]))
    return ids[0]


@dataclass
class Seen:
    """What hooked modules received (first input) and returned (first output) in one forward."""

    inputs: dict[nn.Module, Tensor] = field(default_factory=dict)
    outputs: dict[nn.Module, Tensor] = field(default_factory=dict)


@contextmanager
def seeing(modules) -> Iterator[Seen]:
    """Forward hooks keeping each module's first input and output (its first call) while the block runs."""
    seen, handles = Seen(), []

    def pre(module, args, kwargs):
        seen.inputs.setdefault(module, hidden_states(args, kwargs))

    def post(module, args, output):
        seen.outputs.setdefault(module, output[0] if isinstance(output, tuple) else output)
    for m in dict.fromkeys(modules):
        handles += [m.register_forward_pre_hook(pre, with_kwargs=True), m.register_forward_hook(post)]
    try:
        yield seen
    finally:
        for h in handles:
            h.remove()
