"""Attention maps opened from a file: an NPZ written by attnviz (the app's Export, `attnviz render -o FILE.npz`,
attnviz.show()) read back as the RunResult it was written from, with no model and nothing computed again.

The variant "maps" (its one field: `maps`, the file) reads instead of computing (VariantSpec.read), so the window,
the worker, the views and `attnviz render --maps FILE.npz` treat a file like any other run. Its result keeps the
configuration the file was saved with (titles, shapes and labels as they were: an export of it is the export of
the original run) and `opened`, the file's path. An NPZ with every layer's weights (`--all-layers`, a
generation, attnviz.show() of a model's attention) shows any layer; the per-token stages (output, q, k, v ...)
exist for the layer it was saved at only.

The arrays' names are the writer's (export/npz.py): the stage names of stages.py, mask, fully_masked_rows,
tokens, key_tokens, token_ids, key_token_ids, device, model_name, layer_weights, prompt_length (a generation's
`generated`, a flag per token, is derived from it for other readers of the file); a pooled run's weights_pooled,
pool_factor, stats_<name> and region. NumPy reads the archive with allow_pickle=False: a file can hold arrays only.
"""

from __future__ import annotations

import os
import stat
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from attnviz.core.kernel.stages import STAGE_NAMES
from attnviz.core.runs.config import ConfigError, RunConfig
from attnviz.core.runs.result import RunResult
from attnviz.core.variants.registry import VARIANTS, VariantSpec, register

MAPS_VARIANT = "maps"
MAX_CONFIG_CHARS = 1 << 20  # a saved configuration is a few KB
OPEN_FIX = "give an .npz written by attnviz (Export, attnviz render -o FILE.npz, or attnviz.show())"
_cache: dict[str, Any] = {}  # the last file read: (path, mtime, size) -> its arrays (a layer change reads no disk)


def _refuse_build(config: RunConfig):
    raise ConfigError("maps", config.maps, "maps opened from a file have no module to build",
                      "open the file again, or choose a variant that computes its maps")


def _read(config: RunConfig) -> RunResult:
    return read_maps(config.maps, config.layer)


def _no_inputs(config: RunConfig) -> tuple:
    return ()


VARIANTS.keys()  # the registry's other variants first, however this module came to be imported: the maps come last
SPEC = register(VariantSpec(
    id=MAPS_VARIANT,
    label="Maps from a file (.npz)",
    seed="attention maps saved by attnviz or handed to attnviz.show()",
    description="Shows the maps an .npz holds as they were saved: no model, nothing computed again.",
    build=_refuse_build,
    inputs=_no_inputs,
    read=_read,
    extra_fields=frozenset({"seq_kv"}),  # the maps keep their own key length (cross-attention too)
    own_fields=frozenset({"variant", "maps", "layer"}),
    labels={"layer": "Layer (of the file's)"},
    default_mask="none",
))


def maps_config(heads: int, rows: int, cols: int, layer: int = 0) -> RunConfig:
    """The configuration of maps that came from outside attnviz (attnviz.show()): their shape only."""
    return RunConfig.for_variant(MAPS_VARIANT, maps="maps.npz", heads=heads, d_model=heads, seq_q=rows,
                                 seq_kv=cols, layer=layer)


def saved_layer(path: str | os.PathLike) -> int:
    """The layer the file's configuration was saved at (its maps show that layer first). Reads the
    configuration alone (the window asks on its GUI thread)."""
    _regular_file(path)
    name = Path(path).name
    try:
        with np.load(path, allow_pickle=False) as z:
            text = z["config"] if "config" in z.files else None
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as exc:
        raise ConfigError("maps", str(path), f"{name} is not an NPZ archive of arrays ({exc})", OPEN_FIX) from None
    return _layer_of(_config_of(text, path))


def read_maps(path: str | os.PathLike, layer: int | None = None) -> RunResult:
    """The RunResult an attnviz NPZ was written from; `layer` picks another layer where the file holds every
    layer's weights. ConfigError (field "maps", or "layer") names what is wrong with the file."""
    saved, arrays = _arrays(path)
    at = _layer_of(saved)
    layer = at if layer is None else layer
    result = _result(saved, arrays, str(path))
    if layer == at:
        return result
    return _other_layer(result, layer, Path(path).name)


def _layer_of(config: RunConfig) -> int:
    return config.layer if config.applies("layer") or config.variant == MAPS_VARIANT else 0


