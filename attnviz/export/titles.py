"""The text above an export: its heading and the lines that say what ran."""

from __future__ import annotations

import math

from attnviz.core.kernel.stages import BY_NAME
from attnviz.core.runs.config import RunConfig
from attnviz.core.runs.runner import RunResult
from attnviz.core.runs.saved import MAPS_VARIANT
from attnviz.export.items import Text
from attnviz.export.options import ExportOptions
from attnviz.export.qt import Metrics
from attnviz.frames import HeatImage
from attnviz.style import INK, SOFT_INK, SUBTITLE_PX, TITLE_PX


def wrap(parts: list[str], width: float, measure) -> list[str]:
    """The parts joined by " · " into lines no wider than `width` (as `measure` reads a text's width)."""
    lines: list[str] = []
    for part in parts:
        if lines and measure(lines[-1] + " \u00b7 " + part) <= width:
            lines[-1] += " \u00b7 " + part
        else:
            lines.append(part)
    return lines


def mask_text(c: RunConfig) -> str:
    """The mask, as a title line says it."""
    if c.mask == "none":
        return "mask: none"
    if c.mask in ("window", "window-bidirectional"):
        return f"mask: {c.mask} {c.window}"
    if c.mask == "padding":
        return "mask: padding, valid keys " + ", ".join(str(n) for n in c.kv_lengths)
    return f"mask: {c.mask}"


def title_parts(result: RunResult, options: ExportOptions, tiles: list[HeatImage]) -> tuple[str, list[str]]:
    """(heading, the parts of the lines below it): what is drawn, then what ran (model or variant, shapes, mask)."""
    c = result.config
    b = options.batch_index
    if options.what == "output":
        tile = tiles[0]
        heading = f"{tile.title} \u00b7 {tile.shape[0]} \u00d7 {tile.shape[1]}"
    else:
        view = options.map_view
        if view == "weights":
            heading = ("Attention weights after dropout (train mode)" if c.dropout_active
                       else "Attention weights" + (" (signed, differential)" if c.spec.head_factor > 1 else ""))
        elif view == "scores":
            heading = "Pre-softmax scores QK\u1d40/\u221ad_head"
        else:
            heading = f"Stage {view}: {BY_NAME[view].description}"
        if options.what == "rollout":
            heading = f"Attention rollout \u00b7 {tiles[0].title.removeprefix('rollout ')}"  # "over N layers"
        elif options.what == "head":
            heading += f" \u00b7 head {options.head} of {c.heads}"
        elif options.what == "mean":
            heading += f" \u00b7 mean over {c.heads} heads"
        else:
            heading += f" \u00b7 {c.heads} head{'s' if c.heads != 1 else ''}"
    if c.spec.backed:  # a trained model on a text: its name, the layer, the tokens
        name = model_title(result)
        if c.text:
            name += f' · "{c.text if len(c.text) <= 40 else c.text[:39] + "…"}"'
        layer = [] if options.what == "rollout" else [f"layer {c.layer}"]  # rollout is every layer's
        return heading, [name, *layer, result.token_count_text(options.step), c.shapes_text(), mask_text(c),
                         f"float32 on {result.device}"]
    if c.variant == MAPS_VARIANT:  # maps given from Python (show(), save()): their shape is all that is known
        layers = 1 if result.layer_weights is None else result.layer_weights.shape[0]
        where = [f"layer {c.layer} of {layers}"] if layers > 1 and options.what != "rollout" else []
        return heading, ["attention maps given", *where, c.shapes_text()]
    parts = [f"{c.spec.label} ({c.variant})", c.shapes_text(), mask_text(c)]
    if c.safe_softmax and c.applies("safe_softmax"):
        parts.append("safe softmax")
    if c.train and c.applies("train"):
        parts.append(f"train mode, dropout {c.dropout:g}")
    parts += [f"batch item {b} of {c.batch}", f"seed {c.seed}", f"{c.dtype} on {result.device}"]
    return heading, parts


def model_title(result: RunResult) -> str:
    """A model's name, family and depth as titles say it (kept in an NPZ: maps opened from it have no model)."""
    info = getattr(result.source, "info", None)
    if info is None:
        return result.model_name or result.config.model
    return f"{info.name} ({getattr(info, 'model_type', result.config.spec.label)}, {info.layers} layers)"


def title_lines(m: Metrics, heading: str, parts: list[str], wrap_w: float) -> list[tuple[str, int, bool, str]]:
    """(text, px, bold, colour) per title line: the heading, then the parts wrapped to wrap_w."""
    wrapped = wrap(parts, wrap_w, lambda t: m.width(t, SUBTITLE_PX))
    return [(heading, TITLE_PX, True, INK)] + [(line, SUBTITLE_PX, False, SOFT_INK) for line in wrapped]


def title_items(items: list, m: Metrics, lines: list, x: int, top: int) -> tuple[int, int]:
    """Draw the title lines from `top`; returns the right edge of the widest and the bottom of the last."""
    right, y = 0, top
    for text, px, bold, color in lines:
        items.append(Text(x, y + m.ascent(px, bold), text, px, bold, color=color))
        y += m.height(px, bold) + 2
        right = max(right, x + math.ceil(m.width(text, px, bold)))
    return right, y
