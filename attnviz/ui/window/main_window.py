"""The main window: parameter panel on the left, head grid and output tensor on the right, the model view
and the explaining panels in one tabbed area below.

Every change becomes an immutable Request (config + view options) with a fresh id; the worker computes it
off the GUI thread; Delivery (delivery.py) swaps in results newer than what the window shows and drops the
rest. Invalid input is caught here (cheap validation, no forward pass) or reported by the worker; either
way the last good maps stay on screen, marked stale. Files, settings and menus are in window_files.py,
window_settings.py and window_actions.py.
"""

from __future__ import annotations

import math
import time

from PySide6.QtCore import QSettings, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QProgressBar,
    QScrollArea,
    QSizePolicy,
    QSpinBox,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from attnviz import colormaps, style
from attnviz.core import ConfigError, RunConfig, run
from attnviz.core.runs.generation import cannot_generate
from attnviz.core.runs.runner import run_stages
from attnviz.frames import MAP_VIEWS, SCALE_MODES, TENSORS, ViewOptions, default_scale, view_stage
from attnviz.session.memory import freeze_alive
from attnviz.ui.maps.info_bar import HOVER_HINT, CoverBanner, InfoBar  # noqa: F401 (the hint, where the window's tests read it)
from attnviz.ui.maps.views import HeadGrid, TensorView, prepare_labels
from attnviz.ui.panels.circuit_job import cancel_all_jobs
from attnviz.ui.panels.explain_views import ExplainViews
from attnviz.ui.panels.generate import STEP_ALL, GenerateOnce, StepControls, continuation_html, generated_count
from attnviz.ui.panels.predictions_view import PredictionStrip
from attnviz.ui.widgets.basic import add_choice, named
from attnviz.ui.window import lifecycle
from attnviz.ui.window.actions import WindowActions
from attnviz.ui.window.captions import caption_for, run_key, status_text
from attnviz.ui.window.delivery import Delivery, single_shot
from attnviz.ui.window.failures import WindowFailures
from attnviz.ui.window.files import WindowFiles
from attnviz.ui.window.layout import WindowLayout
from attnviz.ui.window.model import WindowModel
from attnviz.ui.window.opening import WindowOpen, path_drop
from attnviz.ui.window.panel import ParameterPanel
from attnviz.ui.window.settings import WindowSettings
from attnviz.ui.window.status_line import StatusLine
from attnviz.ui.window.worker import Failure, Outcome, Request, Worker, generating
from attnviz.ui.window.zooming import WindowZoom

TENSOR_MIN_PX = 120  # the tensor view keeps its rows and tick labels legible in a cramped window
DEFAULT_GENERATE = 20  # tokens the Generate button writes while the count is off
# The busy bar appears once the worker has been busy this long (at once for a counted forward or generation):
# a quick run never animates it. Its repaints woke the GUI thread during the forward, and each wake-up held up
# one of the forward's two threads while the other waited for it (benchmarks/README.md, Behind the code).
BUSY_SHOW_MS = 250
MODEL_VIEW_PARTIAL_S = 0.5  # while a generation streams, the model view follows at most this often


def _delivered(name: str, doc: str) -> property:
    return property(lambda self: getattr(self.delivery, name), doc=doc)


