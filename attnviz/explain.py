"""What the explaining views show, computed on the worker (NumPy/torch, no Qt): the pipeline of one
head stage by stage, per-head statistics, token focus, the comparison with a pinned result, and
attention rollout. `render_extras` builds what the ViewOptions fields ask for (session.present calls it after
frames.render), each part only when its view asks, cached with the pooled maps of the same result.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import torch

from attnviz import colormaps
from attnviz.core.analysis.stats import STAT_NAMES, head_stats, layer_stats, rollout, row_keys
from attnviz.core.kernel.stages import BY_NAME, PROBABILITY_STAGES, STAGES
from attnviz.core.runs.backed import backed_stages
from attnviz.core.runs.runner import RunResult, run_stages
from attnviz.core.runs.saved import opened_note
from attnviz.frames import (
    HeatImage,
    PoolCache,
    ViewOptions,
    allowed_maps,
    head_title,
    pool_maps,
    quantise_pooled,
    quantise_scaled,
    view_signed,
    view_stage,
)

PIPELINE_PX = (128, 128)  # each small stage of the pipeline is pooled to at most this
LARGE_PX = (640, 640)  # the stage shown large
HEAD_CONTEXT = "head_context"  # the pipeline's own step: one head's slice of the context, before the heads merge
# how the pipeline spells each stage: the stages' own titles (their descriptions are the tooltips)
STAGE_TITLES = {s.name: s.title for s in STAGES} | {HEAD_CONTEXT: "@V"}
WEIGHT_STAGES = PROBABILITY_STAGES  # probabilities: the weights' colormap and scale


def _kept(cache: PoolCache, result: RunResult, key: tuple, make):
    """The cache's entry for `key` beside the result's pooled maps, made here when missing (so frames' cache never
    calls back up into explain)."""
    entries = cache.entries_for(result)
    if key not in entries:
        entries[key] = make()
    return entries[key]


def token_labels(result: RunResult, keys: bool = False) -> list[str]:
    """Display labels of the queries (or keys): the run's tokens where it has them, else positions."""
    c = result.config
    n = c.lkv if keys else c.seq_q
    tokens = (result.key_tokens or result.tokens) if keys else result.tokens
    if len(tokens) == n:
        return [f"{i} {t}" for i, t in enumerate(tokens)]
    return [str(i) for i in range(n)]


# --- the pipeline ------------------------------------------------------------------------------


@dataclass
class PipelineStage:
    name: str  # a stage of core.stages, or HEAD_CONTEXT (the head's slice of the context)
    title: str
    data: np.ndarray  # the 2-D array shown (a view into the result), full resolution
    image: HeatImage  # pooled to PIPELINE_PX
    value_range: tuple[float, float]  # finite min and max
    array_shape: tuple[int, ...]  # the whole stage's shape (all heads, the batch)
    is_map: bool  # an (Lq, Lkv) attention map (hover shows the cell's path)
    map_index: int = 0  # which map of the stage (differential: 2 per head)


@dataclass
class PipelineFrames:
    head: int
    batch_index: int
    stages: list[PipelineStage]
    large: tuple[str, HeatImage] | None = None  # the stage shown large, pooled to LARGE_PX
    missing: tuple[str, ...] = ()  # stages this configuration has that the result did not keep


def pipeline_stage_names(result: RunResult) -> list[str]:
    """The stages the pipeline shows for this configuration, in order (dropout only when active)."""
    names = [n for n in run_stages(result.config) if n != "dropped" or result.config.dropout_active]
    if result.source is not None:  # a model records what its family exposes (weights only for some)
        own = backed_stages(result.source.info)
        names = [n for n in names if n in own]
    if "context" not in names:
        return names
    i = names.index("context")
    return names[:i] + [HEAD_CONTEXT] + names[i:]


def _stage_data(result: RunResult, name: str, b: int, head: int) -> tuple[np.ndarray, int, tuple]:
    """(2-D data, map index, whole-stage shape) of one stage for one head of batch item b."""
    c = result.config
    if name == HEAD_CONTEXT:
        context = result.context[b]
        width = context.shape[-1] // c.heads
        return context[:, head * width:(head + 1) * width], head, result.context.shape
    array = result.stages[name]
    if array.ndim == 3:  # x, context, output: (B, L, d)
        return array[b], 0, array.shape
    m = head * array.shape[1] // c.heads  # GQA: the kv head this query head reads; differential: map 2h
    return array[b, m], m, array.shape


