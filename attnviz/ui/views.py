"""The heatmap views: the per-head grid with its colour bar, and the output tensor view.

They only swap in display-ready uint8 images prepared by the worker (frames.py), through a
256-entry LUT: Qt's Indexed8 fast path. Hover reads exact values from the full-resolution result.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QCoreApplication, QEvent, QPointF, QRectF, Qt, QTimer, Signal
from PySide6.QtWidgets import QLabel, QWidget

from .. import colormaps
from ..core import RunResult
from ..core.cells import cell_path
from ..frames import Frames, HeatImage, head_title, tensor_data, view_stage
from ..models.tokens import display
from .panel import named

STEP_NAMES = {"qk": "Q·Kᵀ", "scaled": "scaled", "biased": "+bias", "capped": "capped", "scores": "score",
              "weights": "softmax"}  # one cell's path, as hover spells it
TOKEN_ROW_PX, TOKEN_CHAR_PX = 18, 7  # room a token label needs: a row's height (with spacing), a character's width
MAX_TILES = 64  # more heads than this are listed, not drawn (a 1,000-tile grid is unreadable)
PREBUILT_TILES = 33  # built ahead, one per idle event-loop turn: 16 heads x 2 maps (differential) + the mean
TITLE_PX = 22


def _image_item() -> pg.ImageItem:
    item = pg.ImageItem(axisOrder="row-major")
    item.setAutoDownsample(False)  # the worker already pooled to screen size
    return item


def set_heat_image(item: pg.ImageItem, heat: HeatImage) -> None:
    """Swap a quantised image in (uint8 + 256-entry LUT: Indexed8) and stretch it over its cells."""
    item.setImage(heat.image, lut=heat.lut, levels=(0, 255), autoLevels=False)
    rows, cols = heat.shape
    item.setRect(QRectF(-0.5, -0.5, cols, rows))  # cell (i, j) centred on (j, i): ticks mark cells


def _fmt(x: float) -> str:
    if np.isnan(x):
        return "NaN"
    if np.isinf(x):
        return "-inf" if x < 0 else "inf"
    return f"{x:.4g}"


def _no_op() -> None:
    pass


class Tile:
    """One heatmap: a PlotItem (axes hidden in the grid) holding one ImageItem."""

    def __init__(self):
        self.plot = pg.PlotItem(enableMenu=False)  # no context menus built: 13 -> 8 ms a tile
        self.plot.setMouseEnabled(False, False)
        self.plot.hideButtons()
        self.plot.invertY(True)
        self.plot.getViewBox().setDefaultPadding(0)
        self.image = _image_item()
        self.plot.addItem(self.image)
        self.title = ""
        self._geometry = None  # (rows, cols, aspect locked) last applied
        for axis in ("left", "bottom", "top", "right"):
            # Positions are whole numbers; and with the prefix on, every range change of a tile
            # re-renders its (hidden) axis labels as HTML: ~0.3 ms each, thousands per regrid.
            self.plot.getAxis(axis).enableAutoSIPrefix(False)
        self.set_axes(False)

    def set_axes(self, shown: bool) -> None:
        self._token_key = None
        for axis in ("left", "bottom"):
            self.plot.showAxis(axis, shown)
            self.plot.getAxis(axis).setTicks(None)
        if shown:
            self.plot.setLabel("left", "query position i")
            self.plot.setLabel("bottom", "key position j")

    def set_token_axes(self, tokens: tuple[tuple[str, ...], tuple[str, ...]], left: bool, bottom: bool,
                       px: tuple[int, int], named_axes: bool = True) -> None:
        """Token labels on the left (queries) and bottom (keys) axes, every k-th one where the cells
        are too small for all (the hover always names both tokens in full)."""
        rows, cols = ([display(t) for t in axis] for axis in tokens)
        widest = max((len(t) for t in cols), default=1)
        steps = (max(1, math.ceil(TOKEN_ROW_PX * max(len(rows), 1) / max(px[0], 1))),
                 max(1, math.ceil((widest * TOKEN_CHAR_PX + 8) * max(len(cols), 1) / max(px[1], 1))))
        key = (tokens, left, bottom, steps, named_axes)
        if key == getattr(self, "_token_key", None):
            return
        self._token_key = key
        for axis, on, step, name, labels in (("left", left, steps[0], "query token", rows),
                                             ("bottom", bottom, steps[1], "key token", cols)):
            self.plot.showAxis(axis, on)
            if on:
                self.plot.getAxis(axis).setTicks([[(k, labels[k]) for k in range(0, len(labels), step)], []])
                self.plot.setLabel(axis, name if named_axes else None)
                self.plot.getAxis(axis).showLabel(named_axes)

    def show(self, heat: HeatImage, title: str, lock_aspect: bool = True) -> None:
        set_heat_image(self.image, heat)
        if title != self.title:
            self.plot.setTitle(title, size="9pt")
            self.title = title
        rows, cols = heat.shape
        geometry = (rows, cols, lock_aspect)
        if geometry == self._geometry:  # each call below re-lays the tile out: only on a change
            return
        self._geometry = geometry
        # Square cells in the grid (axes hidden, so the spare margin is blank); the single-head
        # view fills its area instead, so its axes never run past the map.
        self.plot.setAspectLocked(lock_aspect and max(rows, cols) <= 8 * min(rows, cols))
        self.plot.setRange(xRange=(-0.5, cols - 0.5), yRange=(-0.5, rows - 0.5), padding=0)


class ColourBar(pg.PlotItem):
    """A vertical gradient of the current LUT with its value axis, plus masked/NaN swatches."""

    def __init__(self):
        super().__init__()
        self.setMenuEnabled(False)
        self.setMouseEnabled(False, False)
        self.hideButtons()
        self.hideAxis("bottom")
        self.hideAxis("left")
        self.showAxis("right")
        self.getAxis("right").enableAutoSIPrefix(False)  # show 0.12, not 120 (x0.001)
        self.setFixedWidth(72)
        self.gradient = _image_item()
        self.addItem(self.gradient)
        ramp = np.arange(colormaps.DATA_LEVELS, dtype=np.uint8)[:, None]
        self._ramp = ramp
        self._lut = None
        self._shown = None
        self.getViewBox().setDefaultPadding(0)

    def show_levels(self, lut: np.ndarray, levels: tuple[float, float], label: str, relative: bool = False,
                    ticks: tuple = ()) -> None:
        """relative: each head has its own range, so the bar shows low..high, not numbers.
        ticks: (fraction of the bar, label) for a non-linear colour scale; the bar then spans 0..1."""
        if ticks and not relative:
            levels = (0.0, 1.0)
        lo, hi = levels
        if lut is not self._lut:
            self.gradient.setImage(self._ramp, lut=lut, levels=(0, 255), autoLevels=False)
            self._lut = lut
        shown = (lo, hi, label, relative, tuple(ticks))
        if shown == self._shown:  # axis ticks and label re-render as HTML: only on a change
            return
        self._shown = shown
        if relative:
            self.getAxis("right").setTicks([[(lo, "low"), (hi, "high")]])
        else:
            self.getAxis("right").setTicks([list(ticks)] if ticks else None)
        self.gradient.setRect(QRectF(0, lo, 1, (hi - lo) or 1.0))
        self.setRange(xRange=(0, 1), yRange=(lo, hi), padding=0)
        self.setLabel("right", label)


def _swatch_html(lut: np.ndarray) -> str:
    def sw(rgb, text):
        return f'<span style="color: rgb{tuple(int(c) for c in rgb[:3])}">&#9632;</span> {text}'

    return sw(lut[colormaps.MASKED_INDEX], "masked") + "&nbsp;&nbsp;" + sw(lut[colormaps.NAN_INDEX], "no key")


class OverlayBanner(QLabel):
    """A message laid over the top edge of `host`: showing, hiding or rewording it never resizes
    the host. (As a row above the head grid, the stale banner resized the grid each time it came
    or went, and a resized grid lays out and re-renders every tile: 30-50 ms on the GUI thread.)"""

    def __init__(self, host: QWidget):
        super().__init__(host)
        self.setWordWrap(True)
        self.setAttribute(Qt.WA_TransparentForMouseEvents)  # hover and clicks reach the maps below
        host.installEventFilter(self)

    def eventFilter(self, watched, event) -> bool:  # noqa: N802 (Qt's name)
        if event.type() == QEvent.Resize:
            self._place()
        return False

    def setText(self, text: str) -> None:  # noqa: N802 (Qt's name)
        super().setText(text)
        self._place()

    def _place(self) -> None:
        width = self.parentWidget().width()
        self.setGeometry(0, 0, width, self.heightForWidth(width))
        self.raise_()


class HeadGrid(pg.GraphicsLayoutWidget):
    """One tile per head of the shown batch item (plus an optional mean tile) and a colour bar."""

    sigHover = Signal(str)
    sigFocusChanged = Signal()
    sigResized = Signal()
    sigRowClicked = Signal(int)  # a query row clicked while row_picking (token focus)

    def __init__(self, parent=None):
        super().__init__(parent)
        named(self, "headGrid")
        self.setToolTip("Attention maps: rows are query positions (top to bottom), columns key positions. "
                        "Hover a cell for its values; click a head to show it large (click again or Esc for the grid).")
        self.setBackground("w")
        self.tiles: list[Tile] = []
        self._spare: list[Tile] = []  # tiles built earlier and not shown now
        self.tile_heads: list[int] = []  # head index per tile; -1 = the mean tile
        self.grid = self.ci.addLayout(row=0, col=0)
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
        self._layout_key = None
        self._column_px: float | None = None
        self.scene().sigMouseMoved.connect(self._hovered)
        self.scene().sigMouseClicked.connect(self._clicked)
        # Building a tile costs 5-40 ms (2 cores): building 16 when the head count first rises
        # stalled the window ~0.7 s. Build them ahead instead, one per turn of the event loop.
        self._regrid = QTimer(self)  # a resize while no new result will come (stale) regrids here
        self._regrid.setSingleShot(True)
        self._regrid.setInterval(30)
        self._regrid.timeout.connect(lambda: self.result and self.frames and self.show_frames(self.result, self.frames))
        self._prebuild = QTimer(self)
        self._prebuild.setInterval(0)
        self._prebuild.timeout.connect(self._build_spare)
        self._prebuild.start()

    def _build_spare(self) -> None:
        if len(self.tiles) + len(self._spare) >= PREBUILT_TILES:
            self._prebuild.stop()
            return
        self._spare.append(Tile())

    # --- layout ------------------------------------------------------------------------------

    def _wanted_heads(self, heads: int) -> list[int]:
        if self.focus is not None:
            return [self.focus]
        shown = list(range(min(heads, MAX_TILES)))
        return shown + ([-1] if self.show_mean else [])

    def grid_shape(self, n: int, rows: int, cols: int) -> tuple[int, int]:
        """(grid rows, grid cols) that make n tiles of rows x cols cells as large as possible."""
        w, h = max(self.width() - 90, 50), max(self.height() - 30, 50)
        best, best_scale = (1, n), -1.0
        for gc in range(1, n + 1):
            gr = math.ceil(n / gc)
            scale = min(w / gc / cols, (h / gr - TITLE_PX) / rows)
            if scale > best_scale:
                best, best_scale = (gr, gc), scale
        return best

    def tile_pixels(self, rows: int, cols: int, heads: int) -> tuple[int, int]:
        """On-screen size (rows, cols) of one tile, in device pixels: what the worker pools to."""
        n = len(self._wanted_heads(heads))
        gr, gc = self.grid_shape(n, rows, cols)
        ratio = self.devicePixelRatioF()
        w = (max(self.width() - 90, 50) / gc) * ratio
        h = (max(self.height() - 30, 50) / gr - TITLE_PX) * ratio
        return max(int(h), 16), max(int(w), 16)

    def _relayout(self, heads: list[int], rows: int, cols: int) -> None:
        gr, gc = self.grid_shape(len(heads), rows, cols)
        key = (gc, self.focus is not None)  # what one layout serves; tiles come and go inside it
        if key != self._layout_key:
            self._layout_key = key
            self._new_grid()
        self._place_tiles(len(heads), gc)
        self.tile_heads = heads
        self._fit_columns(gc)

    def _new_grid(self) -> None:
        """An empty layout: a reused QGraphicsGridLayout keeps the widths of columns it no longer has."""
        self.grid.clear()
        self.ci.removeItem(self.grid)
        self.grid = pg.GraphicsLayout()
        self.ci.addItem(self.grid, row=0, col=0)
        self._spare.extend(reversed(self.tiles))  # built tiles are kept: building one costs ~5 ms
        self.tiles = []
        self._column_px = None

    def _place_tiles(self, n: int, gc: int) -> None:
        """Take tiles off the end of the grid or add them there: tile k shows the k-th wanted map, so
        a head-count change within one column count touches only the tiles that come or go."""
        for tile in self.tiles[n:]:
            self.grid.removeItem(tile.plot)
        self._spare.extend(reversed(self.tiles[n:]))
        del self.tiles[n:]
        # pyqtgraph's addItem activates the whole layout after each item, resizing every tile
        # added so far: O(n^2) resizes, 0.3-0.9 s for 16 tiles on 2 cores. Lay out once instead.
        self.grid.layout.activate = _no_op
        while len(self.tiles) < n:
            k = len(self.tiles)
            tile = self._spare.pop() if self._spare else Tile()
            self.grid.addItem(tile.plot, row=k // gc, col=k % gc)
            tile.set_axes(self.focus is not None)
            tile.title, tile._geometry = "", None
            self.tiles.append(tile)
        del self.grid.layout.activate  # pyqtgraph's own again

    def _fit_columns(self, gc: int) -> None:
        """Equal columns: a grid column otherwise grows with its widest title ("mean over heads")."""
        column = max(self.width() - 90, 50) / gc
        if column == self._column_px:
            return
        self._column_px = column
        for c in range(gc):
            self.grid.layout.setColumnPreferredWidth(c, column)
            self.grid.layout.setColumnMaximumWidth(c, column)

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        if getattr(self, "frames", None) is not None and self.result is not None:
            # The tiles stretch the maps they hold; the re-render this asks for (pooled to the new
            # tile size) re-lays the grid out if its shape changes. Nothing heavier here: a dock
            # coming or going resizes the grid, and the tiles' full update took 30-50 ms.
            if self.stale or self._layout_key is None:  # no result will come to regrid: do it soon,
                self._regrid.start()  # once for a burst of resizes, and never inside a swap
            else:
                self._fit_columns(self._layout_key[0])
            self.sigResized.emit()

    # --- content -----------------------------------------------------------------------------

    def show_frames(self, result: RunResult, frames: Frames) -> None:
        self.result, self.frames = result, frames
        c = result.config
        maps = len(frames.heads)  # heads, or 2 maps per head before differential attention combines them
        heads = self._wanted_heads(maps)
        if self.focus is not None and self.focus >= maps:
            self.focus = None
            heads = self._wanted_heads(maps)
        self._relayout(heads, c.seq_q, c.lkv)
        self._token_axes(result, heads)
        view = frames.options.view
        what = view
        if view == "weights" and c.dropout_active:
            what = "weights after dropout"
        for tile, h in zip(self.tiles, heads):
            heat = frames.mean if h == -1 else frames.heads[h]
            if heat is None:  # the mean tile was not rendered for this request
                continue
            lo, hi = heat.levels
            scale = "" if frames.options.shared_scale else f" ({_fmt(lo)}..{_fmt(hi)})"
            tile.show(heat, heat.title + scale, lock_aspect=self.focus is None)
            tile.image.setOpacity(0.35 if self.stale else 1.0)
        if frames.scale.unit:
            what = f"{what} {frames.scale.unit}"
        if frames.options.shared_scale:
            self.bar.show_levels(frames.lut, frames.levels, what, ticks=frames.scale.ticks)
        else:
            span = (-1.0, 1.0) if frames.signed else (0.0, 1.0)
            self.bar.show_levels(frames.lut, span, f"{what}, per-head scale", relative=True)
        more = f"showing {MAX_TILES} of {maps} maps · " if maps > MAX_TILES and self.focus is None else ""
        self.legend.setText(more + _swatch_html(frames.lut))
        # Lay the grid out and set the tiles' view transforms now. Left to the event loop, the
        # layout ran after the first paint and each ViewBox set its transform inside the paint,
        # so one swap painted the whole grid two or three times.
        QCoreApplication.sendPostedEvents(None, QEvent.LayoutRequest)
        self.scene().prepareForPaint()

    def _token_axes(self, result: RunResult, heads: list[int]) -> None:
        """Token-labelled runs: the tokens along the grid's left column and bottom row."""
        c = result.config
        axes = result.axis_tokens()
        if axes is None:
            for tile in self.tiles:
                if tile._token_key is not None:  # a tokenised run showed before: plain axes again
                    tile.set_axes(self.focus is not None)
            return
        gr, gc = self.grid_shape(len(heads), c.seq_q, c.lkv)
        px = self.tile_pixels(c.seq_q, c.lkv, len(heads))
        for n, tile in enumerate(self.tiles):
            single = self.focus is not None
            tile.set_token_axes(axes, single or n % gc == 0, single or n + gc >= len(heads), px,
                                named_axes=single or n == 0 or n == (gr - 1) * gc)

    def set_stale(self, stale: bool) -> None:
        self.stale = stale
        for tile in self.tiles:
            tile.image.setOpacity(0.35 if stale else 1.0)

    def set_focus(self, head: int | None) -> None:
        if head != self.focus:
            self.focus = head
            self._layout_key = None
            self.sigFocusChanged.emit()

    # --- interaction -------------------------------------------------------------------------

    def _tile_at(self, pos: QPointF) -> tuple[int, float, float] | None:
        for tile, h in zip(self.tiles, self.tile_heads):
            vb = tile.plot.getViewBox()
            if vb.sceneBoundingRect().contains(pos):
                p = vb.mapSceneToView(pos)
                return h, p.x(), p.y()
        return None

    def cell_text(self, head: int, i: int, j: int) -> str:
        """Exact values of one cell; token-labelled runs lead with "L3 H5  'cat' → 'the'  0.41"."""
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
            return f"mean over heads · {where} · mean {view} {_fmt(value)}" + (" · masked" if masked else "")
        name = f"{head_title(head, len(shown), c.heads)} · {where}"
        if r.fully_masked_rows[b, 0, i]:
            return (f"{name} · no key to attend to: every key of query {i} is masked "
                    f"(softmax over all -inf gives {'0, safe softmax' if c.safe_softmax else 'NaN'})")
        if masked:
            return f"{name} · masked: query {i} may not attend key {j} (score -inf, weight 0)"
        heads = r.dropped.shape[1]
        text = f"{name} · {'weight' if view == 'weights' else view} {_fmt(float(shown[head]))}"
        if view == "weights" and c.dropout_active:
            text += f" (before dropout {_fmt(float(r.weights[b, head, i, j]))})"
        maps = [head] if r.scores.shape[1] == heads or view != "weights" else [2 * head, 2 * head + 1]
        for m in maps:
            path = cell_path(r, b, m, i, j)
            steps = " → ".join(f"{STEP_NAMES[k]} {_fmt(v)}" for k, v in path.items() if k in STEP_NAMES)
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
        c = self.result.config
        if 0 <= i < c.seq_q and 0 <= j < c.lkv:
            self.sigHover.emit(self.cell_text(h, i, j))

    def _clicked(self, event) -> None:
        if event.button() != Qt.LeftButton or self.result is None:
            return
        hit = self._tile_at(event.scenePos())
        if hit is not None and self.row_picking:
            i = int(math.floor(hit[2] + 0.5))
            if 0 <= i < self.result.config.seq_q:
                self.sigRowClicked.emit(i)
        elif hit is not None:
            self.set_focus(None if self.focus is not None else hit[0])


