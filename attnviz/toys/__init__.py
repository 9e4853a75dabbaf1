"""Trained toy models with known attention heads, shipped in attnviz/resources/models (no Qt here).

    >>> toy = load_toy("toy-reverse")
    >>> for layer in toy.traces("31415926"):
    ...     layer.name, layer.trace["weights"].shape, layer.query_tokens, layer.key_tokens

Each toy is built from the seed modules (attnviz.core.variants.modules), so a layer's `trace` is exactly
what that seed module returns with return_trace=True (read it by item: trace["weights"]).
Retrain with `python -m attnviz.toys train NAME` (recipes in specs.py, loop in train.py).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from attnviz.core.runs.model_lock import model_lock
from attnviz.toys.specs import TOYS, ToySpec

if TYPE_CHECKING:
    from attnviz.core.kernel.context import ForwardContext
    from attnviz.core.runs.backed import Encoded

# attnviz.core's variant registry reads TOYS from here, so nothing at this module's top level may
# import attnviz.core (the networks, built from the seed modules, are imported where they are built).
__all__ = ["TOYS", "LayerTrace", "ToyBacked", "ToyModel", "ToySpec", "load_toy", "models_dir"]


def models_dir() -> Path:
    """attnviz/resources/models, where the package is (a source checkout or an installed copy)."""
    return Path(str(resources.files("attnviz.resources"))) / "models"


@dataclass(frozen=True)
class LayerTrace:
    """One attention layer of a toy's forward pass, with the labels for its two axes."""

    name: str  # e.g. "decoder cross-attention", "layer 1"
    trace: Any  # the seed module's trace: trace["weights"] is (1, H, Lq, Lkv)
    query_tokens: list[str]  # rows (Lq)
    key_tokens: list[str]  # columns (Lkv)


class ToyModel:
    """A trained toy: its spec, its card (what training measured) and the network (eval mode)."""

    def __init__(self, spec: ToySpec, card: dict[str, Any], module: nn.Module):
        self.spec, self.card, self.module = spec, card, module.eval()

    def encode(self, text: str) -> tuple[list[str], list[str] | None, Tensor]:
        """Text -> (query tokens, key tokens or None when they are the queries, ids (1, L)).

        For the encoder-decoder toys the queries of the cross-attention are the decoder's output
        positions, labelled with what the model outputs there (so this runs the model once).
        Raises ValueError naming characters outside the vocabulary or a wrong length.
        """
        ids = self._ids(text.strip())
        chars = [self.spec.vocabulary[i] for i in ids[0].tolist()]
        if self.spec.task == "induction":
            return chars, None, ids
        return list(self.predict(text)), chars, ids

    def predict(self, text: str) -> str:
        """What the model outputs: the digits reversed / sorted, or each next-token guess."""
        with torch.no_grad():
            out = self.module(self._ids(text.strip())).argmax(-1)[0]
        return "".join(self.spec.vocabulary[i] for i in out.tolist())

    def traces(self, text: str) -> list[LayerTrace]:
        """Every attention layer's trace for `text`, in forward order (index = --layer)."""
        queries, keys, ids = self.encode(text)
        with torch.no_grad():
            _, traces = self.module(ids, return_trace=True)
        inputs = keys if keys is not None else queries
        out = []
        for i, (name, trace) in enumerate(zip(self.spec.layer_names, traces)):
            is_cross = keys is not None and i == len(traces) - 1
            out.append(LayerTrace(name, trace, queries if is_cross else inputs, inputs))
        return out

    def _ids(self, text: str) -> Tensor:
        vocab = self.spec.vocabulary
        bad = sorted({c for c in text if c not in vocab})
        if bad:
            raise ValueError(f"{self.spec.name}: {', '.join(map(repr, bad))} not in the vocabulary; "
                             f"allowed characters: {vocab}")
        lengths = self._lengths()
        if not lengths[0] <= len(text) <= lengths[1]:
            wanted = str(lengths[0]) if lengths[0] == lengths[1] else f"{lengths[0]} to {lengths[1]}"
            raise ValueError(f"{self.spec.name}: input must be {wanted} characters long, got {len(text)}")
        return torch.tensor([[vocab.index(c) for c in text]], dtype=torch.long)

    def _lengths_text(self) -> str:
        lo, hi = self._lengths()
        return f"{lo} characters" if lo == hi else f"{lo} to {hi} characters"

    def _lengths(self) -> tuple[int, int]:
        arch = self.spec.architecture
        return (arch["length"], arch["length"]) if "length" in arch else (1, arch["max_len"])


@functools.cache
def load_toy(name: str, directory: Path | None = None) -> ToyModel:
    """The trained toy NAME from DIRECTORY (default: models_dir()), loaded once and cached
    (the instance is shared: read it, do not train it)."""
    from safetensors.torch import load_file

    from attnviz.toys.models import build

    if name not in TOYS:
        raise ValueError(f"unknown toy {name!r}; toys: {', '.join(TOYS)}")
    folder = models_dir() if directory is None else Path(directory)
    weights, card_path = folder / f"{name}.safetensors", folder / f"{name}.json"
    if not weights.is_file() or not card_path.is_file():
        raise FileNotFoundError(f"{weights} or its card is missing; train it: python -m attnviz.toys train {name}")
    card = json.loads(card_path.read_text(encoding="utf-8"))
    module = build(card["architecture"])
    module.load_state_dict(load_file(str(weights)), strict=True)
    return ToyModel(TOYS[name], card, module)


