"""PNG, SVG and NPZ export, rendered from the data (never a screenshot); shared by the GUI and the CLI.

No widgets: QtGui (QImage, QPainter, QFont) where text is measured and pixels are painted or encoded,
nothing of Qt for the NPZ. One layout is computed per export as a short list of drawing items (heat
map rasters, vector text, tick marks, the colour bar); the PNG backend paints it with QPainter, the SVG
backend writes the same items as SVG 1.1 (each heat map an embedded, crisp PNG; all text as vector
<text>). Heat maps come from frames.render at full resolution (no pooling), upscaled
nearest-neighbour by an integer scale, so every cell is a crisp square of exactly the view's colours
(LUT, masked and no-key colours).

    options   ExportOptions, FORMATS, WHATS, file names
    figure    the composed figure (layout(), auto_scale), from titles, ticks and colourbar
    generated a generation's marks: the generated tokens' labels in blue, a dashed line at the prompt's end
    items     the drawing items and the size limit, plain data
    png, svg  the two backends; qt holds what they need from QtGui
    pipeline  one head's pipeline figure
    npz       the arrays
    write     export(), the one entry point
    table     the panels' heat table and map strip figures; write_figure, write_csv, write_arrays
    panels    each explaining panel's figure and numbers, from the frames it shows
    patches   a vision model's attention over its picture (PNG, SVG)

Every file attnviz writes goes through here (the window's panels too: never a grab of a widget).

Every write is atomic (see attnviz.atomic): a failed or interrupted export leaves the previous
file, if any, untouched and no temporary file behind.

    export(result, "maps.png", ExportOptions(what="grid"))
    image = compose_image(result, ExportOptions(what="head", head=2))   # e.g. for the clipboard
"""

from __future__ import annotations

from attnviz.atomic import ExportError, MissingFolder, ReadOnlyTarget, check_target
from attnviz.export.figure import GAP, MARGIN, MAX_AUTO_SCALE, MIN_TILE_PX, auto_scale, layout, rollout_scale
from attnviz.export.items import MAX_PIXELS, ImageTooLarge, Layout
from attnviz.export.npz import file_arrays, write_npz
from attnviz.export.options import FORMATS, WHATS, ExportOptions, default_filename, format_of
from attnviz.export.pipeline import export_pipeline, pipeline_layout
from attnviz.export.png import compose_image, png_bytes
from attnviz.export.qt import ensure_gui_app
from attnviz.export.svg import svg_document, svg_text
from attnviz.export.write import export

__all__ = [
    "FORMATS", "GAP", "MARGIN", "MAX_AUTO_SCALE", "MAX_PIXELS", "MIN_TILE_PX", "WHATS", "ExportError",
    "ExportOptions", "ImageTooLarge", "Layout", "MissingFolder", "ReadOnlyTarget", "auto_scale", "check_target",
    "compose_image", "default_filename", "ensure_gui_app", "export", "export_pipeline", "file_arrays",
    "format_of", "layout", "pipeline_layout", "png_bytes", "rollout_scale", "svg_document", "svg_text",
    "write_npz",
]
