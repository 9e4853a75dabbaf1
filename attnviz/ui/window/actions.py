"""The window's menus, toolbar and shortcuts. Mixed into MainWindow: each entry calls one of its methods."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QLineEdit, QMenu, QToolBar

from attnviz.ui.window.check_job import TransformersCheck


class ShortcutsFirst(QObject):
    """Lets the window's Ctrl shortcuts through the panel's text boxes: a line edit claims some of them for itself
    (on X11 Ctrl+E is "end of line"), and a claimed key never reaches the window's action. Their ShortcutOverride
    is refused here, so the action fires; typing, and the edit keys (copy, paste, undo ...), stay the box's."""

    def __init__(self, parent: QObject, keys: set) -> None:
        super().__init__(parent)
        self.keys = keys

    def eventFilter(self, watched, event) -> bool:  # noqa: N802 (Qt's name)
        if event.type() == QEvent.ShortcutOverride and event.keyCombination() in self.keys:
            event.ignore()
            return True
        return False


class WindowActions:
    """File, View and Run menus and the toolbar of MainWindow."""

    def _action(self, text: str, shortcut: str, slot, tip: str, menu: QMenu, name: str | None = None) -> QAction:
        """A menu entry; `name`: also on the toolbar, its button named so (tests and accessibility find it)."""
        a = QAction(text, self)
        if shortcut:
            a.setShortcut(QKeySequence(shortcut))
        a.setToolTip(f"{tip} ({QKeySequence(shortcut).toString()})" if shortcut else tip)
        a.setStatusTip(tip)
        a.triggered.connect(slot)
        menu.addAction(a)
        if name:
            self.toolBar.addAction(a)
            self.toolBar.widgetForAction(a).setObjectName(name)
            self.toolBar.widgetForAction(a).setAccessibleName(name)
        return a

    def _make_actions(self) -> None:
        self.toolBar = QToolBar("Main")
        self.toolBar.setObjectName("mainToolBar")
        self.addToolBar(self.toolBar)
        self._file_actions(self.menuBar().addMenu("&File"))
        self._view_actions(self.menuBar().addMenu("&View"))
        run_menu = self.menuBar().addMenu("&Run")
        self.generateAction = self._action("Generate", "Ctrl+G", self.generate, "Let the model write after the text "
                                           "(the Generate count, or 20 while it is off), streaming each token",
                                           run_menu)
        self.stopAction = self._action("Stop", "", self.stop_generation, "Stop the model writing (Esc); what it "
                                       "wrote so far stays on screen. During a long forward: cancel it within "
                                       "its current layer", run_menu)
        run_menu.addSeparator()
        self.transformersCheck = TransformersCheck(self)
        self.checkAction = self._action(
            "Check against transformers", "Ctrl+Shift+J", self.transformersCheck.start, "Run transformers' own model "
            "(eager attention, float32) once on the shown text and show the max |diff| of every layer's and head's "
            "maps and of the logits: in the status bar, and per head in the Statistics panel", run_menu)
        self.checkAction.setObjectName("checkAction")
        keys = {a.shortcut()[0] for a in self.findChildren(QAction)
                if not a.shortcut().isEmpty() and a.shortcut()[0].keyboardModifiers() & Qt.ControlModifier}
        self._shortcuts_first = ShortcutsFirst(self, keys)
        for box in self.panel.findChildren(QLineEdit):
            box.installEventFilter(self._shortcuts_first)

    def _file_actions(self, menu: QMenu) -> None:
        act = self._action
        self.exportAction = act("Export…", "Ctrl+E", self.export_dialog,
                                "Export the view as PNG, SVG or raw tensors (NPZ)", menu, "exportButton")
        self.copyAction = act("Copy image", "Ctrl+Shift+C", self.copy_image,
                              "Copy the head grid as an image to the clipboard", menu, "copyButton")
        menu.addSeparator()
        self.openAction = act("Open…", "Ctrl+O", self.open_any_dialog,
                              "Open a .gguf model, a saved configuration (.json), exported maps (.npz), a picture or a "
                              "text file; drop any of them, or a model folder, onto the window", menu, "openButton")
        self._make_recent_menu(menu)
        self.saveAction = act("Save configuration…", "Ctrl+S", self.save_dialog,
                              "Save the configuration as JSON (the preset format)", menu, "saveButton")
        self.openTextAction = act("Open text file…", "Ctrl+Shift+O", self.open_text_dialog,
                                  "Put a text file (UTF-8) into the Text box: a long input for a trained toy or a "
                                  "pretrained model", menu)
        self.openTextAction.setObjectName("openTextAction")
        menu.addSeparator()
        self.loadWeightsAction = act("Load weights…", "Ctrl+Shift+W", lambda: self.load_file_dialog("weights"),
                                     "Load your own weights (a state_dict: .safetensors, .pt, .pth) into the "
                                     "seed module", menu)
        self.loadWeightsAction.setObjectName("loadWeightsAction")
        self.loadInputsAction = act("Load inputs…", "Ctrl+Shift+I", lambda: self.load_file_dialog("inputs"),
                                    "Load your own input tensors (.pt, .npz, .safetensors) named as the forward's "
                                    "arguments", menu)
        self.loadInputsAction.setObjectName("loadInputsAction")
        menu.addSeparator()
        act("Quit", "Ctrl+Q", self.close, "Close attnviz", menu)

    def _view_actions(self, menu: QMenu) -> None:
        act = self._action
        act("Weights", "Ctrl+1", lambda: self.viewCombo.setCurrentIndex(0), "Show softmax weights", menu)
        act("Scores", "Ctrl+2", lambda: self.viewCombo.setCurrentIndex(self.viewCombo.findData("scores")),
            "Show pre-softmax scores", menu)
        act("Mean tile", "M", lambda: self.meanCheck.toggle(), "Toggle the mean-over-heads tile", menu)
        act("Back to grid", "Esc", self._escape, "Leave the zoomed block or the large single-head view; while "
            "the model writes or a long forward runs, stop it", menu)
        self.resetAction = act("Reset parameters", "Ctrl+R", self.panel.resetButton.click,
                               "Reset every parameter to the defaults", menu)
        self.explain.add_actions(menu)
        menu.addSeparator()
        self.modelViewAction = self.modelDock.toggleViewAction()
        self.modelViewAction.setText("Model view")
        self.modelViewAction.setShortcut(QKeySequence("Ctrl+Shift+M"))
        self.modelViewAction.setToolTip("Every layer × head of a pretrained model as small tiles (Ctrl+Shift+M)")
        menu.addAction(self.modelViewAction)
        self.tensorAction = self.tensorDock.toggleViewAction()  # closed, the dock is remembered closed
        self.tensorAction.setText("Tensor view")
        self.tensorAction.setShortcut(QKeySequence("Ctrl+Shift+E"))
        self.tensorAction.setToolTip("One tensor of the shown batch item (input, Q, K, V, context, output) as a "
                                     "heatmap (Ctrl+Shift+E)")
        menu.addAction(self.tensorAction)
        self.stripAction = act("Predictions strip", "Ctrl+Shift+N", self._strip_toggled,
                               "The model's top-1 prediction at each position under the maps, coloured by the "
                               "target's probability", menu)
        self.stripAction.setCheckable(True)
        self.stripAction.setChecked(True)
        act("Next layer", "Ctrl+]", lambda: self._step_layer(1), "Show the next layer of the model", menu)
        act("Previous layer", "Ctrl+[", lambda: self._step_layer(-1), "Show the previous layer of the model", menu)
