"""What an export draws and how it looks (ExportOptions), the formats, and file names."""

from __future__ import annotations

import numbers
import os
from dataclasses import dataclass
from pathlib import Path

from attnviz import colormaps
from attnviz.core.runs.config import RunConfig
from attnviz.core.runs.runner import RunResult
from attnviz.frames import MAP_VIEWS, SCALE_MODES, TENSORS, ViewOptions, view_stage

FORMATS = {".png": "PNG image", ".svg": "SVG 1.1 drawing (crisp embedded rasters, vector text)",
           ".npz": "NumPy arrays and the run configuration"}
WHATS = {
    "grid": "every head, one tile each",
    "head": "one head",
    "mean": "the mean over heads",
    "output": "the output tensor (or another tensor: see `tensor`)",
    "scores": "every head's pre-softmax scores (the grid with view='scores')",
    "rollout": "attention rollout over the layers (multi-layer models)",
}


@dataclass(frozen=True)
class ExportOptions:
    """What to export and how it looks. The colours are exactly the view's (see frames.ViewOptions)."""

    what: str = "grid"  # a key of WHATS
    view: str = "weights"  # for grid/head/mean: "weights" or "scores" (what="scores" implies scores)
    head: int = 0  # for what="head"
    scale: int | None = None  # pixels per cell (nearest-neighbour); None = auto (tiles >= ~240 px)
    title: bool = True  # the title lines and the tile titles
    colorbar: bool = True  # the colour bar with tick labels (and masked / no-key swatches)
    axis_labels: bool = True  # position ticks and "key position j" / "query position i"
    all_labels: bool = False  # a label for every token (cells made tall enough for one: auto scale), not every k-th
    colormap: str = colormaps.DEFAULT_SEQUENTIAL  # for weights
    diverging: str = colormaps.DEFAULT_DIVERGING  # for scores and tensors
    batch_index: int = 0
    shared_scale: bool = True  # one colour scale for all heads (else each head its own)
    tensor: str = "output"  # for what="output": a key of frames.TENSORS
    tensor_head: int = 0  # which head's q, k or v
    scale_mode: str = "linear"  # colour scale of the maps: a key of frames.SCALE_MODES
    all_layers: bool = False  # NPZ of a multi-layer model: also every layer's weights (layer_weights)
    step: int | None = None  # a generation after this many generated tokens (the window's Step slider, render
    # --step): images fade the later rows and mark the step's as the window does; an NPZ holds the maps as they
    # stood (core.runs.generation.at_step). None: every token

    @classmethod
    def from_view(cls, view: ViewOptions, **changes) -> ExportOptions:
        """The options that export what a view with these ViewOptions shows (plus changes)."""
        base = dict(view=view.view, colormap=view.colormap, diverging=view.diverging,
                    batch_index=view.batch_index, shared_scale=view.shared_scale, tensor=view.tensor,
                    tensor_head=view.tensor_head, scale_mode=view.scale_mode)
        return cls(**{**base, **changes})

    @property
    def map_view(self) -> str:
        return "scores" if self.what == "scores" else self.view

    def check(self, config: RunConfig) -> None:
        """Raise ValueError naming the option, the value and the allowed range."""
        for name in ("head", "tensor_head", "batch_index"):
            if not _whole(getattr(self, name)):
                raise ValueError(f"{name} = {getattr(self, name)!r}: must be a whole number")
        if self.what not in WHATS:
            raise ValueError(f"what = {self.what!r}: unknown; use one of {', '.join(WHATS)}")
        if self.view not in MAP_VIEWS:
            raise ValueError(f"view = {self.view!r}: unknown; use one of {', '.join(MAP_VIEWS)}")
        if self.scale_mode not in SCALE_MODES:
            raise ValueError(f"scale mode = {self.scale_mode!r}: unknown; use one of {', '.join(SCALE_MODES)}")
        if self.tensor not in TENSORS:
            raise ValueError(f"tensor = {self.tensor!r}: unknown; use one of {', '.join(TENSORS)}")
        for name in (self.colormap, self.diverging):
            if name not in colormaps.names():
                raise ValueError(f"colormap {name!r}: unknown; use one of {', '.join(colormaps.names())}")
        if self.what == "head" and not 0 <= self.head < config.heads:
            raise ValueError(f"head {self.head} does not exist: the run has {config.heads} head(s), "
                             f"use 0..{config.heads - 1}")
        if self.what == "output" and self.tensor in ("q", "k", "v") and not 0 <= self.tensor_head < config.heads:
            raise ValueError(f"tensor head {self.tensor_head} does not exist: use 0..{config.heads - 1}")
        if not 0 <= self.batch_index < config.batch:
            raise ValueError(f"batch index {self.batch_index} does not exist: the batch has {config.batch} "
                             f"item(s), use 0..{config.batch - 1}")
        if self.scale is not None and (not _whole(self.scale) or self.scale < 1):
            raise ValueError(f"scale = {self.scale!r}: must be a whole number of pixels per cell, 1 or more")

    def check_step(self, result: RunResult) -> None:
        """Raise ValueError when `step` is no step of `result`'s generation (or `result` is no generation)."""
        if self.step is None:
            return
        n = result.generated_count
        if not _whole(self.step):
            raise ValueError(f"step = {self.step!r}: must be a whole number")
        if not n:
            raise ValueError(f"step {self.step}: these maps are no generation (no generated tokens to step "
                             "through); leave the step out")
        if not 0 <= self.step <= n:
            raise ValueError(f"step {self.step} does not exist: this generation has steps 0..{n}")

    def check_held(self, result: RunResult) -> None:
        """Raise ValueError when `result` lacks the stage a figure of these options draws (maps given or read
        from a file hold their weights, and scores where given; a run keeps what it recorded)."""
        if self.what == "rollout":  # every layer's weights: its own message where they are missing
            return
        needed = self.tensor if self.what == "output" else view_stage(self.map_view)
        if needed not in result.stages:
            held = [v for v in MAP_VIEWS if view_stage(v) in result.stages]
            fix = "draw a map instead: what='grid'" if self.what == "output" else "draw one of those: " + \
                " or ".join(f"view={v!r}" for v in held)
            kind = "the tensor" if self.what == "output" else "the view"
            raise ValueError(f"{kind} {needed!r} is not held by these maps (they hold the views "
                             f"{', '.join(held)}); {fix}")


def _whole(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def format_of(path: str | os.PathLike) -> str:
    """'.png', '.svg' or '.npz' from the file name; ValueError naming the extension otherwise."""
    ext = Path(path).suffix.lower()
    if ext not in FORMATS:
        shown = f"extension {ext!r}" if ext else "no extension"
        raise ValueError(f"cannot export {os.fspath(path)!r}: {shown}; use one of {', '.join(FORMATS)}")
    return ext


def default_filename(result: RunResult, options: ExportOptions | None = None, ext: str = ".png") -> str:
    """A descriptive file name such as 'attnviz-causal-weights-grid.png'."""
    options = options or ExportOptions()
    what = options.what
    if what == "head":
        what = f"head{options.head}"
    elif what == "output":
        what = options.tensor
    view = "" if options.what in ("output", "scores") else f"-{options.map_view}"
    step = "" if options.step is None else f"-step{options.step}"
    return f"attnviz-{result.config.variant}{view}-{what}{step}{ext}"
