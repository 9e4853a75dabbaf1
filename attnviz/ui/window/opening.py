"""Opening what people have: `attnviz PATH`, File > Open…, File > Open Recent and drops onto the window.

One entry, MainWindow.open_path(path), takes a model folder, a .gguf file, a saved configuration (.json), maps
exported as .npz (shown as saved, no model: core/runs/saved.py), a picture for a vision model or a text file, and
remembers it among the last RECENT_COUNT opened. Mixed into MainWindow (needs self.panel, self.settings, the
status bar and the WindowFiles methods). Nothing here reads more of a file than its kind: the worker does.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QMenu, QMessageBox

from attnviz.core import ConfigError, RunConfig
from attnviz.core.runs.config import IMAGE_SUFFIXES, MAPS_SUFFIX
from attnviz.core.runs.saved import MAPS_VARIANT, saved_layer
from attnviz.models.errors import ModelError
from attnviz.models.folder import check_model_path
from attnviz.ui.widgets.file_chooser import FileDrop

RECENT_COUNT = 10
RECENT_KEY = "recentFiles"
OPEN_FILTER = ("Everything attnviz opens (*.json *.npz *.gguf *.png *.jpg *.jpeg *.webp *.txt);;"
               "Saved configurations (*.json);;Exported maps (*.npz);;GGUF models (*.gguf);;All files (*)")
KINDS = {  # what open_path does with each kind, as the status line says it
    "model": "model folder", "gguf": "GGUF model", "config": "configuration", "maps": "exported maps",
    "image": "picture", "text": "text file",
}


def path_kind(path: str) -> str | None:
    """What `path` is to attnviz (a key of KINDS), or None when it is nothing it opens."""
    p = Path(path)
    suffix = p.suffix.lower()
    if p.is_dir():
        return "model"
    if not p.is_file():
        return None
    return {".gguf": "gguf", ".json": "config", MAPS_SUFFIX: "maps", ".txt": "text"}.get(
        suffix, "image" if suffix in IMAGE_SUFFIXES else None)


class WindowOpen:
    """open_path, the Open… dialog, the recent files and the drop filter of MainWindow."""

    refused: str | None = None  # why the last path given to open_path was not opened

    def open_path(self, path: str) -> bool:
        """Open `path` in the window by its kind; False, with the reason on the status line, when it cannot
        (the last good maps stay)."""
        self.refused = None
        kind = path_kind(path)
        if kind is None:
            what = "does not exist" if not Path(path).exists() else "is not something attnviz opens"
            self._refuse_open(f"{path} {what}: give a model folder, a .gguf file, a saved configuration (.json), "
                              "exported maps (.npz), a picture or a text file")
            return False
        try:
            opened = self._open_kind(kind, path)
        except ModelError as exc:  # names the path itself
            self._refuse_open(exc.describe(exc.value))
            return False
        except ConfigError as exc:
            self._refuse_open(str(exc) if exc.field in ("file", "maps") else f"{path}: {exc}")
            return False
        if opened:
            self.remember_recent(path)
            self.statusBar().showMessage(f"Opened {Path(path).name} ({KINDS[kind]})", 6000)
        return opened

    def _open_kind(self, kind: str, path: str) -> bool:
        if kind in ("model", "gguf"):  # an empty or foreign file, a folder that is no model: refused before the
            check_model_path(path)  # panel takes it, so the maps, the settings and Open Recent keep the last good
            self.panel.set_config(self._pretrained_config(path))
        elif kind == "config":
            self.open_config(path)
        elif kind == "maps":  # the file's layer shows first; its arrays are read on the worker
            self.panel.set_config(RunConfig.for_variant(MAPS_VARIANT, maps=path, layer=saved_layer(path)))
        elif kind == "image":  # a vision model's picture, as a drop of it does
            self.panel.widgets["image"].set_path(path)
        else:
            return self.open_text(path)
        return True

    def _pretrained_config(self, path: str) -> RunConfig:
        """The model at `path` on the text the panel holds (or a sentence that shows something at once)."""
        text = self.panel.widgets["text"].text() or "The cat sat on the mat because it was tired."
        # absolute: the settings and a saved configuration find it again from another folder
        return RunConfig.for_variant("pretrained", model=str(Path(path).absolute()), text=text)

    def _refuse_open(self, message: str) -> None:
        self.refused = message  # the last path refused and why: `attnviz PATH` says it on the terminal as well
        self.statusBar().showMessage(f"Not opened: {message}", 15000)

    # --- the dialog and the recent files ------------------------------------------------------------

    def refuse_start(self) -> None:
        """`attnviz PATH` refused PATH (self.refused): the window opened on the last good view instead; say so
        where the user looks, in a box over the window (not waited on) as well as the status line."""
        message = f"Not opened: {self.refused}"
        self.statusBar().showMessage(message, 60000)
        box = QMessageBox(QMessageBox.Warning, "Cannot open", message + "\n\nThe window shows the last view instead.",
                          QMessageBox.Ok, self)
        box.setObjectName("refusedBox")
        box.setAttribute(Qt.WA_DeleteOnClose)
        box.open()

    def open_any_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open", self._start_dir(), OPEN_FILTER)
        if path:
            self._remember_dir(path)
            if not self.open_path(path):
                QMessageBox.warning(self, "Cannot open", self.statusBar().currentMessage().removeprefix("Not opened: "))

    def recent_files(self) -> list[str]:
        """The files and folders opened last, newest first (at most RECENT_COUNT)."""
        if self.settings is None:
            return list(getattr(self, "_recent", []))
        value = self.settings.value(RECENT_KEY, [])
        items = [value] if isinstance(value, str) else value if isinstance(value, list) else []
        return [str(p) for p in items if isinstance(p, str) and p][:RECENT_COUNT]

    def remember_recent(self, path: str) -> None:
        path = str(Path(path).absolute())
        recent = [path] + [p for p in self.recent_files() if p != path]
        if self.settings is None:
            self._recent = recent[:RECENT_COUNT]
        else:
            self.settings.setValue(RECENT_KEY, recent[:RECENT_COUNT])
        self._fill_recent_menu()

    def _make_recent_menu(self, menu: QMenu) -> None:
        self.recentMenu = menu.addMenu("Open &Recent")
        self.recentMenu.setObjectName("recentMenu")
        self.recentMenu.setToolTipsVisible(True)
        self._fill_recent_menu()

    def _fill_recent_menu(self) -> None:
        menu = getattr(self, "recentMenu", None)
        if menu is None:
            return
        menu.clear()
        recent = self.recent_files()
        for i, path in enumerate(recent):
            label = f"&{(i + 1) % 10} {Path(path).name or path}"
            action = menu.addAction(label, lambda p=path: self.open_path(p))
            action.setToolTip(path)
        if recent:
            menu.addSeparator()
            menu.addAction("Clear the list", self._clear_recent)
        else:
            menu.addAction("(nothing opened yet)").setEnabled(False)

    def _clear_recent(self) -> None:
        if self.settings is not None:
            self.settings.setValue(RECENT_KEY, [])
        self._recent = []
        self._fill_recent_menu()


def path_drop(window) -> FileDrop:
    """A model folder, .gguf, .json, .npz or text file dropped anywhere on the window is opened (pictures are the
    Image field's: patch_view.image_drop)."""
    return FileDrop(window, lambda path: path_kind(path) not in (None, "image"), window.open_path)


__all__ = ["KINDS", "OPEN_FILTER", "RECENT_COUNT", "WindowOpen", "path_drop", "path_kind"]
