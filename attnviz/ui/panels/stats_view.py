"""statsTable: per-head statistics of the shown layer (computed on the worker by core.stats), sortable;
for multi-layer results a layer x head overview of one column as a small heatmap. Copy and CSV export.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRect, QSize, Qt, Signal
from PySide6.QtGui import QGuiApplication, QStandardItem, QStandardItemModel
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSplitter,
    QStyle,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from attnviz import style
from attnviz.core.analysis.stats import STATS, stats_csv
from attnviz.explain import StatsFrames
from attnviz.ui.maps.views import image_item, lean_axes, set_heat_image
from attnviz.ui.widgets.basic import add_choice, named

SORT_ROLE = Qt.UserRole + 1
ROW_PAD_PX = 3  # a table row's height over its text's
SORT_MARK_PX = 12  # room a header keeps for the sort arrow
# the head types measured on a probe (explain.PROBE_TYPES); previous token, first key and diagonal are
# the statistics' own columns
PROBE_HEADERS = {"duplicate_token": ("duplicate token", "mean weight on earlier copies of the query's own token, "
                                     "measured on a probe (random tokens repeated twice)"),
                 "induction": ("induction", "mean weight on the token after the earlier copy of the query's token, "
                               "measured on a probe (random tokens repeated twice)")}


def header(name: str) -> tuple[str, str]:
    """(header, tooltip) of a column: a statistic or a probe's head type, named as the overview's list, the
    exported figure and the CSV name it ("duplicate token", not the model view's badge "dup")."""
    if name in STATS:
        return STATS[name]
    return PROBE_HEADERS.get(name, (name.replace("_", " "), name))


class StatsView(QWidget):
    """The statistics panel: the table, the column shown in the overview, copy and export."""

    sigExport = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        named(self, "statsView")
        self.frames: StatsFrames | None = None
        self._batch_index = 0
        self.extra: tuple[str, str, np.ndarray] | None = None  # (header, tooltip, per head) after the statistics
        self._cells = (0, 0)  # the overview's (layers, heads)
        self.model = QStandardItemModel(self)
        self.model.setSortRole(SORT_ROLE)
        self._make_table()
        self._make_controls()
        self._make_overview()
        split = QSplitter(Qt.Horizontal)
        split.addWidget(self.table)
        split.addWidget(self.overview)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 1)
        split.setSizes([750, 350])
        # One row of controls above the table and the overview: a row above and another below took a short
        # dock's height from both (at 1280 x 800 the overview was 5 px high)
        row = QHBoxLayout()
        row.addWidget(self.infoLabel)
        row.addWidget(self.overviewNote)
        row.addStretch(1)
        row.addWidget(self.overviewChoice)
        row.addWidget(self.copyButton)
        row.addWidget(self.exportButton)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 2, 4, 2)
        layout.setSpacing(2)
        layout.addLayout(row)
        layout.addWidget(split, 1)

    def _make_table(self) -> None:
        """statsTable: one compact, sortable row per head."""
        self.table = named(QTableView(), "statsTable")
        self.table.setToolTip("One row per head of the shown layer and batch item; click a header to sort. "
                              "Means are over the query rows that have a key.")
        self.table.setModel(self.model)
        self.table.setSortingEnabled(True)
        self.table.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeToContents)
        # headers of two words or more on two lines (see _header_size): on one line the columns took 912 px of a
        # 587 px table at 1280 x 800, so the probe's columns were out of sight and "previous token" cut at its edge
        self.table.horizontalHeader().setDefaultAlignment(Qt.AlignCenter | Qt.TextWordWrap)
        self.table.horizontalHeader().setTextElideMode(Qt.ElideNone)
        self.table.verticalHeader().hide()
        # Rows as high as the text and a hair: a dock beside the model view at 1280 x 800 shows six or seven
        # heads (the style's default row is ~30 px; the text's height and 6 px showed five)
        self.table.verticalHeader().setMinimumSectionSize(1)
        self.table.verticalHeader().setDefaultSectionSize(self.table.fontMetrics().height() + ROW_PAD_PX)
        self.table.sortByColumn(0, Qt.AscendingOrder)

    def _make_controls(self) -> None:
        """The overview's column, Copy and Export, and the line saying what the table holds."""
        self.columnCombo = named(QComboBox(), "statsColumnCombo")
        for name, (text, tip) in list(STATS.items()) + list(PROBE_HEADERS.items()):
            add_choice(self.columnCombo, text, name, tip)
        self.columnCombo.setToolTip("The statistic the layer x head overview shows")
        self.columnCombo.currentIndexChanged.connect(self._show_overview)
        self.copyButton = named(QPushButton("Copy"), "statsCopyButton")
        self.copyButton.setToolTip("Copy the table as CSV text")
        self.copyButton.clicked.connect(self.copy)
        self.exportButton = named(QPushButton("Export…"), "statsExportButton")
        self.exportButton.setToolTip("Save the table as CSV, or the panel as a PNG image")
        self.exportButton.clicked.connect(self.sigExport)
        self.overviewChoice = QWidget()
        choice = QHBoxLayout(self.overviewChoice)
        choice.setContentsMargins(0, 0, 0, 0)
        choice.addWidget(QLabel("Overview of"))
        choice.addWidget(self.columnCombo, 1)
        self.infoLabel = QLabel()
        self.infoLabel.setStyleSheet("color: palette(mid);")

    def _make_overview(self) -> None:
        """The layer x head image of the chosen statistic, and the note shown when there is one layer."""
        self.overview = pg.PlotWidget()
        named(self.overview, "statsOverview")
        self.overview.setBackground(style.BACKGROUND)
        plot = self.overview.getPlotItem()
        plot.setMenuEnabled(False)
        plot.hideButtons()
        plot.invertY(True)
        lean_axes(plot)
        plot.setLabel("left", "layer")
        plot.setLabel("bottom", "head")
        plot.getViewBox().setDefaultPadding(0)
        plot.getViewBox().sigResized.connect(lambda *_: self._overview_ticks())
        self.overviewPanel = self.overview
        self.overviewImage = image_item()
        plot.addItem(self.overviewImage)
        self.overviewNote = QLabel("The layer × head overview needs a multi-layer model")
        self.overviewNote.setWordWrap(True)
        self.overviewNote.setStyleSheet("color: palette(mid);")

    def show_frames(self, frames: StatsFrames | None, batch_index: int = 0) -> None:
        if frames is None or frames is self.frames:
            return
        self.frames, self._batch_index = frames, batch_index
        self.extra = None  # another result's: its owner sets it again for this one (set_extra_column)
        self._fill()
        self._show_overview()

    def set_extra_column(self, name: str, tip: str, values: np.ndarray | None) -> None:
        """One more column before the statistics, one value per head of the shown layer (None: none), e.g.
        Check against transformers' max |diff| per head (ui/window/check_job.py). Dropped when new frames come."""
        extra = None if values is None else (name, tip, np.asarray(values, dtype=np.float64))
        if extra is None and self.extra is None:
            return
        self.extra = extra
        if self.frames is not None:
            self._fill()

    def _extra_shown(self) -> bool:
        return self.extra is not None and self.frames is not None and len(self.extra[2]) == len(self.frames.labels)

    def _fill(self) -> None:
        frames = self.frames
        sort_column = self.table.horizontalHeader().sortIndicatorSection()
        order = self.table.horizontalHeader().sortIndicatorOrder()
        columns = {self.extra[:2]: self.extra[2]} if self._extra_shown() else {}  # first: in sight
        columns.update((header(name), values) for name, values in frames.columns.items())
        self.model.clear()
        self.model.setHorizontalHeaderLabels(["head"] + [text for text, _ in columns])
        for col, (text, tip) in enumerate(columns, start=1):
            self.model.horizontalHeaderItem(col).setToolTip(tip)
            self.model.setHeaderData(col, Qt.Horizontal, self._header_size(text), Qt.SizeHintRole)
        for h, label in enumerate(frames.labels):
            first = QStandardItem(label)
            first.setData(h, SORT_ROLE)
            items = [first]
            for values in columns.values():
                v = float(values[h])
                item = QStandardItem("—" if np.isnan(v) else f"{v:.4g}")
                item.setData(-np.inf if np.isnan(v) else v, SORT_ROLE)
                item.setTextAlignment(Qt.AlignRight | Qt.AlignVCenter)
                items.append(item)
            self.model.appendRow(items)
        if 0 <= sort_column < self.model.columnCount():
            self.table.sortByColumn(sort_column, order)
        self.infoLabel.setText(f"{len(frames.labels)} heads · batch item {self._batch_index} · weights before dropout")

    def _header_size(self, text: str) -> QSize:
        """Room for a column's header on two lines, broken at the space that makes the longer line shortest (the
        header paints it word-wrapped into that width, so it takes the same two lines)."""
        header = self.table.horizontalHeader()
        fm = header.fontMetrics()

        def ink(line: str) -> int:  # laid out as the header paints it (with its bearings)
            return fm.boundingRect(QRect(0, 0, 10_000, 100), Qt.AlignCenter, line).width()

        spaces = [i for i, ch in enumerate(text) if ch == " "]
        width = min((max(ink(text[:i]), ink(text[i + 1:])) for i in spaces), default=ink(text))
        margin = header.style().pixelMetric(QStyle.PM_HeaderMargin, None, header)
        return QSize(width + 2 * margin + SORT_MARK_PX, 2 * fm.height() + 2 * margin)

    def _show_overview(self) -> None:
        f = self.frames
        has = f is not None and f.layers is not None
        self.overviewPanel.setVisible(has)
        self.overviewChoice.setVisible(has)
        self.overviewNote.setVisible(not has)
        if not has:
            return
        heat = f.overview.get(self.columnCombo.currentData())
        if heat is None:  # a head type this model has no score for
            self.overviewImage.clear()
            self.overview.getPlotItem().setTitle("no head-type scores for this model", size="9pt")
            return
        set_heat_image(self.overviewImage, heat)
        rows, cols = heat.shape
        lo, hi = heat.levels
        self._cells = (rows, cols)
        self._overview_ticks()
        self.overview.getPlotItem().setTitle(f"{self.columnCombo.currentText()} · {lo:.3g} … {hi:.3g}", size="9pt")
        self.overview.getPlotItem().setRange(xRange=(-0.5, cols - 0.5), yRange=(-0.5, rows - 0.5), padding=0)

    def _overview_ticks(self) -> None:
        """Layer and head labels, every n-th where the cells are too small for all (30 layers in ~100 px ran
        together); again as the overview resizes."""
        rows, cols = self._cells
        plot = self.overview.getPlotItem()
        room = plot.getViewBox().size()
        plot.getAxis("left").setTicks([_every(rows, room.height(), LABEL_ROW_PX)])
        plot.getAxis("bottom").setTicks([_every(cols, room.width(), LABEL_COL_PX)])

    def csv(self) -> str:
        return stats_csv(self.frames.columns, self.frames.labels) if self.frames else ""

    def column(self, name: str) -> np.ndarray:
        """The values of one statistic in table order as shown (after sorting)."""
        col = list(self.frames.columns).index(name) + 1 + self._extra_shown()
        return np.array([self.model.item(r, col).data(SORT_ROLE) for r in range(self.model.rowCount())])

    def copy(self) -> None:
        QGuiApplication.clipboard().setText(self.csv())


LABEL_ROW_PX, LABEL_COL_PX = 14, 22  # screen room a layer label and a head label need


def _every(n: int, pixels: float, label_px: int) -> list[tuple[int, str]]:
    """Ticks 0, k, 2k, ... for n cells across `pixels` of screen: every cell where each has label_px."""
    step = max(1, math.ceil(n * label_px / max(pixels, 1.0)))
    return [(i, str(i)) for i in range(0, n, step)]
