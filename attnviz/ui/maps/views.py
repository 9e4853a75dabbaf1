"""The heatmap views: the per-head grid with its colour bar, and the output tensor view.

They only swap in display-ready images prepared by the worker (frames.py): the grid's maps as ARGB
pixels (mosaic.py), the focused map and the tensor as uint8 through a 256-entry LUT (Qt's Indexed8
fast path). Hover reads exact values from the full-resolution result. Their parts (one map, the colour
bar, image and axis helpers) are in heatmap.py.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtWidgets import QApplication, QGraphicsRectItem

from attnviz import colormaps
from attnviz.core import RunResult
from attnviz.core.analysis.cells import cell_path
from attnviz.core.kernel.stages import BY_NAME
from attnviz.frames import Frames, head_title, not_kept_note, tensor_data, view_stage
from attnviz.models.tokens import display
from attnviz.style import BACKGROUND, STALE_OPACITY, number
from attnviz.ui.maps.heatmap import (
    TICK_TEXT_PX,
    ColourBar,
    CountsPaints,
    image_item,
    lean_axes,
    set_heat_image,
    settle_before_paint,
)
from attnviz.ui.maps.labels import widest_label_px
from attnviz.ui.maps.mosaic import POSITION_AXES, ROW_MARK, TOKEN_AXES, MapTile, Mosaic, image_rects
from attnviz.ui.maps.zoom import ZoomFrames, drag_region
from attnviz.ui.widgets.basic import OverlayBanner, named

MAX_TILES = 64  # more heads than this are listed, not drawn (a 1,000-tile grid is unreadable)


def _swatch_html(lut: np.ndarray) -> str:
    def sw(rgb, text):
        return f'<span style="color: rgb{tuple(int(c) for c in rgb[:3])}">&#9632;</span> {text}'

    return sw(lut[colormaps.MASKED_INDEX], "masked") + "&nbsp;&nbsp;" + sw(lut[colormaps.NAN_INDEX], "no key")


@functools.lru_cache(maxsize=8)
def positions(n: int) -> tuple[str, ...]:
    """Position labels "0" .. "n-1" (a focused map of a run without tokens)."""
    return tuple(str(i) for i in range(n))


@functools.lru_cache(maxsize=8)
def display_labels(axis: tuple[str, ...]) -> tuple[str, ...]:
    """One axis's token labels as drawn (a space or newline token made visible)."""
    return tuple(display(t) for t in axis)


def axis_labels(result: RunResult) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """The grid's (query, key) labels of a token-labelled result, else None."""
    axes = result.axis_tokens()
    return None if axes is None else (display_labels(axes[0]), display_labels(axes[1]))


def prepare_labels(result: RunResult) -> None:
    """On the worker (Worker.prepare), before a new result goes to the window: its labels and their widths,
    which the grid's swap then finds made (a call per token on the GUI thread: benchmarks/README.md, Behind the
    code)."""
    for labels in axis_labels(result) or ():
        widest_label_px(labels)


