"""A GGUF file as a transformers model, read by attnviz itself: parsed once, dequantised in bulk.

transformers' own GGUF load parses the file's metadata three times (config, tokenizer, weights) and
dequantises tensor by tensor, slowly (benchmarks/README.md, Behind the code). Here the header is parsed once
(gguf_reader.py) and every piece is built from it the way transformers builds it, with transformers' own
tables and code where they are pure: the config dict (load_gguf_checkpoint's mapping, GGUF_CONFIG_MAPPING),
the tokenizer (convert_gguf_tokenizer on the same tokenizer dict as get_gguf_tokenizer), the tensor names
(get_gguf_hf_weights_map) and the tensor transforms (the llama family's Q/K row permutation undone, Gemma's
and Nemotron's norms stored as 1 + w). The tensors dequantise with NumPy on a pool of threads
(gguf_dequant.py) while the tokenizer is built on another. Architectures whose conversion does more (t5,
bloom, gpt2, mamba, mixture-of-experts, ...) go through transformers' loader as before.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from torch import nn

from attnviz.core.kernel import progress
from attnviz.models.compact import (
    CompactLinear,
    CompactWeight,
    block_weight,
    blocks_finite,
    compact_module,
    file_rows,
    half_weight,
    is_compact,
    keeps_blocks,
    replaceable,
    start_probes,
)
from attnviz.models.errors import ModelError
from attnviz.models.gguf_dequant import dequantize
from attnviz.models.gguf_reader import GgufHeader, TensorInfo, tensor_bytes

# Architectures whose config or tensors transformers converts with more than renaming (left to transformers)
SPECIAL = frozenset({"t5", "t5encoder", "umt5", "stablelm", "lfm2", "gpt-oss", "gpt_oss", "minimax-m2", "minimax_m2",
                     "qwen2moe", "qwen2_moe", "qwen3moe", "qwen3_moe", "gemma4", "bloom", "gpt2", "mamba"})
NORM_PLUS_ONE = ("gemma2", "gemma3", "nemotron")  # norms stored as 1 + w (Gemma2TensorProcessor ...)
TIED_ANYWAY = ("falcon", "bloom")  # tie_word_embeddings even with output.weight (load_gguf_checkpoint)


def fast_path(architecture: str) -> bool:
    """Whether attnviz's reader builds this architecture (else transformers' GGUF loader does): one whose config
    transformers maps key by key and whose tensors it only renames or permutes, in a transformers with the
    GGUF tokenizer converter this module calls (5.25's integrations.gguf)."""
    try:
        from transformers.integrations.ggml import GGUF_CONFIG_MAPPING
        from transformers.integrations.gguf import GGUF_CONFIG_ARCHS, GGUF_TOKENIZER_MAPPING  # noqa: F401
    except ImportError:  # another transformers: its own loader
        return False
    return (architecture in GGUF_CONFIG_MAPPING and architecture not in SPECIAL
            and architecture not in GGUF_CONFIG_ARCHS and _processor(architecture) is not None)


def _processor(architecture: str):
    """transformers' tensor processor for the architecture, where it is one whose transforms attnviz applies."""
    from transformers import modeling_gguf_pytorch_utils as g

    cls = g.TENSOR_PROCESSORS.get(architecture, g.TensorProcessor)
    known = (g.TensorProcessor, g.LlamaTensorProcessor, g.Gemma2TensorProcessor, g.NemotronTensorProcessor)
    return cls if cls in known else None


def config_dict(header: GgufHeader) -> dict:
    """The config dict transformers' load_gguf_checkpoint(return_tensors=False) gives, from the parsed header."""
    from transformers.integrations.ggml import GGUF_CONFIG_DEFAULTS_MAPPING, GGUF_CONFIG_MAPPING

    metadata, architecture = header.metadata, header.architecture
    names = [metadata["general.name"]] if "general.name" in metadata else []
    updated = "mistral" if "llama" in architecture and "mistral" in names else architecture  # as transformers
    config: dict = {"tie_word_embeddings": all(t.name != "output.weight" for t in header.tensors)
                    or architecture in TIED_ANYWAY}
    for key, value in (GGUF_CONFIG_DEFAULTS_MAPPING.get(updated, GGUF_CONFIG_DEFAULTS_MAPPING.get(architecture))
                       or {}).items():
        config.setdefault(key, value)
    for key, value in metadata.items():
        prefix, _, rest = key.replace(architecture, updated).partition(".")
        if isinstance(value, list) and len(value) == 1:
            value = value[0]
        if isinstance(value, str) and architecture in value:
            value = value.replace(architecture, updated)
        renamed = GGUF_CONFIG_MAPPING.get(prefix, {}).get(rest, -1)
        if renamed not in (-1, None):
            config[renamed] = value
    if config.get("model_type") == "gemma3":  # the file holds the text backbone only
        config["model_type"] = "gemma3_text"
    tokens = metadata.get("tokenizer.ggml.tokens")
    if "vocab_size" not in config and isinstance(tokens, list):
        config["vocab_size"] = len(tokens)
    return config


def build_config(header: GgufHeader):
    """The transformers config of the file (as AutoConfig.from_pretrained(gguf_file=...) builds it)."""
    from transformers import CONFIG_MAPPING

    values = config_dict(header)
    try:
        return CONFIG_MAPPING[values["model_type"]].from_dict(values)
    except Exception as exc:  # noqa: BLE001 - metadata transformers cannot map, a config's own validation
        raise ModelError(header.path, f"transformers cannot read the GGUF file's configuration "
                         f"({type(exc).__name__}: {str(exc).strip()[:160]})",
                         "use a GGUF file written by llama.cpp's converter") from exc


def build_tokenizer(header: GgufHeader):
    """transformers' fast tokenizer of the file, built from the parsed metadata (get_gguf_tokenizer's dict
    handed to convert_gguf_tokenizer), with the chat template and special tokens the file names."""
    from transformers import PreTrainedTokenizerFast
    from transformers.integrations.gguf import GGUF_TOKENIZER_MAPPING, convert_gguf_tokenizer

    metadata = header.metadata
    parts = {group: {name: metadata[f"tokenizer.{key}"] for key, name in renames.items()
                     if f"tokenizer.{key}" in metadata} for group, renames in GGUF_TOKENIZER_MAPPING.items()}
    tokenizer, options = parts["tokenizer"], parts["tokenizer_config"]
    if tokenizer.get("tokenizer_type") == "llama":  # as get_gguf_tokenizer: llama.cpp's default for sentencepiece
        options.setdefault("add_bos_token", True)
    tokens = tokenizer.get("tokens") or []
    for name, key in (("bos_token", "bos_token_id"), ("eos_token", "eos_token_id"), ("unk_token", "unknown_token_id"),
                      ("pad_token", "padding_token_id")):
        index = metadata.get(f"tokenizer.ggml.{key}")
        options[name] = tokens[index] if isinstance(index, int) and 0 <= index < len(tokens) else None
    try:
        fast, extra = convert_gguf_tokenizer(header.architecture, tokenizer)
        return PreTrainedTokenizerFast(tokenizer_object=_Handed(fast), **options, **extra)
    except Exception as exc:  # noqa: BLE001 - a vocabulary transformers cannot convert
        raise ModelError(header.path, f"transformers cannot build a tokenizer from this GGUF file "
                         f"({type(exc).__name__}: {str(exc).strip()[:160]})",
                         "use a GGUF file written by llama.cpp's converter") from exc


class _Handed:
    """A tokenizer handed to transformers' wrapper as it is: the wrapper deep-copies the object it is given
    (seconds for a large vocabulary: benchmarks/README.md, Behind the code), and this one was built for it
    alone."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def __deepcopy__(self, memo):
        return self.tokenizer


def build_model(cls, header: GgufHeader, config, implementation: str, dtype: torch.dtype = torch.float32,
                storage: str = "float32") -> tuple[nn.Module, dict]:
    """The model of class `cls` with the file's weights (dequantised to `dtype`, or its matrices kept compact:
    storage "float16" or "blocks", compact.py), and a loading-info dict like from_pretrained's
    (missing_keys, unexpected_keys, mismatched_keys). The model is built without touching its float32
    storage, so the matrices replaced by compact ones never take memory."""
    from transformers import initialization

    with initialization.no_init_weights(), initialization.no_tie_weights():
        model = cls._from_config(config, attn_implementation=implementation, dtype=dtype)
    processor = _processor(header.architecture)(config=config_dict(header))
    names = weights_map(model)
    wanted = [t for t in header.tensors if t.name in names]
    compact = {t.name for t in wanted if storage != "float32" and _compactable(model, names[t.name], t)}
    make = None if not compact else lambda info: _compact(header, info, processor.config, storage)
    weights = _tensors(header, wanted, processor.config, dtype, lambda info: make if info.name in compact else None)
    expected = model.state_dict()
    state, mismatched, loaded = {}, [], set()
    for info, tensor in zip(wanted, weights):
        key = names[info.name]
        if key in expected and tuple(expected[key].shape) != tuple(tensor.shape):
            mismatched.append((key, tuple(tensor.shape), tuple(expected[key].shape)))
        elif isinstance(tensor, CompactWeight):
            path, _, _ = key.rpartition(".")
            _replace(model, path, compact_module(model.get_submodule(path), tensor))
            loaded.add(tensor.stored.data_ptr())
        else:
            state[key] = tensor
    result = model.load_state_dict(state, strict=False, assign=True)
    model.attnviz_finite_checked = True  # each tensor was checked as it was dequantised
    _tie(model, compact)
    if compact:
        start_probes(model)  # the opening's probes dequantise each matrix once (ended by hf.py once opened)
    loaded |= {t.data_ptr() for t in state.values()}  # a tied head shares the embeddings' storage once tied
    current = model.state_dict()
    loading = {"missing_keys": [k for k in result.missing_keys if k in current and current[k].data_ptr() not in loaded],
               "unexpected_keys": [t.name for t in header.tensors if t.name not in names],
               "mismatched_keys": mismatched}
    return model, loading


def _compactable(model: nn.Module, key: str, info: TensorInfo) -> bool:
    path, _, leaf = key.rpartition(".")
    return leaf == "weight" and len(info.shape) == 2 and replaceable(model.get_submodule(path))


def _compact(header: GgufHeader, info: TensorInfo, config: dict, storage: str) -> CompactWeight:
    """A matrix kept compact: the file's blocks (rows moved as transformers moves them), or float16."""
    if storage == "blocks" and keeps_blocks(info.qtype):
        raw = tensor_bytes(header, info)
        if not blocks_finite(raw, info.qtype):
            raise _not_finite(info)
        rows = _transformed(header, info, config, file_rows(raw, info.shape[0]), torch.uint8)
        return block_weight(rows, info.qtype, info.shape)
    return half_weight(_dequantized(header, info, config, torch.float32), info.qtype)


