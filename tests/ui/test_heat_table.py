"""The heat table's model answers each role Qt asks for, whether the role comes as an int or as Qt's enum,
and its painted cells carry the LUT's colours."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor

from attnviz.ui.panels.heat_table import HeatTable

LUT = np.array([[0, 0, 0, 255], [255, 255, 255, 255], [200, 30, 30, 255]] + [[0, 0, 0, 0]] * 253, np.uint8)


def _table(qtbot) -> HeatTable:
    table = HeatTable(cell_width=40)
    qtbot.addWidget(table)
    index = np.array([[0, 1, 2], [2, 1, 0]], np.uint8)
    texts = [["a", "b", "c"], ["d", "e", "f"]]
    table.heat.set_cells(texts, index, LUT, ["L0", "L1"], ["H0", "H1", "H2"], lambda r, c: f"tip {r},{c}")
    return table


def test_each_role_as_enum_or_int(qtbot):
    table = _table(qtbot)  # kept: the model is the table's child
    heat = table.heat
    cell = heat.index(1, 0)
    for role in (Qt.BackgroundRole, int(Qt.BackgroundRole.value)):
        assert heat.data(cell, role) == QColor(200, 30, 30, 255)
    assert heat.data(cell, Qt.DisplayRole) == "d" == heat.data(cell, 0)
    assert heat.data(heat.index(0, 0), Qt.ForegroundRole) == QColor("white")  # black cell, white text
    assert heat.data(heat.index(0, 1), Qt.ForegroundRole) == QColor("black")
    assert heat.data(cell, Qt.ToolTipRole) == "tip 1,0"
    assert heat.data(cell, Qt.TextAlignmentRole) == int(Qt.AlignCenter.value)
    assert heat.data(cell, Qt.DecorationRole) is None
    assert heat.headerData(2, Qt.Horizontal) == "H2" and heat.headerData(1, Qt.Vertical) == "L1"
    assert (heat.rowCount(), heat.columnCount()) == (2, 3)


def test_cleared_table_has_no_cells(qtbot):
    table = _table(qtbot)
    table.heat.clear()
    assert (table.heat.rowCount(), table.heat.columnCount()) == (0, 0)


def test_painted_cells_have_the_luts_colours(qtbot):
    table = _table(qtbot)
    table.resize(300, 150)
    table.show()
    qtbot.waitExposed(table)
    image = table.viewport().grab().toImage()
    for row, col, colour in ((0, 0, (0, 0, 0)), (0, 1, (255, 255, 255)), (1, 0, (200, 30, 30))):
        rect = table.visualRect(table.heat.index(row, col))
        pixel = image.pixelColor(rect.left() + 2, rect.top() + 2)  # a corner: clear of the text
        assert (pixel.red(), pixel.green(), pixel.blue()) == colour
