"""The main window: parameter panel on the left, head grid and output tensor on the right.

Every change becomes an immutable Request (config + view options) with a fresh id; the worker
computes it off the GUI thread; the window swaps in results newer than what it shows and drops
the rest. Invalid input is caught here (cheap validation, no forward pass) or reported by the
worker; either way the last good maps stay on screen, marked stale.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
import math
import time
from pathlib import Path

from PySide6.QtCore import QByteArray, QSettings, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QGuiApplication, QKeySequence, QPalette
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDockWidget,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QMessageBox,
    QProgressBar,
    QScrollArea,
    QSpinBox,
    QSplitter,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from .. import colormaps
from ..core import ConfigError, RunConfig, load_config, load_preset, run, saved_json
from ..core.backed import WEIGHTS_ONLY_NOTE
from ..core.config import field_meta
from ..core.runner import run_stages
from ..core.userfiles import FileChanged
from ..frames import MAP_VIEWS, SCALE_MODES, TENSORS, ViewOptions, default_scale, view_stage
from . import lifecycle
from .choices import add_choice
from .explain_views import ExplainViews
from .generate import StepControls, continuation_html, generated_count
from .model_view import ModelPanel, ModelView, ablated_heads, toggle_head
from .panel import ParameterPanel, named
from .predictions_view import PredictionStrip
from .views import CaptionBar, HeadGrid, OverlayBanner, TensorView
from .worker import Failure, Outcome, Request, Worker, generating, supersedes

SETTINGS_VERSION = 1
START_PRESET = "toy-reverse"  # what a first launch shows
MODEL_DOCK_PX = 200  # the model view's height at a first launch
TENSOR_MIN_PX = 120  # the tensor view keeps its rows and tick labels legible in a cramped window
DEFAULT_GENERATE = 20  # tokens the Generate button writes while the count is off
MODEL_VIEW_PARTIAL_S = 0.5  # while a generation streams, the model view follows at most this often
HOVER_HINT = "Hover a cell for its exact value and how it was computed; click a head to enlarge it (Esc: back)."


STACK_CAPTIONS = {"encoder": "encoder self-attention", "decoder": "decoder self-attention (causal)",
                  "cross": "cross-attention (decoder tokens reading the encoder's)"}


def caption_for(result) -> tuple[str, bool]:
    """What to look for in a result's maps, and whether it is a trained model's own caption."""
    config = result.config
    text, focus = config.spec.caption, config.spec.defaults.get("layer")
    if text:
        if focus is not None and config.layer != focus:
            text += f"  (this is layer {config.layer}; the pattern is in layer {focus})"
        return text, True
    if result.source is not None:
        info = result.source.info
        lacking = f" ({WEIGHTS_ONLY_NOTE})" if WEIGHTS_ONLY_NOTE in result.notes else ""
        stacks = getattr(info, "stacks", ())
        stack = f" {STACK_CAPTIONS[config.stack or stacks[0]]}," if len(stacks) > 1 else ""
        return (f"Pretrained {info.name} ({info.model_type}) on your text:{stack} layer {config.layer} of "
                f"{info.layers} (0-{info.layers - 1}){lacking}. Hover a cell for the token pair and its weight."), False
    if config.weights:
        return f"Your weights ({Path(config.weights).name}): the maps show what they learned.", False
    return (f"Random weights (seed {config.seed}): nothing learned, so the maps are near-uniform apart from what "
            "the mask, positions and scale impose. A \u201cTrained toy\u201d variant shows heads with a job."), False


def run_key(result) -> RunConfig:
    """What a result was computed for: a model forward's config (a generation's partial results share it)."""
    return result.source.key if result.source is not None else result.config


def generation_text(outcome: Outcome) -> str:
    """The status line's lead for a generation: how far it got."""
    if outcome.generated is None:
        return ""
    n, total = outcome.generated
    if outcome.partial:
        return f"generating {n} / {total} tokens · "
    if outcome.stopped:
        return f"stopped after {n} of {total} tokens · "
    return f"generated {n} tokens · "


