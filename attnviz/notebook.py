"""attnviz from a notebook or a script: show attention someone already has in the window, without blocking.

    import attnviz
    out = model(ids, output_attentions=True)            # transformers: one (batch, heads, q, k) tensor per layer
    attnviz.show(out.attentions, tokens=tokenizer.convert_ids_to_tokens(ids[0]))
    attnviz.show(cache, tokens=model.to_str_tokens(text))  # a TransformerLens ActivationCache (its patterns)
    attnviz.show(weights)                                 # any array: (layers, heads, q, k) or (heads, q, k)
    from attnviz import head_view, model_view             # bertviz's calls, as they are
    attnviz.save(out.attentions, "maps.svg", tokens=tokens, layer=3)  # a figure, no window (also headless)

The maps are checked (shape, finite, rows summing to about 1 unless scores=True), written to a temporary .npz
(the format `attnviz render -o FILE.npz` writes, see core/runs/saved.py) and opened by a new attnviz process, so the
caller keeps running and the window lives on its own. Nothing here imports Qt's widgets.
"""

from __future__ import annotations

import numbers
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attnviz.core import ConfigError, RunResult
from attnviz.core.runs.saved import maps_config
from attnviz.system import no_display

ROW_SUM_TOLERANCE = 1e-3  # softmax rows in float16/bfloat16 sum to 1 within ~1e-3
PATTERN_KEY = re.compile(r"blocks\.(\d+)\.attn\.hook_pattern$")  # TransformerLens' attention patterns
SCORES_KEY = re.compile(r"blocks\.(\d+)\.attn\.hook_attn_scores$")
FIX = "give transformers' output_attentions, a TransformerLens cache, or an array (layers, heads, q, k)"


@dataclass(frozen=True)
class Shown:
    """What show() started: the .npz the window opened and its process (poll(), terminate())."""

    path: Path
    process: subprocess.Popen


def attention_maps(attention: Any, batch_index: int = 0, scores: bool = False) -> np.ndarray:
    """(layers, heads, q, k) float32 from transformers' tuple, a TransformerLens cache, an nnsight value, a torch
    tensor or a NumPy array; ConfigError naming the problem otherwise."""
    if isinstance(attention, Mapping) or hasattr(attention, "cache_dict"):
        attention = _from_cache(getattr(attention, "cache_dict", attention), scores)
    if isinstance(attention, (tuple, list)):
        if not attention:
            raise ConfigError("attention", attention, "no layers given", FIX)
        layers = [_array(a) for a in attention]
        if len({a.shape for a in layers}) > 1:
            raise ConfigError("attention", [a.shape for a in layers], "the layers' maps differ in shape", FIX)
        maps = np.stack(layers)
    else:
        maps = _array(attention)
    if maps.ndim == 5:  # (layers, batch, heads, q, k): one item of the batch
        _check_whole("batch_index", batch_index)
        if not 0 <= batch_index < maps.shape[1]:
            raise ConfigError("batch_index", batch_index, f"the batch holds {maps.shape[1]} items",
                              f"give batch_index from 0 to {maps.shape[1] - 1}")
        maps = maps[:, batch_index]
    if maps.ndim == 3:
        maps = maps[None]
    if maps.ndim != 4 or 0 in maps.shape:
        raise ConfigError("attention", maps.shape, f"maps of shape {maps.shape}: not (layers, heads, q, k) or "
                          "(heads, q, k)", FIX)
    _check_values(maps, scores)
    return maps


def _from_cache(cache: Mapping, scores: bool) -> list:
    key = SCORES_KEY if scores else PATTERN_KEY
    layers = sorted((int(m.group(1)), name) for name in cache if isinstance(name, str) and (m := key.search(name)))
    if not layers:
        hook = "hook_attn_scores" if scores else "hook_pattern"
        raise ConfigError("attention", type(cache).__name__, f"the cache holds no blocks.N.attn.{hook}",
                          "run the model with run_with_cache (or names_filter keeping the attention patterns)")
    return [cache[name] for _, name in layers]


def _array(value: Any) -> np.ndarray:
    """A NumPy float32 copy of a tensor, an nnsight saved value (its .value) or an array."""
    value = getattr(value, "value", value) if not isinstance(value, np.ndarray) else value
    if hasattr(value, "detach"):  # torch: any device, any float dtype
        value = value.detach().float().cpu().numpy()
    try:
        array = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise ConfigError("attention", type(value).__name__, f"not an array of numbers ({exc})", FIX) from None
    return array


