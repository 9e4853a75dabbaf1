"""One cell's path through the stages: what hover and the pipeline view show for a weight.

Recomputed from the kept q and k with the same score mods the kernel ran (flex_attention's
signature works on single indices too), so no full map of the intermediate stages is stored. A
model's layer recomputes with the scale and cap its call used (its mods.ScoreRecipe).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from attnviz.core.runs.runner import RunResult


def cell_path(result: RunResult, b: int, m: int, i: int, j: int) -> dict[str, float]:
    """Stage name -> value at batch item b, score map m (a head; a sub-head for differential
    attention), query i, key j: qk, scaled, biased, capped (those the run has), scores, weights."""
    q, k = result.stages.get("q"), result.stages.get("k")
    path: dict[str, float] = {}
    if q is not None and k is not None:
        kv = m * k.shape[1] // q.shape[1]  # the key head this query head reads (GQA)
        s = torch.tensor(float(np.dot(q[b, m, i].astype(np.float64), k[b, kv, j].astype(np.float64))))
        path["qk"] = float(s)
        steps, complete = _score_steps(result, s, q.shape[1], q.shape[-1], (b, m, i, j))
        path.update(steps)
        if complete and "scores" not in result.stages:  # the run left the scores out: masked is -inf, else
            mask = result.mask  # the last step's (the mask broadcastable to (B, H, Lq, Lkv))
            allowed = mask[min(b, mask.shape[0] - 1), min(m, mask.shape[1] - 1), min(i, mask.shape[2] - 1), j]
            path["scores"] = list(steps.values())[-1] if allowed else -math.inf
    for name in ("scores", "weights"):
        if name in result.stages and result.stages[name].shape[1] > m:
            path[name] = float(result.stages[name][b, m, i, j])
    return path


def qk_scale(result: RunResult, width: int) -> float | None:
    """The factor q·k is multiplied by in `result` (`width`: the query head's size): a model layer's own
    call's, else the configuration's (1/√width by default); None for a model layer whose recipe is unknown."""
    if _model_layer(result):
        return None if result.score_recipe is None else result.score_recipe.scale
    configured = result.config.attention_options().qk_scale
    return configured if configured else 1 / math.sqrt(width)


def _model_layer(result: RunResult) -> bool:
    """Whether `result` is a model's layer (live, or opened from a file: then its call's recipe is unknown)."""
    return result.source is not None or result.config.spec.backed


def _score_steps(result: RunResult, s: torch.Tensor, heads: int, width: int, cell: tuple
                 ) -> tuple[dict[str, float], bool]:
    """The stages from q·k `s` towards the score (scaled, then each score mod's: a seed variant's from its
    config, a model layer's from its recipe), and whether they reach it: not for a model layer whose recipe
    is unknown (another attention than the kernel's) or that added a bias."""
    steps: dict[str, float] = {}
    if _model_layer(result):  # a model's layer: its own call's scale and cap, not the config's
        recipe = result.score_recipe
        if recipe is None:
            return steps, False
        s = s * recipe.scale
        steps["scaled"] = float(s)
        if recipe.softcap and not recipe.biased:
            steps["capped"] = float(torch.tanh(s / recipe.softcap) * recipe.softcap)
        return steps, not recipe.biased
    options = result.config.attention_options()
    s = s * options.qk_scale if options.qk_scale else s / math.sqrt(width)  # divided as the kernel does (exact)
    steps["scaled"] = float(s)
    index = [torch.tensor(v) for v in cell]
    for mod in options.score_mods(heads):
        s = mod.fn(s, *index)
        steps[mod.stage] = float(s)
    return steps, True
