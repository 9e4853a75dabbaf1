"""attnviz.ui.widgets: small widgets every part of the window uses: a widget named in one call, combo items
with tooltips, the file choosers and the drop filter, and a one-shot background job.

Imports: Qt and everything below the ui; nothing else of attnviz.ui.
"""
