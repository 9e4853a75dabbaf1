"""Your own weights and inputs: state_dict and input files read into a seed variant's run.

Weights: `.safetensors`, or `.pt`/`.pth` through torch.load(weights_only=True) (a checkpoint that
needs pickle is refused: unpickling arbitrary objects can run code). A state_dict saved from the
tutorial's class loads as is (strict). The file decides what it alone can tell and the run takes
it: the bias flags (a seed 000 checkpoint without q/k/v biases turns qkv_bias off). Widths are
never changed behind the user's back: a width that differs from the file's is a ConfigError naming
the key, its shape and the width that fits (its `suggestions` drive the app's quick-fix button).
What the file cannot tell (heads) stays as set.

Inputs: `.pt` (weights_only), `.npz` or `.safetensors` with tensors named as the forward's arguments
(x; queries, keys, values; x, y). Feature widths are checked the same way; batch and lengths
follow the file (the run's config takes them).

Files are read once per (path, mtime, size): edits of other parameters never reread them.
No Qt here.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from attnviz.core.runs.config import FILE_FIELDS, ConfigError, RunConfig
from attnviz.core.runs.configfile import ConfigFileError, read_config_text
from attnviz.core.runs.lru import LRU
from attnviz.core.variants.registry import VARIANTS

CACHE_ENTRIES = 6  # loaded files (and hashes) kept in memory
_cache: LRU[Any] = LRU(CACHE_ENTRIES)

RESAVE = ("re-save only the tensors: torch.save(model.state_dict(), 'weights.pt'), or "
          "safetensors.torch.save_file(model.state_dict(), 'weights.safetensors')")


@dataclass(frozen=True)
class FileRecord:
    """Which file produced a run: its field (weights or inputs), path, sha256, size and mtime."""

    field: str
    path: str
    sha256: str
    size: int
    mtime_ns: int

    @property
    def name(self) -> str:
        return Path(self.path).name

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "path": self.path, "sha256": self.sha256, "bytes": self.size}

    def changed(self) -> bool:
        """Whether the file on disk is no longer the one read (another mtime or size, or gone)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return True
        return (st.st_mtime_ns, st.st_size) != (self.mtime_ns, self.size)


@dataclass(frozen=True)
class UserFiles:
    """What a run takes from the files: the config they adjust, the weights, the inputs, the records."""

    config: RunConfig
    state: dict[str, Tensor] | None = None
    inputs: tuple[Tensor, ...] | None = None
    records: tuple[FileRecord, ...] = ()
    notes: tuple[str, ...] = ()


# --- reading, cached ----------------------------------------------------------------------------


def _stat(field: str, path: str) -> tuple[str, int, int]:
    try:
        st = os.stat(path)
    except OSError as exc:
        raise ConfigError(field, path, f"cannot be read ({exc.strerror})",
                          "check the path, or choose the file again") from None
    if not os.path.isfile(path):
        raise ConfigError(field, path, "is not a file", "choose a file")
    return os.path.abspath(path), st.st_mtime_ns, st.st_size


def _cached(kind: str, field: str, path: str, load: Callable[[str], Any]) -> Any:
    """load(path), once per (kind, path, mtime, size); the few newest are kept."""
    key = (kind, *_stat(field, path))
    return _cache.get_or_make(key, lambda: load(path))


def file_record(field: str, path: str) -> FileRecord:
    """The file's sha256 (read once per path, mtime and size)."""
    abspath, mtime, size = _stat(field, path)

    def digest(p: str) -> str:
        h = hashlib.sha256()
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return h.hexdigest()

    return FileRecord(field, path, _cached("sha256", field, path, digest), size, mtime)


class UnreadableCheckpoint(Exception):
    """A pickle checkpoint read_checkpoint would not read: `reason` says why, `pickled` whether it held objects
    (not a file torch cannot parse)."""

    def __init__(self, reason: str, pickled: bool):
        super().__init__(reason)
        self.reason, self.pickled = reason, pickled