class HeadGrid(CountsPaints, pg.GraphicsLayoutWidget):
    """The maps of the shown batch item, one per head (plus an optional mean), and a colour bar.

    The grid is drawn by one Mosaic item; a focused head (and a zoomed block) too, with square cells and
    labels (the positions where the run has no tokens) of every row and column whose label fits."""

    sigHover = Signal(str)
    sigFocusChanged = Signal()
    sigResized = Signal()
    sigRowClicked = Signal(int)  # a query row clicked while row_picking (token focus)
    sigZoom = Signal(object)  # a block dragged on a map: (q0, q1, k0, k1), token indices, ends exclusive

    def __init__(self, parent=None):
        super().__init__(parent)
        named(self, "headGrid")
        self.setToolTip("Attention maps: rows are query positions (top to bottom), columns key positions. "
                        "Hover a cell for its values; click a head to show it large (click again or Esc for the grid). "
                        "Drag a rectangle on a map to see that block exactly, every head, with its tokens "
                        "(Esc or Back: the full maps).")
        self.setBackground(BACKGROUND)
        self.tiles: list[MapTile] = []  # what is shown, in order
        self.mosaic = Mosaic()
        self.ci.addItem(self.mosaic, row=0, col=0)
        self.bar = ColourBar()
        self.ci.addItem(self.bar, row=0, col=1)
        self.legend = pg.LabelItem(justify="right", size="8pt")
        self.ci.addItem(self.legend, row=1, col=0, colspan=2)
        self.focus: int | None = None  # a head index, -1 for the mean, None for the grid
        self.row_picking = False  # a click picks a query row (token focus) instead of focusing a head
        self.show_mean = False
        self.result: RunResult | None = None
        self.frames: Frames | None = None
        self.stale = False
        self.zoom: ZoomFrames | None = None  # a zoomed block shown in place of the maps
        self._press: QPointF | None = None  # where a left-button press began (scene), while it is down
        self._dragging = False  # the press moved far enough to be a drag (a zoom), not a click
        self.band = QGraphicsRectItem()  # the rectangle being dragged
        self.band.setPen(pg.mkPen(ROW_MARK, width=1.5, style=Qt.DashLine))
        self.band.setZValue(1e6)
        self.band.hide()
        self.scene().addItem(self.band)
        self.scene().sigMouseMoved.connect(self._hovered)
        self.scene().sigMouseClicked.connect(self._clicked)

    def set_generation(self, prompt_length: int | None, step_row: int | None) -> None:
        """Mark a generation's prompt / generated boundary and its chosen step (None: no mark) in every map."""
        self.mosaic.set_generation(prompt_length, step_row)

    @property
    def tile_heads(self) -> list[int]:
        """Head index per shown map; -1 = the mean."""
        return [t.head for t in self.tiles]

    # --- layout ------------------------------------------------------------------------------

    def _wanted_heads(self, heads: int) -> list[int]:
        if self.focus is not None:
            return [self.focus]
        shown = list(range(min(heads, MAX_TILES)))
        return shown + ([-1] if self.show_mean else [])

    def _map_area(self) -> QRectF:
        """The mosaic's area; before the first layout, the widget less the colour bar and legend."""
        rect = self.mosaic.rect()
        if rect.width() < 2 or rect.height() < 2:
            rect = QRectF(0, 0, max(self.width() - 90, 50), max(self.height() - 30, 50))
        return rect

    def tile_pixels(self, rows: int, cols: int, heads: int) -> tuple[int, int]:
        """On-screen size (rows, cols) of one map, in device pixels: what the worker pools to."""
        area = self.mosaic.tile_area(self._map_area())
        size = image_rects(len(self._wanted_heads(heads)), rows, cols, area, self.focus is not None)[0].size()
        ratio = self.devicePixelRatioF()
        return max(int(size.height() * ratio), 16), max(int(size.width() * ratio), 16)

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)  # the mosaic re-places its maps when the layout resizes it
        if getattr(self, "frames", None) is not None and self.result is not None:
            self.sigResized.emit()  # re-pool to the new size

    # --- content -----------------------------------------------------------------------------

    def show_frames(self, result: RunResult, frames: Frames, zoom: ZoomFrames | None = None) -> None:
        """Show a result's maps; with `zoom`, that block of them instead (every head, exact, its tokens)."""
        self.result, self.frames, self.zoom = result, frames, zoom
        self.mosaic.message = ""  # maps now: no "opening" line
        if zoom is not None:
            self._show_zoom(zoom, result.config)
            return
        c = result.config
        maps = len(frames.heads)  # heads, or 2 maps per head before differential attention combines them
        if self.focus is not None and self.focus >= maps:
            self.set_focus(None)  # that head is gone: the grid, re-pooled for its tiles (a new request)
        shared = frames.options.shared_scale
        self.tiles = []
        for h in self._wanted_heads(maps):
            heat = frames.mean if h == -1 else frames.heads[h]
            if heat is not None:  # None: the mean was not rendered for this request
                lo, hi = heat.levels
                self.tiles.append(MapTile(h, heat, heat.title + ("" if shared else f" ({number(lo)}..{number(hi)})")))
        labels, names = axis_labels(result), TOKEN_AXES
        focused = self.focus is not None
        if focused and labels is None:  # a map shown large has its positions on the axes
            labels, names = (positions(c.seq_q), positions(c.lkv)), POSITION_AXES
        self.mosaic.set_tiles(self.tiles, (c.seq_q, c.lkv), labels, focused, names)
        self._show_bar(frames, c)
        focus = frames.extras.get("focus")  # token focus: its query row outlined in every map
        self.mark_row(focus.row if focus is not None else None)
        more = f"showing {MAX_TILES} of {maps} maps · " if maps > MAX_TILES and self.focus is None else ""
        legend = more + _swatch_html(frames.lut)
        if legend != self.legend.text:  # re-rendered as HTML: only on a change
            self.legend.setText(legend)
        settle_before_paint(self)
        self.mark_shown()

    def _show_zoom(self, zoom: ZoomFrames, c) -> None:
        self.tiles = [MapTile(h, heat, heat.title) for h, heat in enumerate(zoom.heads[:MAX_TILES])]
        names = TOKEN_AXES if self.result.axis_tokens() is not None else POSITION_AXES
        self.mosaic.set_tiles(self.tiles, zoom.values.shape[1:], zoom.tokens, True, names)
        self._show_bar(zoom, c)
        self.mark_row(None)
        legend = f"{zoom.title} · " + _swatch_html(zoom.lut)
        if legend != self.legend.text:
            self.legend.setText(legend)
        settle_before_paint(self)
        self.mark_shown()

    def zoom_pixels(self, rows: int, cols: int, heads: int) -> tuple[int, int]:
        """On-screen size (rows, cols) in device pixels of one map of a zoomed block (every head in the grid)."""
        size = image_rects(min(heads, MAX_TILES), rows, cols, self.mosaic.tile_area(self._map_area()), True)[0].size()
        ratio = self.devicePixelRatioF()
        return max(int(size.height() * ratio), 16), max(int(size.width() * ratio), 16)

    def _show_bar(self, frames: Frames, c) -> None:
        view = frames.options.view
        what = "weights after dropout" if view == "weights" and c.dropout_active else view
        if frames.scale.unit:
            what = f"{what} {frames.scale.unit}"
        if frames.options.shared_scale:
            self.bar.show_levels(frames.lut, frames.levels, what, ticks=frames.scale.ticks)
        else:
            span = (-1.0, 1.0) if frames.signed else (0.0, 1.0)
            self.bar.show_levels(frames.lut, span, f"{what}, per-head scale", relative=True)

    def set_stale(self, stale: bool) -> None:
        self.stale = stale
        self.mosaic.set_stale(stale)

    def set_message(self, text: str) -> None:
        """A line in the middle of the grid while it has no maps (a model opening at launch); "" for none."""
        self.mosaic.set_message(text)

    def set_focus(self, head: int | None) -> None:
        if head == -1 and not self.show_mean:
            head = None  # no mean tile to enlarge: the grid (an empty view otherwise)
        if head != self.focus:
            self.focus = head
            self.sigFocusChanged.emit()

    def mark_row(self, row: int | None) -> None:
        """Outline query row `row` in every map (token focus); None removes the outline."""
        self.mosaic.set_row(row)

    # --- interaction -------------------------------------------------------------------------

    def _tile_at(self, pos: QPointF) -> tuple[int, float, float] | None:
        """(head, x, y) under scene position `pos`: cell (i, j) spans y, x in i +- 0.5, j +- 0.5."""
        if not self.tiles:
            return None
        hit = self.mosaic.cell_at(self.mosaic.mapFromScene(pos))
        return None if hit is None else (self.tiles[hit[0]].head, hit[1], hit[2])

    def cell_scene_pos(self, k: int, x: float, y: float) -> QPointF:
        """Where cell coordinates (x, y) of the k-th shown map lie in the scene (the inverse of hovering)."""
        return self.mosaic.mapToScene(self.mosaic.cell_pos(k, x, y))

    def zoom_text(self, head: int, i: int, j: int) -> str:
        """One cell of the zoomed block: its tokens and exact value."""
        z, c = self.zoom, self.result.config
        q, k = z.region[0] + i, z.region[2] + j
        value = float(z.values[head, i, j])
        name = head_title(head, len(z.values), c.heads)
        what = "NaN (no key to attend to)" if np.isnan(value) else number(value)
        return (f"L{c.layer} {name} · query {q} '{z.tokens[0][i]}' → key {k} '{z.tokens[1][j]}' · "
                f"{z.options.view} {what} (exact) · {z.title}; Esc or Back: the full maps")

    def cell_text(self, head: int, i: int, j: int) -> str:
        """Exact values of one cell; token-labelled runs lead with "L3 H5  'cat' → 'the'  0.41". A pooled run
        (a long input) says which block of cells the pooled cell under the mouse holds, and its maximum."""
        if self.result.pool_factor is not None:
            return self._pooled_text(head, i, j)
        detail = self._cell_detail(head, i, j)
        r = self.result
        axes = r.axis_tokens()
        if axes is None or i >= len(axes[0]) or j >= len(axes[1]):
            return detail
        b = min(self.frames.options.batch_index, r.config.batch - 1)
        shown = getattr(r, view_stage(self.frames.options.view))[b, :, i, j]
        value = float(np.nan_to_num(shown).mean()) if head == -1 else float(shown[head])
        who = "mean" if head == -1 else f"H{head}"
        return (f"L{r.config.layer} {who}  '{display(axes[0][i])}' → '{display(axes[1][j])}'  "
                f"{'NaN' if np.isnan(value) else f'{value:.2f}'}  ·  {detail}")

    def _pooled_text(self, head: int, i: int, j: int) -> str:
        """One pooled cell: the queries and keys it covers (tokens where the run has them) and its value,
        the maximum of those cells (of largest magnitude for a signed map), or that they are all masked."""
        r, c = self.result, self.result.config
        (fq, fk), b = r.pool_factor, min(self.frames.options.batch_index, c.batch - 1)
        pi, pj = i // fq, j // fk
        q0, q1, k0, k1 = pi * fq, min(c.seq_q, (pi + 1) * fq) - 1, pj * fk, min(c.lkv, (pj + 1) * fk) - 1
        axes = r.axis_tokens()
        span = f"queries {q0}–{q1} × keys {k0}–{k1}"
        if axes is not None:
            (qa, qb), (ka, kb) = ((display(t[a]), display(t[z])) for t, a, z in ((axes[0], q0, q1), (axes[1], k0, k1)))
            span += f" ('{qa}'…'{qb}' → '{ka}'…'{kb}')"
        values = getattr(r, view_stage(self.frames.options.view))[b, :, pi, pj]
        who = "mean over heads" if head == -1 else head_title(head, len(values), c.heads)
        allowed = bool(r.mask[min(b, r.mask.shape[0] - 1), 0, pi, pj])
        value = float(np.nan_to_num(values).mean()) if head == -1 else float(values[head])
        found = f"max {number(value)}" if allowed else "every cell masked"
        return (f"{who} · {span}: one cell of the map max-pooled {fq} × {fk} · {found} · the exact cells: drag "
                f"over them, or render --region {q0}:{q1 + 1},{k0}:{k1 + 1}")

    def _cell_detail(self, head: int, i: int, j: int) -> str:
        """Exact values of one cell, read from the full-resolution result."""
        r = self.result
        c = r.config
        b = min(self.frames.options.batch_index, c.batch - 1)
        # Index single cells only: a whole-map operation here would run on every mouse move.
        mask = r.mask if r.mask.ndim == 4 else r.mask[None, None]
        masked = not bool(mask[min(b, mask.shape[0] - 1), 0, i, j])  # masks carry no head dimension
        view = self.frames.options.view
        shown = getattr(r, view_stage(view))[b, :, i, j]  # (H or 2H,)
        where = f"query i={i}, key j={j}"
        if head == -1:
            value = 0.0 if masked else float(np.nan_to_num(shown).mean())
            return f"mean over heads · {where} · mean {view} {number(value)}" + (" · masked" if masked else "")
        name = f"{head_title(head, len(shown), c.heads)} · {where}"
        if r.fully_masked_rows[b, 0, i]:
            return (f"{name} · no key to attend to: every key of query {i} is masked "
                    f"(softmax over all -inf gives {'0, safe softmax' if c.safe_softmax else 'NaN'})")
        if masked:
            return f"{name} · masked: query {i} may not attend key {j} (score -inf, weight 0)"
        heads = r.dropped.shape[1]
        text = f"{name} · {'weight' if view == 'weights' else view} {number(float(shown[head]))}"
        if view == "weights" and c.dropout_active:
            text += f" (before dropout {number(float(r.weights[b, head, i, j]))})"
        maps = [head] if r.weights.shape[1] == heads or view != "weights" else [2 * head, 2 * head + 1]
        for m in maps:
            path = cell_path(r, b, m, i, j)
            steps = " → ".join(f"{BY_NAME[k].title} {number(v)}" for k, v in path.items())  # the stages' titles
            text += f" · {'map ' + str(m % 2 + 1) + ': ' if len(maps) > 1 else ''}{steps}"
        return text

    def _hovered(self, pos: QPointF) -> None:
        if self.result is None or self.frames is None:
            return
        hit = self._tile_at(pos)
        if hit is None:
            return
        h, x, y = hit
        i, j = int(math.floor(y + 0.5)), int(math.floor(x + 0.5))
        rows, cols = self.zoom.values.shape[1:] if self.zoom is not None else (self.result.config.seq_q,
                                                                                 self.result.config.lkv)
        if 0 <= i < rows and 0 <= j < cols:
            self.sigHover.emit(self.zoom_text(h, i, j) if self.zoom is not None else self.cell_text(h, i, j))

    # --- zoom: a rectangle dragged on a map ----------------------------------------------------

    def drag_zoom(self, start: QPointF, end: QPointF) -> tuple[int, int, int, int] | None:
        """The region (q0, q1, k0, k1) a drag from scene position `start` to `end` covers on the map where it
        began (None: it began on no map); sigZoom says it. In a zoomed block: a block inside it."""
        if self.result is None or self.frames is None:
            return None
        cells = self._drag_cells(start, end)
        if cells is None:
            return None
        c, z = self.result.config, self.zoom
        if z is None:
            region = drag_region(*cells, (c.seq_q, c.lkv), self.result.pool_factor)
        else:
            q0, q1, k0, k1 = drag_region(*cells, z.values.shape[1:])
            region = (q0 + z.region[0], q1 + z.region[0], k0 + z.region[2], k1 + z.region[2])
        self.sigZoom.emit(region)
        return region

    def _drag_cells(self, start: QPointF, end: QPointF):
        """((x, y) at start, (x, y) at end) in the cells of the map under `start`, or None."""
        hit = self.mosaic.cell_at(self.mosaic.mapFromScene(start))
        if hit is None:
            return None
        return hit[1:], self.mosaic.cell_xy(hit[0], self.mosaic.mapFromScene(end))

    def mousePressEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        if event.button() == Qt.LeftButton:
            self._press, self._dragging = self.mapToScene(event.position().toPoint()), False
        super().mousePressEvent(event)

    def mouseMoveEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        if self._press is not None and event.buttons() & Qt.LeftButton:
            here = self.mapToScene(event.position().toPoint())
            moved = self.mapFromScene(here) - self.mapFromScene(self._press)
            self._dragging = self._dragging or moved.manhattanLength() >= QApplication.startDragDistance()
            if self._dragging:
                self.band.setRect(QRectF(self._press, here).normalized())
                self.band.show()
        super().mouseMoveEvent(event)

    def mouseReleaseEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        dragged, start = self._dragging and event.button() == Qt.LeftButton, self._press
        if event.button() == Qt.LeftButton:
            self._press, self._dragging = None, False
            self.band.hide()
        if dragged:
            self.drag_zoom(start, self.mapToScene(event.position().toPoint()))
        self._swallow_click = dragged  # the scene may still call it a click (a slow, short drag)
        super().mouseReleaseEvent(event)
        self._swallow_click = False

    _swallow_click = False

    def _clicked(self, event) -> None:
        if event.button() != Qt.LeftButton or self.result is None or self._swallow_click or self.zoom is not None:
            return
        hit = self._tile_at(event.scenePos())
        if hit is not None and self.row_picking:
            i = int(math.floor(hit[2] + 0.5))
            if 0 <= i < self.result.config.seq_q:
                self.sigRowClicked.emit(i)
        elif hit is not None:
            self.set_focus(None if self.focus is not None else hit[0])


