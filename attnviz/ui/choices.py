"""Combo box items with their own tooltips (shown while the list is open)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox


def add_choice(combo: QComboBox, text: str, data, tooltip: str) -> None:
    """Append an item to `combo` with its own tooltip."""
    combo.addItem(text, data)
    combo.setItemData(combo.count() - 1, tooltip, Qt.ToolTipRole)
