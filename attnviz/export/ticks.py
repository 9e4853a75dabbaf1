"""Where an export's ticks go and how their labels read."""

from __future__ import annotations

import math

from attnviz.style import MINUS, TICK_PX


def nice_step(span: float, count: int) -> float:
    """1, 2 or 5 times a power of ten: the smallest such step that cuts `span` into at most `count`."""
    raw = span / max(count, 1)
    if raw <= 0:
        return 1.0
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if m * mag >= raw:
            return m * mag
    return 10 * mag


def position_ticks(n: int, length_px: int) -> list[int]:
    """Integer positions 0, step, 2*step ... < n with labels at least ~36 px apart."""
    count = max(1, length_px // 36)
    step = max(1, int(nice_step(max(n - 1, 1), count)))
    if step not in (1, 2, 5) and step % 5:
        step = int(math.ceil(step / 5) * 5)
    return list(range(0, n, step))


def value_ticks(lo: float, hi: float, length_px: int) -> tuple[list[float], list[str]]:
    """Round values in lo..hi for a bar `length_px` long, and their labels (as many decimals as the step needs)."""
    count = max(2, min(6, length_px // 32))
    step = nice_step(hi - lo, count)
    first = math.ceil(lo / step - 1e-9) * step
    values = [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]
    values = [0.0 if abs(v) < step * 1e-9 else v for v in values]
    big = max(abs(lo), abs(hi))
    if big >= 1e5 or big < 1e-3:
        labels = [f"{v:.2g}" for v in values]
    else:
        decimals = max(0, -math.floor(math.log10(step) + 1e-9))
        labels = [f"{v:.{decimals}f}" for v in values]
    labels = [s.replace("-", MINUS) for s in labels]
    return values, labels


def all_labels_scale() -> int:
    """The least pixels per cell where every token's label fits its cell."""
    return TICK_PX + 2


def token_ticks(n: int, scale: int, every: bool = False) -> list[int]:
    """Every token whose label fits its cell; every k-th one when the cells are smaller than the text (`every`:
    each token's, whatever the cells)."""
    step = 1 if every else max(1, math.ceil(all_labels_scale() / max(scale, 1)))
    return list(range(0, n, step))
