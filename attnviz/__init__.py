"""attnviz: see attention. A Qt desktop app over a traced, pure-PyTorch attention engine."""

__version__ = "0.1.0"

# The model-backed variants: modules that add their specs to core's registry, loaded the first time the
# registry is read (core imports neither package; `import attnviz` imports nothing heavy). In this order,
# after the seed variants: the Variant box's order (maps opened from a file last).
VARIANT_MODULES = ("attnviz.models.variant", "attnviz.toys.variant", "attnviz.core.saved")
