"""A model folder through transformers: its own modelling code, attnviz's kernel in every attention layer.

`load_transformers_model(folder)` imports transformers (lazily, hub offline), builds the folder's
architecture class with `attn_implementation="attnviz"` where the family's code calls the attention
interface (else "eager", weights only), checks every weight was found, and finds the attention
modules (layers.py). Also the folder's transformers tokenizer where attnviz needs one: a chat template,
or a fast tokenizer built from a vocabulary file or a GGUF file.
"""

from __future__ import annotations

import inspect
import json
import math
import re
import sys
from dataclasses import dataclass, replace

import torch
from torch import nn

from attnviz.core.kernel.kernel import Trace
from attnviz.core.kernel.masks import is_causal
from attnviz.core.kernel.progress import Cancelled
from attnviz.core.kernel.stages import STAGE_NAMES
from attnviz.models.compact import end_probes, piece_bytes
from attnviz.models.folder import ModelError, ModelFolder, check_pickle, parameter_bytes, safetensors_header
from attnviz.models.gguf_files import gguf_header, read_gguf
from attnviz.models.gguf_model import build_config, build_model, fast_path
from attnviz.models.hf_attention import ATTN_NAME, transformers
from attnviz.models.layers import HOOKED, discover, stack_of
from attnviz.models.outputs import find_output_side
from attnviz.style import format_bytes
from attnviz.system import torch_threads

# The architecture's name ends -> the Auto class that builds it with its head (logits for later views)
HEADS = (("ForCausalLM", "AutoModelForCausalLM"), ("LMHeadModel", "AutoModelForCausalLM"),
         ("ForMaskedLM", "AutoModelForMaskedLM"))  # an encoder-decoder opens headless (T5Model, BartModel)
# Families seen running weights only (their code does not call the attention interface), in transformers 5.24
WEIGHTS_ONLY_SEEN = ("gpt_neo", "falcon", "bloom", "mpt", "xglm", "deberta_v2", "mpnet")
NO_POSITION_LIMIT = 1 << 20  # relative-position models (T5) read any length the memory allows
# A layer's index in a checkpoint key: under the containers families keep their layers in (not experts.N.)
LAYER_INDEX = re.compile(r"(?:^|\.)(?:layers|layer|h|block|blocks|albert_layers)\.(\d+)\.")
LAYER_COUNTS = ("num_hidden_layers", "num_layers", "num_decoder_layers", "encoder_layers", "decoder_layers")
MAX_SHARED_LAYERS = 4096  # a model whose layers share one set of weights (ALBERT) still has a sane depth
# config.json's sizes (a family's own spellings; the first found counts) and scales that must be positive
WIDTH_KEYS = ("hidden_size", "n_embd", "d_model", "dim")
VOCAB_KEYS = ("vocab_size",)
FFN_KEYS = ("intermediate_size", "n_inner", "ffn_dim", "d_ff", "decoder_ffn_dim", "encoder_ffn_dim")
EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
POSITION_KEYS = ("max_position_embeddings", "n_positions")
POSITIVE_KEYS = frozenset({"rope_theta", "layer_norm_eps", "rms_norm_eps", "layer_norm_epsilon", "norm_eps",
                           "max_position_embeddings", "n_positions", "vocab_size", "hidden_size",
                           "n_embd", "d_model", "num_attention_heads", "n_head", "num_key_value_heads", "head_dim",
                           "num_hidden_layers", "n_layer", "num_layers", "intermediate_size", "n_inner"})
# The few-token forwards that find the attention layers and the output side: on a second thread every op waits
# for a core another program holds (benchmarks/README.md, Behind the code)
SHORT_FORWARD_THREADS = 1
IMPLIED_FACTOR, IMPLIED_SLACK = 8, 256 << 20  # a config may describe more than its file holds (tied, untrained head)


@dataclass(frozen=True)
class ModelInfo:
    model_type: str
    architecture: str  # the transformers class that runs it (LlamaForCausalLM ...)
    layers: int
    heads: int
    kv_heads: int
    d_model: int
    vocab_size: int
    max_positions: int
    causal: bool
    parameter_bytes: int  # the weights as float32
    name: str  # the folder's name (a snapshot's repository name where it has one)
    stacks: tuple[str, ...] = ("decoder",)
    dtype: str = "float32"  # the checkpoint's dtype (computed in float32 on the CPU)
    stages: tuple[str, ...] = ()  # the stages this family records
    weight_piece: int = 0  # float32 bytes a compact weight makes per call, at most (compact.piece_bytes)


