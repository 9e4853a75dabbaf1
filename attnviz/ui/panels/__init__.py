"""attnviz.ui.panels: the dock panels beside the maps: pipeline, statistics, token focus, predictions,
logit lens, head effects, circuits, logit attribution, patching, a vision model's picture, generation.

Imports: attnviz.ui.maps and everything below the ui; never attnviz.ui.window.
"""
