"""How the window shows a failure: the control marked, the message, the last good maps kept and marked stale
(a pretrained variant with no model chosen yet is a prompt instead: window_model.py). Mixed into MainWindow."""

from __future__ import annotations


class WindowFailures:
    """The failure state of MainWindow (needs its panel, status bar, stale banner and views)."""

    _prompting = False  # the failure is a pretrained variant's empty model: a prompt (no banner, no red)

    def _show_failure(self, message: str, field: str | None, suggestions: tuple = ()) -> None:
        self.last_error = message
        self._prompting = self._prompt_for_model(field)
        if self._prompting:
            return
        self.panel.show_error(message, field, suggestions)
        self.statusBar().showMessage(f"Not updated: {message}")
        if self.result is not None:
            self._mark_stale(message)

    def _mark_stale(self, message: str) -> None:
        if self._prompting:  # the maps dimmed, the prompt above them: no banner
            self.headGrid.set_stale(True)
            self.outputView.set_stale(True)
            return
        self.staleLabel.setText("Stale: the maps show the last valid configuration. " + message)
        self.staleLabel.show()
        self.headGrid.set_stale(True)
        self.outputView.set_stale(True)

    def _clear_failure(self) -> None:
        if self.last_error is None:
            return
        self.last_error, self._prompting = None, False
        self.panel.clear_error()
        self.statusBar().clearMessage()
        self.staleLabel.hide()
        self.headGrid.set_stale(False)
        self.outputView.set_stale(False)
