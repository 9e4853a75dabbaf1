"""The model view: every layer x head of a model as small tiles (bertviz's model view), the mean over
each layer's heads in the last column; an encoder-decoder's encoder, decoder and cross-attention stacks one
block under another. Click a tile to open that stack, layer and head in the head grid; Alt+click (or the
context menu) ablates the head or restores it. Ablated heads are drawn crossed; heads whose head-type
score passes its threshold carry a coloured badge (the legend under the view says which colour is which).

The mosaic is composed on a background thread (model_mosaic.py) once per model forward; the GUI
thread only swaps the finished picture in. During a long (pooled) forward the view fills in layer by layer
(show_partial): each finished layer's row of tiles is composed off the GUI thread as it comes, the layers
still running stay grey, and the whole forward's picture replaces them when it is done.
"""

from __future__ import annotations

import contextlib
import math
import threading

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt, Signal
from PySide6.QtGui import QAction, QFontMetricsF
from PySide6.QtWidgets import QFrame, QLabel, QMenu, QScrollArea, QVBoxLayout, QWidget

from attnviz.model_mosaic import model_mosaic, mosaic_columns, mosaic_rows
from attnviz.style import (
    BACKGROUND,
    HEAD_TYPE_COLOURS,
    HIGHLIGHT,
    LABEL_FILL,
    LIGHT_INK,
    OTHER_HEAD_TYPE,
    OUTLINE,
    PENDING_GREY,
    RED,
)
from attnviz.system import lower_priority
from attnviz.ui.maps.views import lean_axes
from attnviz.ui.widgets.basic import named

GAP = 2
STACK_LABELS = {"encoder": "enc", "decoder": "dec", "cross": "cross"}  # the row labels of an encoder-decoder
MIN_TILE, MAX_TILE = 12, 72
READABLE_TILE, SCROLL_TILE = 16, 28  # under this the view scrolls instead, at tiles of at most that
BADGE_COLOURS = HEAD_TYPE_COLOURS  # one colour per head type (badges and legend); others OTHER_HEAD_TYPE
BADGE_PX = 0.18  # a badge's side, as a fraction of the tile
BADGE_MAX = 10.0  # px: a badge marks, it does not cover the tile
LABEL_ROW_PX, LABEL_COL_PX = 14, 26  # screen room a layer label and a head label need
LABEL_PAD_PX = 3  # the least space between a head label and the "mean" column's
NO_MODEL = ("Random weights: no model behind these maps. Choose a trained toy or a pretrained model "
            "(Variant) to see all its layers and heads here.")