def _finite_range(data: np.ndarray) -> tuple[float, float]:
    finite = data[np.isfinite(data)]
    return (float(finite.min()), float(finite.max())) if finite.size else (0.0, 0.0)


def _stage_image(result: RunResult, name: str, data: np.ndarray, b: int, options: ViewOptions,
                 max_px) -> HeatImage:
    """One stage quantised: weights in the maps' colormap and scale, everything else diverging, linear."""
    c = result.config
    is_map = name in BY_NAME and BY_NAME[name].is_map
    probability = name in WEIGHT_STAGES and not view_signed("weights", c)
    signed = not probability
    allowed = empty = None
    if is_map and not BY_NAME[name].pre_mask:
        full = allowed_maps(result, b)
        allowed = None if full is None else full[:1]
        empty = result.fully_masked_rows[b][:1]
    pooled = pool_maps(data[None], allowed, empty if is_map else ~np.isfinite(data).all(-1)[None], max_px, signed,
                       row=probability and options.scale_mode == "row")
    mode = options.scale_mode if probability else "linear"
    (image,), (levels,), _ = quantise_scaled(pooled, True, mode)
    lut = colormaps.lut(options.colormap if probability else options.diverging)
    return HeatImage(image, data.shape, levels, lut, STAGE_TITLES[name])


def pipeline_frames(result: RunResult, options: ViewOptions) -> PipelineFrames:
    """Every stage of the attention call for one head, in order, each as a small image."""
    c = result.config
    b = min(max(options.batch_index, 0), c.batch - 1)
    head = min(max(options.pipeline_head or 0, 0), c.heads - 1)
    stages, missing = [], []
    for name in pipeline_stage_names(result):
        if (name if name != HEAD_CONTEXT else "context") not in result.stages:
            missing.append(name)
            continue
        data, m, shape = _stage_data(result, name, b, head)
        is_map = name in BY_NAME and BY_NAME[name].is_map
        image = _stage_image(result, name, data, b, options, PIPELINE_PX)
        title = STAGE_TITLES[name] + (" (rotated)" if name in ("q", "k") and "q_proj" in result.stages else "")
        image.title = title
        stages.append(PipelineStage(name, title, data, image, _finite_range(data), shape, is_map, m))
    large = None
    chosen = next((s for s in stages if s.name == options.pipeline_stage), None)
    if chosen is not None:
        large = (chosen.name, _stage_image(result, chosen.name, chosen.data, b, options, LARGE_PX))
    return PipelineFrames(head, b, stages, large, tuple(missing))


# --- statistics, focus, compare, rollout -------------------------------------------------------


@dataclass
class StatsFrames:
    columns: dict[str, np.ndarray]  # STAT_NAMES -> (maps,) one value per head (differential: per map)
    labels: list[str]  # one per row of the table
    layers: dict[str, np.ndarray] | None = None  # STAT_NAMES -> (layers, H) for multi-layer results
    overview: dict[str, HeatImage] = field(default_factory=dict)  # the layer x head heatmap per column


def stats_frames(result: RunResult, b: int, options: ViewOptions) -> StatsFrames:
    weights = result.weights[b]
    empty = result.fully_masked_rows[b, 0]
    keys = row_keys(result.mask[min(b, result.mask.shape[0] - 1)], weights.shape[1])  # one-key rows left out
    columns = head_stats(weights, empty, keys)
    labels = [head_title(m, weights.shape[0], result.config.heads) for m in range(weights.shape[0])]
    frames = StatsFrames(columns, labels)
    lw = result.layer_weights
    if lw is not None and lw.ndim == 5:
        frames.layers = layer_stats(lw, min(b, lw.shape[1] - 1), keys)
        lut = colormaps.lut(options.colormap)
        for name in STAT_NAMES:
            frames.overview[name] = _overview_image(frames.layers[name], lut, name)
    return frames


