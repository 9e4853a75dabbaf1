"""A table whose cells are coloured by a value: the logit lens (layers x positions, the top-1 token in
each cell) and the head effects (layers x heads). The model reads the worker's arrays on demand, so
showing a new result costs one model reset, whatever the number of cells; Qt asks only for the cells
it paints."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from PySide6.QtCore import QAbstractTableModel, QModelIndex, Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableView

from attnviz import style

# Qt asks data() for seven roles of every cell it paints (3,780 calls for a 30 x 9 table painted twice):
# plain ints compared with ints and a colour picked from lists, not Qt enums compared with an int or NumPy
# scalars indexed per call, which made painting a table of head effects slow (benchmarks/README.md, Behind the code)
DISPLAY, BACKGROUND, FOREGROUND = (int(r.value) for r in (Qt.DisplayRole, Qt.BackgroundRole, Qt.ForegroundRole))
TOOLTIP, ALIGNMENT = int(Qt.ToolTipRole.value), int(Qt.TextAlignmentRole.value)
CENTRED = int(Qt.AlignCenter.value)


class HeatModel(QAbstractTableModel):
    """texts (rows x cols strings), colour indices (rows, cols) uint8 into a 256-entry RGBA LUT,
    header labels and a tooltip function (row, col) -> str."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.texts: list | tuple = ()
        self.index_ = np.zeros((0, 0), np.uint8)
        self._index: list[list[int]] = []  # index_ as lists: what data() reads
        self.rows: list[str] = []
        self.cols: list[str] = []
        self.tip: Callable[[int, int], str] | None = None
        self._colours: list[QColor] = []
        self._inks: list[QColor] = []

    def set_cells(self, texts, index: np.ndarray, lut: np.ndarray, rows: list[str], cols: list[str],
                  tip: Callable[[int, int], str] | None = None) -> None:
        self.beginResetModel()
        self.texts, self.index_, self.rows, self.cols, self.tip = texts, index, rows, cols, tip
        self._index = np.asarray(index).tolist()
        self._colours = [QColor(int(r), int(g), int(b), int(a)) for r, g, b, a in lut]
        # dark cells get light text, light ones dark; a nearly clear cell shows the table's own light background
        self._inks = [QColor(style.ink_on(r, g, b) if a > 100 else style.DARK_INK) for r, g, b, a in lut.astype(float)]
        self.endResetModel()

    def clear(self) -> None:
        self.set_cells((), np.zeros((0, 0), np.uint8), np.zeros((256, 4), np.uint8), [], [])

    def rowCount(self, parent=None) -> int:  # noqa: N802 (Qt's name)
        return 0 if parent is not None and parent.isValid() else self.index_.shape[0]

    def columnCount(self, parent=None) -> int:  # noqa: N802 (Qt's name)
        return 0 if parent is not None and parent.isValid() else self.index_.shape[1]

    def data(self, index: QModelIndex, role: int = DISPLAY):
        role = role if type(role) is int else int(getattr(role, "value", role))
        if role == DISPLAY:
            return self.texts[index.row()][index.column()] if self.texts else None
        if role == BACKGROUND:
            return self._colours[self._index[index.row()][index.column()]]
        if role == FOREGROUND:
            return self._inks[self._index[index.row()][index.column()]]
        if role == ALIGNMENT:
            return CENTRED
        if role == TOOLTIP and self.tip is not None:
            return self.tip(index.row(), index.column())
        return None

    def headerData(self, section: int, orientation, role: int = Qt.DisplayRole):  # noqa: N802 (Qt's name)
        if role != Qt.DisplayRole:
            return None
        labels = self.cols if orientation == Qt.Horizontal else self.rows
        return labels[section] if section < len(labels) else None


class HeatTable(QTableView):
    """A read-only QTableView on a HeatModel with compact cells."""

    def __init__(self, cell_width: int = 56, parent=None):
        super().__init__(parent)
        self.heat = HeatModel(self)
        self.setModel(self.heat)
        self.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.setSelectionMode(QAbstractItemView.SingleSelection)
        self.setWordWrap(False)
        self.setTextElideMode(Qt.ElideRight)  # a long token is cut, its whole text in the tooltip
        self.horizontalHeader().setSectionResizeMode(QHeaderView.Fixed)
        self.horizontalHeader().setDefaultSectionSize(cell_width)
        self.horizontalHeader().setTextElideMode(Qt.ElideRight)
        self.verticalHeader().setSectionResizeMode(QHeaderView.Fixed)
        self.verticalHeader().setDefaultSectionSize(22)
        # A scroll bar that appears when the first rows come re-lays out the table inside that result's paint
        # (the end of a head-effects run; benchmarks/README.md, Behind the code): it is always there instead
        self.setVerticalScrollBarPolicy(Qt.ScrollBarAlwaysOn)

    def cell_text(self, row: int, col: int) -> str:
        return self.heat.data(self.heat.index(row, col))
