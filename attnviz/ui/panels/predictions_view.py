"""predictionStrip: under the maps, one cell per position: the input token, the model's top-1 next
token and its probability, the cell coloured by the probability given to the target (the token that
actually comes next, or the toy's task answer). Hover a cell for the top k. With heads ablated each
cell reads before → after, and the header gives the KL divergence from the unablated model.
The numbers come from the worker (explain.prediction_frames); this widget only paints them.
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np
from PySide6.QtCore import QEvent, QPointF, QRect, QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QFont, QPainter, QPen
from PySide6.QtWidgets import QHBoxLayout, QLabel, QMenu, QScrollArea, QSizePolicy, QToolTip, QVBoxLayout, QWidget

from attnviz import colormaps, style
from attnviz.explain import PredictionFrames
from attnviz.models.tokens import display
from attnviz.ui.maps.mosaic import GENERATED_INK, ROW_MARK
from attnviz.ui.widgets.basic import named

CELL_MIN, CELL_MAX = 58, 120  # px per position: few positions fill the width, many scroll
CELL_ABLATED = 92
COLUMN_ROOM = 300  # px of the maps' column below which the strip folds away
ROWS_PX = 32  # two lines of text: the strip takes little from the maps
NO_TARGET = QColor(style.NO_TARGET)


def _ink(colour: QColor) -> QColor:
    return QColor(style.ink_on(colour.red(), colour.green(), colour.blue()))


def _p(value: float) -> str:
    """A probability in few characters: .89, 1.0, 3e-04."""
    if not math.isfinite(value):
        return "—"
    return f"{value:.2f}".lstrip("0").replace("1.00", "1.0") if value >= 0.01 else f"{value:.0e}"


PENDING = "Predictions: computing the output head for the shown input …"

class _Cells(QWidget):
    """The painted row of cells (inside a horizontal scroll area)."""

    def __init__(self, strip: PredictionStrip):
        super().__init__()
        self.strip = strip
        self.setFixedHeight(ROWS_PX)
        self.setMouseTracking(True)

    def count(self) -> int:
        f = self.strip.frames
        return 0 if f is None or f.message else len(f.tokens)

    def cell_width(self) -> float:
        n = self.count()
        return max(self.strip.cell_min(), min(CELL_MAX, self.width() / n)) if n else CELL_MIN

    def paintEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        n = self.count()
        if not n:
            return
        painter = QPainter(self)
        w = self.cell_width()
        first = max(0, int(event.rect().left() // w))
        last = min(n, int(event.rect().right() // w) + 1)
        bold = QFont(self.font())
        bold.setBold(True)
        lines = self.strip.cell_lines
        line_h = ROWS_PX // 2
        for i in range(first, last):
            rect = QRect(int(i * w), 0, int(w) - 1, ROWS_PX)
            colour = self.strip.colour(i)
            painter.fillRect(rect, colour)
            painter.setPen(_ink(colour))
            for k, text in enumerate(lines(i)):
                painter.setFont(bold if k == 1 else self.font())
                box = rect.adjusted(3, k * line_h, -3, 0)
                box.setHeight(line_h)
                painter.drawText(box, Qt.AlignHCenter | Qt.AlignVCenter,
                                 painter.fontMetrics().elidedText(text, Qt.ElideRight, box.width()))
        self._paint_generation(painter, w, n)
        painter.end()

    def _paint_generation(self, painter: QPainter, w: float, n: int) -> None:
        """A generation: a line where the prompt ends; the chosen step's predicting cell outlined."""
        p, cell = self.strip.prompt_length, self.strip.step_cell()
        if p is not None and 0 < p < n:
            painter.setPen(QPen(GENERATED_INK, 2))
            painter.drawLine(QPointF(p * w - 1, 0), QPointF(p * w - 1, ROWS_PX))
        if cell is not None and cell < n:
            painter.setPen(QPen(ROW_MARK, 2))
            painter.drawRect(QRectF(cell * w + 1, 1, w - 3, ROWS_PX - 2))

    def mousePressEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        """Click: split the logit of the cell's top-1 token in the Logit attribution panel; right-click: a menu of
        its top k, to split or to subtract (the baseline)."""
        i = int(event.position().x() // self.cell_width())
        if not 0 <= i < self.count():
            return
        if event.button() == Qt.RightButton:
            self._pick_menu(i).exec(event.globalPosition().toPoint())
        elif event.button() == Qt.LeftButton:
            self.strip.sigPicked.emit(i, 0, -1)

    def _pick_menu(self, i: int) -> QMenu:
        menu = QMenu(self)
        top = self.strip.frames.top_tokens[i]
        for k, token in enumerate(top):
            menu.addAction(f"Split the logit of {display(token)!r}", partial(self.strip.sigPicked.emit, i, k, -1))
        menu.addSeparator()
        for k, token in enumerate(top):
            menu.addAction(f"… minus the logit of {display(token)!r}", partial(self.strip.sigPicked.emit, i, -1, k))
        return menu

    def event(self, event) -> bool:
        if event.type() == QEvent.ToolTip:
            i = int(event.pos().x() // self.cell_width())
            if 0 <= i < self.count():
                QToolTip.showText(event.globalPos(), self.strip.tooltip(i), self)
            else:
                QToolTip.hideText()
            return True
        return super().event(event)


class PredictionStrip(QWidget):
    """The strip: a header line (what the colour means, the KL of an ablation) over the cells."""

    # a cell picked for the Logit attribution panel: (position, rank of the token to split, rank of the baseline
    # to subtract), ranks in the cell's top k, -1: leave that choice as it is
    sigPicked = Signal(int, int, int)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        named(self, "predictionStrip")
        self.frames: PredictionFrames | None = None
        self.lut = colormaps.lut(colormaps.DEFAULT_SEQUENTIAL)
        self.prompt_length: int | None = None  # a generation: where the prompt ends
        self.step: int | None = None  # a generation's chosen token's position (the cell before predicts it)
        self.infoLabel = named(QLabel(), "predictionInfo")
        self.infoLabel.setTextFormat(Qt.PlainText)
        self.cells = _Cells(self)
        self.scroll = QScrollArea()
        self.scroll.setWidget(self.cells)
        self.scroll.setWidgetResizable(True)
        self.scroll.setVerticalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.scroll.setFrameShape(QScrollArea.NoFrame)
        # fixed: a run with or without an output head keeps the maps' size (no relayout per result)
        self.scroll.setFixedHeight(ROWS_PX + self.scroll.horizontalScrollBar().sizeHint().height() + 2)
        self.scroll.setMinimumHeight(0)
        self.setToolTip("The model's prediction at each position: the input token, the most likely next token "
                        "and its probability; the colour is the probability of the target (what comes next). "
                        "Hover a cell for the top k; click one to split its top token's logit by head (Logit "
                        "attribution), right-click for the others and a baseline.")
        row = QHBoxLayout()
        row.addWidget(self.infoLabel, 1)
        # one height whether or not the run has an output head (a result never lays the maps out again);
        # folded to nothing in a cramped column (fold_below), so the head grid keeps its rows
        self._full = self.scroll.height() + self.infoLabel.sizeHint().height() + 4
        self._room, self._column_h = 0, 10 ** 6
        self.setMaximumHeight(self._full)
        self.setSizePolicy(QSizePolicy.Preferred, QSizePolicy.Maximum)
        layout = QVBoxLayout(self)
        layout.setSizeConstraint(QVBoxLayout.SetNoConstraint)  # its children's minimum is not the strip's
        layout.setContentsMargins(0, 2, 0, 0)
        layout.setSpacing(1)
        layout.addLayout(row)
        layout.addWidget(self.scroll)
        self.show_frames(None)

    def fold_below(self, column: QWidget, room: int = COLUMN_ROOM) -> None:
        """Fold to nothing while `column` (the maps' column) is shorter than `room`: in a cramped window the
        head grid keeps its rows. Only a resize changes it, never a result."""
        self._room = room
        column.installEventFilter(self)

    def eventFilter(self, watched, event) -> bool:  # noqa: N802 (Qt's name)
        if event.type() == QEvent.Resize:
            self._column_h = event.size().height()
            self._fit()
        return False

    def _fit(self) -> None:
        """Nothing in a cramped column (a resize only, never a result)."""
        height = self._full if self._column_h >= self._room else 0
        if self.maximumHeight() != height:
            self.setMaximumHeight(height)

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        return QSize(super().sizeHint().width(), self._full)

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt's name): squeezed before the maps and the tensor view
        return QSize(0, 0)

    def show_frames(self, frames: PredictionFrames | None, colormap: str | None = None) -> None:
        if colormap is not None:
            self.lut = colormaps.lut(colormap)
        if frames is not None and frames is self.frames:
            return
        self.frames = frames
        n = self.cells.count()
        self.cells.setMinimumWidth(int(n * self.cell_min()))
        self.infoLabel.setText(self.header())
        self.cells.update()

    def show_pending(self) -> None:
        """New maps are on screen and their predictions follow: the strip says so, empty (the last result's
        predictions belong to another input)."""
        self.frames = None
        self.cells.setMinimumWidth(0)
        self.cells.update()
        self.infoLabel.setText(PENDING)

    def set_generation(self, prompt_length: int | None, step: int | None) -> None:
        """Mark a generation's prompt boundary and the chosen token `step` (its position; None: no step)."""
        if (prompt_length, step) == (self.prompt_length, self.step):
            return
        self.prompt_length, self.step = prompt_length, step
        self.infoLabel.setText(self.header())
        cell = self.step_cell()
        if cell is not None:
            w = self.cells.cell_width()
            self.scroll.ensureVisible(int((cell + 0.5) * w), 0, int(w), 0)
        self.cells.update()

    def step_cell(self) -> int | None:
        """The position whose prediction the chosen step's token is (the one before it), if shown."""
        if self.step is None or not 0 < self.step <= self.cells.count():
            return None
        return self.step - 1

    def step_text(self) -> str:
        """The chosen step's prediction: what the position before it gave the token written, and its top k."""
        f, i = self.frames, self.step_cell()
        top = ", ".join(f"{t!r} {_p(float(p))}" for t, p in zip(f.top_tokens[i], f.top_probs[i]))
        written = f.tokens[self.step] if self.step < len(f.tokens) else "?"
        return f"Step: position {i} {f.tokens[i]!r} → wrote {written!r} · top {len(f.top_tokens[i])}: {top}"

    def header(self) -> str:
        f = self.frames
        if f is None:
            return PENDING if self.infoLabel.text() == PENDING else "Predictions: waiting for a run"
        if f.message:
            return f"Predictions: {f.message}"
        if self.step_cell() is not None:
            return self.step_text()
        text = "Predictions · top-1 and its probability · colour = probability of the target (grey: no target)"
        if f.kl is not None:
            finite = f.kl[np.isfinite(f.kl)]
            mean = float(finite.mean()) if finite.size else float("nan")
            text = (f"Ablated {', '.join(f.ablate)} ({f.ablation}) · before → after · KL(unablated ‖ ablated) "
                    f"mean {mean:.3g} nats, max {float(finite.max(initial=0)):.3g} · colour = target "
                    f"probability after")
        return text

    def cell_min(self) -> int:
        """Before → after needs room for two probabilities."""
        f = self.frames
        return CELL_ABLATED if f is not None and f.before_probs is not None else CELL_MIN

    def top1(self) -> list[str]:
        """The top-1 token at each position, as shown."""
        f = self.frames
        return [] if f is None or f.message else [row[0] for row in f.top_tokens]

    def colour(self, i: int) -> QColor:
        p = float(self.frames.target_probs[i])
        if not math.isfinite(p):
            return NO_TARGET
        r, g, b, a = self.lut[int(round(min(max(p, 0.0), 1.0) * (colormaps.DATA_LEVELS - 1)))]
        return QColor(int(r), int(g), int(b), int(a))

    def cell_lines(self, i: int) -> tuple[str, str]:
        """(the position and its input token, the top-1 and its probability; before → after with an ablation)."""
        f = self.frames
        token = f"{i} {display(f.tokens[i])}"  # a space or newline token as on the axes, not blank
        top = display(f.top_tokens[i][0])
        if f.before_probs is None:
            return token, f"{top} {_p(float(f.top_probs[i, 0]))}"
        return (token, f"{display(f.before_tokens[i][0])}→{top} "
                       f"{_p(float(f.before_probs[i, 0]))}→{_p(float(f.top_probs[i, 0]))}")

    def tooltip(self, i: int) -> str:
        f = self.frames
        lines = [f"position {i}: input {f.tokens[i]!r}"]
        target = f.target_tokens[i]
        if target:
            after = _p(float(f.target_probs[i]))
            before = "" if f.before_target is None else f"{_p(float(f.before_target[i]))} → "
            lines.append(f"target {target!r}: p = {before}{after}")
        else:
            lines.append("no target at this position")
        if f.kl is not None:
            lines.append(f"KL(unablated ‖ ablated) = {float(f.kl[i]):.3g} nats")
            lines.append(f"top {len(f.before_tokens[i])} before ablation:")
            lines += [f"  {t!r} {_p(float(p))}" for t, p in zip(f.before_tokens[i], f.before_probs[i])]
            lines.append(f"top {len(f.top_tokens[i])} after:")
        else:
            lines.append(f"top {len(f.top_tokens[i])}:")
        lines += [f"  {t!r} {_p(float(p))}" for t, p in zip(f.top_tokens[i], f.top_probs[i])]
        return "\n".join(lines)
