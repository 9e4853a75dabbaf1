"""pipelineView: one head's attention call, stage by stage, as small heatmaps joined by arrows.

The stages come from the one stage list (core.stages) through explain.pipeline_frames, rendered on
the worker; this widget only swaps images in. Click a stage to see it large; hover a cell of a map
stage to see that cell's path (core.cells.cell_path): q_i · k_j, the scale, the bias, the cap, the
mask, the softmax, marked in every tile it passes through.
"""

from __future__ import annotations

import math

import pyqtgraph as pg
from PySide6.QtCore import QEvent, QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QPen
from PySide6.QtWidgets import (
    QFrame,
    QGraphicsRectItem,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSpinBox,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from attnviz.core.analysis.cells import cell_path, qk_scale
from attnviz.core.kernel.stages import BY_NAME
from attnviz.explain import STAGE_TITLES, PipelineFrames, PipelineStage
from attnviz.style import BACKGROUND, TICK_INK, number
from attnviz.ui.maps.square import SquareCells
from attnviz.ui.maps.views import image_item, lean_axes, set_heat_image
from attnviz.ui.widgets.basic import ElidedLabel, named

ARROW_W = 22
CAPTION_PX = 34  # a stage tile's two caption lines (title; shape and range)
CAPTION_W = 150  # the least width of a stage tile's column: its caption's
MIN_SIDE = 72  # tiles whose square box would be smaller go in one row, scrolled sideways
ROWS_OF = {"x": "i", "q_proj": "i", "q": "i", "k_proj": "j", "k": "j", "v": "j", "head_context": "i",
           "context": "i", "output": "i"}  # which position a vector stage's rows are


def stage_caption(stage: PipelineStage) -> str:
    rows, cols = stage.data.shape
    lo, hi = stage.value_range
    return f"<b>{stage.title}</b><br><span style='font-size:8pt'>{rows}×{cols} · {number(lo)} … {number(hi)}</span>"


def flow_shape(n: int, width: float, height: float) -> tuple[int, float]:
    """(stage tiles per row, tile column width) for n stages in a flow viewport of width x height px: the
    rows that make each tile's square box largest within the width, or, where that box would be smaller than
    MIN_SIDE, one row of boxes as tall as the viewport, scrolled sideways. Columns are never narrower than
    a caption (CAPTION_W)."""
    def side(per_row: int) -> float:
        rows = math.ceil(n / per_row)
        column = (width - 8) / per_row - ARROW_W - 4
        return min(column, height / rows - CAPTION_PX) if column >= CAPTION_W else -1.0
    per_row = max(range(1, max(n, 1) + 1), key=side)
    if side(per_row) >= MIN_SIDE:
        return per_row, (width - 8) / per_row - ARROW_W - 4
    return max(n, 1), max(height - CAPTION_PX, CAPTION_W)


def path_text(result, b: int, m: int, i: int, j: int) -> str:
    """One cell's way through the pipeline, in words and numbers."""
    path = cell_path(result, b, m, i, j)  # the stages in the pipeline's order
    parts = [f"query i={i}, key j={j}"]
    if "qk" in path:
        parts.append(f"q_i·k_j = {number(path.pop('qk'))}")
    if "scaled" in path:  # the layer's own scale (a model's call may set one other than 1/√d_head)
        parts.append(f"× {number(qk_scale(result, result.q.shape[-1]))} = {number(path.pop('scaled'))}")
    parts += [f"{STAGE_TITLES[name]} → {number(value)}" for name, value in path.items()]
    return " · ".join(parts)


class StageTile:
    def __init__(self) -> None:
        self.plot = pg.PlotItem()
        self.plot.setMenuEnabled(False)
        self.plot.setMouseEnabled(False, False)
        self.plot.hideButtons()
        self.plot.hideAxis("left")
        self.plot.hideAxis("bottom")
        self.plot.invertY(True)
        self.plot.getViewBox().setDefaultPadding(0)
        self.plot.setAspectLocked(True)  # square cells: an L x L stage square, an (L, d) one its true shape
        self.image = image_item()
        self.plot.addItem(self.image)
        self.marker = QGraphicsRectItem()
        pen = QPen(Qt.red)
        pen.setCosmetic(True)
        pen.setWidth(2)
        self.marker.setPen(pen)
        self.marker.setZValue(10)
        self.marker.hide()
        self.plot.addItem(self.marker)
        self.stage: PipelineStage | None = None

    def show(self, stage: PipelineStage) -> None:
        self.stage = stage
        set_heat_image(self.image, stage.image)
        self.plot.setTitle(stage_caption(stage), size="9pt")
        rows, cols = stage.data.shape
        self.plot.setRange(xRange=(-0.5, cols - 0.5), yRange=(-0.5, rows - 0.5), padding=0)
        self.plot.setToolTip(f"{stage.name}: {BY_NAME[stage.name].description if stage.name in BY_NAME else ''} "
                             f"· stage shape {stage.array_shape} · click to see it large")


class PipelineView(QWidget):
    """The pipeline panel: head chooser, the flow of stages, the chosen stage large, the hovered path."""

    sigChanged = Signal()  # head or large stage changed: ask the worker to re-render
    sigExport = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        named(self, "pipelineView")
        self.setToolTip("Every stage of one head's attention call, in order. Click a stage to see it large; "
                        "hover a map cell to follow it through the pipeline.")
        self.result = None
        self.frames: PipelineFrames | None = None
        self.stage_name: str | None = "weights"
        self.tiles: list[StageTile] = []
        self._layout_key = None

        top = QHBoxLayout()
        self.headSpin = named(QSpinBox(), "pipelineHeadSpin")
        self.headSpin.setPrefix("head ")
        self.headSpin.setToolTip("The head whose pipeline is shown")
        self.headSpin.valueChanged.connect(self.sigChanged)
        self.exportButton = named(QPushButton("Export figure…"), "pipelineExportButton")
        self.exportButton.setToolTip("Save the pipeline as one PNG or SVG figure, or its stages as NPZ")
        self.exportButton.clicked.connect(self.sigExport)
        self.infoLabel = ElidedLabel()  # a narrow dock shows "…" in the middle, the tooltip the whole line
        self.infoLabel.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Preferred)
        self.infoLabel.setStyleSheet("color: palette(mid);")
        top.addWidget(self.headSpin)
        top.addWidget(self.infoLabel, 1)
        top.addWidget(self.exportButton)

        self.flow = pg.GraphicsLayoutWidget()
        self.flow.setBackground(BACKGROUND)
        self.flowScroll = QScrollArea()  # the flow is as wide as its stages need; a narrow panel scrolls it
        self.flowScroll.setWidget(self.flow)
        self.flowScroll.setFrameShape(QFrame.NoFrame)
        self.flowScroll.setVerticalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.flowScroll.viewport().installEventFilter(self)
        self.flow.scene().sigMouseMoved.connect(self._hovered)
        self.flow.scene().sigMouseClicked.connect(self._clicked)
        split = QSplitter(Qt.Horizontal)
        split.addWidget(self.flowScroll)
        split.addWidget(self._make_large())
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)
        self.pathLabel = named(QLabel("Hover a map cell to follow it through the pipeline"), "pipelinePathLabel")
        self.pathLabel.setWordWrap(True)
        self.pathLabel.setTextInteractionFlags(Qt.TextSelectableByMouse)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(top)
        layout.addWidget(split, 1)
        layout.addWidget(self.pathLabel)

    def _make_large(self) -> QWidget:
        """The stage chosen, large, under its title."""
        self.large = pg.PlotWidget()
        named(self.large, "pipelineLarge")
        self.large.setBackground(BACKGROUND)
        self.largePlot = self.large.getPlotItem()
        self.largePlot.setMenuEnabled(False)
        self.largePlot.hideButtons()
        self.largePlot.invertY(True)
        self.largePlot.getViewBox().setDefaultPadding(0)
        self.largeCells = SquareCells(self.large, self.largePlot)  # square cells, the axes on the data alone
        lean_axes(self.largePlot)
        self.largeImage = image_item()
        self.largePlot.addItem(self.largeImage)
        self.large.scene().sigMouseMoved.connect(self._hovered_large)
        large = QWidget()  # the title above the plot, not in it: a title wider than the map widened the plot
        large_layout = QVBoxLayout(large)
        large_layout.setContentsMargins(0, 0, 0, 0)
        large_layout.setSpacing(0)
        self.largeTitle = named(QLabel(), "pipelineLargeTitle")
        self.largeTitle.setAlignment(Qt.AlignCenter)
        self.largeTitle.setStyleSheet(f"color: {TICK_INK}; background: {BACKGROUND}; font-size: 9pt;")
        self.largeTitle.setMinimumWidth(16)
        large_layout.addWidget(self.largeTitle)
        large_layout.addWidget(self.large, 1)
        return large

    def set_heads(self, heads: int) -> None:
        self.headSpin.setMaximum(max(heads - 1, 0))

    # --- content -----------------------------------------------------------------------------

    def _relayout(self, names: tuple[str, ...]) -> None:
        room = self.flowScroll.viewport().size()
        per_row, column = flow_shape(len(names), room.width(), room.height() - 4)
        width = max(room.width(), int(per_row * (column + ARROW_W + 4) + 8))
        self.flow.resize(width, room.height())
        key = (names, per_row, column)
        if key == self._layout_key:
            return
        self._layout_key = key
        self.flow.clear()
        while len(self.tiles) < len(names):
            self.tiles.append(StageTile())
        del self.tiles[len(names):]
        for n, tile in enumerate(self.tiles):
            row, col = divmod(n, per_row)
            if col or row:  # an arrow before every stage but the first; at a row start it points on
                self.flow.addLabel("→", row=row, col=2 * col, size="14pt", color=TICK_INK)
            self.flow.addItem(tile.plot, row=row, col=2 * col + 1)
        grid = self.flow.ci.layout  # equal tile columns that fit the width (titles must not widen them)
        grid.setHorizontalSpacing(2)
        self.flow.ci.setContentsMargins(2, 2, 2, 2)
        for col in range(per_row):
            grid.setColumnFixedWidth(2 * col, ARROW_W)
            grid.setColumnPreferredWidth(2 * col + 1, column)
            grid.setColumnMaximumWidth(2 * col + 1, column)

    def show_frames(self, result, frames: PipelineFrames | None) -> None:
        self.result, self.frames = result, frames
        if frames is None:
            return
        self._relayout(tuple(s.name for s in frames.stages))
        for tile, stage in zip(self.tiles, frames.stages):
            tile.show(stage)
            tile.marker.hide()
        c = result.config
        missing = f" · not kept: {', '.join(frames.missing)}" if frames.missing else ""
        self.infoLabel.setText(f"{len(frames.stages)} stages · {c.spec.label} · batch item {frames.batch_index}"
                               + missing)
        self.infoLabel.setToolTip(self.infoLabel.text())
        if frames.large is not None:
            name, heat = frames.large
            set_heat_image(self.largeImage, heat)
            rows, cols = heat.shape
            lo, hi = heat.levels
            self.largeTitle.setText(f"{STAGE_TITLES[name]} · head {frames.head} · {rows}×{cols} · "
                                    f"colours {number(lo)} … {number(hi)}")
            self.largeCells.show(rows, cols)

    def stage(self, name: str) -> PipelineStage | None:
        return next((s for s in self.frames.stages if s.name == name), None) if self.frames else None

    def eventFilter(self, watched, event) -> bool:  # noqa: N802 (Qt's name)
        if event.type() == QEvent.Resize and self.frames is not None:  # the flow's viewport
            self._relayout(tuple(s.name for s in self.frames.stages))
        return False

    # --- interaction -------------------------------------------------------------------------

    def _tile_at(self, pos: QPointF):
        for tile in self.tiles:
            vb = tile.plot.getViewBox()
            if tile.stage is not None and vb.sceneBoundingRect().contains(pos):
                p = vb.mapSceneToView(pos)
                return tile, int(math.floor(p.y() + 0.5)), int(math.floor(p.x() + 0.5))
        return None

    def _clicked(self, event) -> None:
        hit = self._tile_at(event.scenePos())
        if hit is not None and event.button() == Qt.LeftButton:
            self.stage_name = hit[0].stage.name
            self.sigChanged.emit()

    def _hovered(self, pos: QPointF) -> None:
        hit = self._tile_at(pos)
        if hit is None or self.frames is None:
            return
        tile, i, j = hit
        rows, cols = tile.stage.data.shape
        if not (0 <= i < rows and 0 <= j < cols):
            return
        if tile.stage.is_map:
            self.show_path(i, j, tile.stage.map_index)
        else:
            value = number(float(tile.stage.data[i, j]))
            self.pathLabel.setText(f"{tile.stage.title} · row {i}, column {j} · value {value}")

    def _hovered_large(self, pos: QPointF) -> None:
        if self.frames is None or self.frames.large is None:
            return
        stage = self.stage(self.frames.large[0])
        vb = self.largePlot.getViewBox()
        if stage is None or not stage.is_map or not vb.sceneBoundingRect().contains(pos):
            return
        p = vb.mapSceneToView(pos)
        i, j = int(math.floor(p.y() + 0.5)), int(math.floor(p.x() + 0.5))
        rows, cols = stage.data.shape
        if 0 <= i < rows and 0 <= j < cols:
            self.show_path(i, j, stage.map_index)

    def show_path(self, i: int, j: int, m: int | None = None) -> str:
        """Show (and return) the path of map cell (i, j) and mark it in every stage it passes through."""
        b = self.frames.batch_index
        m = self.frames.head if m is None else m
        text = path_text(self.result, b, m, i, j)
        self.pathLabel.setText(text)
        for tile in self.tiles:
            s = tile.stage
            rows, cols = s.data.shape
            if s.is_map:
                tile.marker.setRect(QRectF(j - 0.5, i - 0.5, 1, 1))
            else:
                r = i if ROWS_OF.get(s.name, "i") == "i" else j
                tile.marker.setRect(QRectF(-0.5, r - 0.5, cols, 1))
            tile.marker.show()
        return text
