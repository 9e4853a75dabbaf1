"""How each explaining panel's Export… writes its file, all through attnviz.export: a figure drawn from the
frames the panel shows (never a grab of the widget), its numbers as CSV, or arrays as NPZ. The panel
records (explain_views.PANELS) name these; `views` is the window's ExplainViews."""

from __future__ import annotations

from pathlib import Path

from attnviz.export import export_pipeline
from attnviz.export.items import Layout
from attnviz.export.panels import (
    compare_figure,
    focus_csv,
    focus_figure,
    lens_csv,
    lens_figure,
    rollout_csv,
    rollout_figure,
    stats_csv,
    stats_figure,
    write_compare,
)
from attnviz.export.patches import export_patch
from attnviz.export.table import write_csv, write_figure


def _shown(frames, kind: str):
    """The frames a panel shows; ValueError where it shows nothing yet."""
    if frames is None or getattr(frames, "message", ""):
        raise ValueError(f"nothing to export: the {kind} panel shows nothing yet")
    return frames


def _batch(views) -> int:
    return views.window.frames.options.batch_index


def _rollout_figure(views) -> Layout:
    _shown(views.rollout.frames, "rollout")
    return rollout_figure(views.window.result, views.window.frames.options)


def _against(views) -> str:
    return "unablated" if views.compare.unablatedButton.isChecked() else "pinned"


FIGURES = {  # kind -> the panel's figure, drawn from the frames it shows
    "stats": lambda v: stats_figure(v.window.result, _shown(v.stats.frames, "statistics"), _batch(v)),
    "focus": lambda v: focus_figure(v.window.result, _shown(v.focus.frames, "token focus"), _batch(v)),
    "lens": lambda v: lens_figure(v.window.result, _shown(v.lens.frames, "logit lens")),
    "rollout": _rollout_figure,
    "compare": lambda v: compare_figure(v.window.result, _shown(v.compare.frames, "compare"), _against(v)),
}
TABLES = {  # kind -> the panel's numbers as CSV text
    "stats": lambda v: stats_csv(_shown(v.stats.frames, "statistics").columns, v.stats.frames.labels),
    "focus": lambda v: focus_csv(_shown(v.focus.frames, "token focus")),
    "lens": lambda v: lens_csv(_shown(v.lens.frames, "logit lens")),
    "rollout": lambda v: rollout_csv(_shown(v.rollout.frames, "rollout")),
}


def panel_export(views, kind: str, path: str, ext: str) -> Path:
    """Write panel `kind`'s file as `ext` (one of the formats its record offers)."""
    window = views.window
    if kind == "pipeline":  # the pipeline figure, or that head's stages as NPZ
        return export_pipeline(window.result, path, window.frames.options, _shown(views.pipeline.frames,
                                                                                  "pipeline").head)
    if kind == "patch":  # the overlay on the picture
        p = views.patch
        return export_patch(p.frames, path, p.mode, p.headSpin.value(), p.alpha)
    if ext == "csv":
        return write_csv(path, TABLES[kind](views))
    if ext == "npz":  # compare: every head's difference (export() runs off the GUI thread for it)
        pinned = views.compare.pinned or window.frames.extras.get("compare_pinned")  # or the unablated run
        if pinned is None:
            raise ValueError("nothing to export: pin a result (or compare against unablated) first")
        return write_compare(window.result, pinned, window.frames.options, path)
    return write_figure(FIGURES[kind](views), path)