def _replace(model: nn.Module, path: str, module: nn.Module) -> None:
    parent, _, name = path.rpartition(".")
    setattr(model.get_submodule(parent), name, module)


def _tie(model: nn.Module, compact: set[str]) -> None:
    """transformers' tying; with compact embeddings, a tied head made a compact Linear over the same table."""
    if not compact:
        model.tie_weights()
        return
    embeddings, head = model.get_input_embeddings(), model.get_output_embeddings()
    tied = getattr(model.config.get_text_config(), "tie_word_embeddings", False)
    if tied and is_compact(embeddings) and type(head) is nn.Linear:
        model.set_output_embeddings(CompactLinear(embeddings.compact))
    elif not is_compact(embeddings) or is_compact(head):
        model.tie_weights()


# transformers' model_type -> gguf's architecture name, where they differ (get_gguf_hf_weights_map's table)
GGUF_ARCH_NAMES = {"cohere": "command-r", "qwen2_moe": "qwen2moe", "qwen3_moe": "qwen3moe", "gemma3_text": "gemma3",
                   "gemma4_text": "gemma4", "umt5": "t5", "minimax_m2": "minimax-m2", "gpt_oss": "gpt-oss"}


def weights_map(model: nn.Module) -> dict[str, str]:
    """GGUF tensor name -> the model's parameter name: transformers' get_gguf_hf_weights_map (every module's own
    names tried against gguf's name map, the outer module's first, then each child's, depth first), with the
    name map built once rather than once per module (most of a deep model's open otherwise: benchmarks/README.md,
    Behind the code)."""
    from gguf import MODEL_ARCH_NAMES, get_tensor_name_map

    model_type = GGUF_ARCH_NAMES.get(model.config.model_type, model.config.model_type)
    arch = next((key for key, value in MODEL_ARCH_NAMES.items() if value == model_type), None)
    if arch is None:
        raise ModelError(model_type, "the gguf package has no tensor names for this architecture",
                         "update the gguf package (pip install -U gguf)")
    name_map = get_tensor_name_map(arch, model.config.num_hidden_layers)
    keys = list(model.state_dict(keep_vars=True))
    found: dict[str, str] = {}
    for prefix, _ in model.named_modules():
        start = f"{prefix}." if prefix else ""
        own: dict[str, str] = {}
        for key in keys:
            if not key.startswith(start):
                continue
            name, dot, suffix = key[len(start):].rpartition(".")
            if suffix not in ("weight", "bias"):
                name, dot, suffix = key[len(start):], "", ""
            gguf_name = name_map.get_name(name)
            if gguf_name is not None:
                own[gguf_name + dot + suffix] = key
        for gguf_name, key in own.items():
            found.setdefault(gguf_name, key)
    return found