def _check_values(maps: np.ndarray, scores: bool) -> None:
    if scores:
        if np.isnan(maps).any() or np.isposinf(maps).any():
            raise ConfigError("attention", "scores", "the scores hold NaN or +inf", "give finite scores (-inf where "
                              "masked)")
        return
    if not np.isfinite(maps).all():
        raise ConfigError("attention", "weights", "the maps hold NaN or infinite values",
                          "give softmax weights, or pass scores=True for pre-softmax scores")
    sums = maps.sum(axis=-1)
    off = np.abs(sums - 1) > ROW_SUM_TOLERANCE
    off &= sums != 0  # a row with no key to attend to (all masked) may be all zeros
    if off.any():
        layer, head, row = (int(i) for i in np.argwhere(off)[0])
        raise ConfigError("attention", float(sums[layer, head, row]), f"row {row} of layer {layer}, head {head} sums "
                          f"to {sums[layer, head, row]:.4g}, not 1: these are not softmax weights",
                          "pass scores=True for pre-softmax scores, or give the weights")


def maps_result(maps: np.ndarray, tokens: Sequence[str] | None = None, key_tokens: Sequence[str] | None = None,
                layer: int = 0, scores: bool = False) -> RunResult:
    """A RunResult of maps that came from outside attnviz (layers, heads, q, k), labelled with `tokens`."""
    layers, heads, rows, cols = maps.shape
    tokens, key_tokens = _labels(tokens, key_tokens, rows, cols)
    _check_whole("layer", layer)
    if not 0 <= layer < layers:
        raise ConfigError("layer", layer, f"the maps have {layers} layers", f"give a layer from 0 to {layers - 1}")
    weights = _softmax(maps) if scores else maps
    stages = {"weights": weights[layer][None], "dropped": weights[layer][None]}
    if scores:
        stages = {"scores": maps[layer][None], **stages}
    notes = ("weights: the softmax of the scores given",) if scores else ()
    return RunResult(
        config=maps_config(heads, rows, cols, layer), stages=stages, mask=np.ones((1, 1, rows, cols), dtype=bool),
        fully_masked_rows=np.zeros((1, heads, rows), dtype=bool), device="cpu", compute_time_s=0.0,
        total_time_s=0.0, notes=notes, tokens=tokens, key_tokens=key_tokens,
        layer_weights=weights[:, None] if layers > 1 else None)


