"""attnviz's look in one place: colours, text sizes and how numbers are written, for the window (ui) and
the exports (export) alike.

Plain Python, no Qt and no attnviz imports, so every layer may use it: colours are hex strings (Qt code
wraps them in QColor), sizes are pixels.
"""

from __future__ import annotations

import math

# --- colours ---------------------------------------------------------------------------------

BACKGROUND = "#ffffff"  # behind the maps
INK = "#1a1a1a"  # titles: an export's heading, every map's title, the window's axis names
SOFT_INK = "#4d4d4d"  # secondary text: an export's subtitle lines and axis names, the window's token labels
TICK_INK = "#404040"  # an export's tick labels, legend text and arrows
FRAME = "#808080"  # frames around maps and the colour bar, tick marks
ROW_MARK = "#ff2020"  # a marked query row (token focus) and a generation's chosen step
GENERATED_INK = "#1f5fbf"  # a generation's written tokens (labels) and the prompt's boundary
GENERATED_LINE_PX = 1.2  # the width of that boundary: a dashed line after the prompt's last row and column
FADE = (255, 255, 255, 190)  # RGBA over the rows after a generation's chosen step: not yet written then
STEP_MARK_PX = 1.5  # the width of the frame (ROW_MARK) around that step's row
RED = "#d0312d"  # the one strong red: error text, a field's error border, the model view's layer marker
STALE_OPACITY = 0.35  # maps of a result that no longer matches the controls
STALE_NOTE = "#fff3cd", "#664d03"  # background and ink of the note over stale maps
LIGHT_INK, DARK_INK = "#ffffff", "#000000"  # text on a coloured cell (ink_on picks), marks drawn over maps
OUTLINE = "#202020"  # the dark edge that keeps a light mark or a grey badge visible on any colormap
LABEL_FILL = (255, 255, 255, 200)  # RGBA behind a label or a legend drawn over maps
HIGHLIGHT = "#ff8c00"  # the Circuits panel's composition boxes on the model view, and their scores
SELECTED = "#1f6feb"  # the frame of the selected picture (the patching panels)
NO_TARGET = "#eeeeee"  # a predictions cell with no next token to score
PENDING_GREY = 228  # the grey level of a model view's tiles while their layer still runs
# one colour per head type (the model view's badges and legend); a type not listed gets OTHER_HEAD_TYPE
HEAD_TYPE_COLOURS = {"previous_token": "#1f77b4", "first_token": "#7f7f7f", "self": "#2ca02c",
                     "duplicate_token": "#9467bd", "induction": "#ff7f0e"}
OTHER_HEAD_TYPE = "#bbbbbb"


def ink_on(r: float, g: float, b: float) -> str:
    """The ink readable on an RGB fill: LIGHT_INK on dark (luminance under the middle, 140), else DARK_INK."""
    return LIGHT_INK if 0.299 * r + 0.587 * g + 0.114 * b < 140 else DARK_INK

# --- text ------------------------------------------------------------------------------------

FONT_FAMILIES = ["DejaVu Sans", "Helvetica", "Arial"]  # an export's fonts, in order of preference
SVG_FONT = "'DejaVu Sans', Helvetica, Arial, sans-serif"  # the same, as SVG's font-family
# an export's text sizes, px: heading, subtitle lines, tile titles, tick labels, axis names and captions
TITLE_PX, SUBTITLE_PX, TILE_PX, TICK_PX, LABEL_PX = 16, 12, 13, 11, 12

# --- numbers ---------------------------------------------------------------------------------

DIGITS = 4  # significant digits of a value in running text (hover, titles, the status bar)
COMPACT_DIGITS = 3  # where room is short: colour bar ticks, captions under an export's maps
MINUS = "\u2212"  # a real minus sign, for drawn text


def number(x: float, digits: int = DIGITS, typeset: bool = False) -> str:
    """`x` with `digits` significant digits; NaN and infinities by name. `typeset`: a real minus sign
    for drawn text (exports, tick labels); otherwise "-", so text a user copies reads back as a number."""
    if math.isnan(x):
        text = "NaN"
    elif math.isinf(x):
        text = "-inf" if x < 0 else "inf"
    else:
        text = f"{x:.{digits}g}"
    return text.replace("-", MINUS) if typeset else text


def format_bytes(n: float) -> str:
    """A byte count in words: GiB with two decimals from a quarter GiB, else whole MiB, KiB or bytes."""
    if n >= 2**28:
        return f"{n / 2**30:.2f} GiB"
    if n >= 2**20:
        return f"{n / 2**20:.0f} MiB"
    return f"{n / 2**10:.0f} KiB" if n >= 2**10 else f"{n:.0f} bytes"  # small budgets are not "0 MiB"
