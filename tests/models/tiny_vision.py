"""Tiny random vision checkpoints written with transformers (test-only), each with its image processor saved
beside it, and a test picture drawn with Pillow."""

from __future__ import annotations

from pathlib import Path

COMMON = dict(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
              intermediate_size=48, initializer_range=0.3)


def draw_picture(path, size: tuple[int, int] = (60, 44), fmt: str | None = None) -> Path:
    """Shapes on a blue ground (wider than tall, so the processor resizes and crops)."""
    from PIL import Image, ImageDraw

    im = Image.new("RGB", size, (30, 60, 200))
    d = ImageDraw.Draw(im)
    w, h = size
    d.ellipse((w // 12, h // 9, w // 2, h * 2 // 3), fill=(250, 220, 10))
    d.rectangle((w * 7 // 12, h // 4, w * 11 // 12, h * 9 // 10), fill=(200, 20, 20))
    d.line((0, h - 1, w - 1, 0), fill=(255, 255, 255), width=max(1, w // 30))
    im.save(path, format=fmt)
    return Path(path)


def _wide(model) -> None:
    """Random biases and norm gains, so a dropped one would show."""
    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.normal_(1.0 if "norm" in name and name.endswith("weight") else 0.0, 0.3)


def make_vit(folder) -> None:
    import torch
    import transformers as tf

    torch.manual_seed(0)
    model = tf.ViTModel(tf.ViTConfig(**COMMON))
    _wide(model)
    model.save_pretrained(folder)
    tf.ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)


def make_dinov2_registers(folder) -> None:
    import torch
    import transformers as tf

    torch.manual_seed(1)
    model = tf.Dinov2WithRegistersModel(tf.Dinov2WithRegistersConfig(**COMMON, num_register_tokens=4))
    _wide(model)
    model.save_pretrained(folder)
    tf.BitImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(folder)


def make_clip(folder) -> None:
    import torch
    import transformers as tf
    from tiny import bytelevel_tokenizer

    tok = bytelevel_tokenizer(bos="<s>")
    text = dict(vocab_size=tok.get_vocab_size(), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=48, max_position_embeddings=32, initializer_range=0.3, bos_token_id=1,
                eos_token_id=0, pad_token_id=0)
    torch.manual_seed(2)
    model = tf.CLIPModel(tf.CLIPConfig(text_config=text, vision_config=COMMON, projection_dim=16))
    _wide(model)
    model.save_pretrained(folder)
    tok.save(str(Path(folder) / "tokenizer.json"))
    tf.CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(folder)


VISION_BUILDERS = {"vit": make_vit, "dinov2_registers": make_dinov2_registers, "clip": make_clip}
