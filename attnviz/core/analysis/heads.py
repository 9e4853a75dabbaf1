"""What heads do: head types scored from their maps, and each head's effect on the prediction when ablated.

`head_scores(config)` -> {type: (layers, heads)}. previous_token, first_token and self are read from the
config's own run (stats.py defines them: the mean weight on key i-1, on key 0, on key i); duplicate_token
and induction from a probe: a seeded sequence of random tokens of the model's vocabulary written twice (with
the tokenizer's own special tokens around it), where the earlier copy of every token of the second half is
known. Each score is the mean, over the rows where the pattern has a target, of the weight on its targets.

Only rows where the head has a choice count: a row that may attend to a single key (a causal map's first
row, whose one key is both key 0 and itself) puts all its weight there whatever the head does, so it is left
out of every type, as the statistics panel leaves it out (stats.py). The first token (a BOS) is otherwise a
key like any other: its weight stays in each row's total, as TransformerLens' detect_head does with its
default `exclude_bos=False` (dropping it would make every first_token score 0).

`head_effects(config)` -> (layers, heads): how much the log-probability of the target token drops when
that head alone is ablated (positive: the head helps the prediction). The heads are knocked out many at a
time, one per batch row, so a model of 270 heads takes a few batched forwards instead of 270.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import numpy as np
import torch

from attnviz.core.analysis.stats import layer_stats, row_keys
from attnviz.core.kernel.ablation import Plan
from attnviz.core.kernel.context import ForwardContext
from attnviz.core.runs.backed import check_ablation_mode, check_kernel_ran, placed_model
from attnviz.core.runs.config import ConfigError, RunConfig
from attnviz.core.runs.predictions import target_log_probs
from attnviz.core.runs.result import Cancelled
from attnviz.core.runs.runner import run

# What every type's tooltip says about the rows it counts (see the module docstring)
CHOICE = ", over rows with more than one allowed key (a BOS stays a key: detect_head's exclude_bos=False)"
# type -> (short label for a badge, what the score measures)
HEAD_TYPES: dict[str, tuple[str, str]] = {
    "previous_token": ("prev", "mean weight on the previous token (key i − 1)" + CHOICE),
    "first_token": ("first", "mean weight on the first token (key 0): an attention sink" + CHOICE),
    "self": ("self", "mean weight on the query's own position (key i)" + CHOICE),
    "duplicate_token": ("dup", "probe: mean weight on earlier copies of the query's own token" + CHOICE),
    "induction": ("ind", "probe: mean weight on the token after an earlier copy of the query's token" + CHOICE),
}
# A badge is drawn where a head's score is at least this (the one place these numbers live)
THRESHOLDS: dict[str, float] = {"previous_token": 0.5, "first_token": 0.8, "self": 0.5,
                                "duplicate_token": 0.3, "induction": 0.3}
FROM_STATS = {"previous_token": "previous", "first_token": "sink", "self": "diagonal"}
PROBE_HALF = 32  # tokens in each copy of the probe (fewer where the model reads fewer positions)
PROBE_SEED = 0
TOKENS_PER_BATCH = 2048  # head_effects: batch rows x tokens per forward
LOGIT_BYTES = 16 << 20  # head_effects: float32 logits made at a time (under malloc's mmap threshold)


def _model(config: RunConfig):
    if not config.spec.backed:
        return None
    return config.spec.load(config, None)


def head_scores(config: RunConfig, forward=None) -> dict[str, np.ndarray]:
    """Every head type's score per layer and head (see the module docstring); NaN where a type cannot be
    measured (a seed variant has no vocabulary to probe). `forward`: this config's model forward when the
    caller has it (backed.ModelForward, e.g. result.source), so its maps are not computed a second time."""
    if forward is None or not forward.serves(config):
        result = run(config)
        forward = result.source  # a model's forward (its pooled statistics are exact), None for a seed
        if forward is None:
            weights, masks = result.weights[None], [result.mask]
    if forward is not None:
        weights, masks = forward.layer_weights, forward.masks
    scores = _layer_scores(weights, forward, masks)
    layers, heads = weights.shape[0], weights.shape[2]
    probe = _probe_scores(_model(config), layers, heads)
    return {**scores, **probe}


def map_scores(layer_weights: np.ndarray, masks) -> dict[str, np.ndarray]:
    """previous_token, first_token and self -> (layers, heads) of (layers, B, H, Lq, Lkv) maps (batch item 0);
    masks: one per layer, bool (B or 1, H or 1, Lq, Lkv), True = may attend. Rows with fewer than two allowed
    keys are left out (stats.row_keys)."""
    lq = layer_weights.shape[-2]
    keys = np.stack([row_keys(np.asarray(mask)[0], lq) for mask in masks])[:, None]  # (layers, 1, Lq)
    stats = layer_stats(layer_weights, keys=keys, names=tuple(FROM_STATS.values()))  # the three read: no logs
    return {name: stats[column] for name, column in FROM_STATS.items()}


def _layer_scores(weights: np.ndarray, forward, masks) -> dict[str, np.ndarray]:
    """map_scores, or a pooled forward's exact statistics (its maps are pooled; rows without a choice are left
    out of them too)."""
    if forward is not None and getattr(forward, "pooled", ()):
        per_layer = [call.stat_arrays() for call in forward.pooled]
        return {name: np.stack([s[column][0] for s in per_layer]) for name, column in FROM_STATS.items()}
    return map_scores(weights, masks)


_PROBED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> its probe scores


def _probe_scores(model, layers: int, heads: int) -> dict[str, np.ndarray]:
    """The probe's scores depend on the model alone (its seeded tokens, not the user's text): measured once
    per loaded model, not on every edit."""
    nan = np.full((layers, heads), np.nan)
    if model is None or getattr(model, "probe", None) is None:
        return {"duplicate_token": nan, "induction": nan.copy()}
    loaded = getattr(model, "model", model)  # a view of a loaded model is made per configuration
    if loaded not in _PROBED:
        _PROBED[loaded] = _probe(model, nan)
    return {name: values.copy() for name, values in _PROBED[loaded].items()}


def _probe(model, nan: np.ndarray) -> dict[str, np.ndarray]:
    ids = model.probe(PROBE_HALF, PROBE_SEED)
    with torch.inference_mode():
        _, traces = model.forward(torch.tensor([ids]), frozenset({"weights"}))
    duplicate, induction = pattern_targets(ids)
    out = {"duplicate_token": nan, "induction": nan.copy()}
    for layer, trace in enumerate(traces):
        w = trace.weights[0].float().cpu().numpy()  # (H, L, L)
        if w.shape[-2:] != (len(ids), len(ids)):  # a cross-attention or a decoder over other tokens
            continue
        # a row with a target sees it and itself (two keys) unless a window hides one: checked, not assumed
        keys = row_keys(trace["mask"][0].cpu().numpy(), len(ids)) if "mask" in trace else None
        out["duplicate_token"][layer] = target_weight(w, duplicate, keys)
        out["induction"][layer] = target_weight(w, induction, keys)
    return out


def pattern_targets(ids) -> tuple[np.ndarray, np.ndarray]:
    """(L, L) bool targets of each query row: earlier copies of its token (duplicate), and the tokens just
    after those copies, short of the query itself (induction)."""
    ids = np.asarray(ids)
    same = ids[:, None] == ids[None, :]
    earlier = np.tri(len(ids), k=-1, dtype=bool)
    duplicate = same & earlier
    induction = np.zeros_like(duplicate)
    induction[:, 1:] = duplicate[:, :-1]  # key p + 1 where key p is an earlier copy
    induction &= earlier
    return duplicate, induction


def target_weight(weights: np.ndarray, targets: np.ndarray, keys: np.ndarray | None = None) -> np.ndarray:
    """(H, L, L) weights -> (H,) mean over the rows with a target of the weight on the targets; keys (L,): the
    keys each row may attend to (rows with fewer than two are left out)."""
    rows = targets.any(-1) if keys is None else targets.any(-1) & (np.asarray(keys) >= 2)
    if not rows.any():
        return np.full(weights.shape[0], np.nan)
    return np.nan_to_num(weights * targets).sum(-1)[:, rows].mean(-1)


def head_effects(config: RunConfig, position: int | None = None, ablation: str = "zero", *,
                 cancel: Callable[[], bool] | None = None, progress: Callable[[int, int], None] | None = None
                 ) -> np.ndarray:
    """(layers, heads): the drop in the target token's log-probability when each head alone is ablated, at
    `position` (None: the mean over the positions that have a target). The config's own ablation is not
    applied: each head is measured against the whole model."""
    model = placed_model(config) if config.spec.backed else None
    if model is None or not getattr(model, "has_head", False):
        raise ConfigError("variant", config.variant, "head effects need a model with an output head",
                          "choose a trained toy or a pretrained causal or masked language model")
    ids = list(model.encode(config.text).ids)
    check_ablation_mode(ablation, len(ids))
    targets = np.asarray(model.targets(ids))
    rows = _effect_rows(targets, position, config)
    info = model.info
    device = next(model.module.parameters()).device if getattr(model, "module", None) is not None else "cpu"
    ids_t = torch.tensor([ids], device=device)
    wanted = torch.as_tensor(targets[rows], device=device)
    with torch.inference_mode():
        base = _target_log_probs(model, ids_t, rows, wanted)  # (1, P)
    pairs = [(layer, head) for layer in range(info.layers) for head in range(info.heads)]
    per_batch = max(1, TOKENS_PER_BATCH // len(ids))
    call_of = getattr(model, "call_index", lambda layer: layer)
    effects = np.zeros(len(pairs))
    for start in range(0, len(pairs), per_batch):
        if cancel is not None and cancel():
            raise Cancelled
        chunk = pairs[start:start + per_batch]
        plan = Plan(ablation)
        for row, (layer, head) in enumerate(chunk):
            plan.knocked.setdefault(call_of(layer), []).append((row, head))
        with torch.inference_mode(), ForwardContext(plan=plan) as ctx:
            after = _target_log_probs(model, ids_t.expand(len(chunk), -1), rows, wanted, ctx)
        check_kernel_ran(plan, config, info)
        effects[start:start + len(chunk)] = (base - after).mean(-1).cpu().numpy()
        if progress is not None:
            progress(start + len(chunk), len(pairs))
    return effects.reshape(info.layers, info.heads)


def _effect_rows(targets: np.ndarray, position: int | None, config: RunConfig) -> np.ndarray:
    has = np.flatnonzero(targets >= 0)
    if position is None:
        if not len(has):
            raise ConfigError("text", config.text, "no position of this text has a target token",
                              "type a longer text")
        return has
    if position not in has:
        raise ConfigError("position", position, f"position {position} has no target (positions with one: "
                          f"{has[0]}..{has[-1]})" if len(has) else "this text has no target token",
                          "choose a position that has a next token", suggestions=tuple(int(p) for p in has[:1]))
    return np.asarray([position])


def _target_log_probs(model, ids: torch.Tensor, rows: np.ndarray, targets: torch.Tensor,
                      ctx: ForwardContext | None = None) -> torch.Tensor:
    """(B, P) log-probabilities of the targets at `rows`, from a forward that records nothing. The logits are
    made LOGIT_BYTES at a time: a whole batch's (B, P, vocab) would be hundreds of MB, and mapping and
    unmapping that much memory stalls every thread of the process (the window's too)."""
    hidden = model.hidden(ids, ctx)[:, torch.as_tensor(rows, device=ids.device)]  # (B, P, d), under ctx's plan
    flat, wanted = hidden.reshape(-1, 1, hidden.shape[-1]), targets.expand(hidden.shape[0], -1).reshape(-1)
    step = max(1, LOGIT_BYTES // (4 * max(1, getattr(model.info, "vocab_size", hidden.shape[-1]))))
    out = [target_log_probs(model.logits(flat[i:i + step].transpose(0, 1))[0], wanted[i:i + step])
           for i in range(0, flat.shape[0], step)]
    return torch.cat(out).reshape(hidden.shape[:2])


def head_scores_csv(scores: dict[str, np.ndarray]) -> str:
    """One row per head: layer, head, then each type's score (HEAD_TYPES order)."""
    names = [n for n in HEAD_TYPES if n in scores]
    layers, heads = scores[names[0]].shape
    lines = [",".join(["layer", "head", *names])]
    for layer in range(layers):
        for head in range(heads):
            lines.append(",".join([str(layer), str(head), *(f"{float(scores[n][layer, head]):.6g}" for n in names)]))
    return "\n".join(lines) + "\n"
