"""One adapter per family: config.json -> ModelShape, checkpoint keys -> Transformer keys.

An adapter module has MODEL_TYPES (config.json model_type values it reads), `shape(config)` and
`convert(state, shape)`; the latter returns the Transformer's state dict (float tensors, any dtype)
from the checkpoint's (whatever prefix the saving class added: `bert.`, `transformer.`, `model.`).
"""

from __future__ import annotations

from types import ModuleType

from ..folder import ModelError
from . import bert, gpt2, llama

ADAPTERS: dict[str, ModuleType] = {t: m for m in (bert, gpt2, llama) for t in m.MODEL_TYPES}


def adapter_for(config: dict) -> ModuleType:
    model_type = config.get("model_type")
    if model_type not in ADAPTERS:
        raise ModelError(model_type, "unsupported model_type", f"attnviz reads {', '.join(sorted(ADAPTERS))}",
                         field_name="model_type")
    return ADAPTERS[model_type]


def strip_prefix(state: dict, marker: str) -> dict:
    """The checkpoint with whatever prefix comes before `marker` removed (e.g. 'bert.' before
    'embeddings.word_embeddings.weight'); keys without the prefix are dropped (heads, poolers)."""
    hits = [k for k in state if k.endswith(marker)]
    if not hits:
        raise ModelError(marker, "the checkpoint lacks this key (not a checkpoint of this family?)",
                         "use the model's own weights", field_name="checkpoint key")
    prefix = min(hits, key=len)[: -len(marker)]
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}


def need(config: dict, *names: str):
    """The first of `names` config.json has (old and new spellings), else ModelError."""
    for name in names:
        if config.get(name) is not None:
            return config[name]
    raise ModelError(names[0], "config.json lacks this field", "restore config.json", field_name="config.json")
