"""export(): one call that writes a result as PNG, SVG or NPZ, chosen by the file's extension."""

from __future__ import annotations

import os
from pathlib import Path

from attnviz.atomic import ExportError, check_target, write_bytes
from attnviz.core.runs.runner import RunResult
from attnviz.export.items import ImageTooLarge
from attnviz.export.npz import write_npz
from attnviz.export.options import ExportOptions, format_of
from attnviz.export.png import png_bytes
from attnviz.export.svg import svg_text


def export(result: RunResult, path: str | os.PathLike, options: ExportOptions | None = None,
           replace_readonly: bool = False) -> Path:
    """Write the result to `path` as PNG, SVG or NPZ (chosen by the extension); returns the path.

    ValueError for an unknown extension or bad options (nothing written). ExportError when the file
    cannot be written or the image would be too large; any previous file at `path` stays intact.
    A read-only file at `path` is refused (ReadOnlyTarget) unless `replace_readonly`. At a generation's step
    (options.step) an image fades the later rows as the window does; an NPZ holds the maps as they stood then.
    """
    ext = format_of(path)
    options = options or ExportOptions()
    check_target(path, replace_readonly)  # before the image is composed
    if ext == ".npz":
        options.check(result.config)
        options.check_step(result)
        if options.step is not None:
            from attnviz.core.runs.generation import at_step

            result = at_step(result, options.step)
        return write_npz(result, path, options.all_layers, replace_readonly)
    try:
        data = png_bytes(result, options) if ext == ".png" else svg_text(result, options).encode("utf-8")
    except ImageTooLarge as exc:
        raise ExportError(path, str(exc)) from exc
    write_bytes(path, data, replace_readonly)
    return Path(path)
