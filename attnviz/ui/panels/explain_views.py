"""The explaining views as dock panels of the main window: pipeline, statistics, token focus,
compare, rollout, which heads matter and the logit lens. The window only wires them: `options()` adds
what the visible panels need to each request's ViewOptions; `show()` hands them the worker's frames.
A hidden panel costs nothing (the pipeline's full trace is recorded only while it is shown).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np
from PySide6.QtCore import QEvent, QObject, QTimer
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QDockWidget, QFileDialog, QFrame, QMainWindow, QScrollArea, QWidget

from attnviz.atomic import write_bytes
from attnviz.explain import token_labels
from attnviz.ui.maps.compare import CompareView, RolloutView
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

# dock objectName -> (title, shortcut, tip)
DOCKS = {
    "pipelineDock": ("Pipeline", "Ctrl+Shift+P", "One head's attention call stage by stage"),
    "statsDock": ("Statistics", "Ctrl+Shift+T", "Per-head statistics: entropy, distance, sink, previous token"),
    "focusDock": ("Token focus", "Ctrl+Shift+F", "Where every head sends one query token"),
    "compareDock": ("Compare", "Ctrl+Shift+D", "A pinned result beside the current one, and their difference"),
    "rolloutDock": ("Rollout", "Ctrl+Shift+R", "Attention rollout over the layers of a model"),
    "headEffectsDock": ("Which heads matter", "Ctrl+Shift+H",
                        "Layer × head: how much each head alone matters for the target's probability (ablation)"),
    "lensDock": ("Logit lens", "Ctrl+Shift+L", "The top-1 token after each layer at each position (causal LMs)"),
    "patchDock": ("Patches", "Ctrl+Shift+G", "A vision model's picture with one query token's attention over its "
                  "patches, per head, mean or rollout"),
    "circuitsDock": ("Circuits", "Ctrl+Shift+K", "The open head's QK and OV circuits, its copying score and the "
                     "earlier heads it composes with"),
    "attributionDock": ("Logit attribution", "Ctrl+Shift+A", "Layer × head: each head's direct share of one logit, "
                        "and the tokens it came from"),
    "patchingDock": ("Patching", "Ctrl+Shift+X", "Layer × head: the share of a logit difference each head carries "
                     "from the shown text into a corrupted one (activation patching)"),
}
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
        self.pipeline = PipelineView()
        self.stats = StatsView()
        self.focus = FocusView()
        self.compare = CompareView()
        self.rollout = RolloutView()
        self.effects = HeadEffectsView(effects)
        self.lens = LensView()
        self.patch = PatchView()
        self.circuits, self.attribution, self.patching = CircuitsView(), AttributionView(), PatchingView()
        self.docks: dict[str, QDockWidget] = {}
        self._visible: dict[str, bool] = dict.fromkeys(DOCKS, False)  # on screen (a tab behind another is not)
        widgets = (self.pipeline, self.stats, self.focus, self.compare, self.rollout, self.effects, self.lens,
                   self.patch, self.circuits, self.attribution, self.patching)
        for (name, (title, _, _)), widget in zip(DOCKS.items(), widgets):
            dock = named(QDockWidget(title, window), name)
            dock.setWidget(PanelScroll(widget))
            window.tab_panel(dock)  # one tabbed area with the model view: a panel never takes more height
            dock.hide()
            dock.visibilityChanged.connect(partial(self._visibility_changed, name))
            self.docks[name] = dock
        for view in (self.pipeline, self.focus, self.compare, self.patch):
            view.sigChanged.connect(window.schedule)
        self.patch.sigExport.connect(lambda: self.export_dialog("patch"))
        image = getattr(window, "panel", None) and window.panel.widgets.get("image")
        self._drop = image_drop(window, image) if image is not None else None  # an image dropped on the window
        self.compare.pinButton.toggled.connect(self._pin_toggled)
        self.compare.unablatedButton.toggled.connect(self._unablated_toggled)
        self.effects.sigOpen.connect(self._open_head)
        for view in (self.circuits, self.attribution, self.patching):
            view.sigOpen.connect(self._open_head)
        self.circuits.sigScores.connect(window.modelView.set_circuits)
        self.lens.sigExport.connect(lambda: self.export_dialog("lens"))
        self.pipeline.sigExport.connect(lambda: self.export_dialog("pipeline"))
        self.stats.sigExport.connect(lambda: self.export_dialog("stats"))
        self.focus.sigExport.connect(lambda: self.export_dialog("focus"))
        self.compare.sigExport.connect(lambda: self.export_dialog("compare"))
        self.rollout.sigExport.connect(lambda: self.export_dialog("rollout"))
        window.headGrid.sigRowClicked.connect(self.focus.toggle)
        window.predictionStrip.sigPicked.connect(self._pick_for_attribution)

    def add_actions(self, menu) -> None:
        """One checkable View-menu entry with a shortcut per panel."""
        menu.addSeparator()
        for name, (_, shortcut, tip) in DOCKS.items():
            action = self.docks[name].toggleViewAction()
            action.toggled.connect(partial(self._opened, name))
            action.setShortcut(QKeySequence(shortcut))
            action.setToolTip(f"{tip} ({shortcut})")
            action.setStatusTip(tip)
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
        if name == "headEffectsDock" and not visible:
            self.effects.stop()  # a hidden panel costs nothing
        circuit_panels = {"circuitsDock": self.circuits, "attributionDock": self.attribution,
                          "patchingDock": self.patching}
        if name in circuit_panels and not visible:
            circuit_panels[name].stop()
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

    def unablated(self, config):
        """The config compared against while "Against unablated" is on (None: off, or nothing ablated)."""
        on = self.shown("compareDock") and self.compare.unablatedButton.isChecked()
        return config.replace(ablate=()) if on and config.ablate else None

    def options(self, config, request=None) -> dict:
        """The ViewOptions fields of the visible panels (`config` sized as the views are; `request` the
        configuration asked for, default `config`)."""
        self.pipeline.set_heads(config.heads)
        self.compare.set_heads(config.heads)
        focus_row = self.focus.row if self.shown("focusDock") else None
        return dict(
            pipeline_head=self.pipeline.headSpin.value() if self.shown("pipelineDock") else None,
            pipeline_stage=self.pipeline.stage_name,
            stats=self.shown("statsDock"),
            focus_row=None if focus_row is None or focus_row >= config.seq_q else focus_row,
            rollout=self.shown("rolloutDock"),
            pinned=self.compare.pinned if self.shown("compareDock") else None,
            compare_head=self.compare.headSpin.value(),
            unablated=self.unablated(config if request is None else request),
            lens=self.shown("lensDock"),
            patch_query=(self.patch.query or 0) if self.shown("patchDock") else None,
        )

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
        formats = {"pipeline": ("png", "svg", "npz"), "stats": ("csv", "png"), "focus": ("csv", "png"),
                   "compare": ("npz", "png"), "rollout": ("csv", "png"), "lens": ("csv", "png"),
                   "patch": ("png", "svg")}[kind]
        path, _ = QFileDialog.getSaveFileName(self.window, f"Export {kind}", str(Path.home() / f"attnviz-{kind}"),
                                              ";;".join(FILTERS[f] for f in formats))
        if not path:
            return
        if Path(path).suffix.lstrip(".").lower() not in formats:
            path += "." + formats[0]
        if kind == "pipeline" or (kind == "compare" and path.lower().endswith(".npz")):  # heavy: off the GUI thread
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
        """Write one panel's image (.png/.svg) or numbers (.csv/.npz) to `path`."""
        if kind == "patch":  # the overlay on the picture, not a grab of the panel
            return self.patch.export(path)
        ext = Path(path).suffix.lower()
        widget = {"pipeline": self.pipeline, "stats": self.stats, "focus": self.focus, "compare": self.compare,
                  "rollout": self.rollout, "lens": self.lens}[kind]
        if kind == "pipeline":
            from attnviz.export import export_pipeline

            return export_pipeline(self.window.result, path, self.window.frames.options, self.pipeline.frames.head)
        if ext == ".png":
            if not widget.grab().save(path):
                raise OSError(f"cannot write {path}")
            return Path(path)
        if kind in ("stats", "focus", "lens"):
            write_bytes(path, widget.csv().encode("utf-8"))
        elif kind == "rollout":
            lines = [",".join(f"{v:.6g}" for v in row) for row in self.rollout.frames.data]
            write_bytes(path, ("\n".join(lines) + "\n").encode("utf-8"))
        else:  # every head's difference (computed here: export() runs off the GUI thread for NPZ)
            from attnviz.atomic import atomic_writer
            from attnviz.explain import compare_difference

            options = self.window.frames.options
            pinned = self.compare.pinned or self.window.frames.extras.get("compare_pinned")  # or the unablated run
            diff = compare_difference(self.window.result, pinned, options.view, options.batch_index)
            with atomic_writer(path) as f:
                np.savez_compressed(f, difference=diff, view=np.array(options.view))
        return Path(path)
