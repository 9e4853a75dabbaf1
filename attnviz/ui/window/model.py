"""The window's pretrained-model side: the model view (every layer × head) in its dock, the layer shown,
opening a tile, and ablating heads from it. Mixed into MainWindow."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDockWidget

from attnviz.core.runs.config import field_meta
from attnviz.core.runs.saved import saved_layers
from attnviz.ui.maps.model_view import ModelPanel, ModelView, ablated_heads, toggle_head
from attnviz.ui.window.layout import ABOUT

MODEL_PROMPT = ("Choose a model under Model folder: one found on this machine, a folder (Open…) or a .gguf file "
                "(the arrow beside Open…).")


class WindowModel:
    """The model dock of MainWindow (needs its panel, head grid, colormap box and schedule)."""

    def _make_model_dock(self) -> None:
        self.modelView = ModelView()
        self.modelDock = QDockWidget("Model view", self)  # a short title: it names a tab among a dozen
        self.modelDock.setObjectName("modelDock")
        self.modelDock.setProperty(ABOUT, "Model view: every layer × head (click one to open it)")
        self.modelPanel = ModelPanel(self.modelView)  # the view and its head-type legend
        self.modelDock.setWidget(self.modelPanel)
        # Open from the start (a note says when no model is behind the maps): a dock that opened with the first model's
        # result re-laid out the whole window inside that result's swap (benchmarks/README.md, Behind the code).
        self.addDockWidget(Qt.BottomDockWidgetArea, self.modelDock)
        self.modelView.sigOpen.connect(self._open_tile)
        self.modelDock.visibilityChanged.connect(self._model_dock_visible)
        self.modelView.sigHover.connect(self._show_hover)
        self.modelView.sigAblate.connect(self._toggle_ablation)
        self.modelView.sigRestoreAll.connect(lambda: self._set_ablation(()))
        self.worker.sigOpening.connect(self._on_opening)

    def _on_progress(self, rid: int, done: int, total: int) -> None:
        """A model's forward, layer by layer: "layer 12 / 30" on the busy bar, and Stop (Esc) cancels it."""
        if total > 1 and not self.delivery.generating_id:
            self._count_on_busy_bar(rid, done, total, f"layer {done} / {total}")

    def _on_opening(self, rid: int, step: str, done: int, total: int) -> None:
        """A model opening step by step (a GGUF's tensors, then its tokenizer): on the busy bar, with Stop (Esc)
        to cancel between two steps."""
        self._count_on_busy_bar(rid, done, max(total, 1), f"opening: {step} {done} / {total}")

    def _count_on_busy_bar(self, rid: int, done: int, total: int, text: str) -> None:
        if rid != self.delivery.latest_id:
            return
        self._forward_id = rid
        self._show_busy_now()
        self.busyIndicator.setRange(0, total)
        self.busyIndicator.setValue(done)
        self.busyIndicator.setFormat(text)
        self.panel.stopButton.setEnabled(True)
        self.stopAction.setEnabled(True)

    _model_behind = False  # the model view open but behind another panel's tab (or the window minimised)

    _opening = ""  # the model whose first run (it loads then) is on its way; "" for none

    def _note_opening(self, config) -> None:
        """A model other than the one shown is asked for: its first run reads its weights and tokenizer (a large
        one for a minute or more). Said above the maps and over a grid with none yet, till its maps come."""
        model = config.model if config.spec.backed and config.applies("model") else ""
        if not model or (self.result is not None and self.result.config.model == model):
            self._end_opening()
            return
        self._opening = model
        text = (f"Opening {Path(model).name}: its weights and tokenizer are read on the first run (a large model "
                "takes a minute or more); its maps follow. The maps below are the last run's.")
        self.captionLabel.set_caption(text if self.result is not None else text.rsplit(" The maps", 1)[0], True)
        self.headGrid.set_message(f"Opening {Path(model).name} …")
        self.statusLabel.setText(f"Opening {Path(model).name} …")
        self.staleLabel.hide()  # the last variant's state is not this one's

    def _end_opening(self) -> None:
        """The model's maps came, or its run failed or was cancelled: the caption is the shown result's again."""
        if not self._opening:
            return
        self._opening = ""
        self.headGrid.set_message("")
        if self.result is not None:
            self._show_caption(self.result)
        else:
            self.captionLabel.set_caption("", False)

    def _prompt_for_model(self, field: str | None) -> bool:
        """No model chosen yet for a pretrained variant: a prompt, not an error (no red box, no stale banner);
        the last maps stay, dimmed, until a model is chosen. False: another failure (shown as one)."""
        self._end_opening()
        if field != "model" or self.panel.widgets["model"].folder():
            return False
        self.panel.clear_error()  # last_error keeps the config's message: the next result clears it
        self.staleLabel.hide()
        self.captionLabel.set_caption(MODEL_PROMPT, True)
        self.statusBar().showMessage(MODEL_PROMPT)
        self.headGrid.set_stale(True)
        self.outputView.set_stale(True)
        return True

    def model_view_wanted(self) -> bool:
        """Whether results go into the model view: it is open and its tab in front (a window not shown yet
        counts: its first result arrives as it shows)."""
        return not self.modelDock.isHidden() and not self._model_behind

    def _model_dock_visible(self, visible: bool) -> None:
        self._model_behind = not visible and not self.modelDock.isHidden()
        if visible and self.result is not None:  # opened after the result came: fill it now
            self._show_model(self.result)
            self.schedule()  # and its head-type badges (computed only while it is shown)

    def _show_model(self, result) -> None:
        """A model-backed result: its layers in the model view, the layer selector bounded by the model."""
        layer_spin = self.panel.widgets["layer"]
        source = result.source or saved_layers(result)  # a model's forward, or an opened file's every layer
        if source is None:  # random weights: no model behind these maps
            layer_spin.setMaximum(int(field_meta("layer")["maximum"]))
            # The dock stays, saying so: hiding it and showing it again with the next model resized
            # every view in the window, twice per switch between a trained and a random variant.
            self.modelView.show_none()
            self.modelPanel.legend.hide()  # no tiles: no badges to explain, no head to Alt+click
            return
        self.modelPanel.legend.show()
        layer_spin.setMaximum(source.info.layers - 1)  # a preset or file may widen it again (panel)
        if result.source is not None:  # the panel hides what this model does not read (decoder text, image)
            self.panel.know_model(result.config.model, getattr(source.info, "stacks", ()),
                                  getattr(source, "picture", None) is not None)
        if self.modelDock.isVisible() and self.model_view_wanted():  # a tab behind waits: composing every
            # layer's tiles holds the GUI thread (benchmarks/README.md, Behind the code, ui/main_window._model_due)
            self.modelView.show_source(source, result.config.layer, self.colormapCombo.currentData())

    def _show_heads(self, result, frames, late: frozenset[str] = frozenset()) -> None:
        """What the heads do: the predictions strip; the model view's crossed (ablated) heads and badges.
        late: the extras still on their way (worker.sigExtras)."""
        extras = frames.extras
        if "predictions" in extras:
            self.predictionStrip.show_frames(extras["predictions"], self.colormapCombo.currentData())
        elif "predictions" in late:
            self.predictionStrip.show_pending()
        if "lens" in late:  # it comes with the predictions (sigExtras)
            self.explain.lens.show_pending()
        if result.source is None:
            return
        heads = result.source.layer_weights.shape[2]
        self.modelView.set_ablated(ablated_heads(result.config.ablate, result.source.info.layers, heads))
        if "head_scores" in extras:
            self._show_head_types(extras["head_scores"])

    def _show_head_types(self, frames) -> None:
        """explain.HeadScoreFrames of the shown model: the model view's badges and their legend."""
        self.modelView.set_head_types(frames)
        self.modelPanel.set_legend(frames)

    def _on_late_extras(self, rid: int, extras: dict) -> None:
        """The head types, predictions and logit lens of the result on screen, computed after its maps were
        shown (worker.late_names)."""
        if not self.delivery.extras_arrived(rid, extras) or self.frames is None:
            return
        self.frames.extras.update(extras)
        if "head_scores" in extras and self.result is not None and self.result.source is not None:
            self._show_head_types(extras["head_scores"])
        if "predictions" in extras:
            self.predictionStrip.show_frames(extras["predictions"], self.colormapCombo.currentData())
        if "lens" in extras:
            self.explain.lens.show_frames(extras["lens"])
        self.delivery.sigLateShown.emit(rid)

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
