"""The model chooser: the folders found in the local Hugging Face cache and ATTNVIZ_MODELS, plus
"Open…". It stands in the parameter panel for RunConfig.model (a folder path)."""

from __future__ import annotations

import threading
from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QComboBox, QFileDialog, QHBoxLayout, QMenu, QToolButton, QWidget

from attnviz.models.discover import discover_models, hub_cache, supported_text
from attnviz.ui.widgets.basic import ElidedCombo, add_choice
from attnviz.ui.widgets.file_chooser import button_box

PLACEHOLDER = "(choose a model folder)"


class _Looks(QObject):
    """Carries each look's result from its thread to the GUI thread. It lives as long as the app, so a look
    never emits on a chooser that is being deleted (the window closed as the look ended); Qt drops a deleted
    chooser's connection."""

    sigFound = Signal(object)  # (the chooser's look key, generation, (found, notes))


_LOOKS: list[_Looks] = []  # made on the GUI thread by the first chooser


def _looks() -> _Looks:
    if not _LOOKS:
        _LOOKS.append(_Looks())
    return _LOOKS[0]


class ModelChooser(QWidget):
    """A combo of model folders (data: the path) and an "Open…" button; folder() is the path. The button is
    `buttons`: beside the combo, or (buttons_apart) left for the owner to place (as PathChooser's)."""

    sigChanged = Signal()
    WAIT_S = 0.5  # how long the window waits for the look before it opens without the list (filled when done)

    def __init__(self, parent: QWidget | None = None, buttons_apart: bool = False):
        super().__init__(parent)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.combo = ElidedCombo()  # a long model name keeps its start and its end ("SmolLM2-135…Q4_1.gguf")
        self.combo.setObjectName("modelCombo")
        self.combo.setAccessibleName("modelCombo")
        self.combo.setSizeAdjustPolicy(QComboBox.AdjustToMinimumContentsLengthWithIcon)
        self.combo.setMinimumContentsLength(4)  # the panel column fits at its 300 px minimum (tests check)
        self.notes: list[str] = []  # what the last look skipped (a FIFO, a loop, an unlistable folder)
        self._generation = self._filled = 0  # the latest look asked for, the latest shown
        self._key = object()  # this chooser's looks, among every chooser's on _looks()
        _looks().sigFound.connect(self._on_found)
        self.tooltip = (f"Model folders found in {hub_cache()} and in ATTNVIZ_MODELS (folders or .gguf files "
                        "separated by the path separator), and GGUF models in Ollama's and LM Studio's stores. "
                        f"Opens {supported_text()}. Nothing is downloaded.")
        self._skipped = ""  # what the last look skipped, said in the tooltip
        self.openButton = QToolButton()
        self.openButton.setObjectName("openModelButton")
        self.openButton.setAccessibleName("openModelButton")
        self.openButton.setText("Open…")
        self.openButton.setToolTip("Choose a local model folder (config.json, *.safetensors, tokenizer.json); the "
                                   "arrow opens a .gguf file instead (llama.cpp, Ollama, LM Studio)")
        self.openButton.setPopupMode(QToolButton.MenuButtonPopup)
        menu = QMenu(self.openButton)
        menu.addAction("Model folder…", self.open_dialog)
        menu.addAction("GGUF file…", self.open_gguf_dialog)
        self.openButton.setMenu(menu)
        self.buttons = button_box(self.openButton)
        layout.addWidget(self.combo, 1)
        if not buttons_apart:
            layout.addWidget(self.buttons)
        self.combo.addItem(PLACEHOLDER, "")  # until the look ends (the models are listed below it)
        self.refresh()
        self.combo.currentIndexChanged.connect(self._chosen)
        self._show_tip()
        self.openButton.clicked.connect(self.open_dialog)

    def refresh(self) -> None:
        """Look for models again (the current choice is kept). The look runs on its own thread (a slow or
        hostile store never freezes the window); a quick one is shown at once, a slow one once it ends."""
        self._generation += 1
        generation, done, result, key, looks = self._generation, threading.Event(), [], self._key, _looks()

        def look() -> None:  # touches no widget: the chooser may be gone when it ends
            result.append(discover_models())  # bounded (discover.Scan): never raises, ends within seconds
            looks.sigFound.emit((key, generation, result[0]))
            done.set()

        threading.Thread(target=look, name="attnviz-model-discovery", daemon=True).start()
        if done.wait(self.WAIT_S):
            self._fill(generation, *result[0])

    def _on_found(self, payload) -> None:
        key, generation, (found, notes) = payload
        if key is not self._key:  # another chooser's look
            return
        self._fill(generation, found, notes)

    def _fill(self, generation: int, found: list[tuple[str, Path]], notes: list[str]) -> None:
        if generation != self._generation or generation == self._filled:  # stale, or shown already
            return
        self._filled, self.notes = generation, notes
        current = self.folder()
        self.combo.blockSignals(True)
        self.combo.clear()
        self.combo.addItem(PLACEHOLDER, "")
        for label, path in found:
            add_choice(self.combo, label, str(path), str(path))
        self.combo.blockSignals(False)
        self.set_folder(current, emit=False)
        more = f" (and {len(notes) - 1} more)" if len(notes) > 1 else ""
        self._skipped = f"\n\nSkipped while looking: {notes[0]}{more}" if notes else ""
        self._show_tip()

    def _chosen(self, _index: int) -> None:
        self._show_tip()
        self.sigChanged.emit()

    def _show_tip(self) -> None:
        """The tooltip: the chosen model's whole name and path first (the combo may show it elided)."""
        chosen = f"{self.combo.currentText()}\n{self.folder()}\n\n" if self.folder() else ""
        self.combo.setToolTip(chosen + self.tooltip + self._skipped)

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
        self._show_tip()  # also when no signal went out

    def open_gguf_dialog(self) -> None:
        start = str(Path(self.folder()).parent) if self.folder() else str(Path.home())
        path, _ = QFileDialog.getOpenFileName(self, "Open a GGUF model file", start,
                                              "GGUF models (*.gguf);;All files (*)")
        if path:
            self.set_folder(path)

    def open_dialog(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Open a model folder", self.folder() or str(Path.home()))
        if folder:
            self.set_folder(folder)
