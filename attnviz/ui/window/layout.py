"""Where the window's docks go and how tall their area is.

The model view and every explaining panel share one tabbed area at the bottom (a panel opened is a tab
there, so opening more never takes more of the window's height), with the tensor view beside it. That area
takes what leaves the head grid its share of the window's height: GRID_SHARE by default, else the share the
user dragged the split to (remembered between launches). The split is kept as the window resizes and as docks
open and close: a dock never squeezes the maps into a strip. Where the docks are (floated, split, tabbed:
QMainWindow.saveState) is restored as it was left. A dock in a row of tabs has no title bar (its tab names it;
double-click or right-click the tab to float or close it): the bar took a line of the panels' height. Mixed into
MainWindow.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt, QTimer
from PySide6.QtWidgets import QApplication, QDockWidget, QMenu, QTabBar, QToolTip, QWidget

GRID_SHARE = 0.47  # the head grid's share of the window's height by default (the maps area is over half)
SHARE_RANGE = (0.25, 0.85)  # the shares a drag of the split may leave (a map stays readable, a dock usable)
TENSOR_SHARE = 0.3  # the tensor view's share of the bottom row's width
ABOUT = "about"  # a dock's property: what it shows, said in its tab's tooltip (the tab has its short title)
TAB_TIP = ("Click to show this panel; double-click to float it in its own window; right-click to float or close it "
           "(the View menu opens and closes every panel)")


class WindowLayout:
    """The bottom dock area of MainWindow (needs its model dock, explaining panels and head grid)."""

    _fitted = False  # the dock area sized for this window once (shown)
    grid_share = GRID_SHARE  # the head grid's share of the window's height that the docks leave it
    _fitting = False  # fit_docks is resizing the docks (not the user)

    def _keep_split(self) -> None:
        """The split follows the window's size and the docks that open or close (on the next loop pass, once)."""
        self._split_timer = QTimer(self)
        self._split_timer.setSingleShot(True)
        self._split_timer.setInterval(0)
        self._split_timer.timeout.connect(self.fit_docks)
        self._split_watch = SplitWatch(self)
        self.headGrid.installEventFilter(self._split_watch)

    def _grid_resized(self, dragged: bool) -> None:
        """The head grid resized. Under a held mouse button the user dragged the split: its share is kept from now
        on. Otherwise the window resized, a dock opened or closed, or a row above the maps came or went: the
        docks are sized again (on the next loop pass, once) so the grid has its share."""
        if self._fitting or not self._fitted or self.height() <= 0:
            return
        if dragged and self._bottom_docks() == self._docked:  # not a dock dragged out or in
            lo, hi = SHARE_RANGE
            self.grid_share = min(max(self.headGrid.height() / self.height(), lo), hi)
        elif abs(self.headGrid.height() - self.grid_share * self.height()) > 2:
            self._split_timer.start()

    _docked: list = []  # the bottom docks at the last fit

    def _bottom_docks(self) -> list[QDockWidget]:
        """The docks shown in the bottom area (not floating)."""
        return [d for d in self.findChildren(QDockWidget) if d.isVisible() and not d.isFloating()
                and self.dockWidgetArea(d) == Qt.BottomDockWidgetArea]

    def _make_tensor_dock(self, tensor: QWidget) -> None:
        self.tensorDock = QDockWidget("Tensor", self)
        self.tensorDock.setObjectName("tensorDock")
        self.tensorDock.setProperty(ABOUT, "Tensor: one tensor of the shown batch item")
        self.tensorDock.setWidget(tensor)
        self.addDockWidget(Qt.BottomDockWidgetArea, self.tensorDock)
        self.splitDockWidget(self.modelDock, self.tensorDock, Qt.Horizontal)
        self.tensorDock.visibilityChanged.connect(self._tensor_dock_visible)
        self._keep_split()

    def _tensor_dock_visible(self, visible: bool) -> None:
        if visible and self.result is not None:
            self.schedule()  # rendered for its size while it was hidden: again for the size it has now

    def tab_panel(self, dock: QDockWidget) -> None:
        """`dock` joins the model view's tabs (ExplainViews' panels)."""
        self.addDockWidget(Qt.BottomDockWidgetArea, dock)
        self.tabifyDockWidget(self.modelDock, dock)
        if hasattr(self, "_titles_timer"):  # a panel added after the window was built
            self._watch_title(dock)

    def _bare_tabs(self) -> None:
        """A dock shown in a row of tabs loses its title bar, and gets it back alone or floating (checked on the
        next loop pass after any dock moves, opens or closes)."""
        self._titles_timer = QTimer(self)
        self._titles_timer.setSingleShot(True)
        self._titles_timer.setInterval(0)
        self._titles_timer.timeout.connect(self.fit_titles)
        self._tab_menu = TabMenu(self)
        for dock in self.findChildren(QDockWidget):
            self._watch_title(dock)
        self.fit_titles()

    def _watch_title(self, dock: QDockWidget) -> None:
        for signal in (dock.visibilityChanged, dock.topLevelChanged, dock.dockLocationChanged):
            signal.connect(lambda *_: self._titles_timer.start())

    def _toolbar_beside_menus(self) -> None:
        """The toolbar's buttons at the right end of the menu bar, not on a row of their own (a row the panels
        need at 1280 x 800); where the menu bar is the system's (macOS), which shows no corner widget, a row."""
        bar = self.menuBar()
        if bar.isNativeMenuBar():
            return
        self.removeToolBar(self.toolBar)
        self.toolBar.setMovable(False)
        self.toolBar.setContentsMargins(0, 0, 0, 0)
        self.toolBar.setStyleSheet("QToolBar { border: 0px; padding: 0px; } QToolButton { padding: 0px 4px; }")
        bar.setCornerWidget(self.toolBar, Qt.TopRightCorner)
        self.toolBar.show()

    def fit_titles(self) -> None:
        """Title bars off for the docks in a row of tabs (their tab names them), on for the others."""
        for dock in self.findChildren(QDockWidget):
            tabbed = not dock.isFloating() and any(
                other.isVisible() and not other.isFloating() for other in self.tabifiedDockWidgets(dock))
            if tabbed != isinstance(dock.titleBarWidget(), BareTitle):
                dock.setTitleBarWidget(BareTitle() if tabbed else None)
        for bar in self.findChildren(QTabBar):
            if bar.parentWidget() is self:  # the dock area's tabs (a panel's own tab bars are deeper)
                bar.installEventFilter(self._tab_menu)  # its tooltip, double-click and right-click
                # whole names, scrolled with arrows where they do not fit: elided, a dozen tabs read "P…" "S…"
                bar.setElideMode(Qt.ElideNone)
                bar.setUsesScrollButtons(True)

    def fit_docks(self) -> None:
        """Size the bottom area so the head grid gets its share of the window's height (the docks' least
        heights permitting); at the first fit the bottom row splits TENSOR_SHARE to the tensor view."""
        self._fitting = True
        try:
            self.layout().activate()
            docks = self._bottom_docks()
            self._docked = docks
            if docks:
                bottom = docks[0]
                spare = self.headGrid.height() - int(self.grid_share * self.height())
                self.resizeDocks([bottom], [max(bottom.height() + spare, 1)], Qt.Vertical)
            if not self._fitted and self.modelDock.isVisible() and self.tensorDock.isVisible():
                row = self.modelDock.width() + self.tensorDock.width()
                tensor = int(TENSOR_SHARE * row)
                self.resizeDocks([self.modelDock, self.tensorDock], [row - tensor, tensor], Qt.Horizontal)
            self.layout().activate()
        finally:
            self._fitting = False
            self._fitted = True

    def showEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().showEvent(event)
        if not self._fitted:
            self.fit_docks()


