"""attnviz.ui: the Qt widgets. `from attnviz.ui import MainWindow`."""

from attnviz.ui.window.main_window import MainWindow

__all__ = ["MainWindow"]