class ModelView(pg.GraphicsLayoutWidget):
    """Shows a ModelForward (core.backed); sigOpen(stack, layer, head) on a click (head -1: the layer's mean)."""

    sigOpen = Signal(str, int, int)  # (stack: "" for a model of one stack, layer, head)
    sigAblate = Signal(str, int, int)  # toggle one head's ablation (stack, layer, head)
    sigRestoreAll = Signal()
    sigHover = Signal(str)
    _sigMosaic = Signal(object, object, int)  # (source, (RGBA mosaic, [(stack, layers)]), tile px), from the composer
    _sigRows = Signal(int, int, object)  # (request id, first layer, RGBA rows of its tiles), a partial forward's

    def __init__(self, parent=None):
        super().__init__(parent)
        named(self, "modelView")
        self.setToolTip("Every layer (rows) and head (columns) of the model, the mean over each layer's heads on "
                        "the right; each tile scaled to its own maximum. Click a tile to open it; Alt+click or "
                        "right-click a head to ablate it (crossed) or restore it.")
        self.setBackground(BACKGROUND)
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
        self.marker.setPen(pg.mkPen(RED, width=2))
        self.plot.addItem(self.marker)
        # a white cross on a dark outline: visible on any colormap, and apart from the red layer marker
        self.crossShadow = pg.PlotDataItem(connect="pairs", pen=pg.mkPen(OUTLINE, width=4))
        self.crosses = pg.PlotDataItem(connect="pairs", pen=pg.mkPen(LIGHT_INK, width=2))
        self.plot.addItem(self.crossShadow)
        self.plot.addItem(self.crosses)
        # a dark outline: a grey badge stays visible on the grey of a causal tile's masked corner
        self.badges = pg.ScatterPlotItem(pxMode=False, symbol="s", pen=pg.mkPen(OUTLINE, width=1))
        self.plot.addItem(self.badges)
        self.ablated: set[tuple[int, int]] = set()  # (layer, head) of the shown stack
        # the Circuits panel's: every head's copying score (hover text) and the earlier heads the open head
        # composes with most, outlined with their kind and score ((layer, head, kind, score), circuits_view.py)
        self.copying: np.ndarray | None = None
        self.composition: tuple = ()
        self.compositionBoxes = pg.ScatterPlotItem(pxMode=False, symbol="s", brush=None,
                                                   pen=pg.mkPen(HIGHLIGHT, width=2))
        self.plot.addItem(self.compositionBoxes)
        self.compositionTexts: list[pg.TextItem] = []
        self.head_types = None  # explain.HeadScoreFrames of the shown model
        self.menu: QMenu | None = None
        self.source = None
        self.drawn = None  # the source whose tiles are on screen (show_source sets source before they arrive)
        self.layer = 0
        self.tile = 0
        self.colormap = "viridis"
        self._note_shown = False  # show_none's note is up
        self.partial: dict | None = None  # a forward filling in: rid, layers, heads, tile, picture, rows asked
        self.partial_shows = 0  # partial pictures swapped in (tests count them)
        self._sigMosaic.connect(self._mosaic_ready)
        self._sigRows.connect(self._rows_ready)
        self.scene().sigMouseClicked.connect(self._clicked)
        self.scene().sigMouseMoved.connect(self._hovered)

    def fit_tiles(self, layers: int, heads: int) -> int:
        """The tiles' side in screen pixels, the view sized for them: as large as the dock shows every layer at,
        up to MAX_TILE; where that is under READABLE_TILE (30 layers in a short dock: 5 px tiles, their badges a
        pixel), the width sets it (at most SCROLL_TILE) and the view grows taller than the dock, which scrolls."""
        room = self._room()
        w = (room.width() - 80) / (heads + 1.5)
        h = (room.height() - 40) / max(layers, 1)
        tile = int(max(MIN_TILE, min(MAX_TILE, w, h)))
        if tile >= READABLE_TILE or w < READABLE_TILE:
            self.setMinimumHeight(0)
            return tile
        tile = int(min(SCROLL_TILE, w))
        self.setMinimumHeight(layers * (tile + GAP) + 6 * GAP + 40)  # mosaic_rows' spacing and the axes
        return tile

    def _room(self):
        """The size the dock gives the view: its scroll area's viewport, where it sits in one."""
        parent = self.parentWidget()
        return parent.size() if isinstance(parent, QWidget) and parent.objectName() == "modelScrollViewport" \
            else self.size()

    def show_source(self, source, layer: int, colormap: str) -> None:
        """Show a model forward's layers, every stack of an encoder-decoder (composed off this thread
        unless it is already shown)."""
        self.layer = layer
        if source is self.source and colormap == self.colormap and self.partial is None:
            self._mark()
            return
        self.source, self.colormap = source, colormap
        self.partial = None  # its rows still being composed are dropped: the whole forward's picture comes
        self._note_shown = False  # a random result before this one's tiles arrive puts the note back
        heads = source.layer_weights.shape[2]
        layers = sum(lw.shape[0] for _, lw, _ in source.stacks) or source.layer_weights.shape[0]  # as blocks()
        tile = self.fit_tiles(layers, heads)

        def compose() -> None:
            lower_priority()  # like the worker: the GUI thread wins the CPU
            blocks = source.blocks()  # here, not on the GUI thread (benchmarks/README.md, Behind the code)
            mosaic = model_mosaic([(lw, allowed) for _, lw, allowed in blocks], tile, colormap, GAP)
            with contextlib.suppress(RuntimeError):  # the window closed meanwhile
                self._sigMosaic.emit(source, (mosaic, [(name, lw.shape[0]) for name, lw, _ in blocks]), tile)
        threading.Thread(target=compose, name="attnviz-model-view", daemon=True).start()

    # --- a long forward filling in, layer by layer ------------------------------------------------

    def show_partial(self, rid: int, layers, total: int, colormap: str) -> None:
        """The finished layers of request `rid`'s forward (layer_feed.Layer each) of `total`: their tiles
        composed off this thread and drawn as they come, the other layers grey."""
        heads = layers[0][0].shape[1]
        p = self.partial
        if p is None or p["rid"] != rid:
            tile = self.fit_tiles(total, heads)
            tops, columns = mosaic_rows([total], tile, GAP), mosaic_columns(heads, tile, GAP)
            picture = np.full((tops[-1] + tile, columns[-1] + tile, 4), 255, np.uint8)
            for y in tops:
                for x in columns:
                    picture[y:y + tile, x:x + tile, :3] = PENDING_GREY
            p = self.partial = dict(rid=rid, total=total, heads=heads, tile=tile, tops=tops, columns=columns,
                                    picture=picture, asked=0, colormap=colormap)
        new, start = layers[p["asked"]:], p["asked"]
        if not new:
            return
        p["asked"] = len(layers)
        tile = p["tile"]

        def compose() -> None:
            lower_priority()
            rows = [model_mosaic([(w[None], None if a is None else a[None])], tile, colormap, GAP) for w, a in new]
            with contextlib.suppress(RuntimeError):  # the window closed meanwhile
                self._sigRows.emit(rid, start, rows)
        threading.Thread(target=compose, name="attnviz-model-view-rows", daemon=True).start()

    def _rows_ready(self, rid: int, start: int, rows: list) -> None:
        p = self.partial
        if p is None or p["rid"] != rid:
            return  # the forward is done (its whole picture is on its way) or another began
        tile = p["tile"]
        for n, row in enumerate(rows):
            y = p["tops"][start + n]
            p["picture"][y:y + tile, :row.shape[1]] = row[:tile]
        self.drawn, self.tile = None, 0  # no clicks, hover or overlays on tiles of a forward still running
        self._note_shown = False
        self.plot.setTitle(None)
        for axis in ("left", "top"):
            self.plot.showAxis(axis)
        self.image.setImage(p["picture"], autoLevels=False, levels=(0, 255))
        self.image.setRect(QRectF(0, 0, p["picture"].shape[1], p["picture"].shape[0]))
        self.marker.setRect(QRectF())
        self.crosses.setData([], [])
        self.crossShadow.setData([], [])
        self.badges.setData([])
        self._size = p["picture"].shape[:2]
        self._fit()
        self._set_ticks([f"L{r}" for r in range(len(p["tops"]))], p["tops"], p["columns"], tile)
        self.partial_shows += 1

    def end_partial(self) -> None:
        """The forward filling in ended with no result (cancelled, failed): the last whole picture again."""
        if self.partial is None:
            return
        self.partial = None
        source, self.source = self.source, None
        if source is None:
            self._note_shown = False
            self.show_none()
        else:
            self.show_source(source, self.layer, self.colormap)

    def show_none(self) -> None:
        """No model behind the maps shown (random weights): an earlier model's tiles go, a note says why."""
        self.partial = None
        if self._note_shown:
            return
        self._note_shown = True
        self.source, self.tile, self._size = None, 0, None
        self.setMinimumHeight(0)  # the note fits the dock: no scrolling
        self.image.clear()
        self.marker.setRect(QRectF())
        self.crosses.setData([], [])
        self.crossShadow.setData([], [])
        self.badges.setData([])
        for axis in ("left", "top"):
            self.plot.getAxis(axis).setTicks([[]])
            self.plot.hideAxis(axis)
        self.plot.setTitle(NO_MODEL, size="9pt")

    def _mosaic_ready(self, source, composed: tuple[np.ndarray, list[tuple[str, int]]], tile: int) -> None:
        if source is not self.source:
            return  # a newer forward is on its way
        mosaic, blocks = composed  # blocks: (stack, layers) of source.blocks(), worked out off this thread
        self.plot.setTitle(None)
        for axis in ("left", "top"):
            self.plot.showAxis(axis)
        heads = source.layer_weights.shape[2]
        self.tile, self.drawn = tile, source
        self.rows = [(name, r) for name, layers in blocks for r in range(layers)]  # (stack, layer) per row
        self.tops = mosaic_rows([layers for _, layers in blocks], tile, GAP)
        self.image.setImage(mosaic, autoLevels=False, levels=(0, 255))
        self.image.setRect(QRectF(0, 0, mosaic.shape[1], mosaic.shape[0]))
        self.columns = mosaic_columns(heads, tile, GAP)
        several = len(blocks) > 1
        labels = [f"{STACK_LABELS.get(name, name)} L{r}" if several else f"L{r}" for name, r in self.rows]
        self._size = mosaic.shape[:2]
        self._fit()
        self._set_ticks(labels, self.tops, self.columns, tile)
        self._mark()
        self._draw_overlays()

    def _set_ticks(self, rows: list[str], tops: list[int], columns: list[int], tile: int) -> None:
        """Layer labels on the left and head labels on top, every n-th where the tiles are too small for all
        (30 layers in a short dock: 12 px tiles under 14 px labels ran into each other)."""
        scale = self.plot.getViewBox().viewPixelSize()[0] or 1.0  # view units per screen pixel
        step_y = max(1, math.ceil(LABEL_ROW_PX * scale / (tile + GAP)))
        step_x = max(1, math.ceil(LABEL_COL_PX * scale / (tile + GAP)))
        left = [(y + tile / 2, text) for n, (y, text) in enumerate(zip(tops, rows)) if n % step_y == 0]
        mean_x = columns[-1] + tile / 2
        axis = self.plot.getAxis("top")
        width = QFontMetricsF(axis.style.get("tickFont") or axis.font()).horizontalAdvance
        # a head label's centre at least this far from "mean"'s, as the two labels are drawn (a fixed guess of
        # their widths dropped H11 of a 12-head model beside "mean")
        room = (width(f"H{len(columns) - 2}") + width("mean")) / 2 + LABEL_PAD_PX
        top = [(x + tile / 2, f"H{c}") for c, x in enumerate(columns[:-1])
               if c % step_x == 0 and mean_x - (x + tile / 2) >= room * scale]
        self.plot.getAxis("left").setTicks([left])
        self.plot.getAxis("top").setTicks([top + [(mean_x, "mean")]])

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
        hit = self.tile_at(event.scenePos())
        if hit is None:
            return
        if event.button() == Qt.LeftButton and event.modifiers() & Qt.AltModifier:
            if hit[2] >= 0:
                self.sigAblate.emit(*hit)
        elif event.button() == Qt.LeftButton:
            self.sigOpen.emit(*hit)
        elif event.button() == Qt.RightButton and hit[2] >= 0:
            self.context_menu(hit).popup(event.screenPos().toPoint())

    def context_menu(self, hit: tuple[str, int, int]) -> QMenu:
        """Ablate or restore the head under the mouse; restore every head."""
        stack, layer, head = hit
        self.menu = QMenu(self)
        ablated = stack == self.source.stack and (layer, head) in self.ablated
        toggle = QAction(f"{'Restore' if ablated else 'Ablate'} L{layer} H{head}", self.menu)
        toggle.setToolTip("Alt+click does the same")
        toggle.triggered.connect(lambda: self.sigAblate.emit(stack, layer, head))
        self.menu.addAction(toggle)
        restore = QAction("Restore all heads", self.menu)
        restore.setEnabled(bool(self.ablated))
        restore.triggered.connect(self.sigRestoreAll)
        self.menu.addAction(restore)
        return self.menu

    def set_ablated(self, heads: set[tuple[int, int]]) -> None:
        """The heads of the shown stack that the shown result ran without (drawn crossed)."""
        if heads != self.ablated:
            self.ablated = set(heads)
            self._draw_overlays()

    def set_circuits(self, copying: np.ndarray | None, composition: tuple) -> None:
        """Every head's copying score (None: none) and the composition marks of the open head."""
        self.copying, self.composition = copying, tuple(composition)
        self._draw_overlays()

    def _draw_composition(self) -> None:
        for item in self.compositionTexts:
            self.plot.removeItem(item)
        self.compositionTexts, spots = [], []
        for layer, head, kind, score in self.composition:
            at = self._tile_origin(layer, head)
            if at is None:
                continue
            spots.append({"pos": (at[0] + self.tile / 2, at[1] + self.tile / 2), "size": self.tile})
            text = pg.TextItem(f"{kind} {score:.2f}", color=HIGHLIGHT, fill=pg.mkBrush(*LABEL_FILL),
                               anchor=(0, 1))
            text.setPos(at[0], at[1] + self.tile)
            self.plot.addItem(text)
            self.compositionTexts.append(text)
        self.compositionBoxes.setData(spots)

    def set_head_types(self, frames) -> None:
        """explain.HeadScoreFrames of the shown model (None: no badges)."""
        if frames is not self.head_types:
            self.head_types = frames
            self._draw_overlays()

    def _tile_origin(self, layer: int, head: int) -> tuple[float, float] | None:
        if self.source is None or not self.tile or (self.source.stack, layer) not in self.rows \
                or head >= len(self.columns) - 1:
            return None  # not a tile of those on screen (another model's, while this one's are composed)
        return self.columns[head], self.tops[self.rows.index((self.source.stack, layer))]

    def _draw_overlays(self) -> None:
        """A cross over each ablated head; one small square per head type passed, along the tile's top."""
        xs, ys = [], []
        for layer, head in sorted(self.ablated):
            at = self._tile_origin(layer, head) if head < len(getattr(self, "columns", [])) - 1 else None
            if at is not None:
                x, y, t = at[0], at[1], self.tile
                xs += [x, x + t, x, x + t]
                ys += [y, y + t, y + t, y]
        self.crosses.setData(xs, ys)
        self.crossShadow.setData(xs, ys)
        self.badges.setData(self._badge_spots())
        self._draw_composition()

    def _badge_spots(self) -> list[dict]:
        frames = self.head_types
        if frames is None or frames.message or not self.tile:
            return []
        size = min(max(self.tile * BADGE_PX, 3.0), BADGE_MAX)
        spots, placed = [], {}  # badges per tile so far: each tile's badges side by side from its top right
        for name, passed in frames.passed.items():
            brush = pg.mkBrush(BADGE_COLOURS.get(name, OTHER_HEAD_TYPE))
            for layer, head in zip(*np.nonzero(passed)):
                at = self._tile_origin(int(layer), int(head))
                if at is None or head >= len(self.columns) - 1:
                    continue
                k = placed[layer, head] = placed.get((layer, head), -1) + 1
                x = at[0] + self.tile - size * (k + 0.5) - 1.5 * k - 1
                spots.append({"pos": (x, at[1] + size / 2 + 1), "size": size, "brush": brush})
        return spots

    def types_of(self, layer: int, head: int) -> list[str]:
        """The head types whose badge the tile carries."""
        frames = self.head_types
        if frames is None or frames.message:
            return []
        return [name for name, passed in frames.passed.items()
                if layer < passed.shape[0] and head < passed.shape[1] and passed[layer, head]]

    def _hovered(self, pos) -> None:
        hit = self.tile_at(pos)
        if hit is not None:
            stack, layer, head = hit
            where = f"{STACK_LABELS.get(stack, stack)} " if stack else ""
            text = f"{where}L{layer} {'mean over heads' if head < 0 else f'H{head}'} · click to open"
            if head >= 0:
                text += " · Alt+click to " + ("restore" if (layer, head) in self.ablated else "ablate")
                text += self._scores_text(layer, head)
                c = self.copying
                if c is not None and layer < c.shape[0] and head < c.shape[1]:
                    text += f" · copying {c[layer, head]:.2f}"
            self.sigHover.emit(text)

    def _scores_text(self, layer: int, head: int) -> str:
        frames = self.head_types
        if frames is None or frames.message:
            return ""
        parts = [f"{frames.types.get(n, (n, ''))[0]} {v[layer, head]:.2f}" for n, v in frames.scores.items()
                 if layer < v.shape[0] and head < v.shape[1]]
        return " · head types: " + ", ".join(parts) if parts else ""