def stats_csv_for(result: RunResult, b: int = 0) -> str:
    """The statistics as CSV: one row per head of the result's weights, then (multi-layer results)
    one row per layer and head."""
    from attnviz.core.analysis.stats import stats_csv

    frames = stats_frames(result, b, ViewOptions())
    text = stats_csv(frames.columns, frames.labels)
    if frames.layers is not None:
        layers, heads = frames.layers[STAT_NAMES[0]].shape
        flat = {name: values.reshape(-1) for name, values in frames.layers.items()}
        labels = [f"layer {n} head {h}" for n in range(layers) for h in range(heads)]
        text += stats_csv(flat, labels).split("\n", 1)[1]
    return text


@dataclass
class FocusFrames:
    row: int
    values: np.ndarray  # (maps, Lkv): each head's attention of the focused query over the keys
    label: str  # the focused query token
    key_labels: list[str]
    titles: list[str]  # one per map


def focus_frames(result: RunResult, b: int, row: int) -> FocusFrames:
    """The focused query's row of the weights view (what multiplied V) in every head."""
    row = min(max(row, 0), result.config.seq_q - 1)
    values = np.nan_to_num(result.stages[view_stage("weights")][b, :, row, :])
    n = values.shape[0]
    return FocusFrames(row, values, token_labels(result)[row], token_labels(result, keys=True),
                       [head_title(m, n, result.config.heads) for m in range(n)])


@dataclass
class CompareFrames:
    message: str = ""  # why there is no difference to show, if there is none
    pinned: HeatImage | None = None
    current: HeatImage | None = None
    difference: HeatImage | None = None  # current − pinned of the shown head, diverging
    diff: np.ndarray | None = None  # (Lq, Lkv) current − pinned of the shown head, full resolution
    head: int = 0
    max_abs: float = 0.0  # max |current − pinned| over every head


def _compare_maps(result: RunResult, pinned: RunResult, view: str, batch_index: int):
    """(pinned maps, current maps, masks, b) of the view, or a message saying why they do not compare."""
    stage = view_stage(view)
    if stage not in pinned.stages:
        return f"the pinned result has no {stage} stage"
    b = min(max(batch_index, 0), result.config.batch - 1)
    if b >= pinned.config.batch:
        return f"the pinned result has no batch item {b}"
    a, c = pinned.stages[stage][b], result.stages[stage][b]
    if a.shape != c.shape:
        return f"shapes differ: pinned {a.shape} vs current {c.shape} (same heads and lengths needed)"
    masks = [allowed_maps(r, b) for r in (pinned, result)]
    masks = [np.ones((1, *c.shape[1:]), bool) if k is None else k[:1] for k in masks]
    return a, c, masks, b


def _head_difference(a: np.ndarray, c: np.ndarray, masks, m: int) -> tuple[np.ndarray, np.ndarray]:
    """current − pinned of map m where both have a value (masked or no-key in either: 0), and where."""
    both = np.isfinite(a[m]) & np.isfinite(c[m]) & masks[0][0] & masks[1][0]
    return np.where(both, np.nan_to_num(c[m]) - np.nan_to_num(a[m]), 0.0).astype(np.float32), both


def compare_difference(result: RunResult, pinned: RunResult, view: str = "weights", batch_index: int = 0):
    """current − pinned of every map of the view, (maps, Lq, Lkv) (the numbers a comparison exports)."""
    maps = _compare_maps(result, pinned, view, batch_index)
    if isinstance(maps, str):
        raise ValueError(maps)
    a, c, masks, _ = maps
    return np.stack([_head_difference(a, c, masks, m)[0] for m in range(c.shape[0])])


