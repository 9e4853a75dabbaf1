"""Watching a model write, in the window: the step slider over a generation's tokens, the text as the model
continues it, and the progress of a generation that is still running.

Everything here only reads a result the worker already built and rendered: moving the slider marks the chosen
token's row in the maps (the rows after it faded: the generation as it stood when that token was written) and
its prediction in the strip, and never asks the worker for anything.
"""

from __future__ import annotations

import html
import re

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSizePolicy, QSlider

from attnviz.core import RunConfig, RunResult
from attnviz.models.tokens import display
from attnviz.ui.maps.mosaic import GENERATED_INK
from attnviz.ui.widgets.basic import named

TEXT_CHARS = 100  # the continuation label (three lines) shows the end of a longer text
LONG_WORD = 16  # characters: a longer run without spaces may wrap anywhere
STEP_ALL = "step: all tokens"


def generated_count(result: RunResult | None) -> int:
    """How many generated tokens a result's maps hold (0: not a generation)."""
    return 0 if result is None else result.generated_count


def continuation_html(result: RunResult) -> str:
    """The prompt's text, then the generated tokens in blue (the end of a long text)."""
    prompt = "".join(result.tokens[:result.prompt_length])
    written = "".join(result.tokens[result.prompt_length:])
    keep = max(TEXT_CHARS - len(written), 40)
    head = ("…" + prompt[-keep:]) if len(prompt) > keep else prompt
    return (f"{_breakable(head)}<span style='color: {GENERATED_INK.name()}; font-weight: bold;'>"
            f"{_breakable(written[-TEXT_CHARS:])}</span>")


def _breakable(text: str) -> str:
    """Escaped; a word longer than LONG_WORD characters (a toy's letters, a run of digits) gets a zero-width space
    after each character, so the label wraps it anywhere instead of growing as wide as it. Words of ordinary
    length wrap between words ("jumps", never "jum ps")."""
    def part(match: re.Match) -> str:
        run = match.group()
        return "\u200b".join(map(html.escape, run)) if len(run) > LONG_WORD else html.escape(run)
    return re.sub(r"\S+|\s+", part, text)


class StepControls:
    """stepSlider and its label, placed in a row of the window; `show` follows each result on screen."""

    def __init__(self) -> None:
        self.slider = named(QSlider(Qt.Horizontal), "stepSlider")
        self.slider.setRange(0, 0)
        self.slider.setEnabled(False)
        self.slider.setFixedWidth(160)
        self.slider.setPageStep(1)
        self.slider.setToolTip("A generated token (enabled for a generation): the maps mark its row, its "
                               "attention over every earlier token, fading the later rows; the predictions strip "
                               "shows the step's top k. At the left: every token. View only, nothing recomputes")
        self.label = named(QLabel(STEP_ALL), "stepLabel")
        self.label.setTextFormat(Qt.PlainText)
        self.label.setFixedWidth(230)  # a new token's text never resizes the row (nor the maps below)
        self.label.setSizePolicy(QSizePolicy.Fixed, QSizePolicy.Preferred)
        self.caption = QLabel("Step")
        self.caption.setBuddy(self.slider)
        self.result: RunResult | None = None
        self._set_shown(False)  # until a generation is on screen

    def add_to(self, row: QHBoxLayout) -> None:
        row.addWidget(self.caption)
        row.addWidget(self.slider)
        row.addWidget(self.label)

    def show(self, result: RunResult) -> None:
        """A new result on screen: the slider spans its generated tokens (the chosen one kept while it exists); with
        none to step through (a plain run, a generation cut back to its prompt) the controls are hidden."""
        self.result = result
        n = generated_count(result)
        self.slider.blockSignals(True)  # the window asks for the marks itself, once per result
        self.slider.setRange(0, n)
        self.slider.blockSignals(False)
        self._set_shown(n > 0)
        self.label.setText(self.text())

    def _set_shown(self, shown: bool) -> None:
        """Hidden, the controls keep their room: a generation arriving never moves the row nor resizes the maps
        below it (which would ask for another render)."""
        for widget in (self.caption, self.slider, self.label):
            policy = widget.sizePolicy()
            policy.setRetainSizeWhenHidden(True)
            widget.setSizePolicy(policy)
            widget.setVisible(shown)
        self.slider.setEnabled(shown)

    def step(self) -> int | None:
        """The chosen step (k generated tokens) as an export takes it (ExportOptions.step); None: every token."""
        return None if self.row() is None else self.slider.value()

    def row(self) -> int | None:
        """The chosen token's position (its row in the maps), or None (no step chosen, or no generation)."""
        k = self.slider.value()
        if not k or self.result is None or generated_count(self.result) < k:
            return None
        return self.result.prompt_length + k - 1

    def text(self) -> str:
        row = self.row()
        if row is None:
            return STEP_ALL
        return (f"step {self.slider.value()}/{generated_count(self.result)}: "
                f"'{display(self.result.tokens[row])}' at {row}")


class GenerateOnce:
    """Generate acts once per click: a request generates only when Generate was pressed or the count was just
    set (the count off: the text alone). Any other request runs the plain forward of the panel's config, except
    one whose config is the shown generation's (a view change, a panel opened): that asks for the generation
    again, and the worker reuses it (or, where it cannot, runs the plain forward: it writes tokens only for a
    forced request)."""

    def __init__(self) -> None:
        self.count = 0  # the count the last request saw
        self.generation: tuple[RunConfig, RunConfig] | None = None  # (its config without generate, as sent)

    def config_for(self, config: RunConfig, force: bool) -> tuple[RunConfig, bool]:
        """(the config to send, forced) for the panel's `config`; `force`: Generate pressed."""
        count = config.generate if config.applies("generate") else 0
        plain = config.replace(generate=0) if config.generate else config
        changed, self.count = count != self.count, count
        if count and (force or changed):
            self.generation = (plain, config)
            return config, True
        generation = self.generation
        if generation is not None and count and generation[0].replace(layer=plain.layer) == plain:
            return self.generation[1].replace(layer=plain.layer), False  # another layer of it too
        self.generation = None
        return plain, False