# --- the toys as model-backed variants (the protocol of attnviz.core.runs.backed) -----------------------


@dataclass(frozen=True)
class ToyInfo:
    name: str
    layers: int
    heads: int
    kv_heads: int
    d_model: int
    max_positions: int
    causal: bool = False  # the induction toy predicts the next token; the others are encoder-decoders


class ToyBacked:
    """A toy as attnviz.core.runs.backed wants a model: info, encode(text), forward(ids, record).
    Toys run on the CPU whatever the device (they take milliseconds), so no `.module` is exposed."""

    def __init__(self, toy: ToyModel):
        self.toy = toy
        self.shared_module = toy.module  # the cached toy's: what core/runs/model_lock.py serialises on
        arch = toy.spec.architecture
        self.info = ToyInfo(toy.spec.name, toy.spec.layers, toy.spec.heads, toy.spec.heads, arch["width"],
                            toy._lengths()[1], causal=toy.spec.task == "induction")

    def encode(self, text: str) -> Encoded:
        from attnviz.core.runs.config import ConfigError

        spec = self.toy.spec
        try:
            ids = self.toy._ids(text.strip())[0].tolist()
        except ValueError as exc:
            raise ConfigError("text", text, str(exc).split(": ", 1)[-1],
                              f"type {self.toy._lengths_text()} of {spec.vocabulary!r}, e.g. {spec.default_text}",
                              suggestions=(spec.default_text,)) from None
        chars = [spec.vocabulary[i] for i in ids]
        layers = [(chars, chars)] * spec.layers
        if spec.task != "induction":  # the decoder's cross-attention: output digits over input digits
            layers[-1] = (list(self.toy.predict(text)), chars)
        from attnviz.core.runs.backed import Encoded

        return Encoded(ids, chars, layers)

    def forward(self, ids: Tensor, record: frozenset[str], ctx: ForwardContext | None = None) -> tuple[Tensor, list]:
        """The logits stand for the last hidden state (logits() passes them on); the induction toy's residual
        stream after each layer goes to `residuals` (the input of the next layer's norm, then of ln_f). ctx: the
        forward's ForwardContext (core/kernel/context.py)."""
        module, seen = self.toy.module, []
        norms = [*module.lns[1:], module.ln_f] if hasattr(module, "lns") else []
        with model_lock(self):  # the hooks are on the cached toy's modules: one forward at a time
            hooks = [n.register_forward_pre_hook(lambda m, args: seen.append(args[0])) for n in norms]
            try:
                logits, traces = module(ids.cpu(), return_trace=record, ctx=ctx)
            finally:
                for h in hooks:
                    h.remove()
        self.residuals = seen or None
        return logits, traces

    def circuit_parts(self):
        """Its weights and modules for circuits, logit attribution and patching (core/analysis/circuit_parts.py)."""
        from attnviz.toys.circuits import toy_parts

        return toy_parts(self.toy)

    # --- the output head (core/runs/predictions.py)

    has_head = True

    def step(self, ids: Tensor, state, record=frozenset(), ctx: ForwardContext | None = None):
        """A generation step (core/runs/generation.py) without a cache: the whole sequence again (the toys take
        milliseconds), each layer's trace cut to the new rows."""
        ids = ids.cpu() if state is None else torch.cat([state, ids.cpu()], dim=1)
        logits, traces = self.forward(ids, record, ctx)
        n = ids.shape[1] - (0 if state is None else state.shape[1])
        rows = [_last_rows(t, n) for t in traces]
        return logits[:, -n:], rows, ids, [r[:, -n:] for r in self.residuals] if self.residuals else None

    def hidden(self, ids: Tensor, ctx: ForwardContext | None = None) -> Tensor:
        with model_lock(self):
            return self.toy.module(ids.cpu(), ctx=ctx)

    def logits(self, hidden: Tensor) -> Tensor:
        return hidden

    def lens_logits(self, residual: Tensor) -> Tensor:
        module = self.toy.module
        with model_lock(self):  # ln_f: an analysis may be watching it
            return module.head(module.ln_f(residual))

    def label(self, token_id: int) -> str:
        return self.toy.spec.vocabulary[token_id]

    def probe(self, half: int, seed: int) -> list[int]:
        """Distinct random tokens written twice, as long as the toy reads (its vocabulary permuted, seeded)."""
        vocab, (_lo, hi) = len(self.toy.spec.vocabulary), self.toy._lengths()
        n = min(half, vocab, hi // 2)
        first = torch.randperm(vocab, generator=torch.Generator().manual_seed(seed))[:n].tolist()
        return first + first

    def targets(self, ids: list[int]) -> list[int]:
        """The task's answer per output position: the next token (induction), the digits reversed or sorted."""
        task = self.toy.spec.task
        if task == "induction":
            return ids[1:] + [-1]
        return ids[::-1] if task == "reverse" else sorted(ids)


def _last_rows(trace, n: int):
    """A trace of the whole sequence as a step's: the last n query rows of each map and per-token stage."""
    from attnviz.core.kernel.kernel import Trace
    from attnviz.core.kernel.stages import BY_NAME

    cut = Trace(trace.record)
    for name, tensor in trace.items():
        per_query = name == "mask" or BY_NAME[name].per_query
        if name == "mask":
            tensor = torch.broadcast_to(tensor, (*tensor.shape[:2], *trace["weights"].shape[-2:]))
        cut[name] = tensor[..., -n:, :] if per_query else tensor
    return cut