class MainWindow(QMainWindow):
    """attnviz's window. `MainWindow()` starts from the defaults and remembers nothing;
    pass a QSettings to restore and save parameters, view choices and geometry."""

    sigShown = Signal(int)  # the request id whose (final) result is now on screen
    sigPartialShown = Signal(int, int)  # a generation still running: (request id, generated tokens on screen)
    sigFailed = Signal(int, str)  # a request id and the message shown for it

    def __init__(self, settings: QSettings | None = None, compute=run, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("attnviz")
        self.settings = settings
        self._ids = itertools.count(1)
        self.latest_id = 0  # newest request sent
        self.shown_id = 0  # newest request on screen
        self.failed_id = 0  # newest request that failed
        self.stopped_id = 0  # newest request stopped before it had anything to show
        self._shown_key = (0, 1, 0)  # (request id, final, tokens) of what is on screen: partials order by tokens
        # generation outcomes of requests older than these are dropped: a newer request replaced that run
        self._partial_cut = self._final_cut = 0
        self._sent: RunConfig | None = None  # the config of the newest request sent to the worker
        self.generating_id = 0  # the newest request whose generation may still be running (0: none)
        self._generate_count = DEFAULT_GENERATE  # what Generate writes while the count is off
        self._model_shown_at = -math.inf  # when a partial result last went into the model view
        self._model_run = None  # (request id, forward config) of the result the model view last got
        self.result = None
        self.frames = None
        self.last_error: str | None = None

        maps_layout = self._make_central()
        self._make_status_bar()
        maps_layout.insertWidget(1, self.hoverLabel)
        self._make_model_dock()
        self._make_actions()
        self.resize(1280, 820)

        self._timer = self._single_shot(0, self.request)  # a burst of edits: one request per loop turn
        self._arrived: Outcome | None = None  # the newest result not yet on screen
        self._unpainted: int | None = None  # the request id of a result shown, not yet painted by both views
        self._swap_timer = self._single_shot(0, self._swap_in)  # a timer, not a queued call: the loop runs between
        self._showing: Outcome | None = None  # in the grid; the other views' turn comes next (_show_rest)
        self._swap_s = 0.0  # the GUI-thread time its grid took
        self._rest_timer = self._single_shot(0, self._show_rest)
        self._retired: list = []  # replaced results and frames, freed once the newest is fully shown

        self.worker = Worker(compute, parent=self)
        self.worker.sigDone.connect(self._on_done)
        self.worker.sigFailed.connect(self._on_failed)
        self.worker.sigBusy.connect(self._on_busy)
        self.worker.sigCancelled.connect(self._on_cancelled)
        self.panel.generateButton.clicked.connect(self.generate)
        self.panel.stopButton.clicked.connect(self.stop_generation)
        self.panel.sigChanged.connect(self.schedule)
        self.panel.sigBatchIndexChanged.connect(self.schedule)
        self.headGrid.sigHover.connect(self._show_hover)
        self.outputView.sigHover.connect(self._show_hover)
        self.headGrid.sigFocusChanged.connect(self.schedule)
        self.headGrid.sigResized.connect(self.schedule)  # re-pool to the new tile size (no recompute)
        # Each view says when it painted (not a Python event() on the window: the whole window's
        # paint then ran inside a Python frame holding the GIL, and the worker's Python waited).
        self.headGrid.after_paint = self.outputView.after_paint = self._resume_worker

        lifecycle.track(self)  # at interpreter exit: workers stopped, window deleted before teardown
        if settings is not None:
            self._restore(settings)
        self.request()
        # ~200k objects are alive after start-up (torch, Qt, pyqtgraph); a full garbage collection
        # over them takes ~115 ms on the GUI thread. Freeze them: they live as long as the app.
        gc.freeze()

    def _make_central(self) -> QVBoxLayout:
        """The parameter panel (scrolling) left; the maps over the tensor view right. Returns the maps'
        layout (the hover line goes under its controls)."""
        self.panel = ParameterPanel()
        scroll = QScrollArea()
        scroll.setWidget(self.panel)
        scroll.setWidgetResizable(True)
        scroll.setMinimumWidth(300)

        self.headGrid = HeadGrid()
        self.outputView = TensorView()
        self.outputView.setMinimumHeight(TENSOR_MIN_PX)
        maps, maps_layout = self._maps_column()
        tensor = QWidget()
        tensor_layout = QVBoxLayout(tensor)
        tensor_layout.setContentsMargins(0, 0, 0, 0)
        tensor_layout.addLayout(self._tensor_controls())
        tensor_layout.addWidget(self.outputView, 1)

        self.rightSplit = QSplitter(Qt.Vertical)
        self.rightSplit.addWidget(maps)
        self.rightSplit.addWidget(tensor)
        self.rightSplit.setStretchFactor(0, 3)
        self.rightSplit.setStretchFactor(1, 1)
        self.mainSplit = QSplitter(Qt.Horizontal)
        self.mainSplit.addWidget(scroll)
        self.mainSplit.addWidget(self.rightSplit)
        self.mainSplit.setStretchFactor(1, 1)
        self.setCentralWidget(self.mainSplit)
        return maps_layout

    def _single_shot(self, interval_ms: int, slot) -> QTimer:
        timer = QTimer(self)
        timer.setSingleShot(True)
        timer.setInterval(interval_ms)
        timer.timeout.connect(slot)
        return timer

    def _make_status_bar(self) -> None:
        """The status line and busy indicator, and the hover line (placed above the maps)."""
        self.statusLabel = named(QLabel(), "statusLabel")
        self.hoverLabel = named(QLabel(), "hoverLabel")
        self.hoverLabel.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.hoverLabel.setWordWrap(True)
        # At least two lines, and it never shrinks: a hover text that wrapped to another line and
        # back resized the head grid, which lays out and re-renders every tile, as the mouse moved.
        self.hoverLabel.setFixedHeight(self._hover_lines(2))
        self.hoverLabel.setAlignment(Qt.AlignLeft | Qt.AlignTop)
        self.hoverLabel.setTextFormat(Qt.PlainText)  # token texts such as '<s>' are not markup
        self._hover_ink = self.hoverLabel.palette()
        self._hint_ink = QPalette(self._hover_ink)
        self._hint_ink.setColor(QPalette.WindowText, self._hover_ink.color(QPalette.PlaceholderText))
        self._show_hover_hint()
        self.busyIndicator = named(QProgressBar(), "busyIndicator")
        self.busyIndicator.setRange(0, 0)  # indeterminate
        self.busyIndicator.setMaximumWidth(110)
        self.busyIndicator.setToolTip("Computing in the background; the window stays usable")
        self.busyIndicator.hide()
        self.statusBar().addWidget(self.statusLabel, 1)
        self.statusBar().addPermanentWidget(self.busyIndicator)

    def _maps_column(self) -> tuple[QWidget, QVBoxLayout]:
        """View controls, the stale banner, a trained model's caption, then the head grid."""
        maps = QWidget()
        maps_layout = QVBoxLayout(maps)
        maps_layout.setContentsMargins(0, 0, 0, 0)
        maps_layout.addLayout(self._view_controls())
        self.staleLabel = named(OverlayBanner(self.headGrid), "staleLabel")  # over the grid: never resizes it
        self.staleLabel.setStyleSheet("background: #fff3cd; color: #664d03; padding: 3px;")
        self.staleLabel.hide()
        self.captionLabel = named(CaptionBar(), "captionLabel")  # what to look for in these maps
        maps_layout.addWidget(self.captionLabel)
        maps_layout.addWidget(self.headGrid, 1)
        # the model's prediction per position, under the maps; squeezed first in a cramped window
        self.predictionStrip = PredictionStrip()
        maps_layout.addWidget(self.predictionStrip)
        self.predictionStrip.fold_below(maps)
        return maps, maps_layout

    # --- controls ----------------------------------------------------------------------------

    def _view_controls(self) -> QHBoxLayout:
        row = QHBoxLayout()
        self.viewCombo = named(QComboBox(), "viewCombo")
        for key, text in MAP_VIEWS.items():
            add_choice(self.viewCombo, key, key, text)
        self.viewCombo.setToolTip("Which stage the maps show: softmax weights (Ctrl+1), pre-softmax scores (Ctrl+2), "
                                  "or an earlier stage of the scores (raw Q·Kᵀ, scaled, +bias, capped)")
        self.colormapCombo = named(QComboBox(), "colormapCombo")
        for name in colormaps.names("sequential"):
            add_choice(self.colormapCombo, name, name, colormaps.description(name))
        self.colormapCombo.setToolTip("Colormap for the weights (scores and tensors use blue-white-red)")
        self.scaleCombo = named(QComboBox(), "scaleCombo")
        for key, text in SCALE_MODES.items():
            add_choice(self.scaleCombo, key, key, text)
        self.scaleCombo.setToolTip("Colour scale of the maps: linear, log, row (each query row over its maximum) "
                                   "or rank (quantiles); each view starts with the one that shows its structure")
        self._scales: dict[str, str] = {}  # the scale chosen per view (else default_scale)
        self.perHeadCheck = named(QCheckBox("Per-head scale"), "perHeadScaleCheck")
        self.perHeadCheck.setToolTip("Scale each head's colours to its own range (default: one scale for all)")
        self.meanCheck = named(QCheckBox("Mean tile"), "meanTileCheck")
        self.meanCheck.setToolTip("Add a tile with the mean over heads (M)")
        for label, w in (("View", self.viewCombo), ("Colormap", self.colormapCombo), ("Scale", self.scaleCombo)):
            lab = QLabel(label)
            lab.setBuddy(w)
            row.addWidget(lab)
            row.addWidget(w)
        row.addWidget(self.perHeadCheck)
        row.addWidget(self.meanCheck)
        self.steps = StepControls()  # a generation's tokens, one at a time (view only: no request)
        self.stepSlider = self.steps.slider
        self.steps.add_to(row)
        self.stepSlider.valueChanged.connect(self._show_step)
        row.addStretch(1)
        self.viewCombo.currentIndexChanged.connect(self._view_changed)
        self.colormapCombo.currentIndexChanged.connect(self.schedule)
        self.scaleCombo.activated.connect(self._scale_chosen)
        self.scaleCombo.currentIndexChanged.connect(self.schedule)
        self._view_changed()
        self.perHeadCheck.toggled.connect(self.schedule)
        self.meanCheck.toggled.connect(self._mean_toggled)
        return row

    def _tensor_controls(self) -> QHBoxLayout:
        row = QHBoxLayout()
        self.tensorCombo = named(QComboBox(), "tensorCombo")
        for key, text in TENSORS.items():
            self.tensorCombo.addItem(text, key)
        self.tensorCombo.setToolTip("Which tensor of the shown batch item the lower view shows")
        self.tensorHeadSpin = named(QSpinBox(), "tensorHeadSpin")
        self.tensorHeadSpin.setToolTip("Head whose Q, K or V is shown")
        self.tensorHeadSpin.setPrefix("head ")
        lab = QLabel("Tensor")
        lab.setBuddy(self.tensorCombo)
        row.addWidget(lab)
        row.addWidget(self.tensorCombo)
        row.addWidget(self.tensorHeadSpin)
        row.addStretch(1)
        self.tensorCombo.currentIndexChanged.connect(self._tensor_changed)
        self.tensorHeadSpin.valueChanged.connect(self.schedule)
        self._tensor_changed()
        return row

    def _make_actions(self) -> None:
        bar = QToolBar("Main")
        bar.setObjectName("mainToolBar")
        self.addToolBar(bar)
        file_menu = self.menuBar().addMenu("&File")
        view_menu = self.menuBar().addMenu("&View")

        def action(text, shortcut, slot, tip, menu, toolbar=False, name=None):
            a = QAction(text, self)
            if shortcut:
                a.setShortcut(QKeySequence(shortcut))
            a.setToolTip(f"{tip} ({QKeySequence(shortcut).toString()})" if shortcut else tip)
            a.setStatusTip(tip)
            a.triggered.connect(slot)
            menu.addAction(a)
            if toolbar:
                bar.addAction(a)
                if name:
                    bar.widgetForAction(a).setObjectName(name)
                    bar.widgetForAction(a).setAccessibleName(name)
            return a

        self.exportAction = action("Export…", "Ctrl+E", self.export_dialog,
                                   "Export the view as PNG, SVG or raw tensors (NPZ)", file_menu, True, "exportButton")
        self.copyAction = action("Copy image", "Ctrl+Shift+C", self.copy_image,
                                 "Copy the head grid as an image to the clipboard", file_menu, True, "copyButton")
        file_menu.addSeparator()
        self.openAction = action("Open configuration…", "Ctrl+O", self.open_dialog,
                                 "Open a saved configuration (JSON)", file_menu, True, "openButton")
        self.saveAction = action("Save configuration…", "Ctrl+S", self.save_dialog,
                                 "Save the configuration as JSON (the preset format)", file_menu, True, "saveButton")
        file_menu.addSeparator()
        self.loadWeightsAction = action("Load weights…", "Ctrl+Shift+W", lambda: self.load_file_dialog("weights"),
                                        "Load your own weights (a state_dict: .safetensors, .pt, .pth) into the "
                                        "seed module", file_menu)
        self.loadWeightsAction.setObjectName("loadWeightsAction")
        self.loadInputsAction = action("Load inputs…", "Ctrl+Shift+I", lambda: self.load_file_dialog("inputs"),
                                       "Load your own input tensors (.pt, .npz, .safetensors) named as the forward's "
                                       "arguments", file_menu)
        self.loadInputsAction.setObjectName("loadInputsAction")
        file_menu.addSeparator()
        action("Quit", "Ctrl+Q", self.close, "Close attnviz", file_menu)
        action("Weights", "Ctrl+1", lambda: self.viewCombo.setCurrentIndex(0), "Show softmax weights", view_menu)
        action("Scores", "Ctrl+2", lambda: self.viewCombo.setCurrentIndex(self.viewCombo.findData("scores")),
               "Show pre-softmax scores", view_menu)
        action("Mean tile", "M", lambda: self.meanCheck.toggle(), "Toggle the mean-over-heads tile", view_menu)
        action("Back to grid", "Esc", self._escape, "Leave the large single-head view; while the model writes, "
               "stop it", view_menu)
        self.resetAction = action("Reset parameters", "Ctrl+R", self.panel.resetButton.click,
                                  "Reset every parameter to the defaults", view_menu)
        self.explain = ExplainViews(self)  # the explaining panels (docks): pipeline, statistics, focus ...
        self.explain.add_actions(view_menu)
        view_menu.addSeparator()
        self.modelViewAction = self.modelDock.toggleViewAction()
        self.modelViewAction.setText("Model view")
        self.modelViewAction.setShortcut(QKeySequence("Ctrl+Shift+M"))
        self.modelViewAction.setToolTip("Every layer × head of a pretrained model as small tiles (Ctrl+Shift+M)")
        view_menu.addAction(self.modelViewAction)
        self.stripAction = action("Predictions strip", "Ctrl+Shift+N", self._strip_toggled,
                                  "The model's top-1 prediction at each position under the maps, coloured by the "
                                  "target's probability", view_menu)
        self.stripAction.setCheckable(True)
        self.stripAction.setChecked(True)
        action("Next layer", "Ctrl+]", lambda: self._step_layer(1), "Show the next layer of the model", view_menu)
        action("Previous layer", "Ctrl+[", lambda: self._step_layer(-1), "Show the previous layer of the model",
               view_menu)
        run_menu = self.menuBar().addMenu("&Run")
        self.generateAction = action("Generate", "Ctrl+G", self.generate, "Let the model write after the text "
                                     "(the Generate count, or 20 while it is off), streaming each token", run_menu)
        self.stopAction = action("Stop", "", self.stop_generation, "Stop the model writing (Esc); what it "
                                 "wrote so far stays on screen", run_menu)

    def _view_changed(self, *_) -> None:
        """Each view shows its own scale: the one chosen for it, else its default."""
        view = self.viewCombo.currentData()
        config = self.result.config if getattr(self, "result", None) is not None else None
        mode = self._scales.get(view) or default_scale(view, config)
        self.scaleCombo.setCurrentIndex(self.scaleCombo.findData(mode))
        self.schedule()

    def _scale_chosen(self, *_) -> None:
        self._scales[self.viewCombo.currentData()] = self.scaleCombo.currentData()

    # --- pretrained models: the model view and the layer ---------------------------------------

    def _make_model_dock(self) -> None:
        self.modelView = ModelView()
        self.modelDock = QDockWidget("Model view: every layer × head (click one to open it)", self)
        self.modelDock.setObjectName("modelDock")
        self.modelPanel = ModelPanel(self.modelView)  # the view and its head-type legend
        self.modelDock.setWidget(self.modelPanel)
        # Open from the start (a note says when no model is behind the maps): a dock that opened with
        # the first model's result re-laid out the whole window inside that result's swap (a 65 ms stall).
        self.addDockWidget(Qt.BottomDockWidgetArea, self.modelDock)
        self.resizeDocks([self.modelDock], [MODEL_DOCK_PX], Qt.Vertical)
        self.modelView.sigOpen.connect(self._open_tile)
        self.modelDock.visibilityChanged.connect(self._model_dock_visible)
        self.modelView.sigHover.connect(self._show_hover)
        self.modelView.sigAblate.connect(self._toggle_ablation)
        self.modelView.sigRestoreAll.connect(lambda: self._set_ablation(()))

    def _model_dock_visible(self, visible: bool) -> None:
        if visible and self.result is not None:  # opened after the result came: fill it now
            self._show_model(self.result)
            self.schedule()  # and its head-type badges (computed only while it is shown)

    def _show_model(self, result) -> None:
        """A model-backed result: its layers in the model view, the layer selector bounded by the model."""
        layer_spin = self.panel.widgets["layer"]
        if result.source is None:  # random weights: no model behind these maps
            layer_spin.setMaximum(int(field_meta("layer")["maximum"]))
            # The dock stays, saying so: hiding it and showing it again with the next model resized
            # every view in the window, twice per switch between a trained and a random variant.
            self.modelView.show_none()
            return
        layer_spin.setMaximum(result.source.info.layers - 1)  # a preset or file may widen it again (panel)
        if self.modelDock.isVisible():
            self.modelView.show_source(result.source, result.config.layer, self.colormapCombo.currentData())

    def _show_heads(self, result, frames) -> None:
        """What the heads do: the predictions strip; the model view's crossed (ablated) heads and badges."""
        extras = frames.extras
        if "predictions" in extras:
            self.predictionStrip.show_frames(extras["predictions"], self.colormapCombo.currentData())
        if result.source is None:
            return
        heads = result.source.layer_weights.shape[2]
        self.modelView.set_ablated(ablated_heads(result.config.ablate, result.source.info.layers, heads))
        if "head_scores" in extras:
            self.modelView.set_head_types(extras["head_scores"])
            self.modelPanel.set_legend(extras["head_scores"])

    def _toggle_ablation(self, stack: str, layer: int, head: int) -> None:
        """Alt+click on a model-view tile: that head goes into (or out of) the Ablation field; the run
        then follows through the normal request path."""
        shown = self.result.source.stack if self.result is not None and self.result.source is not None else ""
        if stack != shown:
            self.statusBar().showMessage("Ablation applies to the stack shown: open that stack first", 6000)
            return
        edit = self.panel.widgets["ablate"]
        specs = [p for p in edit.text().split(",") if p.strip()]
        self._set_ablation(toggle_head(specs, layer, head, self.result.source.layer_weights.shape[2]))

    def _set_ablation(self, specs: tuple[str, ...]) -> None:
        self.panel.widgets["ablate"].setText(", ".join(specs))
        self.schedule()

    def _strip_toggled(self, on: bool) -> None:
        self.predictionStrip.setVisible(on)
        self.schedule()  # shown again: the next render asks for the predictions

    def _follow_default_scale(self, config: RunConfig) -> None:
        """A view whose scale the user has not chosen follows its default when that changes between
        results (random maps: log; trained or signed maps: linear); the change only re-renders."""
        view = self.viewCombo.currentData()
        mode = default_scale(view, config)
        before, self._default_shown = getattr(self, "_default_shown", default_scale(view)), mode
        if mode != before and view not in self._scales and self.scaleCombo.currentData() != mode:
            self.scaleCombo.blockSignals(True)  # not the user's choice: do not remember it
            self.scaleCombo.setCurrentIndex(self.scaleCombo.findData(mode))
            self.scaleCombo.blockSignals(False)
            self.schedule()

    def _show_caption(self, result) -> None:
        self.captionLabel.set_caption(*caption_for(result))

    HOVER_MAX_LINES = 4

    def _hover_lines(self, lines: int) -> int:
        return lines * self.hoverLabel.fontMetrics().lineSpacing() + 4

    def _show_hover_hint(self) -> None:
        """What hovering does, in grey; two lines at most, so it never grows the line (no relayout)."""
        self.hoverLabel.setPalette(self._hint_ink)
        self.hoverLabel.setText(HOVER_HINT)

    def _show_hover(self, text: str) -> None:
        self.hoverLabel.setPalette(self._hover_ink)
        self.hoverLabel.setText(text)
        needed = min(self.hoverLabel.heightForWidth(self.hoverLabel.width()), self._hover_lines(self.HOVER_MAX_LINES))
        if needed > self.hoverLabel.height():  # grows once for longer texts; never shrinks back
            self.hoverLabel.setFixedHeight(needed)

    def _open_tile(self, stack: str, layer: int, head: int) -> None:
        shown = self.result.source.stack if self.result is not None and self.result.source is not None else ""
        if stack != shown:  # another stack of an encoder-decoder: its forward runs again
            self.panel.widgets["stack"].setText(stack)
        self.panel.widgets["layer"].setValue(layer)
        self.headGrid.set_focus(head if head >= 0 else None)
        self.schedule()

    def _step_layer(self, step: int) -> None:
        spin = self.panel.widgets["layer"]
        spin.setValue(spin.value() + step)

    def _shapes(self, config: RunConfig) -> RunConfig:
        """The config whose shapes the views size for: a model's come from its last result."""
        last = self.result
        if config.spec.backed and last is not None and last.source is not None:
            return last.config
        return config

    def _mean_toggled(self, on: bool) -> None:
        if not on and self.headGrid.focus == -1:
            self.headGrid.set_focus(None)  # the focused mean tile is going away
        self.headGrid.show_mean = on
        self.schedule()

    def _tensor_changed(self) -> None:
        self.tensorHeadSpin.setVisible(self.tensorCombo.currentData() in ("q", "k", "v"))
        self.schedule()

    # --- requests ----------------------------------------------------------------------------

    def schedule(self, *_) -> None:
        if hasattr(self, "_timer"):
            self._timer.start()

    def is_settled(self) -> bool:
        """True when no edit waits to be sent and the newest request sent is on screen (or failed)."""
        return (not self._timer.isActive() and self._arrived is None and self._showing is None
                and self.latest_id in (self.shown_id, self.failed_id, self.stopped_id))

    def view_options(self, config: RunConfig) -> ViewOptions:
        request, config = config, self._shapes(config)
        self.tensorHeadSpin.setMaximum(config.heads - 1)
        return ViewOptions(
            view=self.viewCombo.currentData(),
            batch_index=min(self.panel.batch_index(), config.batch - 1),
            colormap=self.colormapCombo.currentData(),
            shared_scale=not self.perHeadCheck.isChecked(),
            tensor=self.tensorCombo.currentData(),
            tensor_head=min(self.tensorHeadSpin.value(), config.heads - 1),
            max_px=self.headGrid.tile_pixels(config.seq_q, config.lkv, config.heads),
            tensor_px=self.outputView.pixels(),
            mean=self.meanCheck.isChecked(),
            scale_mode=self.scaleCombo.currentData(),
            grid_pixels=self.headGrid.focus is None,  # a focused head is drawn by its own PlotItem
            predictions=not self.predictionStrip.isHidden(),
            head_scores=not self.modelDock.isHidden() or self.explain.shown("statsDock"),
            **self.explain.options(config, request),
        )

    def request(self, force: bool = False) -> int | None:
        """Send the panel's state to the worker; returns the request id (None if invalid). `force`: compute
        again even if the last result shows this configuration (Generate pressed again)."""
        self._timer.stop()
        rid = next(self._ids)
        self.latest_id = rid  # also for invalid input: an older result in flight must not clear it
        try:
            config = self.panel.config()
        except ConfigError as exc:
            self.failed_id = rid
            self._replace_generation(rid, None, False)
            self._show_failure(str(exc), exc.field, exc.suggestions)
            return None
        self._offer_views(config)
        self._replace_generation(rid, config, force)
        self.worker.submit(Request(rid, config, self.view_options(config), force))
        return rid

    # --- generation: Generate, Stop, streamed partial results, the step slider ------------------

    def _replace_generation(self, rid: int, config: RunConfig | None, force: bool) -> None:
        """A new request: one that needs another run ends a running generation (the worker cancels it within
        a token) and nothing of that run is shown after it; a view of the same run lets it go on."""
        if self.generating_id and (force or self._sent is None or supersedes(config, self._sent)):
            self._partial_cut = self._final_cut = rid
            self.generating_id = 0
            if config is None:  # an invalid edit: the worker hears of no new run, so tell it to stop
                self.worker.cancel(rid - 1)
        self._sent = config if config is not None else self._sent
        if config is not None and generating(config):
            self.generating_id = rid
            self._generate_count = config.generate  # what Generate writes once the count is off again
        self._show_generating()

    def generate(self) -> None:
        """Generate (Ctrl+G): write the count of tokens after the text (DEFAULT_GENERATE while it is off); pressed
        again with the count on, write again (a new sample with another seed, the same with the same)."""
        spin = self.panel.widgets["generate"]
        if not self.panel.config_applies("generate"):
            self.statusBar().showMessage("Generation needs a model (a trained toy or a pretrained causal model): "
                                         "choose one under Variant first", 8000)
            return
        if spin.value() == 0:
            spin.setValue(self._fitting_count(self._generate_count))  # an edit: the normal request follows
            return
        self.request(force=True)

    def _fitting_count(self, count: int) -> int:
        """`count`, or fewer where the shown model's positions end sooner after this text (a count past
        them is refused by the run, with the largest that fits offered)."""
        r = self.result
        info = getattr(r.source, "info", None) if r is not None else None
        room = getattr(info, "max_positions", None)
        if room is None or r.config.text != self.panel.widgets["text"].text():
            return count
        prompt = r.prompt_length if r.prompt_length is not None else len(r.tokens)
        return max(1, min(count, room - prompt))

    def stop_generation(self) -> None:
        """Stop (Esc while writing): the worker ends the generation after its current token and sends what it
        wrote; no partial result of that run is shown after this."""
        if not self.generating_id:
            return
        self._partial_cut = self.latest_id + 1
        self.worker.cancel(self.latest_id)
        self.generating_id = 0
        self._show_generating()

    def _escape(self) -> None:
        if self.generating_id:
            self.stop_generation()
        else:
            self.headGrid.set_focus(None)

    def _show_generating(self) -> None:
        running = bool(self.generating_id)
        self.panel.stopButton.setEnabled(running)
        self.stopAction.setEnabled(running)
        if not running:
            self.busyIndicator.setRange(0, 0)  # indeterminate again (a generation's progress is over)

    def _generation_done(self, rid: int) -> None:
        """A request's final outcome (shown, dropped, failed or cancelled): its generation is over."""
        if self.generating_id and rid >= self.generating_id:
            self.generating_id = 0
            self._show_generating()

    def _model_due(self, outcome: Outcome) -> bool:
        """Whether the model view follows this result: every final one; a generation's partial ones at most
        every MODEL_VIEW_PARTIAL_S (composing and painting every layer's tiles took 25-45 ms of the GUI thread
        per partial result on a 30-layer model)."""
        now, run = time.monotonic(), (outcome.request.id, run_key(outcome.result))
        if outcome.partial and run == self._model_run and now - self._model_shown_at < MODEL_VIEW_PARTIAL_S:
            return False  # a new run's first partial result always goes in: nothing of the old one stays
        self._model_shown_at, self._model_run = now, run
        return True

    def _show_progress(self, outcome: Outcome) -> None:
        if outcome.partial and outcome.generated is not None:
            n, total = outcome.generated
            self.busyIndicator.setRange(0, total)
            self.busyIndicator.setValue(n)
            self.busyIndicator.setFormat(f"{n} / {total} tokens")

    def _show_generation(self, result) -> None:
        """A result on screen: the text as the model continued it (the slider and marks came with the grid)."""
        label = self.panel.generatedLabel
        label.setVisible(result.prompt_length is not None)  # in the panel's scroll area: the maps keep their size
        if result.prompt_length is not None:
            label.setText(continuation_html(result))

    def _show_step(self, *_) -> None:
        """The step slider moved: marks only (view only, nothing is asked of the worker)."""
        self.steps.label.setText(self.steps.text())
        self._mark_step()

    def _mark_step(self) -> None:
        result = self.result
        prompt = result.prompt_length if result is not None and generated_count(result) else None
        row = self.steps.row()
        self.headGrid.set_generation(prompt, row)
        self.predictionStrip.set_generation(prompt, row)

    def _on_cancelled(self, rid: int) -> None:
        """A request stopped before it had anything to show: it is over (the last view stays)."""
        self._generation_done(rid)
        if rid == self.latest_id:
            self.stopped_id = rid
            self.statusBar().showMessage("Stopped before the first token: the maps show the last run", 6000)

    def _offer_views(self, config: RunConfig) -> None:
        """The View box offers only the stages this configuration has (e.g. biased needs ALiBi)."""
        have = set(run_stages(config))
        items = self.viewCombo.model()
        for i in range(self.viewCombo.count()):
            items.item(i).setEnabled(view_stage(self.viewCombo.itemData(i)) in have)

    @staticmethod
    def _key(outcome: Outcome) -> tuple[int, int, int]:
        """Orders results: by request id, a generation's partial ones by their tokens, its final one last."""
        return outcome.request.id, int(not outcome.partial), generated_count(outcome.result)

    def _dropped(self, outcome: Outcome) -> bool:
        """Not to be shown: older than what is on screen or on its way, or a generation's result after a
        request that replaced that run (or, for a partial result, after Stop)."""
        rid = outcome.request.id
        if outcome.partial and rid < self._partial_cut:
            return True
        if outcome.result.prompt_length is not None and rid < self._final_cut:
            return True
        waiting, showing = self._arrived, self._showing
        newest = max([self._shown_key] + [self._key(o) for o in (waiting, showing) if o is not None])
        return self._key(outcome) <= newest

    def _on_done(self, outcome: Outcome) -> None:
        """A result arrived: keep the newest and swap it in on the next timer turn. Qt delivers
        every signal queued by then in one go, so results that arrive together (a fast worker, a
        busy GUI thread) are swapped and painted once, and the loop breathes between swaps."""
        if not outcome.partial:
            self._generation_done(outcome.request.id)
        if self._dropped(outcome):
            self.worker.release(outcome.result, outcome.frames)  # never shown
            self.worker.resume(outcome.request.id)  # nothing to paint
            return
        waiting = self._arrived
        if waiting is not None:
            self.worker.release(waiting.result, waiting.frames)
        self._arrived = outcome
        if not self._swap_timer.isActive():  # a stream of results must not keep postponing it
            self._swap_timer.start()

    def _swap_in(self) -> None:
        """Make the newest result current and show it in the head grid; the rest follows on the next
        loop pass (_show_rest). Each view's scene repaints the window synchronously once its items
        changed, so shown in one pass the grid's, the tensor view's and the model view's repaints ran
        back to back with no timer or input between them (benchmarks/README.md, "A result in two passes")."""
        outcome, self._arrived = self._arrived, None
        if outcome is None:
            return
        t0 = time.perf_counter()
        rid = outcome.request.id
        if self.result is None or run_key(outcome.result) != run_key(self.result):
            self._show_hover_hint()  # the text described cells of the previous run
        self._retired.append((self.result, self.frames))  # freed once this result is fully shown
        self.result, self.frames = outcome.result, outcome.frames
        if rid == self.latest_id:  # before the grid lays out: a stale grid regrids on every resize
            self._clear_failure()
        elif self.last_error is not None and self.failed_id == self.latest_id:
            self._mark_stale(self.last_error)  # the newest request failed before this older one came
        self._show_caption(outcome.result)  # before the grid: a caption that comes or goes resizes it
        self.headGrid.show_frames(outcome.result, outcome.frames)
        self.steps.show(outcome.result)  # the generation's marks in the grid's own paint
        self._mark_step()
        self._shown_key = self._key(outcome)
        self._showing, self._swap_s = outcome, time.perf_counter() - t0
        self._rest_timer.start()  # after the grid's paint, which Qt runs first

    def _show_rest(self) -> None:
        outcome, self._showing = self._showing, None
        if outcome is None:
            return
        t0 = time.perf_counter()
        rid = outcome.request.id
        self.outputView.show_frames(outcome.result, outcome.frames)
        self.explain.show(outcome.result, outcome.frames)
        if self._model_due(outcome):
            self._show_model(outcome.result)
        self._show_heads(outcome.result, outcome.frames)
        self._show_generation(outcome.result)
        self._show_progress(outcome)
        self._follow_default_scale(outcome.result.config)
        if rid == self.latest_id and not outcome.partial and self.panel.adopt_files(outcome.result.config):
            self.schedule()  # what the files set (bias flags, batch, lengths) shown; a re-render sized for them
        self._release_retired()
        if not outcome.partial:
            self.shown_id = rid
        self._update_status(outcome, self._swap_s + time.perf_counter() - t0)
        self._unpainted = rid  # the worker yields till both views have painted it
        self._resume_worker()  # now, if they already have (or neither is on screen to paint it)
        if outcome.partial:
            self.sigPartialShown.emit(rid, generated_count(outcome.result))
        else:
            self.sigShown.emit(rid)

    def _release_retired(self) -> None:
        retired, self._retired = self._retired, []
        self.worker.release(*retired)  # the last references to the old maps: freed off this thread

    def _on_failed(self, failure: Failure) -> None:
        self._generation_done(failure.request.id)
        if failure.request.id < self.latest_id:
            return  # a newer request is on its way
        self.failed_id = failure.request.id
        self._show_failure(failure.message, failure.field, failure.suggestions)
        self.sigFailed.emit(failure.request.id, failure.message)

    def _show_failure(self, message: str, field: str | None, suggestions: tuple = ()) -> None:
        self.last_error = message
        self.panel.show_error(message, field, suggestions)
        self.statusBar().showMessage(f"Not updated: {message}")
        if self.result is not None:
            self._mark_stale(message)

    def _mark_stale(self, message: str) -> None:
        self.staleLabel.setText("Stale: the maps show the last valid configuration. " + message)
        self.staleLabel.show()
        self.headGrid.set_stale(True)
        self.outputView.set_stale(True)

    def _clear_failure(self) -> None:
        if self.last_error is None:
            return
        self.last_error = None
        self.panel.clear_error()
        self.statusBar().clearMessage()
        self.staleLabel.hide()
        self.headGrid.set_stale(False)
        self.outputView.set_stale(False)

    def _on_busy(self, busy: bool) -> None:
        self.busyIndicator.setVisible(busy)

    def _update_status(self, outcome: Outcome, swap_s: float) -> None:
        r, c = outcome.result, outcome.result.config
        out_shape = "x".join(map(str, r.output.shape))
        compute = f"compute {r.compute_time_s * 1e3:.1f} ms" if outcome.recomputed else "view only (no recompute)"
        render = (outcome.frames.render_time_s + swap_s) * 1e3
        notes = " · " + "; ".join(r.notes) if r.notes else ""
        self.statusLabel.setText(
            f"{generation_text(outcome)}{c.spec.label} · {c.shapes_text()} · output {out_shape} · mask {c.mask} · "
            f"{r.device} · {compute} · render {render:.1f} ms{notes}"
        )

    # --- files -------------------------------------------------------------------------------

    def _start_dir(self) -> str:
        return str(self.settings.value("lastDir", str(Path.home()))) if self.settings else str(Path.home())

    def _remember_dir(self, path: str) -> None:
        if self.settings is not None:
            self.settings.setValue("lastDir", str(Path(path).parent))

    def save_config(self, path: str, replace_readonly: bool = False) -> None:
        """Write the panel's configuration as JSON (atomically; the preset format)."""
        from ..atomic import write_bytes

        write_bytes(path, saved_json(self.panel.config()).encode("utf-8"), replace_readonly)

    def open_config(self, path: str) -> None:
        """Open a saved configuration; a weights or inputs file that changed since is opened anyway, with a note."""
        try:
            self.panel.set_config(load_config(path))
        except FileChanged as exc:
            self.panel.set_config(exc.config)
            self.statusBar().showMessage(f"Note: {exc}", 15000)

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
            from .export_dialog import confirm_write

            path = path if path.endswith(".json") else path + ".json"
            replace_readonly = confirm_write(self, path)
            if replace_readonly is None:
                self.statusBar().showMessage(f"Not saved: {path} is read-only", 6000)
                return
            try:
                self.save_config(path, replace_readonly)
                self._remember_dir(path)
                self.statusBar().showMessage(f"Saved {path}", 4000)
            except Exception as exc:
                QMessageBox.warning(self, "Cannot save", str(exc))

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

    def export_dialog(self) -> None:
        from .export_dialog import ExportDialog

        if self.result is None:
            return
        self.exportDialog = ExportDialog(self)
        self.exportDialog.open()  # window-modal without blocking the event loop (workers keep reporting)

    def copy_image(self) -> None:
        """Put the grid (or the focused head) on the clipboard, rendered from the data off this thread."""
        from .export_dialog import copy_to_clipboard

        if self.result is not None:
            copy_to_clipboard(self)

    def put_on_clipboard(self, image) -> None:  # GUI thread: the clipboard belongs to it
        QGuiApplication.clipboard().setImage(image)
        self.statusBar().showMessage(f"Copied a {image.width()} x {image.height()} image to the clipboard", 4000)

    def copy_failed(self, message: str) -> None:
        self.statusBar().showMessage(f"Not copied: {message}", 8000)

    # --- settings and closing ----------------------------------------------------------------

    def _restore(self, s: QSettings) -> None:
        # a first launch opens on a trained toy: learned attention with labelled tokens, at once
        self.panel.set_config(load_preset(START_PRESET), emit=False)
        if s.value("version", 0, int) != SETTINGS_VERSION:
            return
        geometry = s.value("geometry")
        if isinstance(geometry, QByteArray):
            self.restoreGeometry(geometry)
        for key, split in (("mainSplit", self.mainSplit), ("rightSplit", self.rightSplit)):
            state = s.value(key)
            if isinstance(state, QByteArray):
                split.restoreState(state)
        text = s.value("config")
        if text:
            with contextlib.suppress(ConfigError):  # from another version or machine: keep the defaults
                self.panel.set_config(RunConfig.from_json(str(text)), emit=False)
        for key, combo in (("view", self.viewCombo), ("colormap", self.colormapCombo), ("tensor", self.tensorCombo)):
            index = combo.findData(s.value(key))
            if index >= 0:
                combo.setCurrentIndex(index)
        with contextlib.suppress(TypeError, ValueError):  # the scale chosen per view
            scales = json.loads(str(s.value("scales", "{}")))
            self._scales = {v: m for v, m in scales.items() if v in MAP_VIEWS and m in SCALE_MODES}
            self._view_changed()
        self.perHeadCheck.setChecked(s.value("perHead", False, bool))
        self._generate_count = max(1, s.value("generateCount", DEFAULT_GENERATE, int))
        self.meanCheck.setChecked(s.value("mean", False, bool))
        self.modelDock.setVisible(s.value("modelDock", True, bool))
        self.stripAction.setChecked(s.value("predictionStrip", True, bool))
        self.predictionStrip.setVisible(self.stripAction.isChecked())
        self.resizeDocks([self.modelDock], [s.value("modelDockHeight", MODEL_DOCK_PX, int)], Qt.Vertical)

    def save_settings(self) -> None:
        s = self.settings
        if s is None:
            return
        s.setValue("version", SETTINGS_VERSION)
        s.setValue("geometry", self.saveGeometry())
        s.setValue("mainSplit", self.mainSplit.saveState())
        s.setValue("rightSplit", self.rightSplit.saveState())
        with contextlib.suppress(ConfigError):  # invalid now: keep the last valid one
            s.setValue("config", self.panel.config().to_json())
        s.setValue("view", self.viewCombo.currentData())
        s.setValue("colormap", self.colormapCombo.currentData())
        s.setValue("tensor", self.tensorCombo.currentData())
        s.setValue("modelDock", not self.modelDock.isHidden())  # the window may be hidden already
        s.setValue("modelDockHeight", self.modelDock.height())
        s.setValue("predictionStrip", not self.predictionStrip.isHidden())
        s.setValue("scales", json.dumps(self._scales))
        s.setValue("perHead", self.perHeadCheck.isChecked())
        s.setValue("mean", self.meanCheck.isChecked())
        s.setValue("generateCount", self._generate_count)
        s.sync()

    def _resume_worker(self) -> None:
        """Let the worker go on once both views have painted the result swapped in (the tensor view
        is often painted one event-loop pass after the grid)."""
        if self._unpainted is None:
            return
        if not self.isVisible() or (self.headGrid.painted_shown() and self.outputView.painted_shown()):
            self.worker.resume(self._unpainted)
            self._unpainted = None

    def closeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        self.save_settings()
        if self._showing is not None:  # the grid shows a result the other views do not yet: finish it
            self._show_rest()
        self._timer.stop()
        self._swap_timer.stop()
        self._rest_timer.stop()
        if self._arrived is not None:  # a result that came too late to be shown
            self.worker.release(self._arrived.result, self._arrived.frames)
            self._arrived = None
        self._release_retired()
        self.worker.stop(timeout=1.5)  # a forward in flight finishes in the background; see app.run_app
        super().closeEvent(event)
