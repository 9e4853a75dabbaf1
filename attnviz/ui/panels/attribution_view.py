"""logitAttribution: each head's direct share of one logit (core.head_logit_attribution), layer x head; a
click on a head shows its share split over the tokens it read (a strip over the text) and opens it.

The position, the token (the model's top predictions there) and the baseline (none, or another of them) are
chosen above the table; computed on a thread of its own, cached per choice."""

from __future__ import annotations

from functools import partial

import numpy as np
from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from attnviz.ui.panels.circuit_job import Job, circuit_config, fill
from attnviz.ui.panels.heat_table import HeatTable
from attnviz.ui.widgets.basic import named

CHOICES = 10  # predictions offered as the token and the baseline


def compute_attribution(config, position, token, baseline, cancel, progress):
    from attnviz.core import head_logit_attribution
    from attnviz.core.runs.result import Cancelled

    if cancel():  # superseded before it began: leave the model to the newer work
        raise Cancelled
    return head_logit_attribution(config, position, token, baseline)


class AttributionView(QWidget):
    """The panel. `show_result(result)` (GUI thread) computes or reuses the attribution of its choices."""

    sigOpen = Signal(int, int)

    def __init__(self, compute=compute_attribution, parent: QWidget | None = None):
        super().__init__(parent)
        named(self, "logitAttribution")
        self.compute = compute
        self.job = Job("logit-attribution", self)
        self.job.sigDone.connect(self._done)
        self.job.sigFailed.connect(self._failed)
        self.attribution = None
        self.shown_key = None
        self._config = None
        self._result = None
        self._make_controls()
        self.table = named(HeatTable(cell_width=52), "logitAttributionTable")
        self.table.setToolTip("Rows = layers, columns = heads: each head's direct share of the logit difference "
                              "(red raises the token over the baseline, blue lowers it). Click a head for the tokens "
                              "its share came from, and to open it.")
        self.table.clicked.connect(self._clicked)
        self.sourcesLabel = named(QLabel("Click a head: where its share came from"), "logitAttributionSourcesInfo")
        self.sources = named(HeatTable(cell_width=44), "logitAttributionSources")
        self.sources.setToolTip("The clicked head's share split over the key positions it read (α · v · W_O)")
        self.sources.setMaximumHeight(64)
        self.sources.hide()  # until a head is clicked: the layer x head table takes the room
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(self._top)
        layout.addWidget(self.infoLabel)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.sourcesLabel)
        layout.addWidget(self.sources)

    def _make_controls(self) -> None:
        self.positionCombo = named(QComboBox(), "logitAttributionPositionCombo")
        self.positionCombo.setToolTip("The position whose logit is split (default: the last)")
        self.tokenCombo = named(QComboBox(), "logitAttributionTokenCombo")
        self.tokenCombo.setToolTip("The token whose logit is split: the model's top predictions at the position")
        self.baselineCombo = named(QComboBox(), "logitAttributionBaselineCombo")
        self.baselineCombo.setToolTip("Subtract this token's logit (a logit difference), or none")
        for combo in (self.positionCombo, self.tokenCombo, self.baselineCombo):
            combo.currentIndexChanged.connect(self._changed)
        self.infoLabel = named(QLabel("Open toy-induction or a decoder-only language model"), "logitAttributionInfo")
        self.infoLabel.setWordWrap(True)
        self._top = QHBoxLayout()
        for text, combo in (("At", self.positionCombo), ("token", self.tokenCombo), ("minus", self.baselineCombo)):
            self._top.addWidget(QLabel(text))
            self._top.addWidget(combo)
        self._top.addStretch(1)

    def show_result(self, result) -> None:
        config = circuit_config(result)
        if config != self._config:
            self._config, self._result = config, result
            self._fill_positions(list(result.tokens[:result.prompt_length]))
        self.refresh()

    def _fill_positions(self, tokens: list[str]) -> None:
        combo = self.positionCombo
        combo.blockSignals(True)
        combo.clear()
        for i, t in enumerate(tokens):
            combo.addItem(f"{i} {t}", i)
        combo.setCurrentIndex(len(tokens) - 1)
        combo.blockSignals(False)
        self._fill_tokens()

    def _fill_tokens(self) -> None:
        """The top predictions at the chosen position (the first chosen), and the same list as baselines."""
        result, p = self._result, self.positionCombo.currentData()
        ids = result.top_ids if result is not None else None
        labels = result.top_tokens if result is not None else None
        pairs = [] if ids is None or p is None else list(zip(ids[p][:CHOICES], labels[p][:CHOICES]))
        for combo, first in ((self.tokenCombo, None), (self.baselineCombo, ("none", None))):
            combo.blockSignals(True)
            combo.clear()
            if first is not None:
                combo.addItem(*first)
            for token_id, label in pairs:
                combo.addItem(f"{label!r}", int(token_id))
            combo.setCurrentIndex(0)
            combo.blockSignals(False)

    def pick(self, position: int, token_rank: int = 0, baseline_rank: int = -1) -> bool:
        """Choose the position, the token to split and the baseline by their ranks in the position's top
        predictions (-1: leave as chosen), as a click on the predictions strip does; False for a position the
        panel does not list."""
        index = self.positionCombo.findData(position)
        if index < 0:
            return False
        if index != self.positionCombo.currentIndex():
            self.positionCombo.blockSignals(True)
            self.positionCombo.setCurrentIndex(index)
            self.positionCombo.blockSignals(False)
            self._fill_tokens()
        for combo, rank in ((self.tokenCombo, token_rank), (self.baselineCombo, baseline_rank + 1)):
            if 0 <= rank < combo.count() and (combo is self.tokenCombo or baseline_rank >= 0):
                combo.blockSignals(True)
                combo.setCurrentIndex(rank)
                combo.blockSignals(False)
        self.refresh()
        return True

    def _changed(self, *_) -> None:
        if self.sender() is self.positionCombo:
            self._fill_tokens()
        self.refresh()

    def _key(self):
        return (self._config, self.positionCombo.currentData(), self.tokenCombo.currentData(),
                self.baselineCombo.currentData())

    def refresh(self) -> None:
        if self._config is None:
            return
        key = self._key()
        if key != self.shown_key and key != self.job.key and self.job.start(key, partial(self.compute, *key)):
            self.infoLabel.setText("Splitting the logit over the heads…")

    def stop(self) -> None:
        self.job.cancel()

    def _failed(self, key, message: str) -> None:
        if self.job.finished(key):
            self.shown_key, self.attribution = None, None
            self.infoLabel.setText(f"No attribution: {message}")
            self.table.heat.clear()
            self._clear_sources()

    def _done(self, key, attribution) -> None:
        self.job.finished(key)
        self.shown_key, self.attribution = key, attribution
        a = attribution
        against = "" if a.baseline is None else f" minus {self.baselineCombo.currentText()}"
        token = self.tokenCombo.currentText() or a.token
        self.infoLabel.setText(f"Logit of {token}{against} at position {a.position}: "
                               f"{a.total:.3f} = heads {a.heads.sum():.3f} + the rest {a.rest:.3f} (embeddings, MLPs, "
                               "biases); each norm's scale frozen at the position")
        layers, heads = a.heads.shape
        texts = [[f"{v:.2f}" for v in row] for row in a.heads]
        fill(self.table, a.heads, [f"L{n}" for n in range(layers)], [f"H{h}" for h in range(heads)], self._tip, texts)
        self._clear_sources()

    def _clear_sources(self) -> None:
        self.sources.heat.clear()
        self.sources.hide()
        self.sourcesLabel.setText("Click a head: where its share came from")

    def _tip(self, row: int, col: int) -> str:
        return f"layer {row} head {col}: adds {self.attribution.heads[row, col]:.4g} · click for its sources"

    def _clicked(self, index) -> None:
        layer, head = index.row(), index.column()
        self.show_sources(layer, head)
        self.sigOpen.emit(layer, head)

    def show_sources(self, layer: int, head: int) -> None:
        a = self.attribution
        if a is None:
            return
        row = a.sources[layer, head][None]
        fill(self.sources, row, [f"L{layer} H{head}"], list(a.tokens),
             lambda r, c: f"{a.tokens[c]!r} (position {c}): {row[0, c]:.4g}", [[f"{v:.2f}" for v in row[0]]])
        self.sources.show()
        top = int(np.argmax(np.abs(row[0])))
        self.sourcesLabel.setText(f"L{layer} H{head}'s share {a.heads[layer, head]:.3f} by the token it read; most "
                                  f"from {a.tokens[top]!r} at {top}")
