"""patching: activation patching by head (core.patch_heads). The shown text is the clean run; type the
corrupted text (as many tokens), the answer and the wrong answer, press Compute: a layer x head table of
the share of the logit difference each head restores. Progress and Cancel while it runs (batched forwards on
a thread of its own); click a head to open it."""

from __future__ import annotations

from functools import partial

import numpy as np
from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFormLayout, QHBoxLayout, QLabel, QLineEdit, QVBoxLayout, QWidget

from attnviz.ui.panels.circuit_job import Job, circuit_config, fill, progress_row
from attnviz.ui.panels.heat_table import HeatTable
from attnviz.ui.widgets.basic import named


def compute_patching(config, corrupted: str, answer: str, wrong: str, cancel, progress) -> np.ndarray:
    from attnviz.core import patch_heads

    return patch_heads(config, corrupted, answer, wrong, cancel=cancel, progress=progress)


class PatchingView(QWidget):
    """The panel. `show_result(result)` keeps the clean run's config; Compute (or Enter) starts a computation."""

    sigOpen = Signal(int, int)

    def __init__(self, compute=compute_patching, parent: QWidget | None = None):
        super().__init__(parent)
        named(self, "patching")
        self.compute = compute
        self.job = Job("patching", self)
        self.job.sigProgress.connect(self._progress)
        self.job.sigDone.connect(self._done)
        self.job.sigFailed.connect(self._failed)
        self.scores: np.ndarray | None = None
        self._config = None
        self._make_controls()
        self.table = named(HeatTable(cell_width=52), "patchingTable")
        self.table.setToolTip("Rows = layers, columns = heads: the share of the clean-minus-corrupted logit "
                              "difference restored when that head's output comes from the clean text (1: all of it). "
                              "Click a head to open it.")
        self.table.clicked.connect(lambda index: self.sigOpen.emit(index.row(), index.column()))
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(self._form)
        layout.addLayout(self._row)
        layout.addWidget(self.infoLabel)
        layout.addWidget(self.table, 1)

    def _make_controls(self) -> None:
        self.corruptedEdit = named(QLineEdit(), "patchingCorruptedEdit")
        self.corruptedEdit.setToolTip("The text with the part the answer depends on changed (e.g. one name for "
                                      "another): as many tokens as the shown text")
        self.answerEdit = named(QLineEdit(), "patchingAnswerEdit")
        self.answerEdit.setToolTip("The shown (clean) text's answer: one token, with its leading space where words "
                                   "have one (' Mary')")
        self.wrongEdit = named(QLineEdit(), "patchingWrongEdit")
        self.wrongEdit.setToolTip("The answer the corrupted text points to: one token")
        self._form = QFormLayout()
        self._form.addRow("Corrupted text", self.corruptedEdit)
        answers = QHBoxLayout()
        for edit in (self.answerEdit, self.wrongEdit):
            edit.returnPressed.connect(self.start)
            answers.addWidget(edit)
        self.corruptedEdit.returnPressed.connect(self.start)
        self._form.addRow("Answer, wrong", answers)
        self.progress, self.computeButton = progress_row("patching")
        self.computeButton.clicked.connect(self._compute_or_cancel)
        self.infoLabel = named(QLabel("The shown text is the clean run: type a corrupted text, the answer and the "
                                      "wrong answer, then Compute"), "patchingInfo")
        self.infoLabel.setWordWrap(True)
        self._row = QHBoxLayout()
        self._row.addWidget(self.computeButton)
        self._row.addWidget(self.progress)
        self._row.addStretch(1)

    def show_result(self, result) -> None:
        self._config = circuit_config(result)

    def _key(self):
        return (self._config, self.corruptedEdit.text(), self.answerEdit.text(), self.wrongEdit.text())

    def start(self) -> None:
        if self._config is None:
            self.infoLabel.setText("Open toy-induction or a decoder-only language model first")
            return
        key = self._key()
        if self.job.start(key, partial(self.compute, *key)):
            self.progress.setRange(0, 0)
            self.progress.show()
            self.computeButton.setText("Cancel")
            self.infoLabel.setText("Patching each head from the clean run…")

    def stop(self) -> None:
        if self.job.key is not None:
            self.job.cancel()
            self._stopped("Stopped while hidden: Compute starts again")

    def _compute_or_cancel(self) -> None:
        if self.job.key is not None:
            self.job.cancel()
            self._stopped("Cancelled: Compute starts again")
        else:
            self.start()

    def _stopped(self, text: str) -> None:
        self.progress.hide()
        self.computeButton.setText("Compute")
        self.infoLabel.setText(text)

    def _progress(self, key, done: int, total: int) -> None:
        if key == self.job.key:
            self.progress.setRange(0, max(total, 1))
            self.progress.setValue(done)

    def _failed(self, key, message: str) -> None:
        if self.job.finished(key):
            self._stopped(f"Not computed: {message}")

    def _done(self, key, scores: np.ndarray) -> None:
        self.job.finished(key)
        self._stopped("")
        self.scores = scores
        layers, heads = scores.shape
        texts = [[f"{v:.2f}" for v in row] for row in scores]
        fill(self.table, scores, [f"L{n}" for n in range(layers)], [f"H{h}" for h in range(heads)], self._tip, texts)
        top = np.unravel_index(np.nanargmax(scores), scores.shape)
        self.infoLabel.setText(f"Share of logit({key[2]!r}) − logit({key[3]!r}) restored by each head's clean output; "
                               f"most: L{top[0]} H{top[1]} ({scores[top]:.3f})")

    def _tip(self, row: int, col: int) -> str:
        return f"layer {row} head {col}: restores {self.scores[row, col]:.4g} of the difference · click to open"
