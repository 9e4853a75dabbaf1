"""The window's files and clipboard: configurations saved and opened (JSON, the preset format), weights and
inputs files chosen, the export dialog, and copying the grid as an image. Mixed into MainWindow, whose
panel, settings and status bar it uses."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QFileDialog, QMessageBox

from attnviz.core import ConfigError, load_config, saved_json


class WindowFiles:
    """File dialogs and the clipboard of MainWindow (needs self.panel, self.settings, self.result)."""

    def _start_dir(self) -> str:
        return str(self.settings.value("lastDir", str(Path.home()))) if self.settings else str(Path.home())

    def _remember_dir(self, path: str) -> None:
        if self.settings is not None:
            self.settings.setValue("lastDir", str(Path(path).parent))

    def save_config(self, path: str, replace_readonly: bool = False) -> None:
        """Write the panel's configuration as JSON (atomically; the preset format)."""
        _write_config(path, saved_json(self.panel.config()), replace_readonly)

    def open_config(self, path: str) -> None:
        """Open a saved configuration at once. The sha256 of each weights or inputs file it was saved with is
        checked on a thread (a 50 GB file takes minutes to hash): one that changed since is kept, with a note."""
        config = load_config(path, check_files=False)
        self.panel.set_config(config)
        if config.weights or config.inputs:
            from attnviz.ui.widgets.jobs import BackgroundJob

            self._fileCheck = BackgroundJob()  # the newest: a note from an earlier one is dropped
            self._fileCheck.sigFailed.connect(self._saved_file_changed)
            self._fileCheck.start(lambda: load_config(path))

    def _saved_file_changed(self, message: str) -> None:
        if self.sender() is getattr(self, "_fileCheck", None):
            self.statusBar().showMessage(f"Note: {message}", 15000)

    def load_file(self, field: str, path: str) -> None:
        """Use `path` as the weights or inputs file (read by the run on the worker, never here).
        Choosing the same file again reruns: the worker notices a file changed on disk."""
        if not self.panel.config_applies(field):
            self.statusBar().showMessage(f"{field.capitalize()} files load into the seed variants (causal, self, "
                                         "cross, cross-context, differential): choose one first", 8000)
            return
        self.panel.widgets[field].set_path(path)
        self.schedule()

    def load_file_dialog(self, field: str) -> None:
        chooser = self.panel.widgets[field]
        chooser.start_dir = self._start_dir()
        path, _ = QFileDialog.getOpenFileName(self, f"Load {field}", chooser.start_dir, chooser.file_filter())
        if path:
            self._remember_dir(path)
            self.load_file(field, path)

    def save_dialog(self) -> None:
        try:
            self.panel.config()
        except ConfigError as exc:
            QMessageBox.warning(self, "Cannot save", f"The configuration is invalid: {exc}")
            return
        path, _ = QFileDialog.getSaveFileName(self, "Save configuration", self._start_dir(), "JSON (*.json)")
        if path:
            self._save_to(path if path.endswith(".json") else path + ".json")

    def _save_to(self, path: str) -> None:
        """Save on a thread: the sha256 of a weights or inputs file the configuration names is part of the file,
        and a big one takes a while to hash. The newest save wins: an older one still hashing writes nothing."""
        from attnviz.ui.widgets.jobs import BackgroundJob
        from attnviz.ui.window.export_dialog import confirm_write

        replace_readonly = confirm_write(self, path)
        if replace_readonly is None:
            self.statusBar().showMessage(f"Not saved: {path} is read-only", 6000)
            return
        config = self.panel.config()
        saves = self.config_saves
        turn = saves.begin(path)
        job = self._saveJob = BackgroundJob()
        job.sigDone.connect(self._config_saved)
        job.sigFailed.connect(self._config_not_saved)
        self.statusBar().showMessage(f"Saving {path}\u2026")
        job.start(lambda: saves.write(turn, path, lambda: saved_json(config), replace_readonly))

    @property
    def config_saves(self) -> ConfigSaves:
        if getattr(self, "_config_saves", None) is None:
            self._config_saves = ConfigSaves()
        return self._config_saves

    def _config_saved(self, path: str | None) -> None:
        self.config_saves.end()
        if path is not None:  # None: a newer save replaced this one, and says so itself
            self._remember_dir(str(path))
            self.statusBar().showMessage(f"Saved {path}", 4000)
        if self.config_saves.close_when_done and not self.config_saves.running:
            self.close()

    def _config_not_saved(self, message: str) -> None:
        self.config_saves.end()
        self.config_saves.close_when_done = False  # the user reads why before the window goes
        self.statusBar().clearMessage()
        QMessageBox.warning(self, "Cannot save", message)

    def close_waits_for_saves(self) -> bool:
        """At the window's close: whether a save still running keeps it open until the file is written (the
        first close; a second one closes at once, and the half-made save leaves no file behind)."""
        saves = self.config_saves
        if not saves.running or saves.close_when_done:
            return False
        saves.close_when_done = True
        self.statusBar().showMessage("Saving the configuration: the window closes once it is written "
                                     "(close again to close now, without it)")
        return True

    def open_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open configuration", self._start_dir(), "JSON (*.json)")
        if path:
            try:
                self.open_config(path)
                self._remember_dir(path)
            except ConfigError as exc:  # a value in the file: say which file (file errors name it already)
                text = str(exc) if exc.field == "file" else f"{path}: {exc}"
                QMessageBox.warning(self, "Cannot open", text)
            except Exception as exc:
                QMessageBox.warning(self, "Cannot open", str(exc))

    def open_text(self, path: str) -> bool:
        """Put a text file's contents (UTF-8) into the text box; the run follows as for typing. False, with the
        reason on the status line, when it cannot (another encoding, too long, a variant without text)."""
        from attnviz.core.runs.configfile import TextFileError, read_text_file
        from attnviz.ui.window.panel import TEXT_MAX_CHARS

        if not self.panel.config_applies("text"):
            self.statusBar().showMessage("Text files load into the variants that read text (a trained toy, a "
                                         "pretrained model): choose one first", 8000)
            return False
        try:
            text = read_text_file(path)
        except TextFileError as exc:
            self.statusBar().showMessage(f"Not opened: {path}: {exc}", 10000)
            return False
        if len(text) > TEXT_MAX_CHARS:
            self.statusBar().showMessage(f"Not opened: {path}: {len(text):,} characters, over the "
                                         f"{TEXT_MAX_CHARS:,} the text box takes; cut it first", 10000)
            return False
        field = self.panel.widgets["text"]
        field.setText(text)  # as the CLI reads it: newlines are tokens too
        field.setCursorPosition(0)  # from its start, as a preset's text shows
        self.statusBar().showMessage(f"Opened {Path(path).name}: {len(text):,} characters", 6000)
        return True

    def open_text_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open text file", self._start_dir(),
                                              "Text (*.txt);;All files (*)")
        if path:
            self._remember_dir(path)
            self.open_text(path)

    def export_dialog(self) -> None:
        from attnviz.ui.window.export_dialog import ExportDialog

        if self.result is None:
            return
        self.exportDialog = ExportDialog(self)
        self.exportDialog.open()  # window-modal without blocking the event loop (workers keep reporting)

    def copy_image(self) -> None:
        """Put the grid (or the focused head) on the clipboard, rendered from the data off this thread."""
        from attnviz.ui.window.export_dialog import copy_to_clipboard

        if self.result is not None:
            copy_to_clipboard(self)

    def put_on_clipboard(self, image) -> None:  # GUI thread: the clipboard belongs to it
        QGuiApplication.clipboard().setImage(image)
        self.statusBar().showMessage(f"Copied a {image.width()} x {image.height()} image to the clipboard", 4000)

    def copy_failed(self, message: str) -> None:
        self.statusBar().showMessage(f"Not copied: {message}", 8000)


