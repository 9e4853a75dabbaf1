"""Run > Check against transformers: models/check.py on a thread of its own (circuit_job.Job), never the GUI
thread or the map worker's, with a progress bar and Cancel in the status bar. The result: one status line, and
a column of each head's max |diff| in the Statistics table for the layer shown (while the shown maps are the
forward that was checked)."""

from __future__ import annotations

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QMainWindow, QProgressBar, QPushButton

from attnviz.explain import forward_config
from attnviz.models.check import CheckReport, check_against_transformers
from attnviz.ui.panels.circuit_job import Job
from attnviz.ui.widgets.basic import named

COLUMN = ("vs transformers", "max |attnviz − transformers| of this head's attention weights, from Run > Check "
          "against transformers (transformers' own eager attention, float32, on the same token ids)")
NEEDS_MODEL = ("Check against transformers needs a pretrained model's maps on screen (a transformers folder or a "
               ".gguf file)")


class TransformersCheck(QObject):
    """The check of one window (a MainWindow: its result, status bar, statistics panel and sigShown)."""

    def __init__(self, window: QMainWindow, check=check_against_transformers):
        super().__init__(window)
        self.window, self.check = window, check
        self.report: CheckReport | None = None
        self._asked = None  # the forward config the running (or last) check is for
        self.job = Job("check", self)
        self.job.sigProgress.connect(self._progress)
        self.job.sigDone.connect(self._done)
        self.job.sigFailed.connect(self._failed)
        self.progress = named(QProgressBar(), "checkProgress")
        self.progress.setToolTip("Check against transformers: loading transformers' own model, then its forward "
                                 "layer by layer")
        self.progress.setFixedWidth(self.progress.fontMetrics().horizontalAdvance("transformers: layer 999 / 999") + 24)
        self.progress.hide()
        self.cancelButton = named(QPushButton("Cancel check"), "checkCancelButton")
        self.cancelButton.setToolTip("Stop checking against transformers (the maps stay as they are)")
        self.cancelButton.clicked.connect(self.cancel)
        self.cancelButton.hide()
        window.statusBar().addPermanentWidget(self.progress)
        window.statusBar().addPermanentWidget(self.cancelButton)
        window.sigShown.connect(self._shown)

    def start(self) -> None:
        """Check the run on screen (its forward's maps and logits) against transformers' eager forward."""
        result = self.window.result
        if result is None or result.source is None:
            self.window.statusBar().showMessage(NEEDS_MODEL, 8000)
            return
        self._asked = forward_config(result)
        check = self.check

        def compute(cancel, progress):
            def step(name: str, done: int, total: int) -> None:  # no count while loading (0) or comparing (1)
                progress(*((done, total) if name == "layers" else (int(name == "comparing"), 0)))
            return check(result, cancel=cancel, progress=step)

        self._busy(True)
        self._progress(self._asked, 0, 0, running=True)
        self.job.start(self._asked, compute)

    def cancel(self) -> None:
        if self.job.key is not None:
            self.job.cancel()
            self.window.statusBar().showMessage("Check against transformers cancelled", 6000)
        self._busy(False)

    def _busy(self, on: bool) -> None:
        self.progress.setVisible(on)
        self.cancelButton.setVisible(on)

    def _progress(self, key, done: int, total: int, running: bool = False) -> None:
        """The bar's text says the step (a busy bar without a range shows no text in most styles)."""
        if key != self.job.key and not running:
            return
        steps = ("transformers: loading…", "comparing…")
        self.progress.setRange(0, max(total, 1))
        self.progress.setValue(done if total else 0)
        self.progress.setFormat(f"transformers: layer {done} / {total}" if total else steps[done])

    def _done(self, key, report: CheckReport) -> None:
        self.job.finished(key)
        if key != self._asked:
            return
        self._busy(False)
        self.report = report
        self.window.statusBar().showMessage(report.line())
        self._shown()

    def _failed(self, key, line: str) -> None:
        self.job.finished(key)
        if key != self._asked:
            return
        self._busy(False)
        said = line.startswith(("not checked", "transformers' float32 copy"))  # check.py's own lines
        self.window.statusBar().showMessage(line if said else f"not checked: {line}")

    def about(self, result) -> bool:
        """Whether the report is about this result's maps (the same forward, any layer)."""
        if self.report is None or result is None or result.source is None:
            return False
        key = forward_config(result)
        return self.report.key.replace(pool=key.pool) == key

    def _shown(self, *_) -> None:
        """A result on screen: the statistics get the column where the report is about it; elsewhere the
        column and the status line go."""
        result = self.window.result
        stats = self.window.explain.stats
        if self.about(result):
            stats.set_extra_column(*COLUMN, self.report.per_head[result.config.layer])
            return
        stats.set_extra_column(*COLUMN, None)
        if self.report is not None and self.window.statusBar().currentMessage() == self.report.line():
            self.window.statusBar().clearMessage()
