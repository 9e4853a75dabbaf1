"""attnviz: see attention. A Qt desktop app over a traced, pure-PyTorch attention engine."""

__version__ = "0.1.0"

# The model-backed variants: modules that add their specs to core's registry, loaded the first time the
# registry is read (core imports neither package; `import attnviz` imports nothing heavy). In this order,
# after the seed variants: the Variant box's order (maps opened from a file last).
VARIANT_MODULES = ("attnviz.models.variant", "attnviz.toys.variant", "attnviz.core.runs.saved")

# From a notebook or a script (attnviz/notebook.py, loaded on first use: `import attnviz` stays light):
# show(attention, tokens) opens the window on attention you already have; save() writes its figure or .npz;
# attention_maps() gives it as (layers, heads, q, k); bertviz's head_view and model_view.
_NOTEBOOK = ("show", "save", "attention_maps", "head_view", "model_view")


def __getattr__(name: str):
    if name in _NOTEBOOK:
        from attnviz import notebook

        return getattr(notebook, name)
    raise AttributeError(f"module 'attnviz' has no attribute {name!r}")