class SplitWatch(QObject):
    """Tells the window when the head grid resizes under a held mouse button (a drag of the dock split)."""

    def __init__(self, window) -> None:
        super().__init__(window)
        self.window = window

    def eventFilter(self, watched, event) -> bool:  # noqa: N802 (Qt's name)
        if event.type() == QEvent.Resize:
            self.window._grid_resized(bool(QApplication.mouseButtons() & Qt.LeftButton))
        return False


class BareTitle(QWidget):
    """No title bar: the (empty) title bar widget of a dock that a tab names."""


class TabMenu(QObject):
    """On the dock area's tabs: a double-click floats that tab's panel; a right-click offers Float and Close."""

    def __init__(self, window) -> None:
        super().__init__(window)
        self.window = window

    def dock_at(self, bar: QTabBar, pos) -> QDockWidget | None:
        """The dock whose tab is at `pos` of `bar` (tabs are named by their docks' titles)."""
        i = bar.tabAt(pos)
        title = bar.tabText(i) if i >= 0 else None
        return next((d for d in self.window.findChildren(QDockWidget) if d.windowTitle() == title), None)

    def eventFilter(self, bar, event) -> bool:  # noqa: N802 (Qt's name)
        kind = event.type()
        if kind not in (QEvent.MouseButtonDblClick, QEvent.ContextMenu, QEvent.ToolTip):
            return False
        dock = self.dock_at(bar, event.position().toPoint() if kind == QEvent.MouseButtonDblClick else event.pos())
        if dock is None:
            return False
        if kind == QEvent.ToolTip:  # Qt's dock tabs show a tooltip only where a tab's text is cut: always here
            QToolTip.showText(event.globalPos(), f"{dock.property(ABOUT) or dock.windowTitle()}. {TAB_TIP}", bar)
        elif kind == QEvent.MouseButtonDblClick:
            dock.setFloating(True)
        else:
            self.menu(dock).exec(event.globalPos())
        return True

    def menu(self, dock: QDockWidget) -> QMenu:
        menu = QMenu(self.window)
        menu.setToolTipsVisible(True)
        float_ = menu.addAction("Float", lambda: dock.setFloating(True))
        float_.setToolTip("Show this panel in its own window (drag it back onto the window to dock it)")
        close = menu.addAction("Close", dock.close)
        close.setToolTip("Close this panel (the View menu opens it again)")
        return menu
