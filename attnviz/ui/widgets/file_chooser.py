"""A "Random / From file" switch with the chosen file: stands in the parameter panel for
RunConfig.weights and RunConfig.inputs (a file path; empty = random from the seed).

It never reads the file: the run does, on the worker (attnviz.core.runs.userfiles)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QEvent, QObject, Signal
from PySide6.QtWidgets import QComboBox, QFileDialog, QHBoxLayout, QToolButton, QWidget

from attnviz.ui.widgets.basic import ElidedLabel, named

RANDOM, FROM_FILE = "random", "file"


def button_box(*buttons: QWidget) -> QWidget:
    """`buttons` side by side in one widget, with no margins."""
    box = QWidget()
    layout = QHBoxLayout(box)
    layout.setContentsMargins(0, 0, 0, 0)
    for button in buttons:
        layout.addWidget(button)
    return box


class FileChooser(QWidget):
    """`prefix`Combo (Random / From file), a label with the file's name and `prefix`BrowseButton.
    path() is the file while "From file" is chosen, else ""; the last file is remembered across switches."""

    sigChanged = Signal()

    def __init__(self, prefix: str, what: str, suffixes: tuple[str, ...], parent: QWidget | None = None):
        super().__init__(parent)
        self.what, self.suffixes, self._path = what, suffixes, ""
        self.start_dir = str(Path.home())
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.combo = named(QComboBox(), f"{prefix}Combo")
        self.combo.addItem("Random", RANDOM)
        self.combo.addItem("From file", FROM_FILE)
        self.combo.setToolTip(f"Random {what} drawn from the seed, or your own from a file "
                              f"({', '.join(suffixes)})")
        self.fileLabel = named(ElidedLabel(), f"{prefix}FileLabel")
        self.fileLabel.setMinimumWidth(40)
        self.browseButton = named(QToolButton(), f"{prefix}BrowseButton")
        self.browseButton.setText("…")
        self.browseButton.setToolTip(f"Choose the {what} file ({', '.join(suffixes)})")
        layout.addWidget(self.combo)
        layout.addWidget(self.fileLabel, 1)
        layout.addWidget(self.browseButton)
        self.combo.activated.connect(self._switched)
        self.browseButton.clicked.connect(self.open_dialog)
        self._show()

    def path(self) -> str:
        return self._path if self.combo.currentData() == FROM_FILE else ""

    def set_path(self, path: str, emit: bool = True) -> None:
        """Show `path` ("" = Random; the last file stays remembered for the switch)."""
        if path:
            self._path = path
        self.combo.setCurrentIndex(self.combo.findData(FROM_FILE if path else RANDOM))
        self._show()
        if emit:
            self.sigChanged.emit()

    def _show(self) -> None:
        name = Path(self._path).name if self._path else "(no file)"
        self.fileLabel.setText(name)
        self.fileLabel.setToolTip(self._path or f"No {self.what} file yet: press … or choose From file")
        self.fileLabel.setEnabled(self.combo.currentData() == FROM_FILE)

    def _switched(self, _index: int) -> None:
        if self.combo.currentData() == FROM_FILE and not self._path:
            if not self.open_dialog():  # nothing chosen: stay random
                self.set_path("", emit=False)
            return
        self._show()
        self.sigChanged.emit()

    def file_filter(self) -> str:
        return f"{self.what.capitalize()} ({' '.join(f'*{s}' for s in self.suffixes)});;All files (*)"

    def open_dialog(self) -> bool:
        """Ask for a file; True if one was chosen (then "From file" is switched on)."""
        start = str(Path(self._path).parent) if self._path else self.start_dir
        path, _ = QFileDialog.getOpenFileName(self, f"Load {self.what}", start, self.file_filter())
        if path:
            self.set_path(path)
        return bool(path)


class PathChooser(QWidget):
    """A panel row naming one file: its name, Open… (`prefix`OpenButton) and a clear button (`prefix`ClearButton);
    path() is "" for none. The buttons are one widget, `buttons`: beside the name, or (buttons_apart) left for
    the owner to place, e.g. on the row of the field's label so that the name has the panel's whole width."""

    sigChanged = Signal()

    def __init__(self, prefix: str, title: str, file_filter: str, open_tip: str, none_tip: str,
                 parent: QWidget | None = None, buttons_apart: bool = False):
        super().__init__(parent)
        self._path, self.title, self.file_filter, self.none_tip = "", title, file_filter, none_tip
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.fileLabel = named(ElidedLabel(), f"{prefix}FileLabel")
        self.fileLabel.setMinimumWidth(16)  # a narrow row: the name elides, the buttons stay
        self.openButton = named(QToolButton(), f"{prefix}OpenButton")
        self.openButton.setText("Open…")
        self.openButton.setToolTip(open_tip)
        self.clearButton = named(QToolButton(), f"{prefix}ClearButton")
        self.clearButton.setText("×")
        self.clearButton.setToolTip("No file")
        self.buttons = button_box(self.openButton, self.clearButton)
        layout.addWidget(self.fileLabel, 1)
        if not buttons_apart:
            layout.addWidget(self.buttons)
        self.openButton.clicked.connect(self.open_dialog)
        self.clearButton.clicked.connect(lambda: self.set_path(""))
        self._show()

    def path(self) -> str:
        return self._path

    def set_path(self, path: str, emit: bool = True) -> None:
        changed = path != self._path
        self._path = path
        self._show()
        if emit and changed:
            self.sigChanged.emit()

    def _show(self) -> None:
        self.fileLabel.setText(Path(self._path).name if self._path else "(none)")
        self.fileLabel.setToolTip(self._path or self.none_tip)
        self.clearButton.setEnabled(bool(self._path))

    def open_dialog(self) -> bool:
        start = str(Path(self._path).parent) if self._path else str(Path.home())
        path, _ = QFileDialog.getOpenFileName(self, self.title, start, self.file_filter)
        if path:
            self.set_path(path)
        return bool(path)


class MapsChooser(PathChooser):
    """The panel's Maps file row (the variant "maps": an .npz written by attnviz)."""

    def __init__(self, parent: QWidget | None = None, buttons_apart: bool = False):
        super().__init__("maps", "Open exported maps", "Exported maps (*.npz);;All files (*)",
                         "Choose an .npz written by attnviz (Export, attnviz render -o FILE.npz, attnviz.show()), or "
                         "drop one onto the window", "No maps file: open one, or drop one onto the window", parent,
                         buttons_apart)


class FileDrop(QObject):
    """An event filter on a window: the first local file dropped on it that `accepts` takes goes to `receive`."""

    def __init__(self, window: QWidget, accepts, receive):
        super().__init__(window)
        self.accepts, self.receive = accepts, receive
        window.setAcceptDrops(True)
        window.installEventFilter(self)

    def dropped_path(self, mime) -> str:
        urls = mime.urls() if mime.hasUrls() else []
        return next((p for p in (u.toLocalFile() for u in urls if u.isLocalFile()) if self.accepts(p)), "")

    def eventFilter(self, obj, event) -> bool:  # noqa: N802 (Qt's name)
        if event.type() not in (QEvent.DragEnter, QEvent.DragMove, QEvent.Drop):
            return False
        path = self.dropped_path(event.mimeData())
        if not path:
            return False
        event.acceptProposedAction()
        if event.type() == QEvent.Drop:
            self.receive(path)
        return True

