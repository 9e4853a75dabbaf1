"""lensView: the logit lens (nostalgebraist, 2020) as a table, layers down and positions across; each
cell the top-1 token of the residual stream after that layer through the model's final norm and
unembedding, coloured by its probability. Computed on the worker (explain.lens_frames)."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from attnviz.explain import LensFrames
from attnviz.models.tokens import display
from attnviz.ui.panels.heat_table import HeatTable
from attnviz.ui.widgets.basic import named


class LensView(QWidget):
    sigExport = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        named(self, "lensView")
        self.frames: LensFrames | None = None
        self.table = named(HeatTable(cell_width=64), "lensTable")
        self.table.setToolTip("Logit lens: row = layer, column = position; each cell is the token the residual "
                              "stream after that layer would predict, coloured by its probability (hover for it). "
                              "The last row is the model's own prediction.")
        self.infoLabel = named(QLabel("The logit lens shows here for a causal LM"), "lensInfo")
        self.infoLabel.setWordWrap(True)
        self.exportButton = named(QPushButton("Export…"), "lensExportButton")
        self.exportButton.setToolTip("Save the lens as CSV (token and probability per cell), or the panel as PNG")
        self.exportButton.clicked.connect(self.sigExport)
        top = QHBoxLayout()
        top.addWidget(self.infoLabel, 1)
        top.addWidget(self.exportButton)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(top)
        layout.addWidget(self.table, 1)

    def show_frames(self, frames: LensFrames | None) -> None:
        if frames is None or frames is self.frames:
            return
        self.frames = frames
        if frames.message:
            self.table.heat.clear()
            self.infoLabel.setText(frames.message)
            return
        layers = len(frames.tokens)
        rows = [f"L{n}" for n in range(layers)]
        texts = [[display(t) for t in row] for row in frames.tokens]  # a space or newline as on the axes
        self.table.heat.set_cells(texts, frames.index, frames.lut, rows, frames.positions, self._tip)
        self.infoLabel.setText(f"Logit lens: the top-1 token after each of {layers} layers at "
                               f"{len(frames.positions)} positions; colour = its probability (0 … 1)")

    def show_pending(self) -> None:
        """New maps are on screen and their lens follows: empty until it comes (the last lens was another
        input's)."""
        self.frames = None
        self.table.heat.clear()
        self.infoLabel.setText("Logit lens: computing for the shown input …")

    def _tip(self, row: int, col: int) -> str:
        f = self.frames
        return (f"after layer {row}, position {f.positions[col]}: top-1 {f.tokens[row][col]!r} "
                f"p = {f.probs[row, col]:.3g}")