def _check_whole(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ConfigError(name, value, "not a whole number", f"give {name} as an int")


def _labels(tokens, key_tokens, rows: int, cols: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    tokens = tuple(str(t) for t in tokens) if tokens is not None else ()
    key_tokens = tuple(str(t) for t in key_tokens) if key_tokens is not None else ()
    if key_tokens and not tokens:
        raise ConfigError("tokens", None, "key_tokens given without tokens",
                          f"give tokens= too ({rows} labels of the query rows)")
    if tokens and len(tokens) != rows:
        raise ConfigError("tokens", len(tokens), f"{len(tokens)} tokens for maps of {rows} query rows",
                          f"give {rows} tokens, one per query position")
    if key_tokens and len(key_tokens) != cols:
        raise ConfigError("key_tokens", len(key_tokens), f"{len(key_tokens)} key tokens for maps of {cols} key "
                          "columns", f"give {cols} key tokens, one per key position")
    if tokens and not key_tokens and rows != cols:
        raise ConfigError("key_tokens", None, f"the maps are {rows} x {cols}: the keys are not the query tokens",
                          f"give key_tokens= ({cols} labels of the keys), as for cross-attention")
    if key_tokens == tokens:
        key_tokens = ()
    return tokens, key_tokens


def _softmax(scores: np.ndarray) -> np.ndarray:
    top = np.max(scores, axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0)
    e = np.exp(scores - top)
    total = e.sum(axis=-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0).astype(np.float32)


def show(attention: Any, tokens: Sequence[str] | None = None, key_tokens: Sequence[str] | None = None, *,
         layer: int = 0, batch_index: int = 0, scores: bool = False) -> Shown:
    """Open attnviz's window on `attention` (see attention_maps) in a process of its own and return at once.
    `tokens` label the query rows, `key_tokens` the key columns where they differ (cross-attention); `layer` is
    shown first; scores=True: the maps are pre-softmax scores (their softmax becomes the weights)."""
    maps = attention_maps(attention, batch_index, scores)
    result = maps_result(maps, tokens, key_tokens, layer, scores)
    return open_window(_write(result))


def save(attention: Any, path: str | os.PathLike, tokens: Sequence[str] | None = None,
         key_tokens: Sequence[str] | None = None, *, layer: int = 0, batch_index: int = 0, scores: bool = False,
         **options: Any) -> Path:
    """Write `attention` (see attention_maps) as `path`: .png or .svg, the figure `attnviz render` draws of
    `layer`; .npz, every layer (open it with `attnviz FILE`). `options` are ExportOptions' fields (what="mean",
    colormap="magma", ...). No window and no display needed; returns the path written."""
    from attnviz.export import ExportOptions, export  # QtGui with it: only when a file is written

    result = maps_result(attention_maps(attention, batch_index, scores), tokens, key_tokens, layer, scores)
    try:
        chosen = ExportOptions(**{"all_layers": True, **options})
    except TypeError as exc:
        raise ConfigError("options", ", ".join(options), str(exc),
                          f"use ExportOptions' fields: {', '.join(ExportOptions.__dataclass_fields__)}") from None
    return export(result, path, chosen)


def _write(result: RunResult) -> Path:
    from attnviz.export import write_npz  # QtGui with it: only when something is shown

    folder = Path(tempfile.mkdtemp(prefix="attnviz-show-"))
    return write_npz(result, folder / "maps.npz", all_layers=True)


def open_window(path: str | os.PathLike) -> Shown:
    """Start `python -m attnviz PATH`: its own process, its output in a log beside the file."""
    if no_display():
        raise RuntimeError(f"no display to open attnviz on (DISPLAY and WAYLAND_DISPLAY are unset); the maps are "
                           f"saved in {path}: attnviz render --maps {path} -o maps.png draws them headless")
    log = open(Path(path).with_suffix(".log"), "wb")  # noqa: SIM115 - the child writes to it after we return
    process = subprocess.Popen([sys.executable, "-m", "attnviz", str(path)], stdin=subprocess.DEVNULL, stdout=log,
                               stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    return Shown(Path(path), process)


# --- bertviz's entry points, as they are called -----------------------------------------------------

def _prettify(tokens: Sequence[str] | None, prettify: bool) -> list[str] | None:
    if tokens is None or not prettify:
        return None if tokens is None else list(tokens)
    return [t.replace("\u0120", " ").replace("\u2581", " ").replace("</w>", "") for t in tokens]


def head_view(attention=None, tokens=None, sentence_b_start=None, prettify_tokens=True, layer=None, heads=None,
              encoder_attention=None, decoder_attention=None, cross_attention=None, encoder_tokens=None,
              decoder_tokens=None, include_layers=None, html_action="view", **_ignored) -> Shown:
    """bertviz.head_view's call: the same arguments open attnviz's window instead (every head of the layer;
    `layer` is shown first; sentence_b_start, heads and html_action have no counterpart and are ignored)."""
    if attention is None:
        return _encoder_decoder(encoder_attention, decoder_attention, cross_attention, encoder_tokens,
                                decoder_tokens, prettify_tokens, include_layers, layer)
    maps = _included(attention_maps(attention), include_layers)
    return open_window(_write(maps_result(maps, _prettify(tokens, prettify_tokens), layer=layer or 0)))


def model_view(attention=None, tokens=None, sentence_b_start=None, prettify_tokens=True, display_mode="dark",
               encoder_attention=None, decoder_attention=None, cross_attention=None, encoder_tokens=None,
               decoder_tokens=None, include_layers=None, include_heads=None, html_action="view",
               **_ignored) -> Shown:
    """bertviz.model_view's call: every layer and head, in attnviz's window (include_layers keeps those layers;
    display_mode, include_heads and html_action have no counterpart and are ignored)."""
    return head_view(attention, tokens, sentence_b_start, prettify_tokens, None, None, encoder_attention,
                     decoder_attention, cross_attention, encoder_tokens, decoder_tokens, include_layers)


def _included(maps: np.ndarray, include_layers) -> np.ndarray:
    if include_layers is None:
        return maps
    picked = list(include_layers)
    if not picked or any(not 0 <= i < len(maps) for i in picked):
        raise ConfigError("include_layers", picked, f"the maps have {len(maps)} layers",
                          f"give layers from 0 to {len(maps) - 1}")
    return maps[picked]


def _encoder_decoder(encoder, decoder, cross, encoder_tokens, decoder_tokens, prettify, include_layers,
                     layer) -> Shown:
    """bertviz's encoder-decoder form: one window per attention given (encoder, decoder, cross)."""
    enc, dec = _prettify(encoder_tokens, prettify), _prettify(decoder_tokens, prettify)
    shown = []
    for attention, rows, cols in ((encoder, enc, None), (decoder, dec, None), (cross, dec, enc)):
        if attention is not None:
            maps = _included(attention_maps(attention), include_layers)
            shown.append(open_window(_write(maps_result(maps, rows, cols, layer or 0))))
    if not shown:
        raise ConfigError("attention", None, "no attention given", FIX)
    return shown[0]


__all__ = ["Shown", "attention_maps", "head_view", "maps_result", "model_view", "open_window", "save", "show"]
