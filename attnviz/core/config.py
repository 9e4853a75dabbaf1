"""The frozen, validated run configuration and its JSON form (also the preset format).

Each field carries metadata (label, tooltip, range, widget objectName) so the parameter panel
and the CLI are generated from this one declaration.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from .configfile import ConfigFileError, read_config_text
from .kernel import nearest_heads
from .variants import VARIANTS

MASK_KINDS = {
    "none": "No mask: every query sees every key",
    "causal": "Causal, top-left aligned (the seeds' triu(1), SDPA is_causal)",
    "causal-bottom-right": "Causal, bottom-right aligned (decoding / KV-cache view)",
    "padding": "Key padding: batch item b sees its first kv_lengths[b] keys",
    "window": "Causal sliding window: the query and the `window` keys before it",
    "window-bidirectional": "Sliding window, both sides: keys within `window` of the query",
}
WINDOW_MASKS = ("window", "window-bidirectional")
DTYPES = ("float32", "float64", "float16", "bfloat16")
MAX_SIZE = 1 << 16
FORMAT_TAG = "attnviz-config"
FORMAT_VERSION = 1


class ConfigError(ValueError):
    """An invalid configuration: names the field, the value and the fix."""

    def __init__(self, field_name: str, value: Any, problem: str, fix: str,
                 suggestions: tuple[Any, ...] = ()):
        self.field, self.value, self.problem, self.fix = field_name, value, problem, fix
        self.suggestions = tuple(suggestions)  # nearest valid values of `field`, for quick fixes
        shown = repr(value)
        if len(shown) > 80:  # a huge or deeply nested value from a file: one readable line
            shown = shown[:60] + f"... ({len(shown):,} characters)"
        super().__init__(f"{field_name} = {shown}: {problem}. Fix: {fix}")


def param(default: Any, label: str, tooltip: str, *, widget: str, minimum: float | None = None,
          maximum: float | None = None, unit: str = "", group: str = "Model") -> Any:
    meta = dict(label=label, tooltip=tooltip, widget=widget, minimum=minimum, maximum=maximum,
                unit=unit, group=group)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class RunConfig:
    """Everything one forward pass depends on. Immutable; invalid values raise ConfigError."""

    variant: str = param("causal", "Variant", "Which seed module to run", widget="variantCombo")
    d_model: int = param(64, "d_model", "Model width: features per input token",
                         widget="dModelSpin", minimum=1, maximum=MAX_SIZE, unit="features")
    d_out: int = param(64, "d_out", "Width of Q, K, V and the output (seed 000's d_out)",
                       widget="dOutSpin", minimum=1, maximum=MAX_SIZE, unit="features")
    d_cross: int = param(32, "d_cross", "Width of the context tokens that keys and values come from",
                         widget="dCrossSpin", minimum=1, maximum=MAX_SIZE, unit="features")
    heads: int = param(4, "Heads", "Number of attention heads; must divide the projected width",
                       widget="headsSpin", minimum=1, maximum=1024)
    batch: int = param(1, "Batch", "Number of independent sequences (batch size B)",
                       widget="batchSpin", minimum=1, maximum=4096, group="Shape")
    seq_q: int = param(16, "Query length", "Number of query tokens Lq (rows of each map)",
                       widget="seqQSpin", minimum=1, maximum=MAX_SIZE, unit="tokens", group="Shape")
    seq_kv: int = param(16, "Key/value length", "Number of key/value tokens Lkv (columns of each map)",
                        widget="seqKvSpin", minimum=1, maximum=MAX_SIZE, unit="tokens", group="Shape")
    mask: str = param("causal", "Mask", "Which keys each query may attend to", widget="maskCombo",
                      group="Mask")
    window: int = param(4, "Window", "Sliding window: keys at most this many positions from the query",
                        widget="windowSpin", minimum=0, maximum=MAX_SIZE, unit="positions", group="Mask")
    kv_lengths: tuple[int, ...] = param(
        (), "Valid lengths", "Key padding: valid keys per batch item, e.g. '16, 9' (one number = all items)",
        widget="kvLengthsEdit", group="Mask")
    safe_softmax: bool = param(False, "Safe softmax",
                               "Rows with no key to attend to give 0 (as SDPA) instead of NaN (seed math)",
                               widget="safeSoftmaxCheck", group="Mask")
    dropout: float = param(0.0, "Dropout p", "Dropout on the attention weights (only in train mode)",
                           widget="dropoutSpin", minimum=0.0, maximum=0.99, group="Training")
    train: bool = param(False, "Train mode",
                        "Apply dropout as in training: shows the sample that multiplied V (rows no longer sum to 1)",
                        widget="trainCheck", group="Training")
    in_bias: bool = param(True, "Input bias", "Bias on the Q, K, V projections", widget="inBiasCheck")
    out_bias: bool = param(True, "Output bias", "Bias on the output projection", widget="outBiasCheck")
    seed: int = param(0, "Seed", "torch.manual_seed for weights, inputs and dropout",
                      widget="seedSpin", minimum=0, maximum=2**31 - 1, group="Run")
    device: str = param("cpu", "Device", "Where the forward pass runs: cpu, cuda, cuda:N or auto",
                        widget="deviceCombo", group="Run")
    dtype: str = param("float32", "Dtype",
                       "Compute precision. float16/bfloat16 on the CPU run 50-400x slower than float32",
                       widget="dtypeCombo", group="Run")

    def __post_init__(self) -> None:
        if isinstance(self.kv_lengths, (list, int)):
            lengths = (self.kv_lengths,) if isinstance(self.kv_lengths, int) else self.kv_lengths
            object.__setattr__(self, "kv_lengths", tuple(lengths))
        self._validate()

    # --- derived -----------------------------------------------------------------------------

    @property
    def spec(self):
        return VARIANTS[self.variant]

    @property
    def lkv(self) -> int:
        """Key/value length actually used (self-attention variants use seq_q)."""
        return self.seq_kv if self.spec.cross else self.seq_q

    @property
    def head_dim(self) -> int:
        return getattr(self, self.spec.head_width) // self.heads

    def applies(self, name: str) -> bool:
        """Whether a field means anything for this variant and mask."""
        return field_applies(name, self.variant, self.mask)

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
        return f"B={self.batch} H={self.heads} Lq={self.seq_q} Lkv={self.lkv} d_head={self.head_dim}"

    # --- validation --------------------------------------------------------------------------

    def _validate(self) -> None:
        if self.variant not in VARIANTS:
            raise ConfigError("variant", self.variant, "unknown variant", f"use one of {', '.join(VARIANTS)}")
        for f in fields(self):
            value, meta = getattr(self, f.name), f.metadata
            kind = f.type
            if kind == "int" and (not isinstance(value, int) or isinstance(value, bool)):
                raise ConfigError(f.name, value, "must be a whole number", f"give an integer such as {f.default}")
            if kind == "str" and not isinstance(value, str):
                raise ConfigError(f.name, value, "must be text", f'give a name such as "{f.default}"')
            if kind == "bool" and not isinstance(value, bool):
                raise ConfigError(f.name, value, "must be true or false", "give true or false")
            if kind == "float" and (not isinstance(value, (int, float)) or isinstance(value, bool)):
                raise ConfigError(f.name, value, "must be a number", f"give a number such as {f.default}")
            if kind == "float" and not math.isfinite(value):  # NaN passes every range check
                raise ConfigError(f.name, value, "must be a finite number", f"give a number such as {f.default}")
            if kind in ("int", "float") and self.applies(f.name):
                lo, hi = meta["minimum"], meta["maximum"]
                if lo is not None and value < lo:
                    raise ConfigError(f.name, value, f"must be at least {lo}", f"set {f.name} to {lo} or more")
                if hi is not None and value > hi:
                    raise ConfigError(f.name, value, f"must be at most {hi}", f"set {f.name} to {hi} or less")
        width = getattr(self, self.spec.head_width)
        width_name = self.spec.labels.get(self.spec.head_width, self.spec.head_width)  # the seed's own name
        if width % self.heads:
            nearest = nearest_heads(width, self.heads)
            raise ConfigError(
                "heads", self.heads, f"{self.heads} heads do not divide {width_name} = {width}",
                f"use {' or '.join(map(str, nearest))} heads, or a {width_name} that is a multiple of {self.heads}",
                suggestions=tuple(nearest),
            )
        if self.mask not in MASK_KINDS:
            raise ConfigError("mask", self.mask, "unknown mask", f"use one of {', '.join(MASK_KINDS)}")
        if self.mask == "padding":
            self._validate_kv_lengths()
        if self.dtype not in DTYPES:
            raise ConfigError("dtype", self.dtype, "unknown dtype", f"use one of {', '.join(DTYPES)}")
        if not re.fullmatch(r"cpu|auto|cuda(:\d+)?", self.device):
            raise ConfigError("device", self.device, "unknown device", "use cpu, cuda, cuda:N or auto")

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
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(unknown[0], data[unknown[0]], "unknown configuration field",
                              f"remove it; known fields are {', '.join(sorted(known))}")
        values = dict(data)
        if "kv_lengths" in values and isinstance(values["kv_lengths"], (list, tuple)):
            values["kv_lengths"] = tuple(values["kv_lengths"])
        return cls(**values)

    @classmethod
    def for_variant(cls, variant: str, **changes: Any) -> RunConfig:
        """A config with the variant's own defaults (its seed's mask and bias flags) plus changes."""
        spec = VARIANTS.get(variant)
        if spec is None:
            raise ConfigError("variant", variant, "unknown variant", f"use one of {', '.join(VARIANTS)}")
        base: dict[str, Any] = {"variant": variant, "mask": spec.default_mask}
        if variant == "cross":
            base["in_bias"] = False  # seed 000: qkv_bias=False
        return cls(**{**base, **changes})

    def to_json(self, description: str = "") -> str:
        doc = {"format": FORMAT_TAG, "version": FORMAT_VERSION, "description": description,
               "config": self.to_dict()}
        return json.dumps(doc, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> RunConfig:
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
        return cls.from_dict(doc["config"])


def field_applies(name: str, variant: str, mask: str) -> bool:
    """Whether config field `name` means anything for this variant and mask kind."""
    if name not in VARIANTS[variant].fields:
        return False
    if name == "window":
        return mask in WINDOW_MASKS
    if name == "kv_lengths":
        return mask == "padding"
    return True


def field_meta(name: str) -> dict[str, Any]:
    return next(f.metadata for f in fields(RunConfig) if f.name == name)


def load_config(path: str | os.PathLike) -> RunConfig:
    try:
        text = read_config_text(path)  # a regular file of at most 1 MiB of UTF-8, or ConfigFileError
    except ConfigFileError as exc:
        raise ConfigError("file", str(path), exc.problem, exc.fix) from exc
    try:
        return RunConfig.from_json(text)
    except ConfigError as exc:
        if exc.field not in ("file", "format"):
            raise
        # name the file, never quote its contents
        raise ConfigError("file", str(path), exc.problem, exc.fix) from exc
