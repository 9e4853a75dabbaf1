"""attnviz.ui.window: the main window and what it is made of: menus and shortcuts, the parameter panel,
files opened and saved, settings remembered, the model chooser, the Export dialog, and the adapters that put
the session (attnviz.session) on Qt: the worker's signals and the delivery's timers.

Imports: attnviz.ui.panels, attnviz.ui.maps and everything below the ui.
"""
