"""load_model(folder) -> PretrainedModel: a checked folder, its adapter, the weights, the tokenizer.

Loaded models are cached (the two most recent, keyed by folder and file stamps), so a second text
costs only the forward. A model too large for the memory budget is refused before any weight is read.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from ..core.kernel import Trace
from .adapters import adapter_for
from .folder import ModelError, ModelFolder, load_state, parameter_bytes, read_folder
from .model import ModelShape, Transformer
from .tokens import Encoded, TextTokenizer

CACHE_SIZE = 2
GENERIC_NAMES = {"model", "models", "weights", "checkpoint", "hf", "transformer"}
MEMORY_FRACTION = 0.5  # as the runner: this share of the free memory, unless a budget is given


@dataclass(frozen=True)
class ModelInfo:
    family: str  # adapter: bert, gpt2, llama
    model_type: str  # config.json's model_type (llama, mistral, qwen2 ...)
    layers: int
    heads: int
    kv_heads: int
    d_model: int
    vocab_size: int
    max_positions: int
    causal: bool
    parameter_bytes: int  # the weights as float32
    name: str  # the folder's name (a snapshot's repository name where it has one)


class PretrainedModel:
    """A model folder ready to run: `encode(text)` then `forward(ids, record)` (one Trace per layer)."""

    def __init__(self, folder: ModelFolder, shape: ModelShape, module: Transformer, tokenizer: TextTokenizer,
                 size: int):
        self.folder, self.shape, self.module, self.tokenizer = folder, shape, module, tokenizer
        self.info = ModelInfo(shape.family, shape.model_type, shape.layers, shape.heads, shape.kv_heads,
                              shape.d_model, shape.vocab_size, shape.max_positions, shape.causal, size,
                              model_name(folder.path))

    def encode(self, text: str) -> Encoded:
        """The text's token ids and labels; ConfigError (field `text`) when empty or too long."""
        if not text.strip():
            raise ModelError(text, "the text is empty", "type a sentence", field_name="text")
        encoded = self.tokenizer.encode(text)
        n, limit = len(encoded.ids), self.info.max_positions
        if n > limit:
            cut = self.tokenizer.decode_prefix(text, limit)
            raise ModelError(f"{text[:40]}…", f"{n} tokens, but {self.info.name} reads at most {limit} positions",
                             f"shorten the text, or truncate it to its first {limit} tokens", field_name="text",
                             suggestions=(cut,))
        if encoded.ids and max(encoded.ids) >= self.info.vocab_size:
            raise ModelError(self.folder.tokenizer, f"the tokenizer gives id {max(encoded.ids)} but the model has "
                             f"{self.info.vocab_size} token embeddings", "use the tokenizer.json saved with this model")
        return encoded

    def truncate(self, text: str) -> str:
        """`text` cut to the model's positions (the fix `encode` offers)."""
        return self.tokenizer.decode_prefix(text, self.info.max_positions)

    @torch.inference_mode()
    def forward(self, ids: Tensor, record=()) -> tuple[Tensor, list[Trace]]:
        """ids (1, L) -> the last hidden state (1, L, d) and each layer's trace of the `record` stages."""
        return self.module(ids.to(self.device), record)

    @property
    def device(self) -> torch.device:
        return next(self.module.parameters()).device


def model_name(path: Path) -> str:
    """'models--org--name/snapshots/<hash>' -> 'org/name'; else the folder's own name."""
    parts = path.resolve().parts
    if len(parts) >= 3 and parts[-2] == "snapshots" and parts[-3].startswith("models--"):
        return parts[-3][len("models--"):].replace("--", "/")
    if path.name.lower() in GENERIC_NAMES and len(parts) >= 2:  # e.g. a package's .../all_minilm/model
        return f"{parts[-2]}/{parts[-1]}"
    return path.name


def _budget(memory_budget: int | None) -> tuple[int, str]:
    if memory_budget is not None:
        return memory_budget, "the memory budget given"
    from ..core.runner import available_memory

    return int(available_memory(torch.device("cpu")) * MEMORY_FRACTION), f"{MEMORY_FRACTION:.0%} of the free memory"


def _build(folder: ModelFolder, memory_budget: int | None) -> PretrainedModel:
    from ..core.runner import _gib

    shape = adapter_for(folder.config).shape(folder.config)
    size = parameter_bytes(folder)
    allowed, source = _budget(memory_budget)
    if size > allowed:
        raise ModelError(folder.path, f"the weights need about {_gib(size)} as float32, over {_gib(allowed)} "
                         f"({source})", "choose a smaller model, or free memory")
    tokenizer = TextTokenizer(folder.tokenizer)
    state = adapter_for(folder.config).convert(load_state(folder), shape)
    missing = sorted(k for k, v in state.items() if v is None)
    if missing:
        raise ModelError(missing[0], f"{len(missing)} weights missing from the checkpoint for a {shape.model_type} "
                         "model", "use the complete checkpoint of this model", field_name="checkpoint key")
    with torch.device("meta"):
        module = Transformer(shape)
    state = {k: v if v.dtype == torch.float32 else v.float() for k, v in state.items()}
    try:
        module.load_state_dict(state, strict=True, assign=True)
    except RuntimeError as exc:
        raise ModelError(folder.path, f"the checkpoint does not fit config.json ({str(exc).splitlines()[-1].strip()})",
                         "use the config.json saved with these weights") from exc
    return PretrainedModel(folder, shape, module.eval(), tokenizer, size)


_cache: OrderedDict[tuple, PretrainedModel] = OrderedDict()
_lock = threading.Lock()


def load_model(folder: str | os.PathLike, *, memory_budget: int | None = None) -> PretrainedModel:
    """The model in `folder` (see the module docstring), from the cache when its files are unchanged."""
    checked = read_folder(folder)
    key = (str(checked.path.resolve()), checked.stamp())
    with _lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    model = _build(checked, memory_budget)
    with _lock:
        _cache[key] = model
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    return model


def clear_cache() -> None:
    with _lock:
        _cache.clear()
