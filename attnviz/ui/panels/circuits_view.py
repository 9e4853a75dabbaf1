"""circuits: the open head's QK and OV circuits (core.head_circuits), tokens on both axes, and the earlier
heads it composes with most (core.composition_scores), each a link that opens that head. The model view
marks those heads on their tiles and gives every head's copying score in its hover text (sigScores), and keeps
doing so for whatever head is open once the panel has computed its model's scores (marks_for).

Computed on a thread of its own (circuit_job.Job) when the panel is shown and the open head changes; the
composition and copying scores are made once per model and text."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QGridLayout, QLabel, QVBoxLayout, QWidget

from attnviz.core.runs.lru import LRU
from attnviz.ui.panels.circuit_job import Job, circuit_config, fill
from attnviz.ui.panels.heat_table import HeatTable
from attnviz.ui.widgets.basic import named

MAX_COLUMN_PX = 64  # a longer token is elided in its column's header (whole in the cells' tooltips)
TOP = 3  # earlier heads listed (and marked in the model view) per open head
_SCORES: LRU = LRU(2)  # config -> (copying, composition): per model and text, not per head


@dataclass(frozen=True)
class CircuitBundle:
    circuits: object  # core.circuits.HeadCircuits
    copying: np.ndarray  # (layers, heads)
    marks: tuple[tuple[int, int, str, float], ...]  # the earlier heads composing most: (layer, head, kind, score)


def top_composition(composition: dict[str, np.ndarray], layer: int, head: int, n: int = TOP):
    """The n highest (layer, head, kind, score) of earlier heads feeding (layer, head), any kind."""
    found = []
    for kind, scores in composition.items():
        column = scores[:layer, :, layer, head]
        found += [(int(l1), int(h1), kind.upper(), float(column[l1, h1]))
                  for l1, h1 in np.argwhere(np.isfinite(column))]
    return tuple(sorted(found, key=lambda m: -m[3])[:n])


def compute_circuits(config, layer: int, head: int, cancel, progress) -> CircuitBundle:
    from attnviz.core import composition_scores, copying_scores, head_circuits
    from attnviz.core.runs.result import Cancelled

    if (scores := _SCORES.get(config)) is None:
        scores = (copying_scores(config, cancel=cancel), composition_scores(config, cancel=cancel))
        _SCORES.put(config, scores)
    if cancel():  # superseded (another head, a closed window): the model is left to the newer work
        raise Cancelled
    copying, composition = scores
    return CircuitBundle(head_circuits(config, layer, head), copying, top_composition(composition, layer, head))


class CircuitsView(QWidget):
    """The panel. `show_result(result, head)` (GUI thread) computes or reuses that head's circuits."""

    sigOpen = Signal(int, int)  # (layer, head) of a clicked composition link
    sigScores = Signal(object, object)  # (copying (layers, heads) or None, marks) for the model view

    def __init__(self, compute=compute_circuits, parent: QWidget | None = None):
        super().__init__(parent)
        named(self, "circuits")
        self.compute = compute
        self.job = Job("circuits", self)
        self.job.sigDone.connect(self._done)
        self.job.sigFailed.connect(self._failed)
        self.bundle: CircuitBundle | None = None
        self.shown_key = None
        self.infoLabel = named(QLabel("Open toy-induction or a decoder-only language model"), "circuitsInfo")
        self.infoLabel.setWordWrap(True)
        self.compositionLabel = named(QLabel(), "circuitsComposition")
        self.compositionLabel.setTextFormat(Qt.RichText)
        self.compositionLabel.setToolTip("The earlier heads whose output this head reads most, by the composition "
                                         "score ||W_OV·W||/(||W_OV|| ||W||): Q (into its queries), K (its keys), V "
                                         "(its values). Click one to open it.")
        self.compositionLabel.linkActivated.connect(self._link)
        self.qkTable = named(HeatTable(cell_width=24), "circuitsQkTable")
        self.qkTable.setToolTip("QK circuit: rows the query's token, columns the key's; red where the query "
                                "attends more (q·k before the scale)")
        self.ovTable = named(HeatTable(cell_width=24), "circuitsOvTable")
        self.ovTable.setToolTip("OV circuit: rows the token attended to, columns the output token; red where "
                                "attending to the row's token raises that token's logit")
        for table in (self.qkTable, self.ovTable):
            table.verticalHeader().setDefaultSectionSize(16)  # a whole small vocabulary in a short dock
        grid = QGridLayout()
        for col, (title, table) in enumerate((("QK: which token attends to which", self.qkTable),
                                              ("OV: what attending to a token writes", self.ovTable))):
            grid.addWidget(QLabel(title), 0, col)
            grid.addWidget(table, 1, col)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.infoLabel)
        layout.addWidget(self.compositionLabel)
        layout.addLayout(grid, 1)

    def show_result(self, result, head: int | None) -> None:
        config = circuit_config(result)
        key = (config, result.config.layer, head if head is not None and head >= 0 else 0)
        if key != self.shown_key and key != self.job.key and self.job.start(key, partial(self.compute, *key)):
            self.infoLabel.setText(f"Computing L{key[1]} H{key[2]}'s circuits…")

    def stop(self) -> None:
        self.job.cancel()

    @staticmethod
    def marks_for(result, head: int | None) -> tuple[np.ndarray | None, tuple]:
        """(copying scores, composition marks) of a result's open head where this panel has computed its model's
        scores (once opened, the model view keeps marking whatever head is open), else (None, ())."""
        scores = _SCORES.get(circuit_config(result)) if result is not None else None
        if scores is None:
            return None, ()
        layer = result.config.layer
        if not 0 <= layer < scores[0].shape[0]:
            return None, ()
        return scores[0], top_composition(scores[1], layer, head if head is not None and head >= 0 else 0)

    def _link(self, href: str) -> None:
        layer, head = (int(x) for x in href.split("."))
        self.sigOpen.emit(layer, head)

    def _failed(self, key, message: str) -> None:
        if self.job.finished(key):
            self.shown_key, self.bundle = None, None
            self.infoLabel.setText(f"No circuits: {message}")
            self.compositionLabel.clear()
            self.qkTable.heat.clear()
            self.ovTable.heat.clear()
            self.sigScores.emit(None, ())

    def _done(self, key, bundle: CircuitBundle) -> None:
        self.job.finished(key)
        self.shown_key, self.bundle = key, bundle
        c = bundle.circuits
        over = (f"the whole vocabulary ({len(c.tokens)} tokens)" if c.over == "vocabulary"
                else f"the text's {len(c.tokens)} tokens at their positions")
        self.infoLabel.setText(f"L{c.layer} H{c.head}: circuits over {over}; copying score {c.copying:.3f} "
                               "(1: attending to a token raises that same token)")
        links = [f'<a href="{l1}.{h1}">L{l1} H{h1}</a> {kind} {score:.3f}' for l1, h1, kind, score in bundle.marks]
        self.compositionLabel.setText("Composes most with: " + (", ".join(links) if links else "no earlier layer"))
        tokens = list(c.tokens)
        for table in (self.qkTable, self.ovTable):  # words need wider columns than the toys' letters
            widest = max((table.fontMetrics().horizontalAdvance(t) for t in tokens), default=0)
            table.horizontalHeader().setDefaultSectionSize(max(24, min(MAX_COLUMN_PX, widest + 12)))
        fill(self.qkTable, c.qk, tokens, tokens, partial(self._tip, "qk"))
        fill(self.ovTable, c.ov, tokens, tokens, partial(self._tip, "ov"))
        self.sigScores.emit(bundle.copying, bundle.marks)

    def _tip(self, which: str, row: int, col: int) -> str:
        c = self.bundle.circuits
        if which == "qk":
            return f"query {c.tokens[row]!r} · key {c.tokens[col]!r}: q·k = {c.qk[row, col]:.4g}"
        return f"attending to {c.tokens[row]!r} adds {c.ov[row, col]:.4g} to the logit of {c.tokens[col]!r}"
