"""attnviz.core.runs: config -> result. The frozen RunConfig and its JSON form, presets, the runner (seeding,
device, memory check, the traced forward), model-backed runs, generation, the predictions a forward yields,
user files, saved maps, and the RunResult.

Imports: attnviz.core.kernel.kernel, attnviz.core.variants.registry, attnviz.system, attnviz.style.
"""
