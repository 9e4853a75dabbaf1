"""Data shipped with attnviz (installed as the package attnviz.resources): presets, icons."""
