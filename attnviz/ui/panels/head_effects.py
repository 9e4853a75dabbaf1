"""headEffects: which heads matter for the prediction. A layer x head table coloured by the drop in the
target's log-probability when that head alone is ablated (core.head_effects: one forward per head,
batched), for one chosen position or the mean over every position with a target.

It runs on its own background thread (circuit_job.Job, as the circuit panels do; not the map worker's: a
minute of forwards must not hold up the maps), with a progress bar and Cancel, and is cached per (forward
config, position, ablation): showing the same result again computes nothing. Click a cell to open that head.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from attnviz.core.runs.lru import LRU
from attnviz.explain import forward_config, prompt_config
from attnviz.ui.panels.circuit_job import Job, fill, progress_row
from attnviz.ui.panels.heat_table import HeatTable
from attnviz.ui.widgets.basic import named

CACHED = 16  # results kept (a config, a position and an ablation each)


def default_effects(config, position=None, ablation="zero", *, cancel=None, progress=None) -> np.ndarray:
    from attnviz.core import head_effects  # lands with the core's half of the feature; imported when first used

    return head_effects(config, position, ablation, cancel=cancel, progress=progress)


class HeadEffectsView(QWidget):
    """The panel. `show_result(result)` (GUI thread) starts or reuses a computation for that result."""

    sigOpen = Signal(int, int)  # (layer, head) of a clicked cell

    def __init__(self, compute=default_effects, parent: QWidget | None = None):
        super().__init__(parent)
        named(self, "headEffects")
        self.compute = compute  # (config, position, ablation, *, cancel, progress) -> (layers, heads) effects
        self.job = Job("head-effects", self)
        self.job.cache = self.cache = LRU(CACHED)  # the job fills it; refresh reads it
        self.job.sigProgress.connect(self._progress)
        self.job.sigDone.connect(self._done)
        self.job.sigFailed.connect(self._failed)
        self.effects: np.ndarray | None = None  # what the table shows
        self.shown_key = None
        self._config = None  # the forward config of the last result shown
        self._ablation = "zero"
        self._tokens: list[str] = []
        self._make_controls()
        self.table = named(HeatTable(cell_width=52), "headEffectsTable")
        self.table.setToolTip("Rows = layers, columns = heads: how much the target's log-probability drops when "
                              "that head alone is ablated (red: the head helps the prediction; blue: ablating it "
                              "helps). Click a cell to open that head.")
        self.table.clicked.connect(lambda index: self.sigOpen.emit(index.row(), index.column()))
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(self._top)
        layout.addWidget(self.infoLabel)
        layout.addWidget(self.table, 1)

    def _make_controls(self) -> None:
        self.positionCombo = named(QComboBox(), "headEffectsPositionCombo")
        self.positionCombo.setToolTip("The position whose target is scored, or the mean over every position "
                                      "with a target")
        self.positionCombo.addItem("all positions", None)
        self.positionCombo.currentIndexChanged.connect(self._position_changed)
        self.progress, self.cancelButton = progress_row("headEffects", "Cancel")
        self.progress.setToolTip("Forwards done: one per head, batched")
        self.cancelButton.clicked.connect(self._cancel_or_compute)
        self.infoLabel = named(QLabel("Open a trained toy or a language model"), "headEffectsInfo")
        self.infoLabel.setWordWrap(True)
        self._top = QHBoxLayout()
        self._top.addWidget(QLabel("Target at"))
        self._top.addWidget(self.positionCombo)
        self._top.addWidget(self.cancelButton)
        self._top.addWidget(self.progress)  # last: its kept place is blank space while hidden
        self._top.addStretch(1)

    def _key(self):
        position = self.positionCombo.currentData()
        return (self._config, position, self._ablation)

    def show_result(self, result) -> None:
        """A new result is on screen (this panel being shown): its effects, from the cache or computed."""
        # each head alone, against the intact model, on the text (a generation's written tokens are not scored)
        config = prompt_config(forward_config(result)).replace(ablate=())
        self._ablation = result.config.ablation
        self._set_positions(list(result.tokens[:result.prompt_length]))
        if config != self._config:
            self._config = config
        self.refresh()

    def refresh(self) -> None:
        if self._config is None:
            return
        key = self._key()
        if key == self.shown_key:
            return
        if (cached := self.cache.get(key)) is not None:
            self._show(key, cached)
        elif key != self.job.key:
            self._start(key)

    def _start(self, key) -> None:
        config, position, ablation = key

        def compute(cancel, progress) -> np.ndarray:
            return np.asarray(self.compute(config, position, ablation, cancel=cancel, progress=progress), np.float64)
        self.job.start(key, compute)
        self.progress.setRange(0, 0)
        self.progress.show()
        self.cancelButton.setText("Cancel")
        self.cancelButton.setEnabled(True)
        self.infoLabel.setText("Ablating each head in turn…")

    def stop(self) -> None:
        """Hidden: whatever runs is cancelled (a hidden panel costs nothing)."""
        if self.job.key is not None:
            self.job.cancel()
            self._stopped("Stopped while hidden")

    def _stopped(self, text: str) -> None:
        self.progress.hide()
        self.cancelButton.setText("Compute")
        self.infoLabel.setText(text)
        self.shown_key = None

    def _cancel_or_compute(self) -> None:
        if self.job.key is not None:
            self.job.cancel()
            self._stopped("Cancelled: Compute starts again")
        else:
            self.refresh()

    def _position_changed(self, *_) -> None:
        self.refresh()

    def _set_positions(self, tokens: list[str]) -> None:
        if tokens == self._tokens:
            return
        self._tokens = tokens
        chosen = self.positionCombo.currentData()
        self.positionCombo.blockSignals(True)
        self.positionCombo.clear()
        self.positionCombo.addItem("all positions", None)
        for i, t in enumerate(tokens):
            self.positionCombo.addItem(f"{i} {t}", i)
        self.positionCombo.setCurrentIndex(max(0, self.positionCombo.findData(chosen)))
        self.positionCombo.blockSignals(False)

    def _progress(self, key, done: int, total: int) -> None:
        if key == self.job.key:
            self.progress.setRange(0, max(total, 1))
            self.progress.setValue(done)

    def _failed(self, key, message: str) -> None:
        if self.job.finished(key):
            self._stopped(f"Not computed: {message}")
            self.table.heat.clear()
            self.effects = None

    def _done(self, key, effects: np.ndarray) -> None:
        if self.job.finished(key):  # (the job has cached it)
            self._show(key, effects)

    def _show(self, key, effects: np.ndarray) -> None:
        self.shown_key, self.effects = key, effects
        self.progress.hide()
        self.cancelButton.setText("Compute")
        self.cancelButton.setEnabled(False)  # shown: nothing to compute
        texts = [[f"{v:.2f}" for v in row] for row in effects]
        layers, heads = effects.shape
        fill(self.table, effects, [f"L{n}" for n in range(layers)], [f"H{h}" for h in range(heads)], self._tip,
             texts)  # the circuit panels' signed colouring: 0 is the middle colour
        where = ("over every position with a target" if key[1] is None
                 else f"at position {self.positionCombo.currentText()}")
        top = np.unravel_index(np.nanargmax(np.nan_to_num(effects, nan=-np.inf)), effects.shape)
        self.infoLabel.setText(f"Drop in the target's log-probability (nats) with each head {key[2]}-ablated, "
                               f"{where}; largest: L{top[0]} H{top[1]} ({effects[top]:.3g})")

    def _tip(self, row: int, col: int) -> str:
        return (f"layer {row} head {col}: ablating it alone lowers the target's log-probability by "
                f"{self.effects[row, col]:.4g} nats · click to open")
