"""attnviz.ui.window: the main window and what it is made of: menus and shortcuts, the parameter panel,
files opened and saved, settings remembered, the model chooser, the Export dialog, and the worker's signal
adapter with its lanes.

Imports: attnviz.ui.panels, attnviz.ui.maps and everything below the ui.
"""
