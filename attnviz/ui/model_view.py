"""The model view: every layer x head of a model as small tiles (bertviz's model view), the mean over
each layer's heads in the last column; an encoder-decoder's encoder, decoder and cross-attention stacks one
block under another. Click a tile to open that stack, layer and head in the head grid.

The mosaic is composed on a background thread (frames.model_mosaic) once per model forward; the GUI
thread only swaps the finished picture in.
"""

from __future__ import annotations

import contextlib
import threading

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt, Signal

from ..frames import model_mosaic, mosaic_columns, mosaic_rows
from .panel import named
from .views import lean_axes
from .worker import lower_priority

GAP = 2
STACK_LABELS = {"encoder": "enc", "decoder": "dec", "cross": "cross"}  # the row labels of an encoder-decoder
MIN_TILE, MAX_TILE = 12, 72
NO_MODEL = ("Random weights: no model behind these maps. Choose a trained toy or a pretrained model "
            "(Variant) to see all its layers and heads here.")


class ModelView(pg.GraphicsLayoutWidget):
    """Shows a ModelForward (core.backed); sigOpen(stack, layer, head) on a click (head -1: the layer's mean)."""

    sigOpen = Signal(str, int, int)  # (stack: "" for a model of one stack, layer, head)
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
        """Show a model forward's layers, every stack of an encoder-decoder (composed off this thread
        unless it is already shown)."""
        self.layer = layer
        if source is self.source and colormap == self.colormap:
            self._mark()
            return
        self.source, self.colormap = source, colormap
        self._note_shown = False  # a random result before this one's tiles arrive puts the note back
        blocks = source.blocks()
        heads = source.layer_weights.shape[2]
        tile = self.tile_px(sum(lw.shape[0] for _, lw, _ in blocks), heads)

        def compose() -> None:
            lower_priority()  # like the worker: the GUI thread wins the CPU
            mosaic = model_mosaic([(lw, allowed) for _, lw, allowed in blocks], tile, colormap, GAP)
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
        blocks = source.blocks()
        heads = source.layer_weights.shape[2]
        self.tile = tile
        self.rows = [(name, r) for name, lw, _ in blocks for r in range(lw.shape[0])]  # (stack, layer) per row
        self.tops = mosaic_rows([lw.shape[0] for _, lw, _ in blocks], tile, GAP)
        self.image.setImage(mosaic, autoLevels=False, levels=(0, 255))
        self.image.setRect(QRectF(0, 0, mosaic.shape[1], mosaic.shape[0]))
        self.columns = mosaic_columns(heads, tile, GAP)
        several = len(blocks) > 1
        labels = [f"{STACK_LABELS.get(name, name)} L{r}" if several else f"L{r}" for name, r in self.rows]
        self.plot.getAxis("left").setTicks([[(y + tile / 2, text) for y, text in zip(self.tops, labels)]])
        top = [(x + tile / 2, f"H{c}") for c, x in enumerate(self.columns[:-1])]
        self.plot.getAxis("top").setTicks([top + [(self.columns[-1] + tile / 2, "mean")]])
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
        if not self.tile or self.source is None:
            return
        row = self.rows.index((self.source.stack, self.layer)) if (self.source.stack, self.layer) in self.rows else 0
        width = self.columns[-1] + self.tile
        self.marker.setRect(QRectF(-1, self.tops[row] - 1, width + 2, self.tile + 2))

    def tile_at(self, scene_pos) -> tuple[str, int, int] | None:
        """(stack, layer, head) under a scene position; head -1 for the mean column; stack "" for a
        model of one stack."""
        if self.source is None or not self.tile:
            return None
        p = self.plot.getViewBox().mapSceneToView(scene_pos)
        heads = self.source.layer_weights.shape[2]
        row = next((r for r, y in enumerate(self.tops) if y <= p.y() < y + self.tile), None)
        col = next((c for c, x in enumerate(self.columns) if x <= p.x() < x + self.tile), None)
        if row is None or col is None:
            return None
        stack, layer = self.rows[row]
        return stack, layer, (-1 if col == heads else col)

    def _clicked(self, event) -> None:
        if event.button() == Qt.LeftButton:
            hit = self.tile_at(event.scenePos())
            if hit is not None:
                self.sigOpen.emit(*hit)

    def _hovered(self, pos) -> None:
        hit = self.tile_at(pos)
        if hit is not None:
            stack, layer, head = hit
            where = f"{STACK_LABELS.get(stack, stack)} " if stack else ""
            self.sigHover.emit(f"{where}L{layer} {'mean over heads' if head < 0 else f'H{head}'} · click to open")