def _write_config(path: str, text: str, replace_readonly: bool) -> str:
    from attnviz.atomic import write_bytes

    write_bytes(path, text.encode("utf-8"), replace_readonly)
    return path


class ConfigSaves:
    """The window's saves in flight. Each has a turn per file; one whose turn is no longer its file's newest
    when its text is ready writes nothing (a slow hash of an earlier save must not replace a later save's
    file). `running` and `close_when_done` are the GUI thread's; `write` runs on the save's thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._newest: dict[str, int] = {}  # file -> the turn of its newest save
        self._turns = 0
        self.running = 0
        self.close_when_done = False

    def begin(self, path: str) -> int:
        """A new save's turn (the GUI thread)."""
        with self._lock:
            self._turns += 1
            self._newest[_file_key(path)] = self._turns
            self.running += 1
            return self._turns

    def end(self) -> None:
        """A save finished, written or not (the GUI thread)."""
        self.running -= 1

    def write(self, turn: int, path: str, text, replace_readonly: bool) -> str | None:
        """Write `text()` to `path` if `turn` is still the newest save; the path written, or None."""
        made = text()  # the hashes: the slow part, outside the lock
        with self._lock:  # a newer save's begin() comes before or after this write, never inside it
            if turn != self._newest.get(_file_key(path)):
                return None
            return _write_config(path, made, replace_readonly)


def _file_key(path: str) -> str:
    return os.path.realpath(path)
