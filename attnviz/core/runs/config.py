"""The frozen, validated run configuration and its JSON form (also the preset format).

Each field carries metadata (label, tooltip, range, group, choices) so the parameter panel
and the CLI are generated from this one declaration (the widgets' objectNames are the UI's: ui/window/field_widgets.py).
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import asdict, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from attnviz.core.kernel.kinds import (
    ABLATIONS,
    POOL_MODES,
    POSITIONS,
    SPEC_FIX,
    nearest_heads,
    spec_problem,
)
from attnviz.core.kernel.kinds import (
    MASK_INFO as MASKS,
)
from attnviz.core.runs.scalars import convert, int_tuple

if TYPE_CHECKING:
    from attnviz.core.kernel.mods import AttentionOptions
    from attnviz.core.variants.registry import Registry

MASK_KINDS = {kind.name: kind.description for kind in MASKS.values()}
MASK_PARAMS = frozenset(p for kind in MASKS.values() for p in kind.params)  # the fields only some kinds read
POSITION_KINDS = {p.name: f"{p.description} ({p.families})" for p in POSITIONS.values()}
DTYPES = ("float32", "float64", "float16", "bfloat16")
MAX_SIZE = 1 << 16
FORMAT_TAG = "attnviz-config"
FORMAT_VERSION = 1
WEIGHT_SUFFIXES = (".safetensors", ".pt", ".pth")  # your own weights (userfiles.py)
INPUT_SUFFIXES = (".pt", ".pth", ".npz", ".safetensors")  # your own inputs
FILE_FIELDS = ("weights", "inputs")  # fields that name a file the run reads
PATH_FIELDS = ("model", "weights", "inputs", "image", "maps")  # fields holding a path (os.PathLike is taken)
MAPS_SUFFIX = ".npz"  # attention maps saved by attnviz (core/runs/saved.py)
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp")  # a vision model's picture (Pillow reads it)
TEXT_FIELDS = ("text", "decoder_text")  # what a tokenizer reads
BOM = "\ufeff"


_TYPE_FIX = {"int": lambda default: f"give an integer such as {default}",
             "float": lambda default: f"give a number such as {default}",
             "bool": lambda default: "give true or false",
             "str": lambda default: f'give a name such as "{default}"'}


class ConfigError(ValueError):
    """An invalid configuration: names the field, the value and the fix."""

    def __init__(self, field_name: str, value: Any, problem: str, fix: str,
                 suggestions: tuple[Any, ...] = ()):
        self.field, self.value, self.problem, self.fix = field_name, value, problem, fix
        self.suggestions = tuple(suggestions)  # nearest valid values of `field`, for quick fixes
        shown = repr(value)
        if len(shown) > 80:  # a huge or deeply nested value from a file: one readable line
            shown = shown[:60] + f"... ({len(shown):,} characters)"
        self.shown = shown
        super().__init__(self.describe(f"{field_name} = {shown}"))

    def describe(self, what: str) -> str:
        """The message about `what` (the field and value, or e.g. the flag that gave the value)."""
        return f"{what}: {self.problem}. Fix: {self.fix}"


def param(default: Any, label: str, tooltip: str, *, minimum: float | None = None,
          maximum: float | None = None, unit: str = "", group: str = "Model",
          choices: dict[str, str] | None = None, decimals: int = 2, zero_text: str = "") -> Any:
    """A config field with what the panel and the CLI are generated from (choices: id -> tooltip;
    zero_text: what the minimum 0 means, shown in its place)."""
    meta = dict(label=label, tooltip=tooltip, minimum=minimum, maximum=maximum,
                unit=unit, group=group, choices=choices, decimals=decimals, zero_text=zero_text)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class RunConfig:
    """Everything one forward pass depends on. Immutable; invalid values raise ConfigError."""

    variant: str = param("causal", "Variant", "Which seed module to run")
    model: str = param("", "Model folder",
                       "A local Hugging Face model folder (config.json, *.safetensors, tokenizer.json); nothing is "
                       "ever downloaded")
    weights: str = param("", "Weights",
                         "Your own weights: a state_dict file (.safetensors, or .pt/.pth saved with "
                         "torch.save(model.state_dict())) loaded into the module; the file's bias flags are taken, "
                         "widths must match; empty = random weights from the seed")
    maps: str = param("", "Maps file",
                      "An .npz of attention maps written by attnviz (Export, attnviz render -o FILE.npz, "
                      "attnviz.show()): shown as saved, with no model and nothing computed again")
    text: str = param("", "Text", "The input text: its tokens label both axes of every map",
                      group="Input")
    image: str = param("", "Image",
                       "A PNG, JPEG or WebP picture for a vision model (ViT, DeiT, DINOv2, CLIP, SigLIP): resized, "
                       "cropped and normalised by the folder's preprocessor_config.json; its patches are the tokens",
                       group="Input")
    chat: bool = param(False, "Chat template",
                       "Wrap the text as one user turn in the model's own chat template (with the assistant's "
                       "prompt after it), as a chat model reads it", group="Input")
    decoder_text: str = param("", "Decoder text",
                              "Encoder-decoder models (T5, BART): the decoder's input after its start token; empty = "
                              "the decoder start token alone", group="Input")
    stack: str = param("", "Stack",
                       "Which attention of the model the maps show: encoder (self-attention over the text), decoder "
                       "(causal self-attention over the decoder text) or cross (decoder tokens as rows reading the "
                       "encoder's as columns); empty = the model's first stack", group="Input")
    generate: int = param(0, "Generate",
                          "Tokens the model writes after the text, one at a time, each new token's attention computed "
                          "over its cache of every earlier token; 0 = off (the text alone)",
                          minimum=0, maximum=4096, unit="tokens", group="Input", zero_text="off")
    temperature: float = param(0.0, "Temperature",
                               "Sampling temperature of the generated tokens; 0 = greedy (always the most likely)",
                               minimum=0.0, maximum=10.0, group="Input",
                               zero_text="greedy")
    sample_top_k: int = param(0, "Sample top k", "Sample only among the k most likely tokens; 0 = all tokens",
                              minimum=0, maximum=100000, unit="tokens", group="Input",
                              zero_text="all")
    ablate: tuple[str, ...] = param(
        (), "Ablate heads",
        'Heads knocked out, as layer.head (e.g. "3.5, 4.*": head 5 of layer 3 and every head of layer 4); their '
        "output is replaced before the output projection, so every later layer and the predictions change",
        group="Ablation")
    ablation: str = param("zero", "Ablation", "What an ablated head outputs",
                          group="Ablation", choices=ABLATIONS)
    top_k: int = param(5, "Top k", "How many of the most likely next tokens the predictions list per position",
                       minimum=1, maximum=100, unit="tokens", group="Ablation")
    inputs: str = param("", "Inputs",
                        "Random (torch.randn from the seed) or your own tensors from a file (.pt, .npz, .safetensors) "
                        "named as the forward's arguments (x; queries, keys, values; x, y): batch and lengths follow "
                        "the file", group="Input")
    d_model: int = param(64, "d_model", "Model width: features per input token",
                         minimum=1, maximum=MAX_SIZE, unit="features")
    d_out: int = param(64, "d_out", "Width of Q, K, V and the output (seed 000's d_out)",
                       minimum=1, maximum=MAX_SIZE, unit="features")
    d_cross: int = param(32, "d_cross", "Width of the context tokens that keys and values come from",
                         minimum=1, maximum=MAX_SIZE, unit="features")
    heads: int = param(4, "Heads", "Number of attention heads; must divide the projected width",
                       minimum=1, maximum=1024)
    layer: int = param(0, "Layer",
                       "Which layer (0 = the first): the layer of a model shown; for differential attention its depth "
                       "sets λ_init = 0.8 - 0.6·exp(-0.3·layer)",
                       minimum=0, maximum=1023)
    batch: int = param(1, "Batch", "Number of independent sequences (batch size B)",
                       minimum=1, maximum=4096, group="Shape")
    seq_q: int = param(16, "Query length", "Number of query tokens Lq (rows of each map)",
                       minimum=1, maximum=MAX_SIZE, unit="tokens", group="Shape")
    seq_kv: int = param(16, "Key/value length", "Number of key/value tokens Lkv (columns of each map)",
                        minimum=1, maximum=MAX_SIZE, unit="tokens", group="Shape")
    mask: str = param("causal", "Mask", "Which keys each query may attend to",
                      group="Mask", choices=MASK_KINDS)
    window: int = param(4, "Window", "Sliding window: keys at most this many positions from the query",
                        minimum=0, maximum=MAX_SIZE, unit="positions", group="Mask")
    sinks: int = param(0, "Sink keys",
                       "Attention sinks (StreamingLLM): the first N keys stay visible to every query that may see "
                       "them, whatever the window", minimum=0, maximum=MAX_SIZE, unit="keys",
                       group="Mask", zero_text="none")
    kv_lengths: tuple[int, ...] = param(
        (), "Valid lengths", "Key padding: valid keys per batch item, e.g. '16, 9' (one number = all items)",
        group="Mask")
    safe_softmax: bool = param(False, "Safe softmax",
                               "Rows with no key to attend to give 0 (as SDPA) instead of NaN (seed math)",
                               group="Mask")
    kv_heads: int = param(0, "KV heads",
                          "Key/value heads: 0 = one per query head (MHA), 1 = shared by all (MQA, PaLM), else "
                          "grouped-query attention (GQA: Llama 2 70B, Llama 3, Mistral); must divide Heads",
                          minimum=0, maximum=1024, group="Attention",
                          zero_text="one per head (MHA)")
    position: str = param("none", "Position",
                          "Position encoding inside attention: RoPE rotates q and k (Llama, Mistral, Qwen2: halves; "
                          "GPT-J: pairs); ALiBi subtracts a per-head distance penalty (BLOOM, MPT)",
                          group="Attention", choices=POSITION_KINDS)
    rope_base: float = param(10000.0, "RoPE base", "RoPE's θ base: larger bases rotate more slowly (Llama 3: 500000)",
                             minimum=1.0, maximum=1e9, group="Attention", decimals=0)
    qk_scale: float = param(0.0, "Score scale",
                            "Multiplies Q·Kᵀ; 0 = divide by sqrt(d_head) as usual; e.g. 1/d_head as in muP",
                            minimum=0.0, maximum=1e3, group="Attention", decimals=5,
                            zero_text="1/√d_head")
    softcap: float = param(0.0, "Soft cap", "Logit soft cap cap·tanh(s / cap) before the mask (Gemma 2: 50); 0 = off",
                           minimum=0.0, maximum=1e4, group="Attention", zero_text="off")
    sink_logit: float = param(0.0, "Sink logit",
                              "A learned sink logit per head joins the softmax denominator (gpt-oss): rows then sum "
                              "to less than 1, the rest went to the sink; 0 = off",
                              minimum=-100.0, maximum=100.0, group="Attention")
    dropout: float = param(0.0, "Dropout p", "Dropout on the attention weights (only in train mode)",
                           minimum=0.0, maximum=0.99, group="Training")
    train: bool = param(False, "Train mode",
                        "Apply dropout as in training: shows the sample that multiplied V (rows no longer sum to 1)",
                        group="Training")
    in_bias: bool = param(True, "Input bias", "Bias on the Q, K, V projections")
    out_bias: bool = param(True, "Output bias", "Bias on the output projection")
    seed: int = param(0, "Seed", "torch.manual_seed for weights, inputs and dropout; a model's sampled tokens",
                      minimum=0, maximum=2**31 - 1, group="Run")
    pool: str = param("auto", "Pool maps",
                      "Long inputs: each map computed in blocks of query rows and max-pooled to at most 1,024 cells a "
                      "side inside the kernel (statistics and the output stay exact); auto pools when every layer's "
                      "maps would need more than 1 GiB or the memory budget", group="Run",
                      choices=POOL_MODES)
    device: str = param("cpu", "Device", "Where the forward pass runs: cpu, cuda, cuda:N or auto",
                        group="Run")
    dtype: str = param("float32", "Dtype",
                       "Compute precision. float16/bfloat16 on the CPU run 50-400x slower than float32",
                       group="Run")

    def __post_init__(self) -> None:
        object.__setattr__(self, "kv_lengths", int_tuple(self.kv_lengths))
        for name in PATH_FIELDS:  # a pathlib.Path is as good as its text
            value = getattr(self, name)
            if isinstance(value, os.PathLike):
                object.__setattr__(self, name, os.fspath(value))
            if isinstance(getattr(self, name), str) and "\0" in getattr(self, name):
                raise ConfigError(name, getattr(self, name), "a path cannot hold a NUL character",
                                  "give the file's path as it is on disk")
        if isinstance(self.ablate, (list, str)):  # JSON gives a list; "3.5, 4.*" reads as its parts
            parts = self.ablate.split(",") if isinstance(self.ablate, str) else self.ablate
            object.__setattr__(self, "ablate", tuple(p.strip() if isinstance(p, str) else p for p in parts
                                                     if not isinstance(p, str) or p.strip()))
        self._convert()
        self._validate()

    def _convert(self) -> None:
        """The boundary's one conversion (scalars.py): NumPy scalars and whole floats to Python's own types;
        a value of the wrong kind (True for an integer, "4" for a number) is refused saying what it is."""
        for f in fields(self):
            value = getattr(self, f.name)
            converted, problem = convert(f.type, value)
            if problem:
                raise ConfigError(f.name, value, problem, _TYPE_FIX[f.type](f.default))
            if converted is not value:
                object.__setattr__(self, f.name, converted)
        for name in TEXT_FIELDS:  # a byte-order mark (Notepad's UTF-8) is no part of the text: not three tokens
            if getattr(self, name).startswith(BOM):
                object.__setattr__(self, name, getattr(self, name)[1:])

    # --- derived -----------------------------------------------------------------------------

    @property
    def spec(self):
        return variants()[self.variant]

    @property
    def lkv(self) -> int:
        """Key/value length actually used (self-attention variants use seq_q; a model's maps are resolved
        to their own shape, which an encoder-decoder's cross-attention makes non-square)."""
        return self.seq_kv if self.spec.cross or self.spec.backed else self.seq_q

    @property
    def head_dim(self) -> int:
        """Width of one score map's q and k (a sub-head for differential attention)."""
        return getattr(self, self.spec.head_width) // (self.heads * self.spec.head_factor)

    @property
    def kv_head_count(self) -> int:
        return self.kv_heads if self.applies("kv_heads") and self.kv_heads else self.heads

    def applies(self, name: str) -> bool:
        """Whether a field means anything for this variant, mask and position."""
        return field_applies(name, self.variant, self.mask, self.position)

    def attention_options(self) -> AttentionOptions:
        """Position, scale and cap as the kernel takes them (fields that do not apply are off)."""
        from attnviz.core.kernel.mods import AttentionOptions

        return AttentionOptions(
            position=self.position if self.applies("position") else "none", rope_base=self.rope_base,
            qk_scale=self.qk_scale if self.applies("qk_scale") else 0.0,
            softcap=self.softcap if self.applies("softcap") else 0.0)

    @property
    def dropout_active(self) -> bool:
        """Whether dropout changes this run: the variant has it, train mode is on and p > 0."""
        return self.applies("train") and self.train and self.dropout > 0

    def kv_lengths_per_item(self) -> tuple[int, ...]:
        lengths = self.kv_lengths
        return lengths * self.batch if len(lengths) == 1 else lengths

    def replace(self, **changes: Any) -> RunConfig:
        return replace(self, **changes)

    def shapes_text(self) -> str:
        shapes = f"B={self.batch} H={self.heads} Lq={self.seq_q} Lkv={self.lkv}"
        return shapes if self.spec.read is not None else f"{shapes} d_head={self.head_dim}"  # a file's: no widths

    # --- validation --------------------------------------------------------------------------

    def _validate(self) -> None:
        if self.variant not in variants():
            raise ConfigError("variant", self.variant, "unknown variant", f"use one of {', '.join(variants())}")
        for f in fields(self):
            value, meta = getattr(self, f.name), f.metadata
            kind = f.type  # the types themselves are right: _convert saw to that
            if kind == "float" and not math.isfinite(value):  # NaN passes every range check
                raise ConfigError(f.name, value, "must be a finite number", f"give a number such as {f.default}")
            if kind in ("int", "float"):  # whether it applies or not: a saved config never holds nonsense
                lo, hi = meta["minimum"], meta["maximum"]
                if lo is not None and value < lo:
                    raise ConfigError(f.name, value, f"must be at least {lo}", f"set {f.name} to {lo} or more")
                if hi is not None and value > hi:
                    raise ConfigError(f.name, value, f"must be at most {hi}", f"set {f.name} to {hi} or less")
        if self.applies("model") and not self.model.strip():  # known before any run: say so at once
            raise ConfigError("model", self.model, "no model folder given",
                              "choose a folder with config.json, *.safetensors and tokenizer.json (e.g. one in the "
                              "Hugging Face cache)")
        if self.applies("maps"):
            self._validate_maps()
        for name in TEXT_FIELDS:
            _check_utf8(name, getattr(self, name))
        self._validate_heads()
        self._validate_ablation()
        if self.mask not in MASK_KINDS:
            raise ConfigError("mask", self.mask, "unknown mask", f"use one of {', '.join(MASK_KINDS)}")
        self._validate_attention()
        if self.applies("kv_lengths"):
            self._validate_kv_lengths()
        if self.pool not in POOL_MODES:
            raise ConfigError("pool", self.pool, "unknown pooling", f"use one of {', '.join(POOL_MODES)}",
                              suggestions=tuple(POOL_MODES))
        if self.dtype not in DTYPES:
            raise ConfigError("dtype", self.dtype, "unknown dtype", f"use one of {', '.join(DTYPES)}")
        self._validate_files()
        if self.image and self.applies("image") and not self.image.lower().endswith(IMAGE_SUFFIXES):
            raise ConfigError("image", self.image, f"unknown kind of image (not {', '.join(IMAGE_SUFFIXES)})",
                              "give a PNG, JPEG or WebP file")
        if not re.fullmatch(r"cpu|auto|cuda(:\d+)?", self.device):
            raise ConfigError("device", self.device, "unknown device", "use cpu, cuda, cuda:N or auto")

    def _validate_maps(self) -> None:
        if not self.maps.strip():
            raise ConfigError("maps", self.maps, "no maps file given",
                              "open an .npz written by attnviz (File > Open, or drop one onto the window)")
        if not self.maps.lower().endswith(MAPS_SUFFIX):
            raise ConfigError("maps", self.maps, "not an .npz file",
                              "give an .npz written by attnviz (Export, or attnviz render -o FILE.npz)")

    def _validate_heads(self) -> None:
        width = getattr(self, self.spec.head_width)
        width_name = self.spec.labels.get(self.spec.head_width, self.spec.head_width)  # the seed's own name
        factor = self.spec.head_factor
        if width % (self.heads * factor):
            nearest = [h // factor for h in nearest_heads(width, self.heads * factor) if h % factor == 0] or [1]
            per = f" x {factor} sub-heads" if factor > 1 else ""
            raise ConfigError(
                "heads", self.heads, f"{self.heads} heads{per} do not divide {width_name} = {width}",
                f"use {' or '.join(map(str, nearest))} heads, or a {width_name} that is a multiple of "
                f"{self.heads * factor}", suggestions=tuple(nearest),
            )
        if self.applies("kv_heads") and self.kv_heads and self.heads % self.kv_heads:
            divisors = [n for n in range(1, self.heads + 1) if self.heads % n == 0]
            nearest = sorted(divisors, key=lambda n: (abs(n - self.kv_heads), n))[:2]
            raise ConfigError(
                "kv_heads", self.kv_heads, f"{self.kv_heads} key/value heads do not divide {self.heads} heads",
                f"use a divisor of {self.heads}: {', '.join(map(str, divisors))} (or 0 for one per head)",
                suggestions=tuple(sorted(nearest)),
            )

    def _validate_ablation(self) -> None:
        """The specs' form only: which layers and heads exist is known once the model is (runner, backed)."""
        if not self.applies("ablate"):
            return
        bad = next((p for p in map(spec_problem, self.ablate) if p), None)
        if bad:
            raise ConfigError("ablate", self.ablate, bad, SPEC_FIX)
        if self.ablation not in ABLATIONS:
            raise ConfigError("ablation", self.ablation, "unknown ablation", f"use one of {', '.join(ABLATIONS)}",
                              suggestions=tuple(ABLATIONS))

    def _validate_attention(self) -> None:
        if self.position not in POSITIONS:
            raise ConfigError("position", self.position, "unknown position encoding",
                              f"use one of {', '.join(POSITIONS)}")
        if self.applies("position") and self.position.startswith("rope") and self.head_dim % 2:
            raise ConfigError(
                "position", self.position, f"RoPE rotates pairs of features but d_head = {self.head_dim} is odd",
                "choose heads so that d_head is even (or a width that gives one), or use position none or alibi")
        if self.applies("sinks") and self.sinks > self.lkv:
            raise ConfigError("sinks", self.sinks, f"{self.sinks} sink keys but only {self.lkv} keys exist",
                              f"use at most {self.lkv} sink keys, or lengthen the sequence", suggestions=(self.lkv,))

    def _validate_files(self) -> None:
        """Only the suffix here (no file access): the run reads and checks the files."""
        for name, suffixes in zip(FILE_FIELDS, (WEIGHT_SUFFIXES, INPUT_SUFFIXES), strict=True):
            path = getattr(self, name)
            if path and self.applies(name) and not path.lower().endswith(suffixes):
                raise ConfigError(name, path, f"unknown kind of file (not {', '.join(suffixes)})",
                                  f"give a {' or '.join(suffixes)} file")

    def _validate_kv_lengths(self) -> None:
        lengths = self.kv_lengths
        if not lengths:
            raise ConfigError("kv_lengths", lengths, "the padding mask needs valid key lengths",
                              f"give one length per batch item (or one for all), each in 0..{self.lkv}")
        if any(not isinstance(n, int) or isinstance(n, bool) for n in lengths):
            raise ConfigError("kv_lengths", lengths, "lengths must be whole numbers", "e.g. 16, 9")
        if len(lengths) not in (1, self.batch):
            raise ConfigError("kv_lengths", lengths, f"{len(lengths)} lengths for batch {self.batch}",
                              f"give 1 or {self.batch} lengths")
        for n in lengths:
            if n < 0 or n > self.lkv:
                raise ConfigError("kv_lengths", lengths,
                                  f"length {n} is outside the key sequence (0..{self.lkv})",
                                  f"use lengths between 0 and {self.lkv}, or raise the key length")

    # --- JSON (saved configurations and presets share this format) --------------------------

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["kv_lengths"] = list(self.kv_lengths)
        d["ablate"] = list(self.ablate)
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(unknown[0], data[unknown[0]], "unknown configuration field",
                              f"remove it; known fields are {', '.join(sorted(known))}")
        values = dict(data)
        for name in ("kv_lengths", "ablate"):
            if name in values and isinstance(values[name], (list, tuple)):
                values[name] = tuple(values[name])
        return cls(**values)

    @classmethod
    def for_variant(cls, variant: str, **changes: Any) -> RunConfig:
        """A config with the variant's own defaults (its seed's mask and bias flags) plus changes."""
        spec = variants().get(variant)
        if spec is None:
            raise ConfigError("variant", variant, "unknown variant", f"use one of {', '.join(variants())}")
        base: dict[str, Any] = {"variant": variant, "mask": spec.default_mask, **spec.defaults}
        if variant == "cross":
            base["in_bias"] = False  # seed 000: qkv_bias=False
        return cls(**{**base, **changes})

    def to_json(self, description: str = "", files: dict[str, dict[str, Any]] | None = None) -> str:
        """The saved-configuration JSON. `files`: {weights/inputs: {name, path, sha256, bytes}} of the files
        that produced a result (userfiles.saved_json reads them for a config about to be saved)."""
        doc = {"format": FORMAT_TAG, "version": FORMAT_VERSION, "description": description,
               "config": self.to_dict()}
        if files:
            doc["files"] = files
        return json.dumps(doc, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> RunConfig:
        if not text.strip():
            raise ConfigError("file", text[:40], "is empty", "give a configuration saved by attnviz "
                              "(Save configuration in the app)")
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError("file", text[:40], f"not valid JSON ({exc})", "fix the JSON syntax") from exc
        except RecursionError:  # e.g. 100,000 nested brackets: json's parser recurses per level
            raise ConfigError("file", text[:40], "nested too deeply to be a configuration",
                              "give a configuration saved by attnviz") from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT_TAG or not isinstance(doc.get("config"), dict):
            raise ConfigError("format", doc.get("format") if isinstance(doc, dict) else type(doc).__name__,
                              "not an attnviz configuration",
                              f'use a file with "format": "{FORMAT_TAG}" and a "config" object')
        version = doc.get("version", FORMAT_VERSION)  # files from before versions were written are version 1
        if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= FORMAT_VERSION:
            newer = isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION
            raise ConfigError("version", version,
                              f"saved by a newer attnviz (format version {version}; this one reads "
                              f"{FORMAT_VERSION})" if newer else "not a format version of attnviz's",
                              "update attnviz" if newer else f'give "version": {FORMAT_VERSION}, or save the '
                              "configuration again")
        return cls.from_dict(doc["config"])


def _check_utf8(name: str, text: str) -> None:
    """A text the tokenizer can encode: an argument holding bytes that are not UTF-8 arrives with lone
    surrogates (Python's surrogateescape), which the tokenizer would fail on mid-run."""
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(text[exc.start])
        what = (f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"a lone surrogate U+{code:04X}")
        raise ConfigError(name, text, f"not valid UTF-8 text: {what} at character {exc.start}",
                          "give the text as UTF-8 (re-save its file as UTF-8 and pass it with --text-file)") from None


def variants() -> Registry:
    """The variant registry, imported on first use: its specs build torch modules, and RunConfig imports
    without the engine."""
    from attnviz.core.variants.registry import VARIANTS

    return VARIANTS


def field_applies(name: str, variant: str, mask: str, position: str = "none") -> bool:
    """Whether config field `name` means anything for this variant, mask kind and position."""
    if name not in variants()[variant].fields:
        return False
    if name in MASK_PARAMS:  # a mask kind's own parameters
        return name in getattr(MASKS.get(mask), "params", ())
    if name == "rope_base":
        return name in getattr(POSITIONS.get(position), "params", ())
    return True


_FIELD_META = {f.name: f.metadata for f in fields(RunConfig)}  # the panel asks per field on every edit


def field_meta(name: str) -> dict[str, Any]:
    return _FIELD_META[name]