def _other_layer(result: RunResult, layer: int, name: str) -> RunResult:
    """Another layer's weights from layer_weights (its other stages were saved for one layer only)."""
    lw = result.layer_weights
    if lw is None:
        raise ConfigError("layer", layer, f"{name} holds the maps of layer {result.config.layer} only",
                          f"set Layer to {result.config.layer}, or export every layer (attnviz render "
                          "--all-layers)", suggestions=(result.config.layer,))
    if not 0 <= layer < len(lw):
        raise ConfigError("layer", layer, f"{name} holds {len(lw)} layers (0-{len(lw) - 1})",
                          f"set Layer to at most {len(lw) - 1}", suggestions=(len(lw) - 1,))
    config = result.config.replace(layer=layer) if result.config.applies("layer") else result.config
    note = f"layer {layer} of {name}: its weights only (the other stages were saved for layer {result.config.layer})"
    twins = {"weights"} | ({"dropped"} & result.stages.keys())  # dropped is the weights outside train mode
    return replace(result, config=config, stages={name: lw[layer] for name in twins}, notes=(*result.notes, note))


def _arrays(path: str | os.PathLike) -> tuple[RunConfig, dict[str, np.ndarray]]:
    """(the saved configuration, every array) of the file, read once while it stays unchanged."""
    info = _regular_file(path)
    key = f"{os.fspath(path)}\0{info.st_mtime_ns}\0{info.st_size}"
    if key not in _cache:
        _cache.clear()  # one file at a time: the maps can be large
        _cache[key] = _load(path)
    return _cache[key]


def _regular_file(path: str | os.PathLike) -> os.stat_result:
    name = Path(path).name
    try:
        info = os.stat(path)
    except OSError as exc:
        raise ConfigError("maps", str(path), f"{name} cannot be read ({exc.strerror or exc})", OPEN_FIX) from None
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError("maps", str(path), f"{name} is not a regular file", OPEN_FIX)
    return info


def _load(path: str | os.PathLike) -> tuple[RunConfig, dict[str, np.ndarray]]:
    name = Path(path).name
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {key: z[key] for key in z.files}
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as exc:
        raise ConfigError("maps", str(path), f"{name} is not an NPZ archive of arrays ({exc})", OPEN_FIX) from None
    config = _config_of(arrays.pop("config", None), path)
    _check_maps(arrays, name)
    _check_prompt(arrays, name)
    return config, arrays


def _config_of(text: np.ndarray | None, path: str | os.PathLike) -> RunConfig:
    """The configuration the file was saved with (its 'config' array: the saved-configuration JSON)."""
    name = Path(path).name
    if text is None or text.dtype.kind != "U" or text.ndim or len(str(text)) > MAX_CONFIG_CHARS:
        raise ConfigError("maps", str(path), f"{name} holds no attnviz configuration (its 'config' array)",
                          OPEN_FIX)
    try:
        return RunConfig.from_json(str(text))
    except ConfigError as exc:
        raise ConfigError("maps", str(path), f"{name}: its configuration is not valid ({exc.problem})",
                          OPEN_FIX) from None


def _check_maps(arrays: dict[str, np.ndarray], name: str) -> None:
    """Every map a (B, H, Lq, Lkv) float array, the weights among them."""
    if "weights" not in arrays and "weights_pooled" not in arrays and "combined" not in arrays:
        raise ConfigError("maps", name, f"{name} holds no attention weights", OPEN_FIX)
    for key in ("weights", "weights_pooled", "scores", "mask"):
        a = arrays.get(key)
        if a is not None and (a.ndim != 4 or a.dtype.kind not in "fb"):
            raise ConfigError("maps", name, f"{name}: '{key}' is {a.dtype} of shape {a.shape}, not (batch, heads, "
                              "queries, keys)", OPEN_FIX)
    lw = arrays.get("layer_weights")
    if lw is not None and (lw.ndim not in (4, 5) or lw.dtype.kind != "f"):
        raise ConfigError("maps", name, f"{name}: 'layer_weights' has shape {lw.shape}, not (layers, heads, "
                          "queries, keys)", OPEN_FIX)


