"""The "pretrained" variant: a model folder or a .gguf file of any family transformers runs, registered with
core's variant registry (core never imports attnviz.models)."""

from __future__ import annotations

from attnviz.core.runs.config import ConfigError
from attnviz.core.variants.registry import BACKED_FIELDS, VariantSpec, no_inputs, not_a_module, register


def load_pretrained(c, memory_budget: int | None):
    """The config's model (cached), as this run sees it: its stack, decoder text, chat switch or image."""
    from attnviz.models.loader import load_model

    model = load_model(c.model, memory_budget=memory_budget)
    if getattr(model, "reads_images", False):  # a vision or text-image model (vision.py)
        return model.view(c.stack, c.decoder_text, c.chat, image=c.image)
    if c.image.strip():
        raise ConfigError("image", c.image, f"{model.info.name} is a text model: it reads no image",
                          "clear the image, or choose a vision model (ViT, DeiT, DINOv2, CLIP, SigLIP)",
                          suggestions=("",))
    return model.view(c.stack, c.decoder_text, c.chat)


PRETRAINED = register(VariantSpec(
    id="pretrained",
    label="Pretrained model (folder or .gguf)",
    seed="a Hugging Face model folder or a .gguf file, of any family transformers runs",
    description="A trained transformer on your own text: every layer and head, with the tokens on the axes.",
    build=not_a_module,
    inputs=no_inputs,
    labels={"layer": "Layer", "model": "Model folder"},
    default_mask="none",
    load=load_pretrained,
    own_fields=BACKED_FIELDS,
))
