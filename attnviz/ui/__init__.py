"""attnviz.ui: the Qt widgets. `from attnviz.ui import MainWindow`."""

from .main_window import MainWindow

__all__ = ["MainWindow"]
