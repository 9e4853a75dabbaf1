"""How each explaining panel's Export… writes its file, all through attnviz.export: a figure drawn from the
frames the panel shows (never a grab of the widget), its numbers as CSV, or arrays as NPZ. Each Panel
record (explain_views.PANELS) names its own: figure, table, arrays or a writer of its own; `views` is the
window's ExplainViews."""

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


def stats_figure_of(views) -> Layout:
    return stats_figure(views.window.result, _shown(views.stats.frames, "statistics"), _batch(views))


def focus_figure_of(views) -> Layout:
    return focus_figure(views.window.result, _shown(views.focus.frames, "token focus"), _batch(views))


def lens_figure_of(views) -> Layout:
    return lens_figure(views.window.result, _shown(views.lens.frames, "logit lens"))


def rollout_figure_of(views) -> Layout:
    _shown(views.rollout.frames, "rollout")
    return rollout_figure(views.window.result, views.window.frames.options)


def compare_figure_of(views) -> Layout:
    against = "unablated" if views.compare.unablatedButton.isChecked() else "pinned"
    return compare_figure(views.window.result, _shown(views.compare.frames, "compare"), against)


def stats_table(views) -> str:
    frames = _shown(views.stats.frames, "statistics")
    return stats_csv(frames.columns, frames.labels)


def focus_table(views) -> str:
    return focus_csv(_shown(views.focus.frames, "token focus"))


def lens_table(views) -> str:
    return lens_csv(_shown(views.lens.frames, "logit lens"))


def rollout_table(views) -> str:
    result = views.window.result
    return rollout_csv(_shown(views.rollout.frames, "rollout"), result.tokens if result is not None else ())


def compare_arrays_to(views, path: str) -> Path:
    """Every head's difference as NPZ (heavy: export() runs off the GUI thread for it)."""
    window = views.window
    pinned = views.compare.pinned or window.frames.extras.get("compare_pinned")  # or the unablated run
    if pinned is None:
        raise ValueError("nothing to export: pin a result (or compare against unablated) first")
    return write_compare(window.result, pinned, window.frames.options, path)


def pipeline_to(views, path: str) -> Path:
    """The pipeline figure (PNG, SVG), or that head's stages as NPZ."""
    window = views.window
    return export_pipeline(window.result, path, window.frames.options, _shown(views.pipeline.frames,
                                                                              "pipeline").head)


def patch_to(views, path: str) -> Path:
    """The overlay on the picture (PNG, SVG)."""
    p = views.patch
    return export_patch(p.frames, path, p.mode, p.headSpin.value(), p.alpha)


def panel_export(panel, views, path: str, ext: str) -> Path:
    """Write `panel`'s file (a Panel record) as `ext`, one of the formats it offers."""
    if panel.write is not None:  # a panel with a writer of its own for every format
        return panel.write(views, path)
    if ext == "csv":
        return write_csv(path, panel.table(views))
    if ext == "npz":
        return panel.arrays(views, path)
    return write_figure(panel.figure(views), path)
