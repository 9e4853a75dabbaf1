"""Attention over the picture: one query token's row of a vision model's maps, on its patch grid.

`patch_frames(result, query)` runs on the worker: the picture as the model saw it, the query's row of every head
of the shown layer over the patches (reshaped to rows x cols), their mean, and rollout's row for the query
(core.stats.rollout over every layer of the stack). The views colour and draw these arrays; export/patches.py
writes one of them over the picture as PNG or SVG (crisp patch edges: one block or rectangle per patch). No Qt.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnviz import colormaps

MODES = {"head": "Focused head", "mean": "Mean over heads", "rollout": "Rollout"}
ALPHA = 0.6  # the overlay's default opacity over the picture
TOP = colormaps.DATA_LEVELS - 1  # the LUT's last data index (the two after it are mask and NaN colours)


@dataclass
class PatchFrames:
    message: str = ""  # why there is nothing to draw, if so
    picture: np.ndarray | None = None  # (H, W, 3) uint8
    grid: tuple[int, int] = (0, 0)  # patch rows, columns
    tokens: tuple[str, ...] = ()  # every token's label ([CLS], reg0, r0c0 ...)
    prefix: int = 0  # tokens before the patches
    query: int = 0  # the query token (a row of the maps)
    layer: int = 0
    heads: np.ndarray | None = None  # (H, rows, cols): each head's weights from the query to each patch
    mean: np.ndarray | None = None  # (rows, cols): the mean over heads
    rollout: np.ndarray | None = None  # (rows, cols): rollout's row for the query over the patches
    lut: np.ndarray | None = None  # (256, 4) uint8
    layers: int = 0  # the stack's layers (rollout's depth)

    def values(self, mode: str, head: int = 0) -> np.ndarray:
        """The (rows, cols) overlay of a mode ("head", "mean", "rollout")."""
        if mode == "rollout":
            return self.rollout
        if mode == "mean":
            return self.mean
        return self.heads[min(max(head, 0), self.heads.shape[0] - 1)]

    def title(self, mode: str, head: int = 0) -> str:
        what = {"head": f"layer {self.layer} head {head}", "mean": f"layer {self.layer}, mean over heads",
                "rollout": f"rollout over {self.layers} layers"}[mode]
        return f"{self.tokens[self.query]} → patches · {what}"


def patch_frames(result, query: int | None = None, colormap: str = colormaps.DEFAULT_SEQUENTIAL) -> PatchFrames:
    """The patch view's arrays for one query token (None: the first token, [CLS] where there is one)."""
    source = getattr(result, "source", None)
    picture = getattr(source, "picture", None)
    if picture is None:
        return PatchFrames("The patch view needs a vision model (ViT, DeiT, DINOv2, CLIP, SigLIP) and an image")
    tokens = tuple(result.tokens)
    if tokens != picture.tokens:
        return PatchFrames("The maps shown are the text tower's: choose the stack vision to see the picture")
    rows, cols = picture.grid
    prefix = len(picture.prefix)
    q = 0 if query is None else min(max(int(query), 0), len(tokens) - 1)
    weights = np.asarray(result.stages["weights"], dtype=np.float64)[0]  # (H, L, L)
    heads = weights[:, q, prefix:].reshape(-1, rows, cols)
    lw = result.layer_weights  # (layers, 1, H, L, L)
    rolled = rollout_row(lw[:, 0], q)[prefix:].reshape(rows, cols)
    return PatchFrames("", picture.pixels, picture.grid, tokens, prefix, q, result.config.layer,
                       heads.astype(np.float32), heads.mean(0).astype(np.float32), rolled.astype(np.float32),
                       colormaps.lut(colormap), layers=int(lw.shape[0]))


def rollout_row(layer_weights: np.ndarray, query: int, residual: float = 0.5) -> np.ndarray:
    """Row `query` of core.stats.rollout for (layers, H, L, L) weights, as vector-matrix products: e_q·Â_L···Â_1
    costs layers·L² where the whole rollout costs layers·L³ (a 197-token ViT's patch click stays instant)."""
    row = np.zeros(layer_weights.shape[-1])
    row[query] = 1.0
    for layer in layer_weights[::-1]:  # the last layer is on the left of the product
        a = (1.0 - residual) * np.nan_to_num(layer.mean(0, dtype=np.float64)) + residual * np.eye(layer.shape[-1])
        row = row @ (a / a.sum(-1, keepdims=True))
    return row


def overlay_rgba(values: np.ndarray, lut: np.ndarray, alpha: float = ALPHA) -> np.ndarray:
    """(rows, cols) values -> (rows, cols, 4) uint8: coloured from 0 to the largest value, `alpha` opaque."""
    top = float(np.nanmax(values)) if values.size else 0.0
    scaled = np.zeros(values.shape) if top <= 0 else np.nan_to_num(values / top)
    rgba = lut[np.clip(np.rint(scaled * TOP), 0, TOP).astype(np.intp)].copy()
    rgba[..., 3] = int(round(255 * alpha))
    return rgba


def composite(picture: np.ndarray, values: np.ndarray, lut: np.ndarray, alpha: float = ALPHA,
              scale: int = 1) -> np.ndarray:
    """The overlay blended onto the picture, both enlarged `scale` times by repeating pixels: (H·s, W·s, 3)."""
    rows, cols = values.shape
    ph, pw = picture.shape[0] // rows, picture.shape[1] // cols
    over = overlay_rgba(values, lut, alpha).repeat(ph, 0).repeat(pw, 1)
    base = picture[: rows * ph, : cols * pw].astype(np.float32)
    a = over[..., 3:4].astype(np.float32) / 255.0
    out = np.rint(base * (1 - a) + over[..., :3].astype(np.float32) * a).astype(np.uint8)
    return out.repeat(scale, 0).repeat(scale, 1) if scale > 1 else out