def _config(folder: ModelFolder):
    tf = transformers()
    if folder.gguf:
        return _gguf_config(tf, folder.gguf)
    model_type = folder.config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise ModelError(folder.path / "config.json", "config.json names no model_type",
                         "restore the config.json saved with the model", field_name="model_type")
    try:
        return tf.AutoConfig.from_pretrained(str(folder.path), local_files_only=True, trust_remote_code=False)
    except (ValueError, KeyError) as exc:
        raise ModelError(model_type, f"transformers {tf.__version__} does not know this architecture",
                         "use a model of a family transformers runs, or a newer transformers",
                         field_name="model_type") from exc
    except Exception as exc:  # noqa: BLE001 - a config's validators raise TypeError, RecursionError, their own
        raise ModelError(folder.path / "config.json", f"config.json does not describe a valid {model_type} model "
                         f"({type(exc).__name__}: {str(exc)[:120]})", "restore the config.json saved with the model") \
            from exc


def _gguf_config(tf, path):
    summary = read_gguf(path)  # readable, of an architecture transformers dequantises: else one clear line
    if fast_path(summary.architecture):  # from the header parsed once, as transformers builds it
        config = build_config(gguf_header(path))
        config._name_or_path = str(path.parent)
        return config
    try:
        return tf.AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name, local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - metadata transformers cannot map
        raise ModelError(path, f"transformers cannot read the GGUF file's configuration ({str(exc).strip()[:160]})",
                         "use a GGUF file written by llama.cpp's converter") from exc


def _auto_class(tf, config, gguf: bool = False):
    architecture = (getattr(config, "architectures", None) or ["ForCausalLM" if gguf else ""])[0]
    for suffix, auto in HEADS:
        if architecture.endswith(suffix):
            try:
                return getattr(tf, auto)._model_mapping[type(config)]
            except KeyError:
                break
    return tf.AutoModel._model_mapping[type(config)]


def uses_interface(cls: type) -> bool:
    """Whether the family's modelling code calls transformers' attention interface (else: weights only)."""
    try:
        return "ALL_ATTENTION_FUNCTIONS" in inspect.getsource(sys.modules[cls.__module__])
    except (OSError, TypeError, KeyError):
        return False


def checkpoint_layers(folder: ModelFolder) -> int:
    """1 + the highest layer index among the checkpoint's keys (read from the safetensors headers)."""
    if folder.gguf:
        return read_gguf(folder.gguf).layers
    if not folder.safetensors:
        return -1
    indices = [int(m.group(1)) for shard in folder.weights for key in safetensors_header(shard)
               for m in [LAYER_INDEX.search(key)] if m]
    return max(indices, default=-1) + 1


def _check_layers(folder: ModelFolder, config) -> None:
    """A config.json asking for more layers than the checkpoint holds is refused before anything is built
    (building a billion layers would never end; fewer would leave layers without weights). Every layer count
    is checked (num_hidden_layers, T5's num_decoder_layers, BART's encoder_layers / decoder_layers ...)."""
    text = config.get_text_config()
    values = {name: getattr(text, name, None) for name in LAYER_COUNTS}  # attribute maps give gpt2's n_layer too
    counts = {name: v for name, v in values.items() if isinstance(v, int) and not isinstance(v, bool)}
    if not counts:
        return
    name, layers = max(counts.items(), key=lambda kv: kv[1])
    shared = getattr(text, "num_hidden_groups", None) is not None  # ALBERT: groups of layers share weights
    held = checkpoint_layers(folder)
    limit = MAX_SHARED_LAYERS if shared else held
    if held > 0 and layers > limit:  # no layer index found (an unusual naming): nothing to compare
        raise ModelError(layers, f"config.json asks for {layers} layers ({name}) but the checkpoint holds "
                         f"{held}", "use the config.json saved with these weights", field_name=name)