class MainWindow(WindowActions, WindowFiles, WindowOpen, WindowSettings, WindowModel, WindowZoom, WindowLayout,
                 WindowFailures, QMainWindow):
    """attnviz's window. `MainWindow()` starts from the defaults and remembers nothing;
    pass a QSettings to restore and save parameters, view choices and geometry, and `open_path` to start on
    a model folder, .gguf, .json, .npz, picture or text file instead of the last session's configuration."""

    sigShown = Signal(int)  # the request id whose (final) result is now on screen
    sigPartialShown = Signal(int, int)  # a generation still running: (request id, generated tokens on screen)
    sigFailed = Signal(int, str)  # a request id and the message shown for it
    latest_id = _delivered("latest_id", "newest request sent")
    shown_id = _delivered("shown_id", "newest request whose final result is on screen")
    failed_id = _delivered("failed_id", "newest request that failed")
    stopped_id = _delivered("stopped_id", "newest request stopped before it had anything to show")
    generating_id = _delivered("generating_id", "the newest request whose generation may still run (0: none)")

    def __init__(self, settings: QSettings | None = None, compute=run, parent: QWidget | None = None,
                 open_path: str | None = None):
        super().__init__(parent)
        self.setWindowTitle("attnviz")
        self.settings = settings
        self._generate_count = DEFAULT_GENERATE  # what Generate writes while the count is off
        self._once = GenerateOnce()  # a request generates once per click (or count set), not on every edit
        self._model_shown_at = -math.inf  # when a partial result last went into the model view
        self._model_run = None  # (request id, forward config) of the result the model view last got
        self._swap_s = 0.0  # the GUI-thread time the grid's pass took
        self._forward_id = 0  # the request whose forward reports its layers (Stop cancels it), 0: none
        self.result = None
        self.frames = None
        self.last_error: str | None = None
        self.worker = Worker(compute, parent=self)
        self.worker.prepare = prepare_labels  # a new result's token labels made on the worker, not in the swap
        self.delivery = Delivery(self.worker, self._show_grid, self._show_rest, self._painted, parent=self)
        self._build()
        self.resize(1280, 820)
        self._timer = single_shot(self, self.request)  # a burst of edits: one request per loop turn
        self._connect()
        lifecycle.track(self)  # at interpreter exit: workers stopped, window deleted before teardown
        if settings is not None:
            self._restore(settings)
        self.pathDrop = path_drop(self)
        if open_path:
            self.open_path(open_path)
        self._once.count = self.panel.widgets["generate"].value()  # a remembered count is not a click
        self.request()
        freeze_alive()  # torch, Qt, pyqtgraph: they live as long as the app (the one gc policy)

    def _reset_view(self) -> None:
        """Reset resets the view too: the weights, and the grid of every head (no head enlarged)."""
        self.viewCombo.setCurrentIndex(0)
        self.headGrid.set_focus(None)

    def _build(self) -> None:
        self._make_central()
        self._make_status_bar()
        self._make_model_dock()
        self.infoBar.watch(self.headGrid, self.outputView, self.modelView)  # their hovered cells show there
        self._make_tensor_dock(self.tensorPanel)
        self.explain = ExplainViews(self)  # the explaining panels (docks): pipeline, statistics, focus ...
        self._bare_tabs()
        self._make_actions()
        self._toolbar_beside_menus()

    def _connect(self) -> None:
        d = self.delivery
        self.worker.sigDone.connect(d.arrived)
        self.worker.sigFailed.connect(self._on_failed)
        self.worker.sigBusy.connect(self._on_busy)
        self.worker.sigCancelled.connect(self._on_cancelled)
        self.worker.sigProgress.connect(self._on_progress)
        self.worker.sigLayers.connect(self._on_layers)
        self.worker.sigExtras.connect(self._on_late_extras)
        d.sigShown.connect(self.sigShown)
        d.sigPartialShown.connect(self.sigPartialShown)
        d.sigGenerating.connect(self._show_generating)
        self.panel.generateButton.clicked.connect(self.generate)
        self.panel.stopButton.clicked.connect(self.stop_generation)
        self.panel.sigChanged.connect(self.schedule)
        self.panel.sigChanged.connect(self._follow_generate)
        self.panel.resetButton.clicked.connect(self._reset_view)
        self.panel.sigBatchIndexChanged.connect(self.schedule)
        self.headGrid.sigHover.connect(self._show_hover)
        self.outputView.sigHover.connect(self._show_hover)
        self.headGrid.sigFocusChanged.connect(self.schedule)
        self.headGrid.sigZoom.connect(self.zoom_to)
        self.headGrid.sigResized.connect(self.schedule)  # re-pool to the new tile size (no recompute)
        # Each view says when it painted (not a Python event() on the window: the whole window's
        # paint then ran inside a Python frame holding the GIL, and the worker's Python waited).
        self.headGrid.after_paint = self.outputView.after_paint = d.on_painted

    def _make_central(self) -> None:
        """The parameter panel (scrolling) left, the maps right; the tensor view for its dock."""
        self.panel = ParameterPanel()
        scroll = QScrollArea()
        scroll.setWidget(self.panel)
        scroll.setWidgetResizable(True)
        scroll.setMinimumWidth(300)

        self.headGrid = HeadGrid()
        self.outputView = TensorView()
        self.outputView.setMinimumHeight(TENSOR_MIN_PX)
        maps = self._maps_column()
        self.tensorPanel = QWidget()
        tensor_layout = QVBoxLayout(self.tensorPanel)
        tensor_layout.setContentsMargins(0, 0, 0, 0)
        tensor_layout.addLayout(self._tensor_controls())
        tensor_layout.addWidget(self.outputView, 1)

        self.mainSplit = QSplitter(Qt.Horizontal)
        self.mainSplit.addWidget(scroll)
        self.mainSplit.addWidget(maps)
        self.mainSplit.setStretchFactor(1, 1)
        self.setCentralWidget(self.mainSplit)

    def _make_status_bar(self) -> None:
        """The status line and busy indicator."""
        self.setStatusBar(StatusLine())  # a long line elided in the middle, whole in its tooltip
        self.statusLabel = self.statusBar().label
        self.busyIndicator = named(QProgressBar(), "busyIndicator")
        self.busyIndicator.setRange(0, 0)  # indeterminate
        self.busyIndicator.setMaximumWidth(150)  # room for "layer 12 / 30" and "40 / 40 tokens"
        self.busyIndicator.setToolTip("Computing in the background; the window stays usable")
        self.busyIndicator.hide()
        self._busy_timer = QTimer(self)
        self._busy_timer.setSingleShot(True)
        self._busy_timer.setInterval(BUSY_SHOW_MS)
        self._busy_timer.timeout.connect(self.busyIndicator.show)
        self._busy = False  # the worker's last sigBusy
        self.statusBar().addPermanentWidget(self.busyIndicator)

    def _maps_column(self) -> QWidget:
        """View controls, the stale banner, the caption (or the hovered cell), then the head grid."""
        maps = QWidget()
        maps_layout = QVBoxLayout(maps)
        maps_layout.setContentsMargins(0, 0, 0, 0)
        maps_layout.addLayout(self._view_controls())
        self.infoBar = InfoBar()  # what to look for in these maps, or the hovered cell's values
        self.captionLabel, self.hoverLabel = self.infoBar.caption, self.infoBar.hover
        self.staleLabel = named(CoverBanner(self.infoBar), "staleLabel")  # over the caption: covers no map
        self.staleLabel.setStyleSheet("background: {}; color: {}; padding: 3px;".format(*style.STALE_NOTE))
        self.staleLabel.hide()
        maps_layout.addWidget(self.infoBar)
        maps_layout.addWidget(self.headGrid, 1)
        # the model's prediction per position, under the maps; squeezed first in a cramped window
        self.predictionStrip = PredictionStrip()
        maps_layout.addWidget(self.predictionStrip)
        self.predictionStrip.fold_below(maps)
        return maps

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
        row.addWidget(self._make_back_button())  # shown while a zoomed block is
        self.steps = StepControls()  # a generation's tokens, one at a time (view only: no request)
        self.stepSlider = self.steps.slider
        self.steps.add_to(row)
        self._narrow_step_label(row)
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

    def _narrow_step_label(self, row: QHBoxLayout) -> None:
        """The step's words take what the row leaves them (up to their width), never less than "step: all tokens":
        at a fixed width the row was 1,052 px and the window could not be narrower than 1,356."""
        label = self.steps.label
        label.setMinimumWidth(label.fontMetrics().horizontalAdvance(STEP_ALL) + 8)
        policy = label.sizePolicy()  # its room kept while hidden (StepControls)
        policy.setHorizontalPolicy(QSizePolicy.Ignored)  # a new text never resizes the row
        label.setSizePolicy(policy)
        label.setToolTip("The chosen step of a generation: its number, its token and its row in the maps")
        row.setStretchFactor(label, 100)  # the row's spare width up to its maximum; the stretch after it the rest

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

    def _view_changed(self, *_) -> None:
        """Each view shows its own scale: the one chosen for it, else its default."""
        view = self.viewCombo.currentData()
        config = self.result.config if getattr(self, "result", None) is not None else None
        mode = self._scales.get(view) or default_scale(view, config)
        self.scaleCombo.setCurrentIndex(self.scaleCombo.findData(mode))
        self.schedule()

    def _scale_chosen(self, *_) -> None:
        self._scales[self.viewCombo.currentData()] = self.scaleCombo.currentData()

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

    def _show_hover(self, text: str) -> None:
        self.infoBar.show_hover(text)

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
        return not self._timer.isActive() and self.delivery.settled()

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
            grid_pixels=self.headGrid.focus is None,  # a focused head's one map: made on the GUI thread
            predictions=not self.predictionStrip.isHidden(),
            head_scores=self.model_view_wanted() or self.explain.shown("statsDock"),
            **self.explain.options(config, request),
        )

    def request(self, force: bool = False) -> int | None:
        """Send the panel's state to the worker; returns the request id (None if invalid). `force`: compute
        again even if the last result shows this configuration (Generate pressed again)."""
        self._timer.stop()
        rid = self.delivery.next_id()
        try:
            config = self.panel.config()
        except ConfigError as exc:
            self.delivery.refused(rid)
            self._show_failure(str(exc), exc.field, exc.suggestions)
            return None
        config, force = self._once.config_for(config, force)
        self._note_opening(config)
        self._offer_views(config)
        self.delivery.sent(rid, config, force)
        if generating(config):
            self._generate_count = config.generate  # what Generate writes once the count is off again
        zoom = self._zoom_ask(config, rid)
        self.worker.submit(Request(rid, config, self.view_options(config), force, zoom,
                                   layers=zoom is None and self.model_view_wanted()))
        return rid

    def _offer_views(self, config: RunConfig) -> None:
        """The View box offers only the stages this configuration has (e.g. biased needs ALiBi); a change that
        takes away the stage shown falls back to the weights, saying so, rather than refusing the change."""
        have = set(run_stages(config))
        items = self.viewCombo.model()
        for i in range(self.viewCombo.count()):
            items.item(i).setEnabled(view_stage(self.viewCombo.itemData(i)) in have)
        shown = self.viewCombo.currentData()
        if view_stage(shown) not in have:
            self.viewCombo.setCurrentIndex(0)  # weights: every configuration has them (its scale follows)
            self.statusBar().showMessage(f"View: weights, since this configuration has no {shown} stage", 8000)

    # --- generation: Generate, Stop, streamed partial results, the step slider ------------------

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

    def _follow_generate(self, *_) -> None:
        """Generate (the button and Ctrl+G) off, its tooltip saying why, while the panel's model is the one shown and
        that model cannot write (an encoder: its run would only refuse the count); on for any other model until
        its own run is shown."""
        result, button = self.result, self.panel.generateButton
        if not hasattr(self, "_generate_tip"):
            self._generate_tip = button.toolTip()
        info = getattr(getattr(result, "source", None), "info", None)
        problem = cannot_generate(info) if info is not None and self._shows_panel_model(result.config) else ""
        button.setEnabled(not problem)
        self.generateAction.setEnabled(not problem)
        button.setToolTip(f"Off for this model: {problem}" if problem else self._generate_tip)

    def _shows_panel_model(self, shown: RunConfig) -> bool:
        widgets = self.panel.widgets
        if widgets["variant"].currentData() != shown.variant:
            return False
        return not shown.applies("model") or widgets["model"].folder() == shown.model

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
        wrote; no partial result of that run is shown after this. During a long forward: cancel it within its
        current layer (the last view stays)."""
        if not self.delivery.stop() and self._forward_id:
            self.worker.cancel(self._forward_id)

    def _escape(self) -> None:
        if self.delivery.generating_id or self._forward_id:
            self.stop_generation()
        elif self.zoomed():
            self.leave_zoom()
        else:
            self.headGrid.set_focus(None)

    def _show_generating(self, running: bool) -> None:
        self.panel.stopButton.setEnabled(running)
        self.stopAction.setEnabled(running)
        if not running:
            self.busyIndicator.setRange(0, 0)  # indeterminate again (a generation's progress is over)

    def _model_due(self, outcome: Outcome) -> bool:
        """Whether the model view follows this result: every final one; a generation's partial ones at most
        every MODEL_VIEW_PARTIAL_S (composing and painting every layer's tiles holds the GUI thread:
        benchmarks/README.md, Behind the code)."""
        now, run = time.monotonic(), (outcome.request.id, run_key(outcome.result))
        if outcome.partial and run == self._model_run and now - self._model_shown_at < MODEL_VIEW_PARTIAL_S:
            return False  # a new run's first partial result always goes in: nothing of the old one stays
        self._model_shown_at, self._model_run = now, run
        return True

    def _show_progress(self, outcome: Outcome) -> None:
        if outcome.partial and outcome.generated is not None:
            n, total = outcome.generated
            self._show_busy_now()
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
        self.headGrid.set_generation(None if self.headGrid.zoom is not None else prompt, row)
        self.predictionStrip.set_generation(prompt, row)

    # --- a result on screen, in two passes (Delivery calls them) -------------------------------

    def _show_grid(self, outcome: Outcome) -> None:
        """Make the result current and show it in the head grid; the rest follows on the next loop pass
        (_show_rest). Each view's scene repaints the window synchronously once its items changed, so shown
        in one pass the grid's, the tensor view's and the model view's repaints ran back to back with no
        timer or input between them (benchmarks/README.md, "A result in two passes")."""
        t0 = time.perf_counter()
        if self.result is None or run_key(outcome.result) != run_key(self.result):
            self.infoBar.show_hint()  # the text described cells of the previous run
        self.delivery.retire(self.result, self.frames)  # freed once this result is fully shown
        self.result, self.frames = outcome.result, outcome.frames
        d = self.delivery
        if outcome.request.id == d.latest_id:  # before the grid lays out: a stale grid regrids on every resize
            self._clear_failure()
        elif self.last_error is not None and d.failed_id == d.latest_id:
            self._mark_stale(self.last_error)  # the newest request failed before this older one came
        self._opening = ""  # its maps are here (_note_opening)
        self._show_caption(outcome.result)  # before the grid: a caption that comes or goes resizes it
        zoom = self._grid_zoom(outcome)
        self.headGrid.show_frames(outcome.result, outcome.frames, zoom)
        self._show_zoom_controls(zoom)
        self.steps.show(outcome.result)  # the generation's marks in the grid's own paint
        self._mark_step()
        self._swap_s = time.perf_counter() - t0

    def _show_rest(self, outcome: Outcome) -> None:
        t0 = time.perf_counter()
        self.outputView.show_frames(outcome.result, outcome.frames)
        self.explain.show(outcome.result, outcome.frames)
        if self._model_due(outcome):
            self._show_model(outcome.result)
        self._show_heads(outcome.result, outcome.frames, outcome.late)
        self._show_generation(outcome.result)
        self._follow_generate()
        self._show_progress(outcome)
        self._follow_default_scale(outcome.result.config)
        latest = outcome.request.id == self.delivery.latest_id
        if latest and not outcome.partial and self.panel.adopt_files(outcome.result.config):
            self.schedule()  # what the files set (bias flags, batch, lengths) shown; a re-render sized for them
        self.statusLabel.setText(status_text(outcome, self._swap_s + time.perf_counter() - t0))

    def _painted(self) -> bool:
        """Whether both views painted the result shown last (the tensor view is often painted one
        event-loop pass after the grid); a view not on screen has nothing to paint."""
        return not self.isVisible() or (self.headGrid.painted_shown()
                                        and (self.outputView.painted_shown() or not self.outputView.isVisible()))

    # --- failures ------------------------------------------------------------------------------

    def _on_failed(self, failure: Failure) -> None:
        self.modelView.end_partial()
        if self._zoom_failed(failure):
            return
        if self.delivery.failed(failure.request.id):  # else a newer request is on its way
            self._show_failure(failure.message, failure.field, failure.suggestions)
            self.sigFailed.emit(failure.request.id, failure.message)

    def _on_cancelled(self, rid: int) -> None:
        """A request stopped before it had anything to show: it is over (the last view stays)."""
        forward = rid == self._forward_id
        self.modelView.end_partial()
        self._end_opening()
        self._zoom_cancelled(rid)
        if forward:
            self._end_forward()
        if self.delivery.cancelled(rid):
            what = "Cancelled" if forward else "Stopped before the first token"
            self.statusBar().showMessage(f"{what}: the maps show the last run", 6000)

    def _on_busy(self, busy: bool) -> None:
        self._busy = busy  # sigBusy(True) comes with every request, sigBusy(False) once the worker is idle
        if busy:
            if not self._busy_timer.isActive() and not self.busyIndicator.isVisible():
                self._busy_timer.start()  # see BUSY_SHOW_MS; a stream of requests must not keep postponing it
            return
        self._busy_timer.stop()
        self.busyIndicator.hide()
        self._end_forward()

    def _show_busy_now(self) -> None:
        """A counted forward or a generation shows its count at once, while the worker is still at it (a partial
        result painted after the worker went idle must not bring the bar back)."""
        if self._busy:
            self._busy_timer.stop()
            self.busyIndicator.show()

    def _end_forward(self) -> None:
        """A forward's layer count is over: the bar spins again when next busy, Stop is for generations."""
        if self._forward_id:
            self._forward_id = 0
            self.busyIndicator.setRange(0, 0)
            self._show_generating(bool(self.delivery.generating_id))

    def closeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        if self.close_waits_for_saves():  # Ctrl+S still hashing: close once the file is written
            event.ignore()
            return
        self.save_settings()
        self._timer.stop()
        self.delivery.close()  # a result half shown is finished; one still waiting is dropped
        cancel_all_jobs()  # the panels' computations stop at their next check (see app.run_app)
        self.worker.stop(timeout=1.5)  # a forward in flight finishes in the background; see app.run_app
        super().closeEvent(event)
