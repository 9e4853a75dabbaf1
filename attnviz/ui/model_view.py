"""The model view: every layer x head of a model as small tiles (bertviz's model view), the mean over
each layer's heads in the last column. Click a tile to open that layer and head in the head grid.

The mosaic is composed on a background thread (frames.model_mosaic) once per model forward; the GUI
thread only swaps the finished picture in.
"""

from __future__ import annotations

import contextlib
import threading

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt, Signal

from ..frames import model_mosaic, mosaic_columns
from .panel import named
from .views import lean_axes
from .worker import lower_priority

GAP = 2
MIN_TILE, MAX_TILE = 12, 72
NO_MODEL = ("Random weights: no model behind these maps. Choose a trained toy or a pretrained model "
            "(Variant) to see all its layers and heads here.")


class ModelView(pg.GraphicsLayoutWidget):
    """Shows a ModelForward (core.backed); sigOpen(layer, head) on a click (head -1: the layer's mean)."""

    sigOpen = Signal(int, int)
    sigHover = Signal(str)
    _sigMosaic = Signal(object, object, int)  # (source, RGBA mosaic, tile px), from the composing thread

    def __init__(self, parent=None):
        super().__init__(parent)
        named(self, "modelView")
        self.setToolTip("Every layer (rows) and head (columns) of the model, the mean over each layer's heads on "
                        "the right; each tile scaled to its own maximum. Click a tile to open it.")
        self.setBackground("w")
        self.plot = self.addPlot()
        self.plot.setMenuEnabled(False)
        self.plot.setMouseEnabled(False, False)
        self.plot.hideButtons()
        self.plot.invertY(True)
        self.plot.showAxis("top")
        self.plot.hideAxis("bottom")
        self.plot.getViewBox().setDefaultPadding(0)
        lean_axes(self.plot)
        self.image = pg.ImageItem(axisOrder="row-major")
        self.plot.addItem(self.image)
        self.marker = pg.QtWidgets.QGraphicsRectItem()
        self.marker.setPen(pg.mkPen("#d0312d", width=2))
        self.plot.addItem(self.marker)
        self.source = None
        self.layer = 0
        self.tile = 0
        self.colormap = "viridis"
        self._note_shown = False  # show_none's note is up
        self._sigMosaic.connect(self._mosaic_ready)
        self.scene().sigMouseClicked.connect(self._clicked)
        self.scene().sigMouseMoved.connect(self._hovered)

    def tile_px(self, layers: int, heads: int) -> int:
        w = (self.width() - 80) / (heads + 1.5)
        h = (self.height() - 40) / max(layers, 1)
        return int(max(MIN_TILE, min(MAX_TILE, w, h)))

    def show_source(self, source, layer: int, colormap: str) -> None:
        """Show a model forward's layers (composed off this thread unless it is already shown)."""
        self.layer = layer
        if source is self.source and colormap == self.colormap:
            self._mark()
            return
        self.source, self.colormap = source, colormap
        self._note_shown = False  # a random result before this one's tiles arrive puts the note back
        lw = source.layer_weights
        tile = self.tile_px(lw.shape[0], lw.shape[2])
        allowed = source.masks[layer][0] if not source.masks[layer].all() else None

        def compose() -> None:
            lower_priority()  # like the worker: the GUI thread wins the CPU
            mosaic = model_mosaic(lw, allowed, tile, colormap, GAP)
            with contextlib.suppress(RuntimeError):  # the window closed meanwhile
                self._sigMosaic.emit(source, mosaic, tile)
        threading.Thread(target=compose, name="attnviz-model-view", daemon=True).start()

    def show_none(self) -> None:
        """No model behind the maps shown (random weights): an earlier model's tiles go, a note says why."""
        if self._note_shown:
            return
        self._note_shown = True
        self.source, self.tile, self._size = None, 0, None
        self.image.clear()
        self.marker.setRect(QRectF())
        for axis in ("left", "top"):
            self.plot.getAxis(axis).setTicks([[]])
            self.plot.hideAxis(axis)
        self.plot.setTitle(NO_MODEL, size="9pt")

    def _mosaic_ready(self, source, mosaic: np.ndarray, tile: int) -> None:
        if source is not self.source:
            return  # a newer forward is on its way
        self.plot.setTitle(None)
        for axis in ("left", "top"):
            self.plot.showAxis(axis)
        layers, _, heads = source.layer_weights.shape[:3]
        self.tile = mosaic.shape[0] // layers if layers == 1 else (mosaic.shape[0] + GAP) // layers - GAP
        self.image.setImage(mosaic, autoLevels=False, levels=(0, 255))
        self.image.setRect(QRectF(0, 0, mosaic.shape[1], mosaic.shape[0]))
        step = self.tile + GAP
        self.columns = mosaic_columns(heads, self.tile, GAP)
        self.plot.getAxis("left").setTicks([[(r * step + self.tile / 2, f"L{r}") for r in range(layers)]])
        top = [(x + self.tile / 2, f"H{c}") for c, x in enumerate(self.columns[:-1])]
        self.plot.getAxis("top").setTicks([top + [(self.columns[-1] + self.tile / 2, "mean")]])
        self._size = mosaic.shape[:2]
        self._fit()
        self._mark()

    def _fit(self) -> None:
        """Square pixels, the mosaic at the top left (not centred far from its layer labels)."""
        if not getattr(self, "_size", None):
            return
        vb = self.plot.getViewBox()
        rows, cols = self._size
        w, h = max(vb.width(), 1.0), max(vb.height(), 1.0)
        scale = min(w / (cols + 4), h / (rows + 4))
        self.plot.setRange(xRange=(-2, w / scale - 2), yRange=(-2, h / scale - 2), padding=0)

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        self._fit()

    def _mark(self) -> None:
        if not self.tile:
            return
        step = self.tile + GAP
        width = self.columns[-1] + self.tile
        self.marker.setRect(QRectF(-1, self.layer * step - 1, width + 2, self.tile + 2))

    def tile_at(self, scene_pos) -> tuple[int, int] | None:
        """(layer, head) under a scene position; head -1 for the mean column."""
        if self.source is None or not self.tile:
            return None
        p = self.plot.getViewBox().mapSceneToView(scene_pos)
        layers, _, heads = self.source.layer_weights.shape[:3]
        row = int(p.y() // (self.tile + GAP))
        col = next((c for c, x in enumerate(self.columns) if x <= p.x() < x + self.tile), None)
        if col is None or not 0 <= row < layers or p.y() % (self.tile + GAP) >= self.tile:
            return None
        return row, (-1 if col == heads else col)

    def _clicked(self, event) -> None:
        if event.button() == Qt.LeftButton:
            hit = self.tile_at(event.scenePos())
            if hit is not None:
                self.sigOpen.emit(*hit)

    def _hovered(self, pos) -> None:
        hit = self.tile_at(pos)
        if hit is not None:
            layer, head = hit
            self.sigHover.emit(f"L{layer} {'mean over heads' if head < 0 else f'H{head}'} · click to open")
