"""Colormaps as 256-entry lookup tables (NumPy only, no Qt), plus the masked and NaN colours.

Quantised images use indices 0..253 for data, 254 for masked cells and 255 for rows with no key
to attend to (NaN). One uint8 image + one 256-entry uint8 LUT is Qt's fast Indexed8 path.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources

import numpy as np

DATA_LEVELS = 254  # indices 0..253 carry data
MASKED_INDEX = 254
NAN_INDEX = 255
DEFAULT_SEQUENTIAL = "viridis"
DEFAULT_DIVERGING = "RdBu_r"

# Candidates in order of preference; the first far enough from every colour of the map wins,
# so a masked or NaN cell can never be read as a weight.
_MASKED_CANDIDATES = [(150, 150, 150), (205, 205, 205), (90, 90, 90), (235, 235, 235), (45, 45, 45)]
_NAN_CANDIDATES = [(255, 0, 255), (0, 255, 255), (255, 128, 0), (0, 200, 0), (255, 255, 255)]
_MIN_DISTANCE = 60.0


@cache
def _table() -> dict:
    text = (resources.files("attnviz.resources") / "colormaps.json").read_text(encoding="utf-8")
    return json.loads(text)["maps"]


def names(kind: str | None = None) -> list[str]:
    """Colormap names, optionally only 'sequential' or 'diverging' ones."""
    return [n for n, m in _table().items() if kind is None or m["kind"] == kind]


def description(name: str) -> str:
    return _table()[name]["description"]


def kind(name: str) -> str:
    return _table()[name]["kind"]


def _pick(rgb: np.ndarray, candidates: list[tuple[int, int, int]], avoid: list) -> tuple[int, int, int]:
    colours = np.vstack([rgb.astype(float)] + [np.array([a], float) for a in avoid])
    best, best_d = candidates[0], -1.0
    for c in candidates:
        d = float(np.sqrt(((colours - np.array(c, float)) ** 2).sum(1)).min())
        if d >= _MIN_DISTANCE:
            return c
        if d > best_d:
            best, best_d = c, d
    return best


@cache
def lut(name: str) -> np.ndarray:
    """(256, 4) uint8 RGBA: 254 data colours, then the masked colour, then the NaN colour."""
    if name not in _table():
        raise ValueError(f"unknown colormap {name!r}; use one of {', '.join(names())}")
    rgb = np.frombuffer(bytes.fromhex(_table()[name]["rgb"]), np.uint8).reshape(256, 3)
    idx = np.linspace(0, 255, DATA_LEVELS).round().astype(int)
    data = rgb[idx]
    masked = _pick(rgb, _MASKED_CANDIDATES, [])
    nan = _pick(rgb, _NAN_CANDIDATES, [masked])
    table = np.empty((256, 4), np.uint8)
    table[:DATA_LEVELS, :3] = data
    table[MASKED_INDEX, :3] = masked
    table[NAN_INDEX, :3] = nan
    table[:, 3] = 255
    table.flags.writeable = False
    return table
