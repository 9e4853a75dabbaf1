"""A generation's marks in an exported map, as the window draws them (ui/maps/mosaic.py): the generated tokens'
labels in GENERATED_INK and a dashed line where the prompt ends, after its last row and column."""

from __future__ import annotations

from dataclasses import dataclass

from attnviz.core.runs.result import RunResult
from attnviz.export.items import Line
from attnviz.style import GENERATED_INK, GENERATED_LINE_PX, TICK_INK

TOKEN_MAPS = ("grid", "head", "mean", "scores", "rollout")  # what an export draws over the tokens on both axes


@dataclass(frozen=True)
class PromptEnd:
    """Where a generation's prompt ends in a drawn map, in cells (a pooled map's cell j covers positions j*f ..):
    the generated tokens are rows from `rows` on and columns from `cols` on; None: that axis is not marked."""

    rows: float | None
    cols: float | None

    def ink(self, j: int, axis: str) -> str:
        """The colour of cell j's label on the rows' (axis "y") or the columns' ("x") axis."""
        end = self.rows if axis == "y" else self.cols
        return GENERATED_INK if end is not None and j >= end else TICK_INK


def prompt_end(result: RunResult, what: str) -> PromptEnd | None:
    """The marks of a generation's map (None: not a generation, or not a map over its tokens). The keys are marked
    where they are the queries' tokens (not an encoder's, for cross-attention)."""
    if not result.generated_count or what not in TOKEN_MAPS:
        return None
    fq, fk = result.pool_factor or (1, 1)
    p = result.prompt_length
    return PromptEnd(p / fq, None if result.key_tokens else p / fk)


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