def compare_frames(result: RunResult, options: ViewOptions, cache: PoolCache) -> CompareFrames:
    """The current result beside the pinned one, and their difference on a diverging scale. Works one
    head at a time: no full-size copy of every head's difference is kept."""
    maps = _compare_maps(result, options.pinned, options.view, options.batch_index)
    if isinstance(maps, str):
        return CompareFrames(maps)
    a, c, masks, b = maps
    key = ("compare-max", id(options.pinned), options.view, b)
    max_abs = _kept(cache, result, key, lambda: max(float(np.abs(_head_difference(a, c, masks, m)[0]).max(initial=0))
                                                 for m in range(c.shape[0])))
    signed = view_signed(options.view, result.config)
    m = min(max(options.compare_head, 0), c.shape[0] - 1)
    lut = colormaps.lut(options.diverging if signed else options.colormap)
    images = []
    for values, allowed, title in zip((a[m], c[m]), masks, ("pinned", "current")):
        ok = allowed[0] & np.isfinite(values)
        pooled = pool_maps(np.nan_to_num(values, neginf=0.0)[None], None if ok.all() else ok[None], None,
                           options.max_px, signed, row=options.scale_mode == "row")
        (image,), (levels,), _ = quantise_scaled(pooled, True, options.scale_mode)
        images.append(HeatImage(image, values.shape, levels, lut, title))
    diff, both = _head_difference(a, c, masks, m)
    (image,), (levels,) = quantise_pooled(pool_maps(diff[None], None if both.all() else both[None], None,
                                                    options.max_px, True))
    difference = HeatImage(image, diff.shape, levels, colormaps.lut(options.diverging), "current − pinned")
    return CompareFrames("", images[0], images[1], difference, diff, m, max_abs)


@dataclass
class RolloutFrames:
    message: str = ""  # why there is no rollout, if there is none
    data: np.ndarray | None = None  # (L, L) rollout of batch item b
    image: HeatImage | None = None


def rollout_frames(result: RunResult, b: int, options: ViewOptions) -> RolloutFrames:
    lw = result.layer_weights
    if lw is None or lw.ndim != 5 or lw.shape[0] < 2:
        return RolloutFrames("attention rollout needs a multi-layer model (this run has one attention layer)")
    if lw.shape[-1] != lw.shape[-2]:
        return RolloutFrames("attention rollout needs self-attention (square maps)")
    data = rollout(lw[:, min(b, lw.shape[1] - 1)][:, None])[0].astype(np.float32)
    pooled = pool_maps(data[None], None, None, options.max_px, False, row=options.scale_mode == "row")
    (image,), (levels,), _ = quantise_scaled(pooled, True, options.scale_mode)
    return RolloutFrames("", data, HeatImage(image, data.shape, levels, colormaps.lut(options.colormap),
                                             f"rollout over {lw.shape[0]} layers"))


# The extras that need the model's output head over every position (the logits of a 49,152-token vocabulary
# cost a SmolLM2-sized model a third of its forward): the window shows the maps first and these after.
LATE_EXTRAS = frozenset({"predictions", "lens"})


def late_extras(options: ViewOptions) -> frozenset[str]:
    """The LATE_EXTRAS that `options` asks for."""
    return frozenset(name for name in LATE_EXTRAS if getattr(options, name))


def render_extras(result: RunResult, options: ViewOptions, cache: PoolCache | None = None, part: str = "all") -> dict:
    """What the explaining views asked for in `options` (an empty dict when none is shown). part: "all",
    "early" (all but LATE_EXTRAS) or "late" (LATE_EXTRAS only)."""
    cache = PoolCache() if cache is None else cache
    with torch.inference_mode():
        out = {} if part == "late" else _early_extras(result, options, cache)
        if part != "early":
            if options.predictions:
                out["predictions"] = _kept(cache, result, ("predictions",), lambda: prediction_frames(result))
            if options.lens:
                out["lens"] = _kept(cache, result, ("lens", options.colormap), lambda: lens_frames(result, options))
    return out


def _early_extras(result: RunResult, options: ViewOptions, cache: PoolCache) -> dict:
    """render_extras' parts other than LATE_EXTRAS."""
    out: dict = {}
    b = min(max(options.batch_index, 0), result.config.batch - 1)
    if options.pipeline_head is not None:
        key = ("pipeline", b, options.pipeline_head, options.pipeline_stage, options.scale_mode,
               options.colormap, options.diverging)
        out["pipeline"] = _kept(cache, result, key, lambda: pipeline_frames(result, options))
    if options.head_scores:
        out["head_scores"] = head_score_frames(result)
    if options.stats:
        stats = _kept(cache, result, ("stats", b, options.colormap), lambda: stats_frames(result, b, options))
        out["stats"] = add_head_types(stats, out["head_scores"], result.config.layer) \
            if "head_scores" in out else stats
    if options.focus_row is not None:
        out["focus"] = focus_frames(result, b, options.focus_row)
    if options.unablated is not None:
        pinned = unablated_result(result, options, cache)
        out["compare"] = compare_frames(result, replace(options, pinned=pinned), cache)
        out["compare_pinned"] = pinned
    elif options.pinned is not None:
        out["compare"] = compare_frames(result, options, cache)
    if options.rollout:
        out["rollout"] = rollout_frames(result, b, options)
    if options.patch_query is not None:  # a vision model's picture (models/patches.py)
        from attnviz.models.patches import patch_frames

        out["patch"] = patch_frames(result, options.patch_query, options.colormap)
    return out


