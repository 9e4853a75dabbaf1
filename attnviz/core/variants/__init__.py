"""attnviz.core.variants.registry: the attention variants a user picks: the seed tutorials' modules, reproduced
(same constructor arguments, state_dict keys and numbers), differential attention, and the registry that
names each variant with its fields.

Imports: attnviz.core.kernel.kernel.
"""