class TensorView(CountsPaints, pg.PlotWidget):
    """outputView: one 2-D tensor of the shown batch item, diverging colours centred at zero."""

    sigHover = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        named(self, "outputView")
        self.setToolTip("The output tensor (or Q, K, V, context) of the shown batch item: rows are positions, "
                        "columns features; blue negative, red positive. Hover for values.")
        self.setBackground(BACKGROUND)
        self.plot = self.getPlotItem()
        self.plot.setMenuEnabled(False)
        self.plot.hideButtons()
        self.plot.invertY(True)
        self.plot.getViewBox().setDefaultPadding(0)
        lean_axes(self.plot)
        self.image = image_item()
        self.plot.addItem(self.image)
        self.plot.setLabel("bottom", "feature")
        self.plot.getAxis("left").setStyle(autoExpandTextSpace=False, tickTextWidth=TICK_TEXT_PX)  # see ColourBar
        self.result: RunResult | None = None
        self.frames: Frames | None = None
        self._shown = None  # (left label, rows, cols) last applied
        # why there is no tensor, wrapped to the view's width (as the plot's one-line title it was cut at the edge)
        self.note = named(OverlayBanner(self), "tensorNote")
        self.note.setAlignment(Qt.AlignHCenter | Qt.AlignTop)
        self.note.setStyleSheet("color: palette(mid); padding: 12px;")
        self.note.hide()
        self.scene().sigMouseMoved.connect(self._hovered)

    def pixels(self) -> tuple[int, int]:
        """On-screen size (rows, cols) of the plot area, in device pixels: what the worker pools to."""
        ratio = self.devicePixelRatioF()
        return max(int(self.height() * ratio), 16), max(int(self.width() * ratio), 16)

    def data(self) -> np.ndarray:
        o = self.frames.options
        return tensor_data(self.result, o.tensor, min(o.batch_index, self.result.config.batch - 1),
                           min(o.tensor_head, self.result.config.heads - 1))

    def show_frames(self, result: RunResult, frames: Frames) -> None:
        self.result, self.frames = result, frames
        heat = frames.tensor
        kept = heat is not None  # else this layer of a long pooled run holds its maps only: say so
        if kept != self.plot.getAxis("left").isVisible():  # showing an axis re-lays out and redraws it
            for side in ("left", "bottom"):
                self.plot.showAxis(side, kept)
        self.note.setVisible(not kept)
        if not kept:
            self.image.clear()
            self.plot.setTitle(None)
            self.note.setText(not_kept_note(result, frames.options.tensor, "\n"))
            self._shown = None
            settle_before_paint(self)
            self.mark_shown()
            return
        set_heat_image(self.image, heat)
        rows, cols = heat.shape
        lo, hi = heat.levels
        self.plot.setTitle(f"{heat.title}: {rows} x {cols}, colour range {number(lo)} .. {number(hi)}", size="9pt")
        shown = ("key position" if frames.options.tensor in ("k", "v") else "query position", rows, cols)
        if shown != self._shown:  # the label re-renders as HTML and the range re-lays out: on a change
            self._shown = shown
            self.plot.setLabel("left", shown[0])
            self.plot.setRange(xRange=(-0.5, cols - 0.5), yRange=(-0.5, rows - 0.5), padding=0)
        settle_before_paint(self)
        self.mark_shown()

    def set_stale(self, stale: bool) -> None:
        self.image.setOpacity(STALE_OPACITY if stale else 1.0)

    def _hovered(self, pos: QPointF) -> None:
        if self.result is None or self.frames.tensor is None:
            return
        vb = self.plot.getViewBox()
        if not vb.sceneBoundingRect().contains(pos):
            return
        p = vb.mapSceneToView(pos)
        data = self.data()
        i, j = int(math.floor(p.y() + 0.5)), int(math.floor(p.x() + 0.5))
        if 0 <= i < data.shape[0] and 0 <= j < data.shape[1]:
            self.sigHover.emit(f"{self.frames.tensor.title} · row {i}, feature {j} · value {number(float(data[i, j]))}")