def _check_values(config) -> None:
    """config.json's numbers, before anything is built: finite, positive where a size or a scale must be (also
    inside nested settings such as rope_parameters)."""
    for key, value in _numbers(config.get_text_config().to_dict()):
        if isinstance(value, float) and not math.isfinite(value):
            raise ModelError(value, f"config.json's {key} is not a finite number", "restore the config.json saved "
                             "with the model", field_name=key)
        if value <= 0 if key in POSITIVE_KEYS else key == "sliding_window" and value < 0:
            least = "positive" if key in POSITIVE_KEYS else "at least 0"
            raise ModelError(value, f"config.json's {key} must be {least}", "restore the config.json saved with the "
                             "model", field_name=key)


def _check_rope(config) -> None:
    """transformers' own RoPE validation, heard: it only logs (a linear factor of 0.5, a dynamic factor of 0,
    llama3's high_freq_factor not above low_freq_factor), and attnviz silences transformers' logging, so such a
    config.json drew its maps silently. What it says must be so is refused here, in its own words."""
    import logging

    text = config.get_text_config()
    validate = getattr(text, "validate_rope", None)
    if validate is None:
        return
    heard: list[str] = []

    class Heard(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            heard.append(record.getMessage())

    logger = logging.getLogger("transformers.modeling_rope_utils")
    level, propagate, handler = logger.level, logger.propagate, Heard()
    logger.setLevel(logging.WARNING)
    logger.propagate = False  # heard here alone, never printed
    logger.addHandler(handler)
    try:
        validate()
    except (ValueError, KeyError, TypeError) as exc:
        heard.append(str(exc))
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate
    problem = next((m for m in heard if "must" in m or "Missing required" in m), None)
    if problem:
        raise ModelError(getattr(text, "rope_parameters", None), f"config.json's RoPE settings are invalid "
                         f"({problem.replace('`', '')[:160]})", "restore the config.json saved with the model",
                         field_name="rope_parameters")


def _numbers(values: dict, depth: int = 2):
    for key, value in values.items():
        if isinstance(value, dict) and depth:
            yield from _numbers(value, depth - 1)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            yield key, value


SIZE_KEYS = {"width": WIDTH_KEYS, "vocab": VOCAB_KEYS, "layers": LAYER_COUNTS, "ffn": FFN_KEYS,
             "experts": EXPERT_KEYS, "positions": POSITION_KEYS}


def _implied_bytes(sizes: dict[str, int]) -> int:
    """float32 bytes a model of these sizes holds, roughly: embeddings, attention, MLPs (every expert)."""
    d, layers = sizes["width"], max(sizes["layers"], 1)
    return 4 * (2 * sizes["vocab"] * d + layers * 4 * d * d + layers * 3 * d * sizes["ffn"] * max(sizes["experts"], 1)
                + sizes["positions"] * d)


def _check_implied_size(config, checkpoint_bytes: int) -> None:
    """A config.json describing a model far larger than its checkpoint (a vocabulary or width of a billion)
    would allocate it all before any weight is read: refused, naming the key whose value makes it large."""
    text = config.get_text_config()
    sizes = {part: _size_of(text, names) for part, names in SIZE_KEYS.items()}
    implied = _implied_bytes(sizes)
    if implied <= IMPLIED_FACTOR * checkpoint_bytes + IMPLIED_SLACK:
        return
    blame = max(sizes, key=lambda part: implied - _implied_bytes({**sizes, part: 1}))
    key = _first_key(text, SIZE_KEYS[blame])
    value = getattr(text, key, None)
    raise ModelError(value, f"config.json ({key} = {value}) describes a model of about {format_bytes(implied)} "
                     f"but the checkpoint holds {format_bytes(checkpoint_bytes)}",
                     "use the config.json saved with these weights", field_name=key)


def _size_of(text, names: tuple[str, ...], default: int = 0) -> int:
    value = next((getattr(text, n) for n in names if isinstance(getattr(text, n, None), int)), default)
    return max(int(value), 0)


def _first_key(text, names: tuple[str, ...]) -> str:
    return next((n for n in names if isinstance(getattr(text, n, None), int)), names[0])


def _from_pretrained(cls, folder: ModelFolder, config, implementation: str, storage: str = "float32") -> nn.Module:
    if not folder.safetensors and not folder.gguf:  # a pickle is read with weights_only=True first
        check_pickle(folder)
    source = {"gguf_file": folder.gguf.name} if folder.gguf else {}
    try:
        if folder.gguf and fast_path(read_gguf(folder.gguf).architecture):  # attnviz's own reader (gguf_model.py)
            model, loading = build_model(cls, gguf_header(folder.gguf), config, implementation, storage=storage)
        else:
            model, loading = cls.from_pretrained(
                str(folder.path), config=config, local_files_only=True, trust_remote_code=False,
                attn_implementation=implementation, dtype=torch.float32, output_loading_info=True, **source)
    except (ModelError, Cancelled):  # a damaged tensor named; Cancel while a GGUF's tensors dequantise
        raise
    except Exception as exc:  # noqa: BLE001 - size mismatches, corrupt files, a config the code rejects
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise ModelError(folder.path, f"transformers cannot load the weights ({first_line})",
                         "use the config.json saved with these weights, and complete weight files") from exc
    missing = [k for k in loading.get("missing_keys") or [] if not _optional(k, model)]
    bad = sorted(missing) + [str(m[0]) for m in loading.get("mismatched_keys") or []]
    if bad:
        raise ModelError(bad[0], f"{len(bad)} weights of a {config.model_type} model missing from the checkpoint or of "
                         "another shape", "use the complete checkpoint saved with this config.json",
                         field_name="checkpoint key")
    # A layer's tensor the model has no place for: more layers in the file than config.json builds, or a
    # layer of another shape of model (a pooler or a head beside the base model is not a layer)
    extra = sorted(k for k in loading.get("unexpected_keys") or [] if LAYER_INDEX.search(k))
    if extra:
        raise ModelError(extra[0], f"{len(extra)} layer weights in the checkpoint that a {config.model_type} model "
                         "built from config.json has no place for (more layers than it says?)",
                         "use the config.json saved with these weights", field_name="checkpoint key")
    if not getattr(model, "attnviz_finite_checked", False):  # gguf_model.py checks each tensor as it reads it
        _check_finite_weights(model)
    # a head whose weights are missing would predict at random: then the run has no predictions
    model.attnviz_trained_head = not any(not k.startswith(model.base_model_prefix + ".") and ".pooler." not in f".{k}"
                                         for k in loading.get("missing_keys") or [])
    return model.eval()


def _check_finite_weights(model: nn.Module) -> None:
    """NaN or infinite weights would draw maps of NaN: refused, naming the tensor (one pass over the weights)."""
    with torch.inference_mode():
        for name, tensor in model.state_dict().items():
            if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                raise ModelError(name, "this weight holds NaN or infinite values",
                                 "use an undamaged copy of the checkpoint", field_name="checkpoint key")


def _optional(key: str, model: nn.Module) -> bool:
    """Weights no map depends on: a pooler, and a head outside the base model (logits would be random)."""
    has_head = model.base_model is not model
    return ".pooler." in f".{key}" or (has_head and not key.startswith(model.base_model_prefix + "."))


def _info(folder: ModelFolder, model: nn.Module, traces: list[Trace], stacks: list[str], name: str,
          size: int) -> ModelInfo:
    config = model.config.get_text_config()
    first = traces[0]
    order = tuple(dict.fromkeys(stacks))
    heads = first.weights.shape[1]
    kv_heads = first["k"].shape[1] if "k" in first else heads
    stages = [s for s in STAGE_NAMES if s in first or s in HOOKED]
    positions = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    return ModelInfo(
        model_type=config.model_type, architecture=type(model).__name__,
        layers=stacks.count(order[0]),
        heads=heads, kv_heads=kv_heads, d_model=int(getattr(config, "hidden_size", 0) or first.weights.shape[-1]),
        vocab_size=int(config.vocab_size), max_positions=int(positions or NO_POSITION_LIMIT),
        causal=is_causal(first["mask"][0, 0]), parameter_bytes=size, name=name,
        dtype=_dtype_name(folder), stages=tuple(stages), stacks=order, weight_piece=piece_bytes(model))


def _dtype_name(folder: ModelFolder) -> str:
    if folder.gguf:
        return f"gguf {read_gguf(folder.gguf).quantization}"
    stored = folder.config.get("torch_dtype") or folder.config.get("dtype") or "float32"
    return stored if isinstance(stored, str) else json.dumps(stored)


def load_transformers_model(folder: ModelFolder, name: str, size: int, storage: str = "float32"):
    """(the whole model, its attention modules in call order, each one's stack, its info, its output side) for a
    checked folder; a GGUF file's matrices kept in `storage` (compact.py)."""
    tf = transformers()
    config = _config(folder)
    _check_layers(folder, config)
    _check_values(config)
    _check_rope(config)
    _check_implied_size(config, size if storage == "float32" else parameter_bytes(folder))  # compact: float32's
    cls = _auto_class(tf, config, gguf=folder.gguf is not None)  # a GGUF is a language model
    model, modules, traces = _load_with_kernel(cls, folder, config, storage)
    names = {m: n for n, m in model.base_model.named_modules()}
    stacks = [stack_of(names[m]) for m in modules]
    if len(set(stacks)) == 1:  # one stack: an encoder (bert, distilbert, modernbert) or a decoder, by its mask
        stacks = ["decoder" if is_causal(traces[0]["mask"][0, 0]) else "encoder"] * len(stacks)
    try:
        with torch_threads(SHORT_FORWARD_THREADS):
            side = find_output_side(model, modules, model.attnviz_trained_head)
    finally:
        end_probes(model)  # compact weights: the probes' memo ends with them (compact.py)
    info = _info(folder, model, traces, stacks, name, size)
    if "v" in info.stages and all(m in side.out_weights for m in modules):
        info = replace(info, stages=tuple(s for s in STAGE_NAMES if s in info.stages or s == "value_weighted"))
    return model, modules, stacks, info, side


def _load_with_kernel(cls, folder: ModelFolder, config, storage: str = "float32"):
    """The model with attnviz's kernel as its attention where its code calls the interface (also inside a
    wrapper, as LLaVA's language model does), else eager with output_attentions (weights only)."""
    known = uses_interface(cls)
    try:
        model = _from_pretrained(cls, folder, config, ATTN_NAME, storage)
        modules, traces = _discover(model, True)
        if modules:
            return model, modules, traces
    except ModelError:
        if known:
            raise
    model = _from_pretrained(cls, folder, config, "eager", storage)
    modules, traces = _discover(model, False)
    if not modules:
        raise ModelError(folder.path, f"{type(model).__name__} ran no attention layer attnviz could see",
                         "choose a model with attention layers")
    return model, modules, traces


def _discover(model: nn.Module, interface: bool):
    try:
        with torch_threads(SHORT_FORWARD_THREADS):
            return discover(model.base_model, interface)
    except Exception as exc:  # noqa: BLE001 - a vision, audio or state-space model's forward on text ids
        raise ModelError(model.name_or_path, f"{type(model).__name__} cannot run on text alone ({type(exc).__name__}: "
                         f"{str(exc).strip()[:120]})", "choose a text model (attnviz reads a text, not images or "
                         "audio)") from exc


def auto_tokenizer(folder: ModelFolder):
    """transformers' AutoTokenizer of the folder or GGUF file: where there is no tokenizer.json (a GGUF file's
    vocabulary, a sentencepiece model, vocab.txt) its fast tokenizer is the one attnviz reads, and a chat
    template is applied through it. ModelError where transformers cannot build one."""
    tf = transformers()
    source = {"gguf_file": folder.gguf.name} if folder.gguf else {}
    try:
        return tf.AutoTokenizer.from_pretrained(str(folder.path), local_files_only=True, trust_remote_code=False,
                                                **source)
    except Exception as exc:  # noqa: BLE001 - a vocabulary transformers cannot convert (or sentencepiece missing)
        raise ModelError(folder.tokenizer, f"transformers cannot build a tokenizer from this file "
                         f"({type(exc).__name__}: {str(exc).strip()[:160]})",
                         "save the model's tokenizer.json (AutoTokenizer(...).save_pretrained(folder)); a "
                         "sentencepiece file needs the sentencepiece package") from exc