# --- what heads do: predictions, the logit lens, head types ------------------------------------
# Everything below reads RunResult's lazy parts (the output head, a second forward for the unablated
# predictions, a probe for the head types): on the worker only. The GUI gets plain NumPy and strings.

NO_HEAD = "no output head: predictions need a trained toy or a language model (causal or masked LM)"
NO_LENS = "No lens for this model: the logit lens needs a causal LM (its final norm and unembedding)"


def forward_config(result: RunResult):
    """The config the result's forward ran for: a model's (every layer, layer 0 in the key) or the run's own."""
    return result.source.key if result.source is not None else result.config


def prompt_config(config):
    """A generation's config without it: the forward over its text alone. What the model's head types and
    head effects are measured on (measured on the generation's own config, the head-type probe ran the
    whole generation again on the worker before its first partial result could be shown)."""
    return config.replace(generate=0) if config.generate else config


@dataclass
class PredictionFrames:
    message: str = ""  # why there are no predictions, if there are none
    tokens: list[str] = field(default_factory=list)  # the input token at each position
    top_tokens: tuple = ()  # L rows of k labels, most likely first
    top_probs: np.ndarray | None = None  # (L, k)
    target_tokens: list[str] = field(default_factory=list)  # "" where a position has no target
    target_probs: np.ndarray | None = None  # (L,), NaN where no target
    ablate: tuple[str, ...] = ()  # the heads ablated in this run ("layer.head")
    ablation: str = "zero"
    before_tokens: tuple = ()  # the unablated run's top k (only with an ablation)
    before_probs: np.ndarray | None = None
    before_target: np.ndarray | None = None
    kl: np.ndarray | None = None  # (L,) KL(unablated ‖ ablated) in nats


def prediction_frames(result: RunResult) -> PredictionFrames:
    """The output head's top k and the target's probability per position (and before/after an ablation)."""
    try:
        p = result.predictions
    except Exception as exc:  # a model whose head cannot say: one line, never the app
        return PredictionFrames(f"no predictions: {exc}")
    if p is None:
        return PredictionFrames(opened_note(result, "predictions") if result.opened else NO_HEAD)
    label = getattr(getattr(result.outputs, "model", None), "label", str)
    tokens = list(result.tokens) if len(result.tokens) == len(p.target_ids) else [str(i) for i in
                                                                                   range(len(p.target_ids))]
    frames = PredictionFrames("", tokens, p.top_tokens, p.top_probs,
                              [label(int(t)) if t >= 0 else "" for t in p.target_ids], p.target_probs,
                              tuple(result.config.ablate), result.config.ablation)
    before = result.unablated if result.config.ablate else None
    if before is not None:
        frames.before_tokens, frames.before_probs = before.top_tokens, before.top_probs
        frames.before_target, frames.kl = before.target_probs, result.kl
    return frames


@dataclass
class LensFrames:
    message: str = ""
    tokens: tuple = ()  # layers rows of L labels: the top-1 of the residual stream after each layer
    probs: np.ndarray | None = None  # (layers, L)
    index: np.ndarray | None = None  # (layers, L) uint8 colour indices of the probabilities
    lut: np.ndarray | None = None
    positions: list[str] = field(default_factory=list)  # the column labels: the run's tokens


def lens_frames(result: RunResult, options: ViewOptions) -> LensFrames:
    try:
        lens = result.lens
    except Exception as exc:
        return LensFrames(f"No lens: {exc}")
    if lens is None:
        return LensFrames(opened_note(result, "logit lens") if result.opened else NO_LENS)
    n = lens.probs.shape[1]
    positions = [f"{i} {t}" for i, t in enumerate(result.tokens)] if len(result.tokens) == n else \
        [str(i) for i in range(n)]
    return LensFrames("", lens.tokens, lens.probs, probability_index(lens.probs),
                      colormaps.lut(options.colormap), positions)


