"""One cell's path through the stages: what hover and the pipeline view show for a weight.

Recomputed from the kept q and k with the same score mods the kernel ran (flex_attention's
signature works on single indices too), so no full map of the intermediate stages is stored.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .runner import RunResult


def cell_path(result: RunResult, b: int, m: int, i: int, j: int) -> dict[str, float]:
    """Stage name -> value at batch item b, score map m (a head; a sub-head for differential
    attention), query i, key j: qk, scaled, biased, capped (those the run has), scores, weights."""
    c = result.config
    q, k = result.stages.get("q"), result.stages.get("k")
    path: dict[str, float] = {}
    if q is not None and k is not None:
        kv = m * k.shape[1] // q.shape[1]  # the key head this query head reads (GQA)
        s = torch.tensor(float(np.dot(q[b, m, i].astype(np.float64), k[b, kv, j].astype(np.float64))))
        path["qk"] = float(s)
        options = c.attention_options()
        s = s * options.qk_scale if options.qk_scale else s / math.sqrt(q.shape[-1])
        path["scaled"] = float(s)
        index = [torch.tensor(v) for v in (b, m, i, j)]
        for mod in options.score_mods(q.shape[1]):
            s = mod.fn(s, *index)
            path[mod.stage] = float(s)
        if "scores" not in result.stages:  # a run that left the scores out: masked is -inf, else the last mod's
            mask = result.mask  # broadcastable to (B, H, Lq, Lkv)
            allowed = mask[min(b, mask.shape[0] - 1), min(m, mask.shape[1] - 1), min(i, mask.shape[2] - 1), j]
            path["scores"] = float(s) if allowed else -math.inf
    for name in ("scores", "weights"):
        if name in result.stages and result.stages[name].shape[1] > m:
            path[name] = float(result.stages[name][b, m, i, j])
    return path
