"""Compare: pin a result, then see the current one beside it and their difference on a diverging
scale (computed on the worker: explain.compare_frames). Also the attention rollout panel."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QSpinBox, QVBoxLayout, QWidget

from attnviz.explain import CompareFrames, RolloutFrames
from attnviz.style import BACKGROUND, number
from attnviz.ui.maps.heatmap import Tile
from attnviz.ui.maps.square import SquareCells
from attnviz.ui.widgets.basic import named


class CompareView(QWidget):
    """compareView: pinned | current | current − pinned for one head of the shown view."""

    sigChanged = Signal()
    sigExport = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        named(self, "compareView")
        self.pinned = None  # the pinned RunResult
        self.frames: CompareFrames | None = None
        self.pinButton = named(QPushButton("Pin current"), "comparePinButton")
        self.pinButton.setCheckable(True)
        self.pinButton.setToolTip("Pin the result on screen; every later result is shown beside it with the "
                                  "difference (e.g. with and without RoPE, two seeds)")
        self.unablatedButton = named(QPushButton("Against unablated"), "compareUnablatedButton")
        self.unablatedButton.setCheckable(True)
        self.unablatedButton.setToolTip("Compare with the same configuration without its ablated heads: the "
                                        "difference shows what the ablation changed in this layer's maps "
                                        "(ablate a head with Alt+click in the model view)")
        self.headSpin = named(QSpinBox(), "compareHeadSpin")
        self.headSpin.setPrefix("head ")
        self.headSpin.setToolTip("The head compared")
        self.headSpin.valueChanged.connect(self.sigChanged)
        self.exportButton = named(QPushButton("Export…"), "compareExportButton")
        self.exportButton.setToolTip("Save the difference of every head as NPZ, or the pinned, current and "
                                     "difference maps as a PNG or SVG figure")
        self.exportButton.clicked.connect(self.sigExport)
        self.infoLabel = QLabel("Pin a result to compare the next ones with it")
        self.infoLabel.setWordWrap(True)
        top = QHBoxLayout()
        top.addWidget(self.pinButton)
        top.addWidget(self.unablatedButton)
        top.addWidget(self.headSpin)
        top.addWidget(self.infoLabel, 1)
        top.addWidget(self.exportButton)
        self.scene = pg.GraphicsLayoutWidget()
        self.scene.setBackground(BACKGROUND)
        self.tiles = [Tile(), Tile(), Tile()]
        for n, tile in enumerate(self.tiles):
            tile.set_axes(False)
            self.scene.addItem(tile.plot, row=0, col=n)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(top)
        layout.addWidget(self.scene, 1)

    def set_heads(self, heads: int) -> None:
        self.headSpin.setMaximum(max(heads - 1, 0))

    def show_frames(self, frames: CompareFrames | None) -> None:
        self.frames = frames
        if frames is None:
            for tile in self.tiles:
                tile.image.clear()
            self.infoLabel.setText("Pin a result to compare the next ones with it")
            return
        if frames.message:
            self.infoLabel.setText("Not compared: " + frames.message)
            return
        against = "unablated" if self.unablatedButton.isChecked() else "pinned"
        for tile, heat in zip(self.tiles, (frames.pinned, frames.current, frames.difference)):
            if against == "unablated":  # the frames name the run compared with "pinned"
                heat.title = heat.title.replace("pinned", "unablated")
            lo, hi = heat.levels
            tile.show(heat, f"{heat.title} ({number(lo)} … {number(hi)})")
        self.infoLabel.setText(f"max |current − {against}| over every head: {number(frames.max_abs)}"
                               + (" (identical)" if frames.max_abs == 0 else ""))


class RolloutView(QWidget):
    """rolloutView: attention rollout over the layers of a multi-layer result, as one more map."""

    sigExport = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        named(self, "rolloutView")
        self.frames: RolloutFrames | None = None
        self.infoLabel = QLabel("Attention rollout (Abnar & Zuidema, 2020): the product over layers of the "
                                "head-averaged maps mixed with the residual, 0.5·A + 0.5·I")
        self.infoLabel.setWordWrap(True)
        self.exportButton = named(QPushButton("Export…"), "rolloutExportButton")
        self.exportButton.setToolTip("Save the rollout as CSV, or as a PNG or SVG figure")
        self.exportButton.clicked.connect(self.sigExport)
        self.scene = pg.GraphicsLayoutWidget()
        self.scene.setBackground(BACKGROUND)
        self.tile = Tile()
        self.tile.set_axes(True)
        self.scene.addItem(self.tile.plot)
        self.cells = SquareCells(self.scene, self.tile.plot)  # square cells; the axes span the tokens alone
        self.titleLabel = named(QLabel(), "rolloutTitle")  # above the map: a wide title widened the plot
        top = QHBoxLayout()
        top.addWidget(self.infoLabel, 1)
        top.addWidget(self.exportButton)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(top)
        layout.addWidget(self.titleLabel)
        layout.addWidget(self.scene, 1)

    def show_frames(self, frames: RolloutFrames | None, tokens: tuple[str, ...] = ()) -> None:
        """`tokens`: the run's tokens, labelling both axes where there is one per position."""
        self.frames = frames
        if frames is None:
            return
        if frames.message:
            self.tile.image.clear()
            self.infoLabel.setText(frames.message)
            return
        lo, hi = frames.image.levels
        rows, cols = frames.data.shape
        self.tile.show(frames.image, "", lock_aspect=False)
        self.titleLabel.setText(f"{frames.image.title} ({number(lo)} … {number(hi)})")
        self.cells.show(rows, cols)
        if len(tokens) == rows == cols:  # every k-th token where the cells are too small for all
            side = int(self.cells.cell * rows)
            self.tile.set_token_axes((tuple(tokens), tuple(tokens)), (side, side))
        else:
            self.tile.set_axes(True)
        self.infoLabel.setText("Rollout: row i = how much of token i's last-layer representation comes from "
                               "each input token (residual-adjusted, head-averaged maps multiplied over layers)")