def _check_prompt(arrays: dict[str, np.ndarray], name: str) -> None:
    """A generation's prompt_length: a whole number of tokens within the file's tokens (the rest were generated;
    the `generated` flags beside it are for readers of the file, derived from it)."""
    p, n = arrays.get("prompt_length"), len(_labels(arrays, "tokens"))
    if p is not None and (p.ndim or p.dtype.kind not in "iu" or not 0 <= int(p) <= n):
        shown = p if p.ndim == 0 else f"an array of shape {p.shape}"
        raise ConfigError("maps", name, f"{name}: 'prompt_length' is {shown}, not a token count from 0 to the "
                          f"file's {n} tokens", OPEN_FIX)


def _result(config: RunConfig, arrays: dict[str, np.ndarray], path: str) -> RunResult:
    pooled = "weights_pooled" in arrays
    found = dict(arrays, weights=arrays["weights_pooled"]) if pooled else arrays
    if "weights" in found and "dropped" not in found and not config.dropout_active:
        found = dict(found, dropped=found["weights"])  # its twin outside train mode, which the weights view draws
    stages = {n: found[n] for n in STAGE_NAMES if n in found}
    shown = stages.get("weights", stages.get("combined"))
    mask = arrays.get("mask")
    if mask is None:
        mask = np.ones((1, 1, *shown.shape[-2:]), dtype=bool)
    rows = arrays.get("fully_masked_rows")
    if rows is None:
        rows = np.broadcast_to(~mask.astype(bool).any(axis=-1), shown.shape[:3]).copy()
    lw = arrays.get("layer_weights")
    return RunResult(
        config=config, stages=stages, mask=mask.astype(bool), fully_masked_rows=rows.astype(bool),
        device=str(arrays["device"]) if "device" in arrays and arrays["device"].dtype.kind == "U" else "cpu",
        compute_time_s=0.0, total_time_s=0.0, notes=(f"opened {Path(path).name}: maps as saved, nothing computed",),
        tokens=_labels(arrays, "tokens"), key_tokens=_labels(arrays, "key_tokens"),
        token_ids=arrays.get("token_ids"), key_token_ids=arrays.get("key_token_ids"),
        layer_weights=None if lw is None else (lw[:, None] if lw.ndim == 4 else lw),
        prompt_length=int(arrays["prompt_length"]) if "prompt_length" in arrays else None,
        pool_factor=tuple(int(f) for f in arrays["pool_factor"]) if pooled and "pool_factor" in arrays else None,
        exact_stats={k[len("stats_"):]: v for k, v in arrays.items() if k.startswith("stats_")} if pooled else None,
        region=arrays.get("region"), opened=path, model_name=" ".join(_labels(arrays, "model_name")))


MAPS_ONLY = "the file holds maps only: nothing is computed again"


def opened_note(result: RunResult, what: str) -> str:
    """Why a view of maps opened from a file has nothing to show: `what` needs a model or a run."""
    return f"{Path(result.opened).name}: no {what} ({MAPS_ONLY}); open the model itself to see it"


@dataclass(frozen=True)
class SavedLayers:
    """What the model view draws of maps opened from a file with every layer's weights (layer_weights): its
    layers x heads, no model behind them (no stacks, no ablation)."""

    layer_weights: np.ndarray  # (layers, 1, H, Lq, Lkv)
    mask: np.ndarray  # (1, 1, Lq, Lkv), the saved layer's, taken for every layer
    stacks: tuple = ()
    stack: str = ""

    @property
    def info(self) -> SimpleNamespace:
        return SimpleNamespace(layers=len(self.layer_weights))

    def blocks(self) -> list[tuple[str, np.ndarray, np.ndarray | None]]:
        allowed = self.mask[0, 0]
        shown = None if allowed.all() else np.broadcast_to(allowed, (len(self.layer_weights), *allowed.shape))
        return [("", self.layer_weights, shown)]


def saved_layers(result: RunResult) -> SavedLayers | None:
    """The model view's picture of an opened file's layers, or None (one layer, or not from a file)."""
    if not result.opened or result.layer_weights is None:
        return None
    return SavedLayers(result.layer_weights, result.mask)


def _labels(arrays: dict[str, np.ndarray], key: str) -> tuple[str, ...]:
    a = arrays.get(key)
    return () if a is None or a.dtype.kind != "U" else tuple(str(t) for t in a.reshape(-1))


__all__ = ["MAPS_ONLY", "MAPS_VARIANT", "SavedLayers", "maps_config", "opened_note", "read_maps", "saved_layer",
           "saved_layers"]
