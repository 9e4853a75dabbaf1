"""A generation's marks in an exported map, as the window draws them (ui/maps/mosaic.py): the generated tokens'
labels in GENERATED_INK and a dashed line where the prompt ends, after its last row and column; at a chosen step
(the window's Step slider, ExportOptions.step) the rows after the step's token faded under FADE and the step's row
framed in ROW_MARK."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnviz.core.runs.result import RunResult
from attnviz.export.items import Line
from attnviz.style import FADE, GENERATED_INK, GENERATED_LINE_PX, ROW_MARK, STEP_MARK_PX, TICK_INK

TOKEN_MAPS = ("grid", "head", "mean", "scores", "rollout")  # what an export draws over the tokens on both axes


@dataclass(frozen=True)
class PromptEnd:
    """Where a generation's prompt ends in a drawn map, in cells (a pooled map's cell j covers positions j*f ..):
    the generated tokens are rows from `rows` on and columns from `cols` on; None: that axis is not marked."""

    rows: float | None
    cols: float | None
    step: int | None = None  # the cell of a chosen step's token (its row framed, the rows after it faded)

    def ink(self, j: int, axis: str) -> str:
        """The colour of cell j's label on the rows' (axis "y") or the columns' ("x") axis."""
        end = self.rows if axis == "y" else self.cols
        return GENERATED_INK if end is not None and j >= end else TICK_INK


def prompt_end(result: RunResult, what: str, step: int | None = None) -> PromptEnd | None:
    """The marks of a generation's map (None: not a generation, or not a map over its tokens). The keys are marked
    where they are the queries' tokens (not an encoder's, for cross-attention). `step`: k generated tokens (0: the
    prompt alone), whose last token's row is marked, as the window's row for step k is (its last prompt row at 0)."""
    if not result.generated_count or what not in TOKEN_MAPS:
        return None
    fq, fk = result.pool_factor or (1, 1)
    p = result.prompt_length
    return PromptEnd(p / fq, None if result.key_tokens else p / fk, None if step is None else (p + step - 1) // fq)


def step_faded(rgba: np.ndarray, end: PromptEnd | None) -> np.ndarray:
    """One map's colours (a cell a pixel) with the rows after the step's under FADE, composed as the window's
    painter lays it over the map (source over); unchanged without a step."""
    if end is None or end.step is None:
        return rgba
    out = rgba.copy()
    alpha = FADE[3] / 255
    below = out[end.step + 1:, :, :3].astype(np.float32)
    out[end.step + 1:, :, :3] = np.rint(below * (1 - alpha) + np.asarray(FADE[:3], np.float32) * alpha)
    return out


def step_lines(end: PromptEnd, image: tuple[int, int, int, int], s: int) -> list[Line]:
    """The frame around the step's row over one map's image (x, y, width, height; s px per cell); none without."""
    if end.step is None:
        return []
    ix, iy, w, _ = image
    top, bottom = iy + end.step * s, iy + (end.step + 1) * s
    ends = ((ix, top, ix + w, top), (ix, bottom, ix + w, bottom), (ix, top, ix, bottom), (ix + w, top, ix + w, bottom))
    return [Line(*e, ROW_MARK, STEP_MARK_PX) for e in ends]


def boundary_lines(end: PromptEnd, image: tuple[int, int, int, int], s: int) -> list[Line]:
    """The dashed lines over one map's image (x, y, width, height; s px per cell) where the prompt ends."""
    ix, iy, w, h = image
    lines = []
    if end.rows is not None:
        y = iy + end.rows * s
        lines.append(Line(ix, y, ix + w, y, GENERATED_INK, GENERATED_LINE_PX, dashed=True))
    if end.cols is not None:
        x = ix + end.cols * s
        lines.append(Line(x, iy, x, iy + h, GENERATED_INK, GENERATED_LINE_PX, dashed=True))
    return lines
