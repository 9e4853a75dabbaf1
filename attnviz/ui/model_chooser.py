"""The model chooser: the folders found in the local Hugging Face cache and ATTNVIZ_MODELS, plus
"Open…". It stands in the parameter panel for RunConfig.model (a folder path)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QFileDialog, QHBoxLayout, QToolButton, QWidget

from ..models.discover import find_model_folders, hub_cache, supported_text
from .choices import add_choice


class ModelChooser(QWidget):
    """A combo of model folders (data: the path) and an "Open…" button; folder() is the path."""

    sigChanged = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.combo = QComboBox()
        self.combo.setObjectName("modelCombo")
        self.combo.setAccessibleName("modelCombo")
        self.combo.setSizeAdjustPolicy(QComboBox.AdjustToMinimumContentsLengthWithIcon)
        self.combo.setMinimumContentsLength(6)  # the panel column fits at its 300 px minimum (a test checks)
        self.combo.setToolTip(f"Model folders found in {hub_cache()} and in ATTNVIZ_MODELS (folders separated by "
                              f"the path separator). Opens {supported_text()}. Nothing is downloaded.")
        self.openButton = QToolButton()
        self.openButton.setObjectName("openModelButton")
        self.openButton.setAccessibleName("openModelButton")
        self.openButton.setText("Open…")
        self.openButton.setToolTip("Choose a local model folder (config.json, *.safetensors, tokenizer.json)")
        layout.addWidget(self.combo, 1)
        layout.addWidget(self.openButton)
        self.refresh()
        self.combo.currentIndexChanged.connect(lambda _: self.sigChanged.emit())
        self.openButton.clicked.connect(self.open_dialog)

    def refresh(self) -> None:
        """List the folders found now (the current choice is kept)."""
        current = self.folder()
        self.combo.blockSignals(True)
        self.combo.clear()
        self.combo.addItem("(choose a model folder)", "")
        for label, path in find_model_folders():
            add_choice(self.combo, label, str(path), str(path))
        self.combo.blockSignals(False)
        self.set_folder(current, emit=False)

    def folder(self) -> str:
        return self.combo.currentData() or "" if self.combo.count() else ""

    def set_folder(self, folder: str, emit: bool = True) -> None:
        index = self.combo.findData(folder)
        if index < 0 and folder:
            path = Path(folder)
            add_choice(self.combo, path.name or folder, folder, folder)
            index = self.combo.count() - 1
        self.combo.blockSignals(not emit)
        self.combo.setCurrentIndex(max(index, 0))
        self.combo.blockSignals(False)

    def open_dialog(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Open a model folder", self.folder() or str(Path.home()))
        if folder:
            self.set_folder(folder)