def _tensors(header: GgufHeader, wanted: list[TensorInfo], config: dict, dtype: torch.dtype,
             maker=lambda info: None) -> list:
    """Every wanted tensor dequantised and transformed (or made by `maker(info)`, where it gives a function),
    largest first on a pool of threads (NumPy lets go of the GIL). Each one finished is reported
    (progress.stage "tensors", n of N) and Cancel stops the rest."""

    def one(info: TensorInfo):
        made = maker(info)
        return made(info) if made is not None else _dequantized(header, info, config, dtype)

    order = sorted(range(len(wanted)), key=lambda i: -wanted[i].nbytes)
    results: list = [None] * len(wanted)
    pool = ThreadPoolExecutor(max_workers=min(os.cpu_count() or 1, 8))
    try:
        futures = {pool.submit(one, wanted[i]): i for i in order}
        for done, (future, i) in enumerate(futures.items(), 1):
            results[i] = future.result()
            progress.stage("tensors", done, len(wanted))  # on the opening thread: its watch, its Cancel
    finally:
        pool.shutdown(wait=False, cancel_futures=True)  # Cancel or an error: the tensors not started never start
    return results


def _dequantized(header: GgufHeader, info: TensorInfo, config: dict, dtype: torch.dtype) -> torch.Tensor:
    values = dequantize(tensor_bytes(header, info), info.qtype, info.shape)
    # any NaN or infinity makes the sum so; float32 values cannot overflow a float64 sum
    if values.is_floating_point() and not math.isfinite(values.numpy().sum(dtype=np.float64)):
        raise _not_finite(info)
    return _transformed(header, info, config, values, dtype)


def _not_finite(info: TensorInfo) -> ModelError:
    return ModelError(info.name, "this weight holds NaN or infinite values", "use an undamaged copy of the "
                      "GGUF file", field_name="checkpoint key")


def _transformed(header: GgufHeader, info: TensorInfo, config: dict, tensor: torch.Tensor,
                 dtype: torch.dtype) -> torch.Tensor:
    """transformers' tensor processors, in float32 before the cast: Q/K rows back in Hugging Face's order for
    the llama family, norms stored as 1 + w back to w."""
    architecture = header.architecture
    if architecture == "llama" and (".attn_q." in info.name or ".attn_k." in info.name):
        heads, kv_heads = config.get("num_attention_heads"), config.get("num_key_value_heads")
        if heads is not None and kv_heads is not None:
            n = heads if ".attn_q." in info.name else kv_heads
            rows = tensor.shape[0]
            tensor = tensor.reshape(n, rows // n // 2, 2, *tensor.shape[1:]).transpose(1, 2).reshape(tensor.shape)
    elif architecture in NORM_PLUS_ONE and "norm.weight" in info.name:
        tensor = tensor - 1
    return tensor.contiguous().to(dtype)