def read_checkpoint(path: str | os.PathLike, mmap: bool = False) -> Any:
    """A torch.save file read with torch.load(weights_only=True) on the CPU, the one way attnviz reads a pickle
    (your own weights and inputs, a model folder's pytorch_model.bin): one holding objects beyond tensors, whose
    unpickling could run any code, or one torch cannot parse raises UnreadableCheckpoint."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as exc:
        found = re.search(r"GLOBAL ([\w.]+)", str(exc))
        what = f"it holds a pickled {found.group(1)}" if found else "it holds pickled Python objects"
        raise UnreadableCheckpoint(f"refused: {what}, not only tensors; torch.load(weights_only=True) refuses "
                                   "arbitrary objects because unpickling them can run any code", True) from None
    except Exception as exc:  # noqa: BLE001 - torch raises many kinds for a file it cannot parse
        raise UnreadableCheckpoint(f"is not a file torch.load can read ({type(exc).__name__})", False) from None


def _torch_load(field: str, path: str) -> Any:
    try:
        return read_checkpoint(path)
    except UnreadableCheckpoint as exc:
        fix = RESAVE if exc.pickled else "give a file written by torch.save, or a .safetensors / .npz file"
        raise ConfigError(field, Path(path).name, exc.reason, fix) from None


def _safetensors(field: str, path: str) -> dict[str, Tensor]:
    from safetensors.torch import load_file

    try:
        return load_file(path, device="cpu")
    except Exception as exc:  # noqa: BLE001 - SafetensorError and OSError
        raise ConfigError(field, Path(path).name, f"is not a readable safetensors file ({exc})",
                          "give a file written by safetensors.torch.save_file") from None


def _tensor_dict(field: str, path: str, obj: Any, what: str, example: str) -> dict[str, Tensor]:
    """A mapping of names to tensors (a training checkpoint's nested 'state_dict' or 'model' is taken)."""
    if isinstance(obj, Mapping) and field == "weights":
        for key in ("state_dict", "model"):
            inner = obj.get(key)
            if isinstance(inner, Mapping) and inner and all(isinstance(v, Tensor) for v in inner.values()):
                obj = inner
                break
    if isinstance(obj, Mapping) and obj and all(isinstance(k, str) and isinstance(v, Tensor) for k, v in obj.items()):
        return dict(obj)
    kind = "an empty mapping" if isinstance(obj, Mapping) and not obj else (
        "a mapping that holds more than tensors" if isinstance(obj, Mapping) else f"a {type(obj).__name__}")
    raise ConfigError(field, Path(path).name, f"holds {kind}, not {what}", f"save a dict of tensors: {example}")


def _read_weights(path: str) -> dict[str, Tensor]:
    if path.lower().endswith(".safetensors"):
        return _safetensors("weights", path)
    obj = _torch_load("weights", path)
    return _tensor_dict("weights", path, obj, "a state_dict (names to tensors)", "torch.save(model.state_dict(), path)")


def _read_inputs(path: str) -> dict[str, Tensor]:
    lower = path.lower()
    if lower.endswith(".safetensors"):
        return _safetensors("inputs", path)
    if lower.endswith(".npz"):
        try:
            with np.load(path, allow_pickle=False) as z:
                return {name: torch.from_numpy(np.array(z[name])) for name in z.files}
        except Exception as exc:  # noqa: BLE001 - not a zip, object arrays (need pickle), bad data
            raise ConfigError("inputs", Path(path).name, f"is not an NPZ of plain arrays ({exc})",
                              "write it with numpy.savez(path, x=x)") from None
    obj = _torch_load("inputs", path)
    return _tensor_dict("inputs", path, obj, "tensors named as the forward's arguments",
                        "torch.save({'x': x}, 'inputs.pt')")


def load_weights(path: str) -> dict[str, Tensor]:
    """The state_dict in a weights file (cached by path, mtime and size). Do not modify it."""
    return _cached("weights", "weights", path, _read_weights)


def load_inputs(path: str) -> dict[str, Tensor]:
    """The named tensors in an inputs file (cached by path, mtime and size). Do not modify them."""
    return _cached("inputs", "inputs", path, _read_inputs)


# --- fitting weights to the variant ------------------------------------------------------------


def expected_shapes(config: RunConfig) -> dict[str, tuple[int, ...]]:
    """The module's state_dict shapes for this config, built on the meta device (nothing allocated)."""
    with torch.device("meta"):
        module = config.spec.build(config)
    return {k: tuple(v.shape) for k, v in module.state_dict().items()}


def _shape(t: Tensor | tuple) -> str:
    return "(" + ", ".join(map(str, tuple(t.shape) if isinstance(t, Tensor) else t)) + ")"


def _label(config: RunConfig, field: str) -> str:
    own = config.spec.labels.get(field)
    return f"{field} ({own})" if own and own != field else field


def _weight_keys(config: RunConfig) -> set[str]:
    return {k for k in expected_shapes(config) if k.endswith("weight")}


def _strip_prefix(config: RunConfig, state: dict[str, Tensor], name: str) -> tuple[dict[str, Tensor], str]:
    """The state under the one prefix (e.g. 'decoder.attn.') that holds every weight the module needs."""
    wanted = _weight_keys(config)
    if wanted <= state.keys():
        return state, ""
    prefixes = {k[: -len(w)] for k in state for w in wanted if k.endswith("." + w)}
    fits = sorted(p for p in prefixes if all(p + w in state for w in wanted))
    if len(fits) != 1:
        return state, ""
    return {k[len(fits[0]):]: v for k, v in state.items() if k.startswith(fits[0])}, fits[0]


def _other_variant(config: RunConfig, state: dict[str, Tensor], name: str) -> None:
    """A file saved from another seed class: say which, with the variant as the quick fix."""
    if _weight_keys(config) <= state.keys():
        return
    for spec in VARIANTS.values():
        keys = _weight_keys(RunConfig.for_variant(spec.id)) if spec.file_widths else set()
        if spec.id != config.variant and keys and keys <= state.keys():
            raise ConfigError("variant", config.variant,
                              f"the weights file {name} holds {spec.seed}'s keys ({', '.join(sorted(keys))}), not "
                              f"{config.spec.seed}'s", f"choose the variant {spec.id} ({spec.label})",
                              suggestions=(spec.id,))


def _check_widths(config: RunConfig, state: dict[str, Tensor], name: str) -> None:
    """Each width the file determines must equal the panel's: else name the key, its shape and the fit."""
    wrong = []
    for field, (key, dim) in config.spec.file_widths.items():
        t = state.get(key)
        if t is not None and t.ndim == 2 and config.applies(field) and t.shape[dim] != getattr(config, field):
            wrong.append((field, key, t, int(t.shape[dim])))
    if not wrong:
        return
    field, _, _, width = wrong[0]
    saved = " and ".join(f"{_label(config, f)} = {w}" for f, _, _, w in wrong)
    shapes = "; ".join(dict.fromkeys(f"{k} has shape {_shape(t)}" for _, k, t, _ in wrong))
    fix = " and ".join(f"{_label(config, f)} to {w}" for f, _, _, w in wrong)
    raise ConfigError(field, getattr(config, field), f"the weights file {name} was saved with {saved} ({shapes})",
                      f"set {fix}", suggestions=(width,))


def _check_kv_heads(config: RunConfig, state: dict[str, Tensor], name: str) -> None:
    """K/V projections narrower than Q: the key/value heads (GQA) that make the shapes fit, if any."""
    if not config.applies("kv_heads"):
        return
    for n in [0] + [n for n in range(1, config.heads) if config.heads % n == 0]:
        if n == config.kv_heads:
            continue
        candidate = config.replace(kv_heads=n)
        if expected_shapes(candidate).items() <= {k: tuple(v.shape) for k, v in state.items()}.items():
            raise ConfigError("kv_heads", config.kv_heads,
                              f"the weights file {name} has key/value projections for {n or config.heads} "
                              f"key/value heads with {config.heads} heads", f"set KV heads to {n}",
                              suggestions=(n,))


def _check_keys(config: RunConfig, state: dict[str, Tensor], name: str) -> None:
    expected = expected_shapes(config)
    missing = sorted(expected.keys() - state.keys())
    unexpected = sorted(state.keys() - expected.keys())
    shapes = [f"{k} is {_shape(state[k])} in the file, {_shape(expected[k])} here"
              for k in expected.keys() & state.keys() if tuple(state[k].shape) != expected[k]]
    if not (missing or unexpected or shapes):
        return
    _check_kv_heads(config, state, name)
    parts = ([f"missing {', '.join(missing[:4])}"] if missing else []) + (
        [f"unexpected {', '.join(unexpected[:4])}"] if unexpected else []) + sorted(shapes)[:3]
    raise ConfigError("weights", name, f"does not fit {config.spec.seed} with {config.shapes_text()}: "
                      + "; ".join(parts),
                      f"save the state_dict of the tutorial's class built with these settings "
                      f"(keys {', '.join(sorted(expected))})")


def fit_weights(config: RunConfig, state: dict[str, Tensor], name: str) -> tuple[RunConfig, dict[str, Tensor],
                                                                                  list[str]]:
    """The config with the file's bias flags, and the state ready for load_state_dict(strict=True);
    ConfigError when the file was saved from another class or with other widths."""
    notes = []
    state, prefix = _strip_prefix(config, state, name)
    if prefix:
        notes.append(f"weights: the keys under '{prefix}' in {name}")
    _other_variant(config, state, name)
    flags = {f: key in state for f, key in config.spec.file_biases.items() if config.applies(f)}
    changed = {f: v for f, v in flags.items() if getattr(config, f) != v}
    if changed:
        config = config.replace(**changed)
        notes.append("weights: " + ", ".join(f"{_label(config, f)} {'on' if v else 'off'}" for f, v in changed.items())
                     + f" as in {name}")
    _check_widths(config, state, name)
    _check_keys(config, state, name)
    return config, state, notes


# --- fitting inputs ----------------------------------------------------------------------------


def _input_example(config: RunConfig) -> str:
    names = [n for n, _, _ in config.spec.layout]
    return "torch.save({" + ", ".join(f"'{n}': {n}" for n in names) + "}, 'inputs.pt')"


def fit_inputs(config: RunConfig, tensors: dict[str, Tensor], name: str) -> tuple[RunConfig, tuple[Tensor, ...]]:
    """The forward's arguments from the file, checked; the config takes the file's batch and lengths."""
    layout = config.spec.layout
    names = [n for n, _, _ in layout]
    missing, unknown = [n for n in names if n not in tensors], sorted(set(tensors) - set(names))
    if missing or unknown:
        held = ", ".join(sorted(tensors))
        wrong = "".join(f"; {what} {', '.join(ns)}" for what, ns in (("missing", missing), ("unknown", unknown)) if ns)
        raise ConfigError("inputs", name, f"holds {held}; {config.spec.seed}'s forward takes {', '.join(names)}{wrong}",
                          f"name the tensors as the forward's arguments: {_input_example(config)}")
    lengths: dict[str, tuple[str, int]] = {}
    batch: tuple[str, int] | None = None
    for arg, length, width in layout:
        t = tensors[arg]
        expected = f"(batch, {length}, {_label(config, width)} = {getattr(config, width)})"
        if t.ndim != 3:
            fix = f"add the batch dimension: {arg}.unsqueeze(0)" if t.ndim == 2 else f"give {arg} as {expected}"
            raise ConfigError("inputs", name, f"{arg} has shape {_shape(t)}: expected 3 dimensions {expected}", fix)
        if not t.is_floating_point():
            raise ConfigError("inputs", name, f"{arg} holds {t.dtype}, not floating-point features",
                              f"save {arg}.float()")
        if t.shape[2] != getattr(config, width):
            raise ConfigError(width, getattr(config, width), f"the inputs file {name} has {arg} of shape "
                              f"{_shape(t)}: {int(t.shape[2])} features, expected {expected}",
                              f"set {_label(config, width)} to {int(t.shape[2])}", suggestions=(int(t.shape[2]),))
        if batch is not None and t.shape[0] != batch[1]:
            raise ConfigError("inputs", name, f"{arg} has batch {t.shape[0]} but {batch[0]} has {batch[1]}",
                              "give every tensor the same batch size")
        batch = batch or (arg, int(t.shape[0]))
        if length in lengths and t.shape[1] != lengths[length][1]:
            other = lengths[length]
            raise ConfigError("inputs", name, f"{arg} has {t.shape[1]} positions but {other[0]} has {other[1]}",
                              f"give {other[0]} and {arg} the same length ({length})")
        lengths.setdefault(length, (arg, int(t.shape[1])))
    changes = {"batch": batch[1], **{f: n for f, (_, n) in lengths.items()}}
    return config.replace(**changes), tuple(tensors[n] for n in names)


# --- the run's entry point ---------------------------------------------------------------------


def prepare(config: RunConfig) -> UserFiles:
    """Read (cached) the config's weights and inputs files; the config takes what they determine."""
    use_weights = bool(config.weights) and config.applies("weights")
    use_inputs = bool(config.inputs) and config.applies("inputs")
    if not (use_weights or use_inputs):
        return UserFiles(config)
    state, inputs, records, notes = None, None, [], []
    if use_weights:
        records.append(file_record("weights", config.weights))
        config, state, more = fit_weights(config, load_weights(config.weights), records[-1].name)
        notes += more
    if use_inputs:
        records.append(file_record("inputs", config.inputs))
        config, inputs = fit_inputs(config, load_inputs(config.inputs), records[-1].name)
    return UserFiles(config, state, inputs, tuple(records), tuple(notes))


def file_fields(variant: str, weights: str, inputs: str) -> frozenset[str]:
    """The config fields a run takes from its files (the bias flags from weights; batch and lengths from
    inputs): the app shows them as the file sets them, read-only."""
    spec = VARIANTS[variant]
    out: set[str] = set()
    if weights and "weights" in spec.fields:
        out |= {f for f in spec.file_biases if f in spec.fields}
    if inputs and "inputs" in spec.fields:
        out |= {"batch"} | {length for _, length, _ in spec.layout}
    return frozenset(out)


def file_records(config: RunConfig) -> dict[str, dict[str, Any]]:
    """{field: {name, path, sha256, bytes}} for the files a config names (a missing file: sha256 None)."""
    out: dict[str, dict[str, Any]] = {}
    for field in FILE_FIELDS:
        path = getattr(config, field)
        if path and config.applies(field):
            try:
                out[field] = file_record(field, path).to_dict()
            except ConfigError:
                out[field] = {"name": Path(path).name, "path": path, "sha256": None, "bytes": None}
    return out


class FileChanged(ConfigError):
    """A saved configuration names a file whose sha256 is no longer what it was saved with.
    `config` holds the configuration, for a caller that opens it anyway."""

    def __init__(self, field: str, path: str, problem: str, fix: str, config: RunConfig):
        super().__init__(field, path, problem, fix)
        self.config = config


def check_recorded(config: RunConfig, recorded: Mapping[str, Any] | None) -> None:
    """FileChanged when a file the configuration was saved with has another sha256 now (or is gone)."""
    for field, rec in (recorded or {}).items():
        if not isinstance(rec, Mapping) or not rec.get("sha256") or getattr(config, field, "") != rec.get("path"):
            continue
        try:
            now = file_record(field, rec["path"]).sha256
        except ConfigError as exc:
            raise FileChanged(field, rec["path"], f"{exc.problem}; the configuration was saved with it "
                              f"(sha256 {rec['sha256'][:12]}…)", "restore the file, or choose another",
                              config) from None
        if now != rec["sha256"]:
            raise FileChanged(field, rec["path"], f"the file changed since the configuration was saved (sha256 "
                              f"{now[:12]}… now, {rec['sha256'][:12]}… then)",
                              "restore the original file, or save the configuration again to accept this one",
                              config)


def saved_json(config: RunConfig, description: str = "") -> str:
    """The configuration as a saved file holds it: with the name, path and sha256 of each file it names."""
    return config.to_json(description, files=file_records(config) if config.weights or config.inputs else None)


def load_config(path: str | os.PathLike, check_files: bool = True) -> RunConfig:
    """A saved configuration; with check_files, userfiles.FileChanged (a ConfigError) when a weights or
    inputs file it was saved with has another sha256 now (exc.config still holds the configuration)."""
    try:
        text = read_config_text(path)  # a regular file of at most 1 MiB of UTF-8, or ConfigFileError
    except ConfigFileError as exc:
        raise ConfigError("file", str(path), exc.problem, exc.fix) from exc
    try:
        config = RunConfig.from_json(text)
    except ConfigError as exc:
        if exc.field not in ("file", "format"):
            raise
        # name the file, never quote its contents
        raise ConfigError("file", str(path), exc.problem, exc.fix) from exc
    files = json.loads(text).get("files")
    if files is not None and not isinstance(files, dict):
        raise ConfigError("file", str(path), f'its "files" is {type(files).__name__}, not the object of files the '
                          "configuration was saved with", 'remove "files", or save the configuration again')
    if check_files and (config.weights or config.inputs):
        check_recorded(config, files)
    return config


__all__ = ["FileChanged", "FileRecord", "UserFiles", "check_recorded", "expected_shapes", "file_fields",
           "file_record", "file_records", "fit_inputs", "fit_weights", "load_config", "load_inputs", "load_weights",
           "prepare", "saved_json"]
