"""Every layer x head of a model as one picture (bertviz's model view), for the model view: each tile pooled
and quantised as frames does a map. NumPy/torch only (no Qt): composed off the GUI thread."""

from __future__ import annotations

import numpy as np
import torch

from attnviz import colormaps
from attnviz.frames import quantise_maps


def model_mosaic(blocks, tile_px: int, colormap: str, gap: int = 2) -> np.ndarray:
    """Every layer x head of a model as one RGBA picture (bertviz's model view): row = layer, column =
    head, then the mean over the layer's heads; an encoder-decoder's stacks one block under another.
    Each tile is max-pooled to at most tile_px, scaled to its own maximum (so a layer's pattern shows even
    where one token takes most of the weight), then drawn as a tile_px square whatever the map's shape.

    blocks: [(layer_weights (layers, 1, H, Lq, Lkv), allowed bool (layers, Lq, Lkv) or None)], one per stack.
    Returns (rows, cols, 4) uint8; mosaic_rows and mosaic_columns give the tiles' places.
    """
    heads = blocks[0][0].shape[2]
    x0 = mosaic_columns(heads, tile_px, gap)
    tops = mosaic_rows([lw.shape[0] for lw, _ in blocks], tile_px, gap)
    out = np.full((tops[-1] + tile_px, x0[-1] + tile_px, 4), 255, np.uint8)
    lut = colormaps.lut(colormap)
    first = 0
    for layer_weights, allowed in blocks:
        for n, image in enumerate(_square_tiles(layer_weights, allowed, tile_px)):
            r, c = divmod(n, heads + 1)
            y = tops[first + r]
            out[y: y + tile_px, x0[c]: x0[c] + tile_px] = lut[image]
        first += layer_weights.shape[0]
    return out


def _square_tiles(layer_weights: np.ndarray, allowed: np.ndarray | None, tile_px: int) -> list[np.ndarray]:
    """One stack's tiles (each layer's heads, then their mean) as tile_px x tile_px uint8 index images. A layer
    at a time, with its own mask for its heads and their mean (the masks of every layer repeated for every head were 78
    MB at 8,192 tokens, made by a NumPy call that holds the GIL: the window froze; benchmarks/README.md, Behind the
    code)."""
    layers, _, heads, lq, lkv = layer_weights.shape
    w = torch.from_numpy(np.ascontiguousarray(layer_weights[:, 0], np.float32))  # (layers, H, Lq, Lkv)
    tiles = []
    for n in range(layers):  # a layer's heads and their mean at a time: no every-layer copy (315 MB at 512 tokens)
        maps = torch.cat([w[n], torch.nan_to_num(w[n], nan=0.0).mean(0, keepdim=True)])
        mask = None if allowed is None else allowed[min(n, allowed.shape[0] - 1)][None]
        images, _ = quantise_maps(maps, mask, None, (tile_px, tile_px), False, shared=False)
        h, width = images[0].shape
        rows, cols = np.arange(tile_px) * h // tile_px, np.arange(tile_px) * width // tile_px
        tiles += [image[rows][:, cols] for image in images]
    return tiles


def mosaic_rows(layers_per_block: list[int], tile_px: int, gap: int = 2) -> list[int]:
    """Top edge of each mosaic row, block after block (a stack's layers), blocks a little further apart."""
    tops, y = [], 0
    for layers in layers_per_block:
        for _ in range(layers):
            tops.append(y)
            y += tile_px + gap
        y += 3 * gap
    return tops


def mosaic_columns(heads: int, tile_w: int, gap: int = 2) -> list[int]:
    """Left edge of each mosaic column: the heads, then the mean a little apart."""
    return [c * (tile_w + gap) for c in range(heads)] + [heads * (tile_w + gap) + 3 * gap]
