"""attnviz.ui.maps: drawing attention maps: the head grid and its mosaic, heat map items, token labels,
square single maps, zoom to exact, compare, the model view of every layer x head, and the captions.

Imports: everything below the ui; never attnviz.ui.panels or attnviz.ui.window.
"""
