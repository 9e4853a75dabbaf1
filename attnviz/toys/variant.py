"""The trained toys as model-backed variants, registered with core's variant registry (core never imports
attnviz.toys)."""

from __future__ import annotations

from attnviz.core.variants.registry import TOY_FIELDS, VariantSpec, no_inputs, not_a_module, register
from attnviz.toys.specs import TOYS


def _load_toy(name: str):
    def load(c, memory_budget: int | None):
        from attnviz.toys import ToyBacked, load_toy

        return ToyBacked(load_toy(name))
    return load


def _toy_spec(toy) -> VariantSpec:
    return VariantSpec(
        id=toy.name, label=f"Trained toy: {toy.task}", seed=f"{toy.name}, trained by attnviz",
        description=toy.description, build=not_a_module, inputs=no_inputs,
        labels={"text": f"Input ({toy.vocabulary[0]}..{toy.vocabulary[-1]})", "layer": "Layer"},
        load=_load_toy(toy.name), own_fields=TOY_FIELDS,
        defaults={"text": toy.default_text, "layer": toy.focus_layer}, caption=toy.caption)


TOY_VARIANTS = tuple(register(_toy_spec(toy)) for toy in TOYS.values())
