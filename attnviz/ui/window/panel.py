"""The parameter panel, generated from RunConfig's field metadata and the variant specs.

Adding a variant or a config field adds no form code here: each field's widget type follows
from its Python type, its label, tooltip, range and objectName from its metadata, and its
visibility from `RunConfig.applies` for the chosen variant and mask.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import torch
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from attnviz.core import DTYPES, VARIANTS, ConfigError, RunConfig, list_presets, load_preset
from attnviz.core.runs.config import FILE_FIELDS, INPUT_SUFFIXES, WEIGHT_SUFFIXES, field_applies, field_meta
from attnviz.core.runs.userfiles import file_fields
from attnviz.style import RED
from attnviz.ui.panels.patch_view import ImageChooser
from attnviz.ui.widgets.basic import add_choice, named
from attnviz.ui.widgets.file_chooser import FileChooser, MapsChooser, PathChooser
from attnviz.ui.window.field_widgets import object_name
from attnviz.ui.window.model_chooser import ModelChooser

GROUPS = ("Model", "Input", "Attention", "Shape", "Mask", "Ablation", "Training", "Run")
DEFAULT_TEXT = "The cat sat on the mat because it was tired."
TEXT_MAX_CHARS = 200_000  # the text box: a long input opened from a file (at least 50,000 characters)
# choosers that show a model's or a file's name: the name gets a row of its own, not the field column beside
# the labels (at the panel's 300 px a model's name read "SmolLM2-1" and a maps file's "m…z")
NAME_ROWS = ("model", "maps", "image")
# fields whose choices are long names: the label on its row, the combo the panel's whole width below it
# (beside the label the variant read "Pretrained model (folde" and "Maps from a file (.n")
WIDE_ROWS = ("variant",)
ERROR_STYLE = f"border: 2px solid {RED}; border-radius: 3px;"


def _label_row(buttons: QWidget) -> QWidget:
    """`buttons` at the right end of a form's field column (on the row of their field's label)."""
    row = QWidget()
    layout = QHBoxLayout(row)
    layout.setContentsMargins(0, 0, 0, 0)
    layout.addStretch(1)
    layout.addWidget(buttons)
    return row


def cuda_devices() -> list[tuple[str, str]]:
    """(id, label) for each CUDA device torch can see."""
    if not torch.cuda.is_available():
        return []
    return [(f"cuda:{i}", f"cuda:{i} ({torch.cuda.get_device_name(i)})") for i in range(torch.cuda.device_count())]


class ParameterPanel(QWidget):
    """Edits a RunConfig. Emits sigChanged on every edit; `config()` validates (may raise ConfigError)."""

    sigChanged = Signal()
    sigBatchIndexChanged = Signal(int)  # view-only: which batch item is shown

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._loading = False
        self._fields_for: tuple | None = None  # (variant, mask, position, model) the rows shown fit
        self._model_lacks: tuple[str, frozenset[str]] = ("", frozenset())  # a model run: the fields it does not read
        self.widgets: dict[str, QWidget] = {}
        self._tooltips: dict[str, str] = {}
        self.labels: dict[str, QLabel] = {}
        self.rows: dict[str, QWidget] = {}  # a field whose row holds more than its widget: that row
        self.heads: dict[str, QWidget] = {}  # a chooser's buttons, on its label's row (NAME_ROWS)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(6, 6, 6, 6)

        outer.addLayout(self._make_preset_row())

        self.variantInfo = QLabel()
        self.variantInfo.setWordWrap(True)
        self.variantInfo.setStyleSheet("color: palette(mid);")

        forms: dict[str, QFormLayout] = {}
        self.groups: dict[str, QGroupBox] = {}
        for group in GROUPS:
            box = QGroupBox(group)
            forms[group] = QFormLayout(box)
            forms[group].setFieldGrowthPolicy(QFormLayout.AllNonFixedFieldsGrow)
            self.groups[group] = box
            outer.addWidget(box)
        for f in fields(RunConfig):
            self._add_field_row(forms[f.metadata["group"]], f.name, f.type, f.metadata)

        self.forms = forms
        self._make_error_box()
        outer.addWidget(self.errorBox)
        outer.addStretch(1)
        self._error_field: str | None = None
        self.set_config(RunConfig(), emit=False)

    # --- widgets -----------------------------------------------------------------------------

    def _make_error_box(self) -> None:
        """errorBox: the message and its fix buttons, shown under the offending field (show_error)."""
        self.errorBox = named(QWidget(), "errorBox")
        box = QVBoxLayout(self.errorBox)
        box.setContentsMargins(0, 0, 0, 0)
        self.errorLabel = named(QLabel(), "errorLabel")
        self.errorLabel.setWordWrap(True)
        self.errorLabel.setStyleSheet(f"color: {RED};")
        self.fixButtons = QHBoxLayout()
        box.addWidget(self.errorLabel)
        box.addLayout(self.fixButtons)
        self.errorBox.hide()

    def _make_preset_row(self) -> QHBoxLayout:
        """The preset chooser and the Reset button."""
        top = QHBoxLayout()
        self.presetCombo = named(QComboBox(), "presetCombo")
        self.presetCombo.setToolTip("Load a named configuration (the seed demos reproduce the tutorials' scripts)")
        self.presetCombo.setSizeAdjustPolicy(QComboBox.AdjustToMinimumContentsLengthWithIcon)
        self.presetCombo.addItem("Presets…", None)
        for preset, description in list_presets().items():
            add_choice(self.presetCombo, preset, preset, description)
        self.presetCombo.activated.connect(self._preset_chosen)
        self.resetButton = named(QPushButton("Reset"), "resetButton")
        self.resetButton.setToolTip("Reset every parameter to the defaults (Ctrl+R)")
        self.resetButton.clicked.connect(lambda: self.set_config(RunConfig()))
        top.addWidget(self.presetCombo, 1)
        top.addWidget(self.resetButton)
        return top

    def _add_field_row(self, form: QFormLayout, name: str, kind: str, meta: dict[str, Any]) -> None:
        """A config field's label and widget; the variant's description and the shown batch item below theirs."""
        widget = self._make_widget(name, kind, meta)
        label = QLabel(meta["label"])
        label.setToolTip(meta["tooltip"])
        label.setBuddy(widget)
        self.widgets[name] = widget
        self.labels[name] = label
        if name in NAME_ROWS:  # the label and the chooser's buttons, then the name the panel's whole width
            self.heads[name] = _label_row(widget.buttons)
            form.addRow(label, self.heads[name])
            form.addRow(widget)
        elif name in WIDE_ROWS:
            form.addRow(label)
            form.addRow(widget)
        else:
            form.addRow(label, self._generate_row(widget) if name == "generate" else widget)
        if name == "variant":
            form.addRow(self.variantInfo)
        if name == "batch":
            self.batchIndexSpin = named(QSpinBox(), "batchIndexSpin")
            self.batchIndexSpin.setToolTip("Which batch item the maps and tensors show (view only: no recompute)")
            self.batchIndexSpin.valueChanged.connect(self.sigBatchIndexChanged)
            self.labels["batch_index"] = QLabel("Shown item")
            self.labels["batch_index"].setBuddy(self.batchIndexSpin)
            form.addRow(self.labels["batch_index"], self.batchIndexSpin)

    def _generate_row(self, spin: QWidget) -> QWidget:
        """The token count with the Generate and Stop buttons beside it (the window connects them), and
        under them the text as the model continues it."""
        row = QWidget()
        line = QHBoxLayout()
        line.setContentsMargins(0, 0, 0, 0)
        self.generateButton = named(QPushButton("Generate"), "generateButton")
        self.generateButton.setToolTip("Let the model write the count of tokens after the text (Ctrl+G); with the "
                                       "count off, writes 20. Each new token's attention streams in as it is made. "
                                       "It writes once per click: editing the text afterwards shows the text alone")
        self.stopButton = named(QPushButton("Stop"), "stopButton")
        self.stopButton.setToolTip("Stop the model writing (Esc): what it wrote so far stays on screen; during a "
                                   "long forward, cancel it within its current layer")
        self.stopButton.setEnabled(False)
        for button in (self.generateButton, self.stopButton):  # the style's 80 px minimum widened the panel
            button.setMinimumWidth(button.fontMetrics().horizontalAdvance(button.text()) + 14)
        line.addWidget(self.generateButton, 1)  # under the count: beside it, the panel grew past its column
        line.addWidget(self.stopButton, 1)
        self.generatedLabel = named(QLabel(), "generatedLabel")
        self.generatedLabel.setWordWrap(True)
        self.generatedLabel.setTextFormat(Qt.RichText)
        self.generatedLabel.setToolTip("The text, then (in blue) what the model wrote after it")
        self.generatedLabel.setFixedHeight(3 * self.generatedLabel.fontMetrics().lineSpacing() + 4)
        self.generatedLabel.setAlignment(Qt.AlignLeft | Qt.AlignTop)
        self.generatedLabel.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Fixed)  # never widens the panel
        self.generatedLabel.hide()
        column = QVBoxLayout(row)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(2)
        column.addWidget(spin)
        column.addLayout(line)
        column.addWidget(self.generatedLabel)
        self.rows["generate"] = row
        return row

    def _make_widget(self, name: str, kind: str, meta: dict[str, Any]) -> QWidget:
        tooltip = meta["tooltip"] + (f" [{meta['unit']}]" if meta["unit"] else "")
        if name == "variant":
            w = QComboBox()
            for spec in VARIANTS.values():
                add_choice(w, spec.label, spec.id, f"{spec.seed}: {spec.description}")
            w.currentIndexChanged.connect(self._variant_changed)
        elif meta.get("choices"):  # mask, position: the registries' kinds, described in tooltips
            w = QComboBox()
            for kind_id, text in meta["choices"].items():
                add_choice(w, kind_id, kind_id, text)
            w.currentIndexChanged.connect(self._edited)
        elif name == "device":
            w = _device_combo()
            w.currentIndexChanged.connect(self._edited)
        elif name == "dtype":
            w = QComboBox()
            for dt in DTYPES:
                slow = " (slow on CPU)" if dt in ("float16", "bfloat16") else ""
                w.addItem(dt + slow, dt)
            w.currentIndexChanged.connect(self._edited)
        elif kind == "bool":
            w = QCheckBox()
            w.toggled.connect(self._edited)
        elif kind in ("int", "float"):
            w = _spin_box(kind, meta)
            w.valueChanged.connect(self._edited)
        elif name == "model":  # a folder: the ones found locally, or "Open…"
            w = ModelChooser(buttons_apart=True)
            w.sigChanged.connect(self._edited)
        elif name == "image":  # a vision model's picture: Open… (or a file dropped onto the window)
            w = ImageChooser(buttons_apart=True)
            w.sigChanged.connect(self._edited)
        elif name == "maps":  # an .npz of maps written by attnviz: Open… (or a file dropped onto the window)
            w = MapsChooser(buttons_apart=True)
            w.sigChanged.connect(self._edited)
        elif name in FILE_FIELDS:  # your own weights / inputs: Random or From file
            w = FileChooser(name, name, WEIGHT_SUFFIXES if name == "weights" else INPUT_SUFFIXES)
            w.sigChanged.connect(self._edited)
        elif kind == "str":  # free text: a folder, the input text
            w = QLineEdit()
            w.setClearButtonEnabled(True)
            if name == "text":
                w.setPlaceholderText("Type a sentence: the maps follow as you type")
                w.setMaxLength(TEXT_MAX_CHARS)  # a long input (File > Open text file…), not Qt's 32,767
            w.textChanged.connect(self._edited)
        else:  # a tuple (lengths, ablated heads), typed as text
            w = QLineEdit()
            w.setPlaceholderText("e.g. 3.5, 4.*" if name == "ablate" else "e.g. 16, 9")
            w.textChanged.connect(self._edited)
        if isinstance(w, QComboBox):  # long item texts must not widen the panel
            w.setSizeAdjustPolicy(QComboBox.AdjustToMinimumContentsLengthWithIcon)
            w.setMinimumContentsLength(8)
        w.setToolTip(tooltip)
        self._tooltips[name] = tooltip
        return named(w, object_name(name))

    def _value(self, name: str) -> Any:
        w = self.widgets[name]
        if isinstance(w, QComboBox):
            return w.currentData()
        if isinstance(w, QCheckBox):
            return w.isChecked()
        if isinstance(w, (QSpinBox, QDoubleSpinBox)):
            return w.value()
        if isinstance(w, ModelChooser):
            return w.folder()
        if isinstance(w, (FileChooser, PathChooser)):
            return w.path()
        if name != "kv_lengths":
            return w.text()
        text = w.text().replace(";", ",").replace(" ", ",")
        parts = [p for p in text.split(",") if p]
        try:
            return tuple(int(p) for p in parts)
        except ValueError:
            raise ConfigError(name, w.text(), "lengths must be whole numbers separated by commas",
                              "type e.g. 16, 9") from None

    def _set_value(self, name: str, value: Any) -> None:
        w = self.widgets[name]
        if isinstance(w, QComboBox):
            index = w.findData(value)
            if index < 0:  # e.g. a saved cuda device that is not here: keep the value visible
                w.addItem(f"{value} (not available)", value)
                index = w.count() - 1
            w.setCurrentIndex(index)
        elif isinstance(w, QCheckBox):
            w.setChecked(bool(value))
        elif isinstance(w, (QSpinBox, QDoubleSpinBox)):
            if value > w.maximum():  # bounded by the last model (layer): a new config's value is not clamped
                w.setMaximum(field_meta(name)["maximum"])
            w.setValue(value)
        elif isinstance(w, ModelChooser):
            w.set_folder(value)
        elif isinstance(w, (FileChooser, PathChooser)):
            w.set_path(value)
        else:
            w.setText(", ".join(str(v) for v in value) if isinstance(value, tuple) else value)
            w.setCursorPosition(0)  # show a long text from its start, not its end

    # --- config in and out -------------------------------------------------------------------

    def raw_values(self) -> dict[str, Any]:
        return {name: self._value(name) for name in self.widgets}

    def config(self) -> RunConfig:
        """The panel's configuration; raises ConfigError (naming the field) when invalid."""
        return RunConfig(**self.raw_values())

    def set_config(self, config: RunConfig, emit: bool = True) -> None:
        self._loading = True
        try:
            for name in self.widgets:
                self._set_value(name, getattr(config, name))
        finally:
            self._loading = False
        self._refresh_visibility()
        if emit:
            self.sigChanged.emit()

    def config_applies(self, name: str) -> bool:
        """Whether field `name` means anything for the panel's current variant, mask and position."""
        return field_applies(name, self._value("variant"), self._value("mask"), self._value("position"))

    def adopt_files(self, config: RunConfig) -> bool:
        """Show what a run took from its files (bias flags, batch, lengths) without a new request;
        True if anything changed."""
        changed = False
        self._loading = True
        try:
            for name in file_fields(config.variant, config.weights, config.inputs):
                if self._value(name) != getattr(config, name):
                    self._set_value(name, getattr(config, name))
                    changed = True
        finally:
            self._loading = False
        if changed:
            self._refresh_visibility()
        return changed

    def batch_index(self) -> int:
        return self.batchIndexSpin.value()

    # --- reactions ---------------------------------------------------------------------------

    def _variant_changed(self) -> None:
        if self._loading:
            return
        spec = VARIANTS[self.widgets["variant"].currentData()]
        self._loading = True  # the seed's own defaults for its mask and bias flags
        try:
            self._set_value("mask", spec.default_mask)
            if spec.id == "cross":
                self._set_value("in_bias", False)
            elif "in_bias" in spec.fields:
                self._set_value("in_bias", True)
            for name, value in spec.defaults.items():  # a toy's own input and layer
                self._set_value(name, value)
            if spec.backed and "model" in spec.fields:
                self._start_backed()
        finally:
            self._loading = False
        self._edited()

    def _start_backed(self) -> None:
        """A text to run once a model is chosen (the model is the user's choice: none is opened unasked)."""
        if not self._value("text").strip():
            self._set_value("text", DEFAULT_TEXT)

    def _edited(self, *_: Any) -> None:
        if self._loading:
            return
        if self._value("mask") == "padding":
            text = self.widgets["kv_lengths"].text().strip()
            lengths = None
            if not text:  # start from something to see: shorter valid lengths per item
                lengths = self._default_lengths()
            elif self.sender() is self.widgets["batch"]:  # keep one length per item: trim or repeat the last
                with contextlib.suppress(ConfigError):
                    old, batch = self._value("kv_lengths"), self._value("batch")
                    if len(old) > 1 and len(old) != batch:
                        lengths = (old + old[-1:] * batch)[:batch]
            if lengths is not None:
                self._loading = True
                self._set_value("kv_lengths", lengths)
                self._loading = False
        self._refresh_visibility()
        self.sigChanged.emit()

    def _default_lengths(self) -> tuple[int, ...]:
        batch = self._value("batch")
        lkv = self._value("seq_kv") if VARIANTS[self._value("variant")].cross else self._value("seq_q")
        return tuple(max(1, lkv - (b + 1) * lkv // (batch + 2)) for b in range(batch))

    def _preset_chosen(self, index: int) -> None:
        name = self.presetCombo.itemData(index)
        self.presetCombo.setCurrentIndex(0)
        if name:
            self.set_config(load_preset(name))

    @contextlib.contextmanager
    def _layouts_held(self) -> Iterator[None]:
        """The panel's layouts off while rows come and go, then one pass. Qt lays out every parent
        of a widget again each time one is shown: a variant change laid the panel out once per
        row that came back, some of the longest fuzz stalls (benchmarks/README.md, Behind the code)."""
        layouts = [box.layout() for box in self.groups.values()] + [self.layout()]
        for layout in layouts:
            layout.setEnabled(False)
        try:
            yield
        finally:
            for layout in layouts:  # the groups first: the panel's pass reads their sizes
                layout.setEnabled(True)
                layout.activate()

    def _refresh_visibility(self) -> None:
        shown_for = tuple(self._value(n) for n in ("variant", "mask", "position", "model"))
        if shown_for != self._fields_for:  # a seed or length edit shows the same rows: ~70 calls saved
            with self._layouts_held():
                self._show_fields(*shown_for)
            self._fields_for = shown_for
        values = {n: self._value(n) for n in ("variant", "batch")}
        self._mark_file_fields(values["variant"])
        self.batchIndexSpin.setMaximum(max(values["batch"] - 1, 0))
        self.batchIndexSpin.setEnabled(values["batch"] > 1)

    def know_model(self, model: str, stacks: tuple[str, ...], vision: bool) -> None:
        """What the model that just ran reads: one stack has no decoder text or stack to choose, a text model
        no image; those rows hide while that model is chosen."""
        lacks = frozenset({"decoder_text", "stack"} if len(stacks) <= 1 else ()) | frozenset(() if vision else
                                                                                             {"image"})
        if (model, lacks) != self._model_lacks:
            self._model_lacks = (model, lacks)
            self._fields_for = None
            self._refresh_visibility()

    def _show_fields(self, variant: str, mask: str, position: str, model: str) -> None:
        """The rows and groups that apply to the variant, mask and position chosen (and the model that ran, where
        it is the one chosen), and their labels."""
        spec = VARIANTS[variant]
        self.variantInfo.setText(f"{spec.seed}: {spec.description}")
        lacks = self._model_lacks[1] if spec.backed and model and model == self._model_lacks[0] else frozenset()
        shown = {name: field_applies(name, variant, mask, position) and name not in lacks for name in self.widgets}
        for name, widget in self.widgets.items():
            self.rows.get(name, widget).setVisible(shown[name])
            self.labels[name].setVisible(shown[name])
            if name in self.heads:
                self.heads[name].setVisible(shown[name])
            self.labels[name].setText(spec.labels.get(name, field_meta(name)["label"]))
        for group, box in self.groups.items():
            box.setVisible(any(shown[n] for n in self.widgets if field_meta(n)["group"] == group))

    def _mark_file_fields(self, variant: str) -> None:
        """Fields the weights or inputs file decides are read-only and say so."""
        weights, inputs = self._value("weights"), self._value("inputs")
        decided = file_fields(variant, weights, inputs)
        for name in ("batch", "seq_q", "seq_kv", "in_bias", "out_bias"):
            w = self.widgets[name]
            w.setEnabled(name not in decided)
            if name == self._error_field:
                continue
            source = Path(weights if name.endswith("bias") else inputs).name
            w.setToolTip(f"Set by the file {source}" if name in decided else self._tooltips[name])

    # --- errors at the control ---------------------------------------------------------------

    @property
    def error_field(self) -> str | None:
        """The control marked by the error shown (None: no error, or one of no control)."""
        return self._error_field

    def show_error(self, message: str, field: str | None, suggestions: tuple = ()) -> None:
        """Mark the offending control, say what is wrong, and offer the nearest valid values."""
        self.clear_error()
        self._error_field = field
        if field in self.widgets:
            w = self.widgets[field]
            _marked(w).setStyleSheet(ERROR_STYLE)
            w.setToolTip(message)
        self.errorLabel.setText(message)
        for value in suggestions[:3]:
            label = self.labels.get(field)
            name = label.text() if label else field
            button = QPushButton(f"Use {name} = {value}")
            button.setObjectName(f"fixButton_{value}")
            button.setToolTip(f"Set {name} to {value}, the nearest valid value")
            if field == "text":  # the fix for a text too long for the model: its start that fits
                button.setText("Truncate the text to fit")
                button.setObjectName("fixButton_truncate")
                button.setToolTip(f"Keep the start of the text that fits the model: {value[:80]}…")
            button.clicked.connect(lambda _=False, v=value: self.apply_fix(field, v))
            self.fixButtons.addWidget(button)
        self._place_error_box(field)
        self.errorBox.show()
        QTimer.singleShot(0, self, self._scroll_to_error)  # once the panel is laid out with the box in place

    def _place_error_box(self, field: str | None) -> None:
        """The message and its buttons in the row under the field's (the panel's end without one): at the
        panel's end, below every group, they sat off-screen in the scrolled panel while the field showed red."""
        self._detach_error_box()
        target = self.rows.get(field, self.widgets.get(field)) if field else None
        for form in self.forms.values():
            row, _ = form.getWidgetPosition(target) if target is not None else (-1, None)
            if row >= 0:
                form.insertRow(row + 1, self.errorBox)
                return
        outer = self.layout()
        outer.insertWidget(outer.count() - 1, self.errorBox)  # before the closing stretch

    def _detach_error_box(self) -> None:
        for form in self.forms.values():
            if form.getWidgetPosition(self.errorBox)[0] >= 0:
                form.takeRow(self.errorBox)
        self.layout().removeWidget(self.errorBox)

    def _scroll_to_error(self) -> None:
        """The scroll area holding the panel shows the marked field and, under it, the message and buttons."""
        scroll = self.parentWidget() and self.parentWidget().parentWidget()
        if not isinstance(scroll, QScrollArea) or not self.errorBox.isVisible():
            return
        scroll.widget().layout().activate()
        scroll.ensureWidgetVisible(self.errorBox, 0, 10)
        field = self.widgets.get(self._error_field)
        if field is not None and field.isVisible():
            scroll.ensureWidgetVisible(field, 0, 10)

    def apply_fix(self, field: str, value: Any) -> None:
        if field not in ("seq_q", "seq_kv"):
            self._set_value(field, value)
            return
        # A memory fix: both lengths at most `value` (never longer), padding lengths clipped to the
        # keys, then one change signal: setting a length to the value it has would emit none.
        self._loading = True
        try:
            for name in ("seq_q", "seq_kv"):
                if name == "seq_q" or field_applies(name, self._value("variant"), self._value("mask")):
                    self._set_value(name, min(self._value(name), value))
        finally:
            self._loading = False
        self._clip_kv_lengths(self._value("seq_q"))
        self._edited()

    def _clip_kv_lengths(self, length: int) -> None:
        """Padding lengths past a shortened key sequence would be invalid: clip them to it."""
        if self._value("mask") != "padding":
            return
        with contextlib.suppress(ConfigError):
            keys = self._value("seq_kv") if VARIANTS[self._value("variant")].cross else length
            self._loading = True
            try:
                self._set_value("kv_lengths", tuple(min(n, keys) for n in self._value("kv_lengths")))
            finally:
                self._loading = False

    def clear_error(self) -> None:
        if self._error_field in self.widgets:
            w = self.widgets[self._error_field]
            _marked(w).setStyleSheet("")
            w.setToolTip(self._tooltips[self._error_field])
        self._error_field = None
        self.errorLabel.clear()
        self.errorBox.hide()
        while self.fixButtons.count():
            item = self.fixButtons.takeAt(0)
            if item.widget():
                item.widget().deleteLater()


def _marked(w: QWidget) -> QWidget:
    """The part of a field's widget an error marks: one box, not each part, and never a parent of the file
    dialogs a chooser opens (a style sheet is inherited by a widget's children, dialogs included)."""
    if isinstance(w, (FileChooser, PathChooser)):
        return w.fileLabel
    return w.combo if isinstance(w, ModelChooser) else w


def _device_combo() -> QComboBox:
    """cpu, auto and every CUDA device; without one a disabled 'cuda' item whose tooltip says why."""
    w = QComboBox()
    w.addItem("cpu", "cpu")
    w.addItem("auto (CUDA if available)", "auto")
    devices = cuda_devices()
    if devices:
        w.addItem("cuda (the current CUDA device)", "cuda")
    for dev, label in devices:
        w.addItem(label, dev)
    if not devices:
        w.addItem("cuda (not available)", "cuda")
        model: QStandardItemModel = w.model()
        model.item(w.count() - 1).setEnabled(False)
        w.setItemData(w.count() - 1, "No CUDA device: torch.cuda.is_available() is False "
                      f"(torch {torch.__version__}, CUDA build: {torch.version.cuda or 'no'})", Qt.ToolTipRole)
    return w


def _spin_box(kind: str, meta: dict[str, Any]) -> QSpinBox | QDoubleSpinBox:
    """An int or float field's spin box: its range, unit suffix, step and the text shown at 0."""
    if kind == "int":
        w = QSpinBox()
        w.setRange(int(meta["minimum"]), int(meta["maximum"]))
        w.setKeyboardTracking(True)
        w.setAccelerated(True)
        if meta["unit"]:
            w.setSuffix(f" {meta['unit']}")
    else:
        w = QDoubleSpinBox()
        w.setRange(meta["minimum"], meta["maximum"])
        w.setDecimals(meta["decimals"])
        w.setSingleStep(0.05 if meta["decimals"] >= 2 else 1000 if meta["maximum"] > 1e5 else 1)
    if meta.get("zero_text"):
        w.setSpecialValueText(meta["zero_text"])  # shown at the minimum, 0
    return w
