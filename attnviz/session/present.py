"""present: a result as the views show it, in one call: frames.render's maps, then explain's extras.

frames knows the maps and explain builds the explaining views on top of it; neither calls the other back.
A new result's slow extras (late_names) follow its maps: present leaves them out and late_frames makes them.
"""

from __future__ import annotations

import dataclasses
import time

import torch

from attnviz.core import RunResult
from attnviz.explain import LATE_EXTRAS, head_score_frames, late_extras, render_extras
from attnviz.frames import Frames, PoolCache, ViewOptions, render


def present(result: RunResult, options: ViewOptions, cache: PoolCache | None = None,
            late: frozenset[str] = frozenset()) -> Frames:
    """Everything the views show for `result` under `options`: one tile per head, the mean, the tensor, and the
    explaining views' parts (Frames.extras), less the `late` extras (late_names), which late_frames makes after.
    `cache`: the pooled maps of this result so far (a view-only change only requantises)."""
    t0 = time.perf_counter()
    cache = PoolCache() if cache is None else cache
    frames = render(result, options, cache)
    if "head_scores" in late:
        options = dataclasses.replace(options, head_scores=False)
    frames.extras = render_extras(result, options, cache, part="early" if late & LATE_EXTRAS else "all")
    frames.render_time_s = time.perf_counter() - t0
    return frames


def late_names(result: RunResult, options: ViewOptions) -> frozenset[str]:
    """The extras of a new result that follow its maps (Outcome.late): the logits of a model with an output head
    (explain.LATE_EXTRAS), and a model's head types while the statistics panel, which prints them beside its
    numbers, is closed: the model view's badges. The head-type probe over every layer's maps held the maps back
    from the screen (benchmarks/README.md, Behind the code)."""
    late = late_extras(options) if result.outputs is not None else frozenset()
    if options.head_scores and not options.stats and result.source is not None:
        late |= {"head_scores"}
    return late


def late_frames(result: RunResult, options: ViewOptions, cache: PoolCache, late: frozenset[str]) -> dict:
    """The `late` extras (late_names) that follow the maps of `result`: the head types first, then the logits."""
    extras = {}
    if "head_scores" in late:
        with torch.inference_mode():
            extras["head_scores"] = head_score_frames(result)
    return extras | (render_extras(result, options, cache, part="late") if late & LATE_EXTRAS else {})
