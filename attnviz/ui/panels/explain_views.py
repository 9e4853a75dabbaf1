"""The explaining views as dock panels of the main window: pipeline, statistics, token focus,
compare, rollout, which heads matter and the logit lens. The window only wires them: `options()` adds
what the visible panels need to each request's ViewOptions; `show()` hands them the worker's frames.
A hidden panel costs nothing (the pipeline's full trace is recorded only while it is shown). Each panel is one
record (Panel, in PANELS): its dock, title, shortcut, widget, what it requests and what it exports; the View
menu, the requests and the exports (panel_export.py, through attnviz.export) are read from it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from PySide6.QtCore import QEvent, QObject, QTimer
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QDockWidget, QFileDialog, QFrame, QMainWindow, QScrollArea, QWidget

from attnviz.explain import token_labels
from attnviz.export.items import Layout
from attnviz.ui.maps.compare import CompareView, RolloutView
from attnviz.ui.panels import panel_export as pe
from attnviz.ui.panels.attribution_view import AttributionView
from attnviz.ui.panels.circuits_view import CircuitsView
from attnviz.ui.panels.focus import FocusView
from attnviz.ui.panels.head_effects import HeadEffectsView, default_effects
from attnviz.ui.panels.lens_view import LensView
from attnviz.ui.panels.patch_view import PatchView, image_drop
from attnviz.ui.panels.patching_view import PatchingView
from attnviz.ui.panels.pipeline import PipelineView
from attnviz.ui.panels.stats_view import StatsView
from attnviz.ui.widgets.basic import named


@dataclass(frozen=True)
class Panel:
    """One dock panel, the one place its facts live: the View menu, the requests and the exports read it."""

    dock: str  # the dock's objectName
    title: str
    shortcut: str
    tip: str
    attr: str  # the ExplainViews attribute that holds its widget (and its export kind)
    make: Callable[[ExplainViews], QWidget]
    exports: tuple[str, ...] = ()  # the file formats its Export… button offers, the first the default
    request: Callable[..., dict] | None = None  # its ViewOptions fields: (views, shown, config, asked config)
    heavy: tuple[str, ...] = ()  # formats written off the GUI thread
    changes: bool = False  # its sigChanged asks for new frames
    opens_heads: bool = False  # its sigOpen opens a head in the grid
    stops: bool = False  # hidden, it stops its own background work
    figure: Callable[[ExplainViews], Layout] | None = None  # its PNG/SVG figure, drawn from the frames it shows
    table: Callable[[ExplainViews], str] | None = None  # its numbers as CSV text
    arrays: Callable[[ExplainViews, str], Path] | None = None  # writes its NPZ
    write: Callable[[ExplainViews, str], Path] | None = None  # a writer of its own for every format it offers


def _pipeline_request(v: ExplainViews, shown: bool, config, asked) -> dict:
    return dict(pipeline_head=v.pipeline.headSpin.value() if shown else None, pipeline_stage=v.pipeline.stage_name)


def _focus_request(v: ExplainViews, shown: bool, config, asked) -> dict:
    row = v.focus.row if shown else None
    return dict(focus_row=None if row is None or row >= config.seq_q else row)


def _compare_request(v: ExplainViews, shown: bool, config, asked) -> dict:
    against = shown and v.compare.unablatedButton.isChecked() and asked.ablate  # "Against unablated" on
    return dict(pinned=v.compare.pinned if shown else None, compare_head=v.compare.headSpin.value(),
                unablated=asked.replace(ablate=()) if against else None)


PANELS: tuple[Panel, ...] = (
    Panel("pipelineDock", "Pipeline", "Ctrl+Shift+P", "One head's attention call stage by stage", "pipeline",
          lambda v: PipelineView(), ("png", "svg", "npz"), _pipeline_request, ("png", "svg", "npz"), changes=True,
          write=pe.pipeline_to),
    Panel("statsDock", "Statistics", "Ctrl+Shift+T", "Per-head statistics: entropy, distance, sink, previous token",
          "stats", lambda v: StatsView(), ("csv", "png", "svg"), lambda v, shown, c, asked: dict(stats=shown),
          figure=pe.stats_figure_of, table=pe.stats_table),
    Panel("focusDock", "Token focus", "Ctrl+Shift+F", "Where every head sends one query token", "focus",
          lambda v: FocusView(), ("csv", "png", "svg"), _focus_request, changes=True, figure=pe.focus_figure_of,
          table=pe.focus_table),
    Panel("compareDock", "Compare", "Ctrl+Shift+D", "A pinned result beside the current one, and their difference",
          "compare", lambda v: CompareView(), ("npz", "png", "svg"), _compare_request, ("npz",), changes=True,
          figure=pe.compare_figure_of, arrays=pe.compare_arrays_to),
    Panel("rolloutDock", "Rollout", "Ctrl+Shift+R", "Attention rollout over the layers of a model", "rollout",
          lambda v: RolloutView(), ("csv", "png", "svg"), lambda v, shown, c, asked: dict(rollout=shown),
          figure=pe.rollout_figure_of, table=pe.rollout_table),
    Panel("headEffectsDock", "Which heads matter", "Ctrl+Shift+H",
          "Layer × head: how much each head alone matters for the target's probability (ablation)", "effects",
          lambda v: HeadEffectsView(v.effects_model), opens_heads=True, stops=True),
    Panel("lensDock", "Logit lens", "Ctrl+Shift+L", "The top-1 token after each layer at each position (causal LMs)",
          "lens", lambda v: LensView(), ("csv", "png", "svg"), lambda v, shown, c, asked: dict(lens=shown),
          figure=pe.lens_figure_of, table=pe.lens_table),
    Panel("patchDock", "Patches", "Ctrl+Shift+G", "A vision model's picture with one query token's attention over its "
          "patches, per head, mean or rollout", "patch", lambda v: PatchView(), ("png", "svg"),
          lambda v, shown, c, asked: dict(patch_query=(v.patch.query or 0) if shown else None), changes=True,
          write=pe.patch_to),
    Panel("circuitsDock", "Circuits", "Ctrl+Shift+K", "The open head's QK and OV circuits, its copying score and the "
          "earlier heads it composes with", "circuits", lambda v: CircuitsView(), opens_heads=True, stops=True),
    Panel("attributionDock", "Logit attribution", "Ctrl+Shift+A", "Layer × head: each head's direct share of one "
          "logit, and the tokens it came from", "attribution", lambda v: AttributionView(), opens_heads=True,
          stops=True),
    Panel("patchingDock", "Patching", "Ctrl+Shift+X", "Layer × head: the share of a logit difference each head "
          "carries from the shown text into a corrupted one (activation patching)", "patching",
          lambda v: PatchingView(), opens_heads=True, stops=True),
)
DOCKS: dict[str, Panel] = {p.dock: p for p in PANELS}
BY_KIND: dict[str, Panel] = {p.attr: p for p in PANELS}
FILTERS = {"png": "PNG image (*.png)", "svg": "SVG drawing (*.svg)", "npz": "NumPy arrays (*.npz)",
           "csv": "CSV table (*.csv)"}


class PanelScroll(QScrollArea):
    """A panel filling its dock, scrolling only where the dock is shorter or narrower than the panel's least
    size: a panel never takes the height the head grid keeps. (QScrollArea's own resizing gives a panel with
    a word-wrapped label its preferred height, not the room there is.)"""

    def __init__(self, panel: QWidget):
        super().__init__()
        self.setWidget(panel)
        self.setFrameShape(QFrame.NoFrame)
        panel.installEventFilter(self)  # its least size changes with its contents

    def _fit(self) -> None:
        panel, room = self.widget(), self.viewport().size()
        least = panel.minimumSizeHint().expandedTo(panel.minimumSize())
        panel.resize(max(room.width(), least.width()), max(room.height(), least.height()))

    def viewportEvent(self, event) -> bool:  # noqa: N802 (Qt's name)
        if event.type() == QEvent.Resize:
            self._fit()
        return super().viewportEvent(event)

    def eventFilter(self, watched, event) -> bool:  # noqa: N802 (Qt's name)
        if event.type() == QEvent.LayoutRequest:
            self._fit()
        return False


class ExplainViews(QObject):
    """Builds the docks into `window` (a MainWindow) and keeps their state."""

    def __init__(self, window: QMainWindow, effects=default_effects):
        super().__init__(window)
        self.window = window
        self.effects_model = effects  # what the head effects panel computes with
        self.docks: dict[str, QDockWidget] = {}
        self._visible: dict[str, bool] = dict.fromkeys(DOCKS, False)  # on screen (a tab behind another is not)
        for panel in PANELS:
            widget = panel.make(self)
            setattr(self, panel.attr, widget)
            dock = named(QDockWidget(panel.title, window), panel.dock)
            dock.setWidget(PanelScroll(widget))
            dock.setProperty("about", panel.tip)  # its tab's tooltip (WindowLayout's ABOUT)
            window.tab_panel(dock)  # one tabbed area with the model view: a panel never takes more height
            dock.hide()
            dock.visibilityChanged.connect(partial(self._visibility_changed, panel.dock))
            self.docks[panel.dock] = dock
            if panel.changes:
                widget.sigChanged.connect(window.schedule)
            if panel.opens_heads:
                widget.sigOpen.connect(self._open_head)
            if panel.exports:
                widget.sigExport.connect(partial(self.export_dialog, panel.attr))
        image = getattr(window, "panel", None) and window.panel.widgets.get("image")
        self._drop = image_drop(window, image) if image is not None else None  # an image dropped on the window
        self.compare.pinButton.toggled.connect(self._pin_toggled)
        self.compare.unablatedButton.toggled.connect(self._unablated_toggled)
        self.circuits.sigScores.connect(window.modelView.set_circuits)
        window.headGrid.sigRowClicked.connect(self.focus.toggle)
        window.predictionStrip.sigPicked.connect(self._pick_for_attribution)

    def add_actions(self, menu) -> None:
        """One checkable View-menu entry with a shortcut per panel."""
        menu.addSeparator()
        for panel in PANELS:
            action = self.docks[panel.dock].toggleViewAction()
            action.toggled.connect(partial(self._opened, panel.dock))
            action.setShortcut(QKeySequence(panel.shortcut))
            action.setToolTip(f"{panel.tip} ({panel.shortcut})")
            action.setStatusTip(panel.tip)
            menu.addAction(action)

    def _opened(self, name: str, on: bool) -> None:
        if on:  # its tab in front, once the area has made it a tab: opened is seen
            QTimer.singleShot(0, self.docks[name].raise_)

    def shown(self, name: str) -> bool:
        """Whether a panel is on screen (open, and its tab the current one)."""
        return self._visible[name] and self.docks[name].isVisible()

    def _visibility_changed(self, name: str, visible: bool) -> None:
        self._visible[name] = visible
        if name == "focusDock" and visible and self.window.result is not None:  # also while stale
            self.focus.set_tokens(token_labels(self.window.result))
        if DOCKS[name].stops and not visible:
            getattr(self, DOCKS[name].attr).stop()  # a hidden panel costs nothing
        self.window.headGrid.row_picking = self.shown("focusDock")
        self.window.schedule()

    def _pin_toggled(self, on: bool) -> None:
        self.compare.pinned = self.window.result if on else None
        self.compare.pinButton.setText("Unpin" if on else "Pin current")
        if on:
            self.compare.unablatedButton.setChecked(False)
        if not on:
            self.compare.show_frames(None)
        self.window.schedule()

    def _unablated_toggled(self, on: bool) -> None:
        if on:
            self.compare.pinButton.setChecked(False)
        else:
            self.compare.show_frames(None)
        self.window.schedule()

    def _pick_for_attribution(self, position: int, token_rank: int, baseline_rank: int) -> None:
        """A predictions-strip cell picked: the Logit attribution panel, open and in front, splits that logit."""
        dock = self.docks["attributionDock"]
        dock.show()
        dock.raise_()
        if self.window.result is not None:
            self.attribution.show_result(self.window.result)
        self.attribution.pick(position, token_rank, baseline_rank)

    def _open_head(self, layer: int, head: int) -> None:
        """A cell of the head effects: that head in the head grid, as a model-view click opens it."""
        result = self.window.result
        stack = result.source.stack if result is not None and result.source is not None else ""
        self.window._open_tile(stack, layer, head)

    def options(self, config, request=None) -> dict:
        """The ViewOptions fields of the visible panels (`config` sized as the views are; `request` the
        configuration asked for, default `config`)."""
        self.pipeline.set_heads(config.heads)
        self.compare.set_heads(config.heads)
        fields: dict = {}
        for panel in PANELS:
            if panel.request is not None:
                fields |= panel.request(self, self.shown(panel.dock), config, config if request is None else request)
        return fields

    def show(self, result, frames) -> None:
        extras = frames.extras
        if "pipeline" in extras:
            self.pipeline.show_frames(result, extras["pipeline"])
        if "stats" in extras:
            self.stats.show_frames(extras["stats"], frames.options.batch_index)
        if self.shown("focusDock"):  # opening it asks for a result, which fills the list then
            self.focus.set_tokens(token_labels(result))
        if "focus" in extras:
            self.focus.show_frames(extras["focus"])
        if "compare" in extras:
            self.compare.show_frames(extras["compare"])
        elif self.shown("compareDock") and self.compare.unablatedButton.isChecked():
            self.compare.show_frames(None)
            self.compare.infoLabel.setText("Nothing is ablated: Alt+click a head in the model view (or type heads "
                                           "into Ablation) to compare with the intact model")
        if "rollout" in extras:
            self.rollout.show_frames(extras["rollout"], result.tokens)
        if "lens" in extras:
            self.lens.show_frames(extras["lens"])
        if "patch" in extras:
            self.patch.show_frames(extras["patch"])
        if self.shown("headEffectsDock"):
            self.effects.show_result(result)
        self.window.modelView.set_circuits(*self.circuits.marks_for(result, self.window.headGrid.focus))
        if self.shown("circuitsDock"):
            self.circuits.show_result(result, self.window.headGrid.focus)
        if self.shown("attributionDock"):
            self.attribution.show_result(result)
        if self.shown("patchingDock"):
            self.patching.show_result(result)

    # --- export ------------------------------------------------------------------------------

    def export_dialog(self, kind: str) -> None:
        panel = BY_KIND[kind]
        path, _ = QFileDialog.getSaveFileName(self.window, f"Export {kind}", str(Path.home() / f"attnviz-{kind}"),
                                              ";;".join(FILTERS[f] for f in panel.exports))
        if not path:
            return
        if Path(path).suffix.lstrip(".").lower() not in panel.exports:
            path += "." + panel.exports[0]
        if Path(path).suffix.lstrip(".").lower() in panel.heavy:  # off the GUI thread
            from attnviz.ui.widgets.jobs import BackgroundJob

            self._job = BackgroundJob(self)
            self._job.sigDone.connect(self._exported)
            self._job.sigFailed.connect(self._export_failed)
            self._job.start(lambda: self.export(kind, path))
            return
        try:
            self._exported(self.export(kind, path))
        except Exception as exc:  # never take the app down for a file
            self._export_failed(str(exc))

    def _exported(self, path) -> None:
        self.window.statusBar().showMessage(f"Wrote {path}", 4000)

    def _export_failed(self, message: str) -> None:
        self.window.statusBar().showMessage(f"Not exported: {message}", 8000)

    def export(self, kind: str, path: str) -> Path:
        """Write one panel's figure (.png/.svg, drawn from its data) or numbers (.csv/.npz) to `path`, through
        attnviz.export (atomic); ValueError for a format the panel does not offer or nothing to export."""
        ext, offered = Path(path).suffix.lstrip(".").lower(), BY_KIND[kind].exports
        if ext not in offered:
            raise ValueError(f"the {kind} panel exports {', '.join(offered)}, not {ext or 'no extension'}")
        return pe.panel_export(BY_KIND[kind], self, path, ext)