class ModelPanel(QWidget):
    """The model view with the head-type legend under it (the model dock's widget)."""

    def __init__(self, view: ModelView, parent: QWidget | None = None):
        super().__init__(parent)
        self.view = view
        self.legend = named(QLabel(), "headTypeLegend")
        self.legend.setTextFormat(Qt.RichText)
        self.legend.setWordWrap(True)
        self.legend.setToolTip("Badges on the tiles: the head types whose score passes its threshold, measured "
                               "on a probe (random tokens repeated twice)")
        policy = self.legend.sizePolicy()
        policy.setRetainSizeWhenHidden(True)  # hidden without a model: the tiles' room stays as it will be with one
        self.legend.setSizePolicy(policy)
        self.scroll = named(QScrollArea(), "modelScroll")  # a model too deep for the dock scrolls (fit_tiles)
        self.scroll.setWidgetResizable(True)
        self.scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.scroll.setFrameShape(QFrame.NoFrame)
        self.scroll.viewport().setObjectName("modelScrollViewport")
        self.scroll.setWidget(view)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(self.scroll, 1)
        layout.addWidget(self.legend)
        self.set_legend(None)

    def set_legend(self, frames) -> None:
        """The badge colours and the thresholds; the crossed-tile key."""
        cross = "<b>✕</b> ablated (Alt+click a head; right-click: menu)"
        if frames is None or frames.message:
            note = "" if frames is None else f" · {frames.message}"
            self.legend.setText(f"<small>{cross}{note}</small>")
            return
        items = [f"<span style='color:{BADGE_COLOURS.get(n, OTHER_HEAD_TYPE)}'>■</span> "
                 f"{frames.types.get(n, (n, ''))[0]} ≥ {frames.thresholds.get(n, 0):.2g}" for n in frames.passed]
        self.legend.setText("<small>" + " &nbsp; ".join(items + [cross]) + "</small>")


def ablated_heads(specs, layers: int, heads: int) -> set[tuple[int, int]]:
    """(layer, head) pairs named by "layer.head" / "layer.*" specs; malformed or out-of-range ones are skipped
    (the config's own validation reports them)."""
    out = set()
    for spec in specs:
        layer, _, head = str(spec).strip().partition(".")
        if not layer.isdigit() or not (head == "*" or head.isdigit()) or int(layer) >= layers:
            continue
        out |= {(int(layer), h) for h in range(heads)} if head == "*" else \
            ({(int(layer), int(head))} if int(head) < heads else set())
    return out


def toggle_head(specs, layer: int, head: int, heads: int) -> tuple[str, ...]:
    """The ablation specs with one head switched: added, or removed (a "layer.*" becomes its other heads)."""
    specs = [str(s).strip() for s in specs if str(s).strip()]
    whole = f"{layer}.*"
    if whole in specs:
        i = specs.index(whole)
        return tuple(specs[:i] + [f"{layer}.{h}" for h in range(heads) if h != head] + specs[i + 1:])
    named_ = [s for s in specs if ablated_heads([s], layer + 1, heads) == {(layer, head)}]
    if named_:
        return tuple(s for s in specs if s not in named_)
    return (*specs, f"{layer}.{head}")
