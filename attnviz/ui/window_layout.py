"""Where the window's docks go and how tall their area is.

The model view and every explaining panel share one tabbed area at the bottom (a panel opened is a tab
there, so opening more never takes more of the window's height), with the tensor view beside it. At a first
launch that area takes what leaves the head grid GRID_SHARE of the window's height; after that the user's
own arrangement (floated, split, resized: QMainWindow.saveState) is restored as it was left.
Mixed into MainWindow.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDockWidget, QWidget

GRID_SHARE = 0.47  # the head grid's share of the window's height at a first launch (at least 45% kept)
TENSOR_SHARE = 0.3  # the tensor view's share of the bottom row's width


class WindowLayout:
    """The bottom dock area of MainWindow (needs its model dock, explaining panels and head grid)."""

    _fitted = False  # the dock area sized for this window (once: then it is the user's)

    def _make_tensor_dock(self, tensor: QWidget) -> None:
        self.tensorDock = QDockWidget("Tensor: one tensor of the shown batch item", self)
        self.tensorDock.setObjectName("tensorDock")
        self.tensorDock.setWidget(tensor)
        self.addDockWidget(Qt.BottomDockWidgetArea, self.tensorDock)
        self.splitDockWidget(self.modelDock, self.tensorDock, Qt.Horizontal)
        self.tensorDock.visibilityChanged.connect(self._tensor_dock_visible)

    def _tensor_dock_visible(self, visible: bool) -> None:
        if visible and self.result is not None:
            self.schedule()  # rendered for its size while it was hidden: again for the size it has now

    def tab_panel(self, dock: QDockWidget) -> None:
        """`dock` joins the model view's tabs (ExplainViews' panels)."""
        self.addDockWidget(Qt.BottomDockWidgetArea, dock)
        self.tabifyDockWidget(self.modelDock, dock)

    def fit_docks(self) -> None:
        """Size the bottom area so the head grid gets GRID_SHARE of the window's height (the tensor view's
        least height permitting) and the bottom row splits TENSOR_SHARE to the tensor view."""
        self._fitted = True
        self.layout().activate()
        bottom = next((d for d in (self.modelDock, self.tensorDock) if d.isVisible() and not d.isFloating()), None)
        if bottom is None:
            return
        spare = self.headGrid.height() - int(GRID_SHARE * self.height())
        self.resizeDocks([bottom], [max(bottom.height() + spare, 1)], Qt.Vertical)
        if self.modelDock.isVisible() and self.tensorDock.isVisible():
            row = self.modelDock.width() + self.tensorDock.width()
            tensor = int(TENSOR_SHARE * row)
            self.resizeDocks([self.modelDock, self.tensorDock], [row - tensor, tensor], Qt.Horizontal)
        self.layout().activate()

    def showEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().showEvent(event)
        if not self._fitted:
            self.fit_docks()
