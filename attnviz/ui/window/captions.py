"""The window's words about a result: what to look for in its maps (the caption over the grid) and the
status line (what was computed, how, and how long it took)."""

from __future__ import annotations

from pathlib import Path

from attnviz.core import RunConfig
from attnviz.core.kernel.pooling import pooled_text
from attnviz.core.runs.backed import WEIGHTS_ONLY_NOTE
from attnviz.core.runs.saved import MAPS_VARIANT
from attnviz.session import Outcome

STACK_CAPTIONS = {"encoder": "encoder self-attention", "decoder": "decoder self-attention (causal)",
                  "cross": "cross-attention (decoder tokens reading the encoder's)"}


def caption_for(result) -> tuple[str, bool]:
    """What to look for in a result's maps, and whether it is a trained model's own caption."""
    config = result.config
    if result.opened:
        return opened_caption(result), False
    text, focus = config.spec.caption, config.spec.defaults.get("layer")
    if text:
        if focus is not None and config.layer != focus:
            text += f"  (this is layer {config.layer}; the pattern is in layer {focus})"
        return text, True
    if result.source is not None:
        info = result.source.info
        lacking = f" ({WEIGHTS_ONLY_NOTE})" if WEIGHTS_ONLY_NOTE in result.notes else ""
        stacks = getattr(info, "stacks", ())
        stack = f" {STACK_CAPTIONS[config.stack or stacks[0]]}," if len(stacks) > 1 else ""
        return (f"Pretrained {info.name} ({info.model_type}) on your text:{stack} layer {config.layer} of "
                f"{info.layers} (0-{info.layers - 1}){lacking}."), False  # how to hover: the info bar's hint
    if config.weights:
        return f"Your weights ({Path(config.weights).name}): the maps show what they learned.", False
    return (f"Random weights (seed {config.seed}): nothing learned, so the maps are near-uniform apart from what "
            "the mask, positions and scale impose. A \u201cTrained toy\u201d variant shows heads with a job."), False


def opened_caption(result) -> str:
    """What maps opened from a file are: what the file says ran, and which layers it holds."""
    c = result.config
    ran = run_name(result)
    layers = (f" It holds every layer's weights (0-{len(result.layer_weights) - 1}): Layer or a click in the model "
              "view shows another." if result.layer_weights is not None else "")
    return f"Opened {Path(result.opened).name}: {ran}, layer {c.layer}, as saved; nothing is computed again.{layers}"


def run_key(result) -> RunConfig:
    """What a result was computed for: a model forward's config (a generation's partial results share it)."""
    return result.source.key if result.source is not None else result.config


def generation_text(outcome: Outcome) -> str:
    """The status line's lead for a generation: how far it got."""
    if outcome.generated is None:
        return ""
    n, total = outcome.generated
    if outcome.partial:
        return f"generating {n} / {total} tokens · "
    if outcome.stopped:
        return f"stopped after {n} of {total} tokens · "
    return f"{outcome.result.token_count_text()} · "  # as an export's title says it


def status_text(outcome: Outcome, swap_s: float) -> str:
    """The status line for an outcome on screen; `swap_s`: the GUI-thread time its views took. How a long run's
    maps are pooled leads (a long line is cut at the window's edge)."""
    r, c = outcome.result, outcome.result.config
    out_shape = ("x".join(map(str, r.output.shape)) if "output" in r.stages
                 else "not in the file" if r.opened else "not kept for this layer")
    compute = f"compute {r.compute_time_s * 1e3:.1f} ms" if outcome.recomputed else "view only (no recompute)"
    render = (outcome.frames.render_time_s + swap_s) * 1e3
    pooled = pool_text(r)
    others = [n for n in r.notes if n != pooled]
    notes = " · " + "; ".join(others) if others else ""
    return (f"{generation_text(outcome)}{pooled + ' · ' if pooled else ''}{run_name(r)} · {c.shapes_text()} · "
            f"output {out_shape} · mask {c.mask} · {r.device} · {compute} · render {render:.1f} ms{notes}")


def run_name(result) -> str:
    """What ran, as the status line names it: the model's own name ("Pretrained model (folder or .gguf)", the
    variant's label, said nothing of a model or of maps opened from a file), else the variant's label."""
    if result.opened:
        c = result.config
        return result.model_name or (c.spec.label if c.variant != MAPS_VARIANT else "maps handed to attnviz")
    info = result.source.info if result.source is not None else None
    if getattr(info, "model_type", None):  # a pretrained model's (a trained toy is named by its label)
        return f"{info.name} ({info.model_type})"
    return result.config.spec.label


def pool_text(result) -> str:
    """'maps max-pooled 8,192 → 1,024 inside the kernel (statistics exact)' for a run computed on the pooled
    path (a seed run's notes say it already), else ''."""
    said = next((n for n in result.notes if "max-pooled" in n), None)
    if said is not None or result.pool_factor is None:
        return said or ""
    c = result.config
    if tuple(result.pool_factor) == (1, 1):
        return f"maps at full resolution ({c.seq_q:,} × {c.lkv:,}), computed in blocks inside the kernel"
    return pooled_text((c.seq_q, c.lkv), tuple(result.pool_factor))
