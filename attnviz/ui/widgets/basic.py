"""Small widget helpers shared by the window, its panels and the maps: a widget named in one call (its
objectName, which tests and users' scripts find it by, and its accessible name), and combo box items with
their own tooltips (shown while the list is open)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QWidget


def named(widget: QWidget, name: str) -> QWidget:
    """`widget` with objectName and accessible name `name`."""
    widget.setObjectName(name)
    widget.setAccessibleName(name)
    return widget


def add_choice(combo: QComboBox, text: str, data, tooltip: str) -> None:
    """Append an item to `combo` with its own tooltip."""
    combo.addItem(text, data)
    combo.setItemData(combo.count() - 1, tooltip, Qt.ToolTipRole)