class TensorView(pg.PlotWidget):
    """outputView: one 2-D tensor of the shown batch item, diverging colours centred at zero."""

    sigHover = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        named(self, "outputView")
        self.setToolTip("The output tensor (or Q, K, V, context) of the shown batch item: rows are positions, "
                        "columns features; blue negative, red positive. Hover for values.")
        self.setBackground("w")
        self.plot = self.getPlotItem()
        self.plot.setMenuEnabled(False)
        self.plot.hideButtons()
        self.plot.invertY(True)
        self.plot.getViewBox().setDefaultPadding(0)
        self.image = _image_item()
        self.plot.addItem(self.image)
        self.plot.setLabel("bottom", "feature")
        self.result: RunResult | None = None
        self.frames: Frames | None = None
        self._shown = None  # (left label, rows, cols) last applied
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
        set_heat_image(self.image, heat)
        rows, cols = heat.shape
        lo, hi = heat.levels
        self.plot.setTitle(f"{heat.title}: {rows} x {cols}, colour range {_fmt(lo)} .. {_fmt(hi)}", size="9pt")
        shown = ("key position" if frames.options.tensor in ("k", "v") else "query position", rows, cols)
        if shown != self._shown:  # the label re-renders as HTML and the range re-lays out: on a change
            self._shown = shown
            self.plot.setLabel("left", shown[0])
            self.plot.setRange(xRange=(-0.5, cols - 0.5), yRange=(-0.5, rows - 0.5), padding=0)

    def set_stale(self, stale: bool) -> None:
        self.image.setOpacity(0.35 if stale else 1.0)

    def _hovered(self, pos: QPointF) -> None:
        if self.result is None:
            return
        vb = self.plot.getViewBox()
        if not vb.sceneBoundingRect().contains(pos):
            return
        p = vb.mapSceneToView(pos)
        data = self.data()
        i, j = int(math.floor(p.y() + 0.5)), int(math.floor(p.x() + 0.5))
        if 0 <= i < data.shape[0] and 0 <= j < data.shape[1]:
            self.sigHover.emit(f"{self.frames.tensor.title} · row {i}, feature {j} · value {_fmt(float(data[i, j]))}")