def probability_index(probs: np.ndarray) -> np.ndarray:
    """Probabilities 0..1 as uint8 colour indices (NaN: the LUT's no-value colour)."""
    index = np.round(np.clip(np.nan_to_num(probs), 0, 1) * (colormaps.DATA_LEVELS - 1)).astype(np.uint8)
    index[~np.isfinite(probs)] = colormaps.NAN_INDEX
    return index


@dataclass
class HeadScoreFrames:
    message: str = ""  # why there are no head types, if there are none
    scores: dict[str, np.ndarray] = field(default_factory=dict)  # HEAD_TYPES name -> (layers, heads)
    passed: dict[str, np.ndarray] = field(default_factory=dict)  # name -> (layers, heads) bool, over THRESHOLDS
    types: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (short label, description)
    thresholds: dict[str, float] = field(default_factory=dict)


_SCORES: dict = {}  # forward config -> HeadScoreFrames; a few models, the worker's thread only
_SCORES_KEPT = 4


def head_score_frames(result: RunResult) -> HeadScoreFrames:
    """The head types of the result's model (a probe forward, once per model config)."""
    if result.source is None:
        return HeadScoreFrames("head types need a model (a trained toy or a pretrained model)")
    if getattr(result.source, "picture", None) is not None:  # patches: no text patterns, and no second forward
        return HeadScoreFrames("head types describe text (previous token, induction ...): not measured on an image")
    key = prompt_config(forward_config(result))
    if key not in _SCORES:
        try:
            from attnviz.core import head_scores
            from attnviz.core.analysis.heads import HEAD_TYPES, THRESHOLDS

            scores = {name: np.asarray(v, np.float64) for name, v in head_scores(key, result.source).items()}
            frames = HeadScoreFrames("", scores, {n: np.nan_to_num(v) >= THRESHOLDS[n] for n, v in scores.items()
                                                  if n in THRESHOLDS}, dict(HEAD_TYPES), dict(THRESHOLDS))
        except Exception as exc:  # a family the probe cannot run: said, the rest of the view stays
            frames = HeadScoreFrames(f"no head types: {exc}")
        while len(_SCORES) >= _SCORES_KEPT:
            _SCORES.pop(next(iter(_SCORES)))
        _SCORES[key] = frames
    return _SCORES[key]


# the head types measured on the probe only; the others are the statistics' own columns
# (previous token, first key, diagonal), not defined twice
PROBE_TYPES = ("duplicate_token", "induction")


def add_head_types(frames: StatsFrames, scores: HeadScoreFrames, layer: int) -> StatsFrames:
    """The statistics with the probe's head types as more columns (this layer's row) and overviews."""
    if scores.message:
        return frames
    out = StatsFrames(dict(frames.columns), frames.labels, dict(frames.layers) if frames.layers else None,
                      dict(frames.overview))
    for name in PROBE_TYPES:
        grid = scores.scores.get(name)
        if grid is None or layer >= grid.shape[0] or grid.shape[1] != len(frames.labels):
            continue
        out.columns[name] = grid[layer]
        if out.layers is not None and grid.shape == next(iter(out.layers.values())).shape:
            out.layers[name] = grid
            out.overview[name] = _overview_image(grid, next(iter(frames.overview.values())).lut, name)
    return out


def _overview_image(grid: np.ndarray, lut: np.ndarray, name: str) -> HeatImage:
    """A layer x head grid min .. max (heads differ by little next to the values themselves)."""
    finite = grid[np.isfinite(grid)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    frac = np.nan_to_num((grid - lo) / ((hi - lo) or 1.0))
    image = np.round(frac * (colormaps.DATA_LEVELS - 1)).astype(np.uint8)
    image[~np.isfinite(grid)] = colormaps.NAN_INDEX
    return HeatImage(image, grid.shape, (lo, hi), lut, name)


def unablated_result(result: RunResult, options: ViewOptions, cache: PoolCache) -> RunResult:
    """The same configuration without its ablation, for the compare view (one more forward, cached)."""
    from attnviz.core import run
    from attnviz.core.kernel.stages import DEFAULT_RECORD

    config = options.unablated
    record = DEFAULT_RECORD | {view_stage(options.view)}
    return _kept(cache, result, ("unablated", config, options.view), lambda: run(config, record=record))
