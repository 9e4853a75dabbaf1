"""The in-app Export dialog and clipboard copy, over attnviz.export (the same renderer as the CLI).

The export runs on a short-lived background thread with a busy bar, so a large grid never blocks
the window; the result object it reads is immutable once shown, so sharing it is safe.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
)

from attnviz.atomic import is_read_only
from attnviz.export import (
    FORMATS,
    WHATS,
    ExportOptions,
    compose_image,
    default_filename,
    export,
    format_of,
)
from attnviz.session import complete_stages
from attnviz.style import RED
from attnviz.ui.widgets.basic import named
from attnviz.ui.widgets.jobs import BackgroundJob


def confirm_write(parent, path: str) -> bool | None:
    """Ask before replacing a read-only file. None: the user said no; else the `replace_readonly`
    flag to write with (False when the file is not read-only: nothing to ask)."""
    if not is_read_only(path):
        return False
    answer = QMessageBox.question(
        parent, "Replace a read-only file?",
        f"{path} is read-only (someone protected it).\n\nReplace it anyway?",
        QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, QMessageBox.StandardButton.No)
    return True if answer == QMessageBox.StandardButton.Yes else None


class ExportDialog(QDialog):
    """What to export, how it looks, where to; the format follows the file extension."""

    sigFinished = Signal(bool, str)  # success, path or message

    def __init__(self, window):
        super().__init__(window)
        self.setObjectName("exportDialog")
        self.setWindowTitle("Export")
        self.setAttribute(Qt.WA_DeleteOnClose)
        self.window_ = window
        result = window.result
        form = self._make_form(window, result)
        self.messageLabel = named(QLabel(), "exportMessage")
        self.messageLabel.setWordWrap(True)
        self.progress = QProgressBar()
        self.progress.setRange(0, 0)
        self.progress.hide()
        self.buttons = QDialogButtonBox(QDialogButtonBox.Cancel)
        self.exportButton = self.buttons.addButton("Export", QDialogButtonBox.AcceptRole)
        self.exportButton.setObjectName("exportConfirmButton")
        self.exportButton.setDefault(True)
        self.buttons.accepted.connect(self.start)
        self.buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.messageLabel)
        layout.addWidget(self.progress)
        layout.addWidget(self.buttons)
        self.whatCombo.currentIndexChanged.connect(self._what_changed)
        self._what_changed()
        # The job belongs to the window: cancelling the dialog mid-export must not delete the
        # object its thread reports through. A late report to a closed dialog is ignored.
        self.job = BackgroundJob(window)
        self.job.sigDone.connect(self._done)
        self.job.sigFailed.connect(self._failed)
        self.headSpin.valueChanged.connect(self._what_changed)

    def _make_form(self, window, result) -> QFormLayout:
        """What to export (the focused view preselected), head, scale, decorations and the target file."""
        form = QFormLayout()
        self.whatCombo = named(QComboBox(), "exportWhatCombo")
        for key, text in WHATS.items():
            self.whatCombo.addItem(text[0].upper() + text[1:], key)
            if key == "rollout" and (result.layer_weights is None or len(result.layer_weights) < 2):
                self.whatCombo.model().item(self.whatCombo.count() - 1).setEnabled(False)  # one layer
        self.whatCombo.setToolTip("The head grid as shown, one head, the mean over heads, the output tensor "
                                  "(or the tensor the lower view shows), or the pre-softmax scores grid")
        focus = window.headGrid.focus
        self.whatCombo.setCurrentIndex(self.whatCombo.findData("grid" if focus is None
                                                               else "mean" if focus == -1 else "head"))
        self.headSpin = named(QSpinBox(), "exportHeadSpin")
        self.headSpin.setRange(0, result.config.heads - 1)
        self.headSpin.setValue(max(focus or 0, 0))
        self.headSpin.setToolTip("Which head to export")
        self.scaleSpin = named(QSpinBox(), "exportScaleSpin")
        self.scaleSpin.setRange(0, 64)
        self.scaleSpin.setSpecialValueText("auto")
        self.scaleSpin.setSuffix(" px per cell")
        self.scaleSpin.setToolTip("Pixels per cell, crisp nearest-neighbour (auto: tiles of at least ~240 px)")
        self.titleCheck = named(QCheckBox("Title (variant, shapes, mask)"), "exportTitleCheck")
        self.barCheck = named(QCheckBox("Colour bar"), "exportColorbarCheck")
        self.labelsCheck = named(QCheckBox("Axis labels and ticks"), "exportLabelsCheck")
        for check in (self.titleCheck, self.barCheck, self.labelsCheck):
            check.setChecked(True)
            check.setToolTip("Include this in the image (PNG and SVG)")
        self.allLabelsCheck = named(QCheckBox("Label every token"), "exportAllLabelsCheck")
        self.allLabelsCheck.setToolTip("A label for every token, not every k-th where the cells are smaller than a "
                                       "label; with Scale on auto the cells are made tall enough for one "
                                       "(attnviz render --all-labels)")
        self.labelsCheck.toggled.connect(self.allLabelsCheck.setEnabled)
        self.stepLabel = self._step_note(window, result)
        self.pathEdit = named(QLineEdit(), "exportPathEdit")
        self.pathEdit.setToolTip("Target file; the extension picks the format: " +
                                 ", ".join(f"{k} ({v})" for k, v in FORMATS.items()))
        start = Path(window._start_dir())
        self.pathEdit.setText(str(start / default_filename(result, self.options())))
        browse = QPushButton("Browse…")
        browse.setToolTip("Choose the file")
        browse.clicked.connect(self._browse)
        path_row = QHBoxLayout()
        path_row.addWidget(self.pathEdit, 1)
        path_row.addWidget(browse)

        form.addRow("Export", self.whatCombo)
        form.addRow("Head", self.headSpin)
        form.addRow("Scale", self.scaleSpin)
        form.addRow("", self.titleCheck)
        form.addRow("", self.barCheck)
        form.addRow("", self.labelsCheck)
        form.addRow("", self.allLabelsCheck)
        if self.stepLabel is not None:
            form.addRow("Step", self.stepLabel)
        form.addRow("File", path_row)
        return form

    @staticmethod
    def _step_note(window, result) -> QLabel | None:
        """What the chosen step of a generation does to the export (None: no step chosen)."""
        step = window.steps.step()
        if step is None:
            return None
        note = named(QLabel(f"{step} of {result.generated_count} generated tokens, as the window shows them: an image "
                            "fades the later rows and frames the step's; an NPZ holds the first "
                            f"{result.prompt_length + step} tokens (the Step slider at the left: every token)"),
                     "exportStepLabel")
        note.setWordWrap(True)
        return note

    def options(self) -> ExportOptions:
        scale = self.scaleSpin.value() or None
        return ExportOptions.from_view(
            self.window_.frames.options, what=self.whatCombo.currentData(), head=self.headSpin.value(),
            scale=scale, title=self.titleCheck.isChecked(), colorbar=self.barCheck.isChecked(),
            axis_labels=self.labelsCheck.isChecked(), all_labels=self.allLabelsCheck.isChecked(),
            step=self.window_.steps.step())

    def _what_changed(self) -> None:
        self.headSpin.setEnabled(self.whatCombo.currentData() == "head")
        path = Path(self.pathEdit.text())
        if path.name.startswith("attnviz-"):  # still our suggestion: follow the choice
            ext = path.suffix or ".png"
            self.pathEdit.setText(str(path.with_name(default_filename(self.window_.result, self.options(), ext))))

    def _browse(self) -> None:
        filters = ";;".join(f"{v} (*{k})" for k, v in FORMATS.items())
        path, _ = QFileDialog.getSaveFileName(self, "Export to", self.pathEdit.text(), filters)
        if path:
            self.pathEdit.setText(path)

    def start(self) -> None:
        path = self.pathEdit.text().strip()
        try:
            format_of(path)
            self.options().check(self.window_.result.config)
        except ValueError as exc:
            self._failed(str(exc))
            return
        replace_readonly = confirm_write(self, path)
        if replace_readonly is None:
            self._failed(f"Not written: {path} is read-only")
            return
        self.messageLabel.setText(f"Writing {path}…")
        self.messageLabel.setStyleSheet("")
        self.progress.show()
        self.exportButton.setEnabled(False)
        result, options = self.window_.result, self.options()
        # an NPZ holds every default stage, an image its map's: also those the window's run left out (the scores)
        full = format_of(path) == ".npz"
        shown = frozenset() if options.what == "output" else frozenset({options.map_view})
        missing = full or not shown <= result.stages.keys()
        self.job.start(lambda: export(complete_stages(result, shown) if missing else result, path, options,
                                      replace_readonly))

    def _done(self, path) -> None:
        path = str(path)
        self.progress.hide()
        self.window_._remember_dir(path)
        self.window_.statusBar().showMessage(f"Exported {path}", 6000)
        self.sigFinished.emit(True, path)
        self.accept()

    def _failed(self, message: str) -> None:
        self.progress.hide()
        self.exportButton.setEnabled(True)
        self.messageLabel.setStyleSheet(f"color: {RED};")
        self.messageLabel.setText(message)
        self.sigFinished.emit(False, message)


def copy_to_clipboard(window) -> None:
    """Put the grid (or the focused head) on the clipboard; composed off the GUI thread (it takes
    seconds at 2,048 tokens: benchmarks/README.md, Behind the code), handed to the clipboard on it."""
    focus = window.headGrid.focus
    what = "grid" if focus is None else ("mean" if focus == -1 else "head")
    options = ExportOptions.from_view(window.frames.options, what=what, head=max(focus or 0, 0),
                                      step=window.steps.step())  # a generation's step: faded as the window shows it
    result = window.result
    job = BackgroundJob(window)
    job.sigDone.connect(window.put_on_clipboard)
    job.sigFailed.connect(window.copy_failed)
    for signal in (job.sigDone, job.sigFailed):
        signal.connect(job.deleteLater)
    window.statusBar().showMessage("Copying the image…")
    job.start(lambda: compose_image(result, options))


__all__ = ["ExportDialog", "confirm_write", "copy_to_clipboard"]
