"""Vision transformers from local folders: every layer against transformers' eager attention on a drawn picture,
the patch overlay and rollout over the image, bad inputs as one line (CLI exit 2)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tiny_vision import VISION_BUILDERS, draw_picture

from attnviz.cli import main
from attnviz.core import RunConfig, run
from attnviz.core.analysis.stats import rollout
from attnviz.core.runs.config import ConfigError
from attnviz.export.patches import export_patch
from attnviz.models.patches import patch_frames

TEXT = "the cat sat on the mat"


@pytest.fixture(scope="session")
def vision_models(tmp_path_factory):
    """kind -> folder (built once per session), and the test picture."""
    pytest.importorskip("transformers")
    pytest.importorskip("PIL")
    root = tmp_path_factory.mktemp("tiny-vision")
    built = {}

    def get(kind: str):
        if kind not in built:
            folder = root / kind
            folder.mkdir()
            VISION_BUILDERS[kind](folder)
            built[kind] = folder
        return built[kind]
    get.picture = draw_picture(root / "shapes.png")
    return get


def _eager(folder, picture, text: str = ""):
    """transformers' own eager attention with output_attentions (and its own image processor)."""
    from PIL import Image
    from transformers import AutoImageProcessor, AutoModel

    model = AutoModel.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()
    pixels = AutoImageProcessor.from_pretrained(folder)(images=Image.open(picture).convert("RGB"),
                                                        return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        if not hasattr(model, "text_model"):
            return model(pixel_values=pixels, output_attentions=True).attentions, None
        vision = model.vision_model(pixel_values=pixels, output_attentions=True).attentions
        if not text:
            return vision, None
        from tokenizers import Tokenizer

        ids = Tokenizer.from_file(str(folder / "tokenizer.json")).encode(text).ids
        return vision, model.text_model(input_ids=torch.tensor([ids]), output_attentions=True).attentions


def _config(folder, picture, **kw) -> RunConfig:
    return RunConfig(variant="pretrained", model=str(folder), image=str(picture), **kw)


def _assert_layers(result, reference) -> None:
    lw = result.layer_weights
    assert lw.shape[0] == len(reference)
    for layer, ref in enumerate(reference):
        np.testing.assert_allclose(lw[layer], ref.numpy(), atol=1e-4, rtol=0, err_msg=f"layer {layer}")
    assert float(lw[-1].std()) > 0.01  # not uniform: the comparison could miss nothing


@pytest.mark.parametrize("kind, prefix", [("vit", ["[CLS]"]), ("dinov2_registers", ["[CLS]", "reg0", "reg1", "reg2",
                                                                                     "reg3"])])
def test_every_layer_matches_transformers_eager(vision_models, kind, prefix):
    folder = vision_models(kind)
    result = run(_config(folder, vision_models.picture))
    reference, _ = _eager(folder, vision_models.picture)
    _assert_layers(result, reference)
    assert list(result.tokens[:len(prefix)]) == prefix
    assert result.tokens[len(prefix):len(prefix) + 5] == ("r0c0", "r0c1", "r0c2", "r0c3", "r1c0")
    assert len(result.tokens) == len(prefix) + 16  # 32 px / patch 8 = a 4 x 4 grid
    assert result.source.picture.pixels.shape == (32, 32, 3)


def test_clip_towers_each_their_own_stack(vision_models):
    folder = vision_models("clip")
    vision_ref, text_ref = _eager(folder, vision_models.picture, TEXT)
    shown = run(_config(folder, vision_models.picture, text=TEXT))  # vision first where an image is given
    assert shown.source.stack == "vision" and shown.tokens[0] == "[CLS]"
    _assert_layers(shown, vision_ref)
    blocks = {name: lw for name, lw, _ in shown.source.blocks()}
    np.testing.assert_allclose(blocks["text"], np.stack([t.numpy() for t in text_ref]), atol=1e-4, rtol=0)
    text = run(_config(folder, vision_models.picture, text=TEXT, stack="text"))
    _assert_layers(text, text_ref)
    assert text.source.stack == "text" and len(text.tokens) == text_ref[0].shape[-1]
    alone = run(_config(folder, "", text=TEXT))  # no image: the text tower alone
    _assert_layers(alone, text_ref)


def test_patch_overlay_is_the_query_row_on_the_grid(vision_models):
    result = run(_config(vision_models("dinov2_registers"), vision_models.picture, layer=1))
    w = result.stages["weights"][0]  # (H, L, L)
    frames = patch_frames(result)  # [CLS] by default
    assert frames.query == 0 and frames.prefix == 5 and frames.grid == (4, 4)
    np.testing.assert_allclose(frames.heads, w[:, 0, 5:].reshape(-1, 4, 4), atol=1e-6)
    query = result.tokens.index("r2c1")
    frames = patch_frames(result, query)
    np.testing.assert_allclose(frames.values("head", 3), w[3, query, 5:].reshape(4, 4), atol=1e-6)
    np.testing.assert_allclose(frames.values("mean"), w[:, query, 5:].mean(0).reshape(4, 4), atol=1e-6)
    rolled = rollout(result.layer_weights)[0]
    np.testing.assert_allclose(frames.values("rollout"), rolled[query, 5:].reshape(4, 4), atol=1e-6)


def test_patch_exports(vision_models, tmp_path):
    from PIL import Image

    frames = patch_frames(run(_config(vision_models("vit"), vision_models.picture)))
    png = export_patch(frames, tmp_path / "p.png", "mean")
    image = np.asarray(Image.open(png))
    assert image.shape == (448, 448, 3)
    block = image[:112, :112].reshape(-1, 3)  # one patch of 8 px enlarged 14 times: one colour over one pixel each
    assert len(np.unique(block, axis=0)) <= 64
    svg = export_patch(frames, tmp_path / "p.svg", "rollout").read_text()
    assert svg.count("<rect") == 16 and "data:image/png;base64," in svg and "r3c3" in svg


def test_image_formats(vision_models, tmp_path):
    folder = vision_models("vit")
    for fmt, suffix in (("JPEG", ".jpg"), ("WEBP", ".webp")):
        picture = draw_picture(tmp_path / f"shapes{suffix}", fmt=fmt)
        assert run(_config(folder, picture)).layer_weights.shape == (2, 1, 4, 17, 17)


def _fails(config: RunConfig, field: str, words: str, tmp_path, capsys) -> None:
    with pytest.raises(ConfigError, match=words) as info:
        run(config)
    assert info.value.field == field
    out = tmp_path / "never.png"
    argv = ["render", "--model", config.model, "--text", config.text, "-o", str(out)]
    argv += ["--image", config.image] if config.image else []
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and field in err, err
    assert not out.exists()


def test_bad_images(vision_models, tmp_path, capsys):
    folder = vision_models("vit")
    not_image = tmp_path / "notes.png"
    not_image.write_text("this is text, not a picture")
    _fails(_config(folder, not_image), "image", "not an image", tmp_path, capsys)
    whole = draw_picture(tmp_path / "whole.png", (200, 150)).read_bytes()
    (tmp_path / "cut.png").write_bytes(whole[: len(whole) // 2])
    _fails(_config(folder, tmp_path / "cut.png"), "image", "truncated|not an image", tmp_path, capsys)
    _fails(_config(folder, tmp_path / "nowhere.png"), "image", "no such file", tmp_path, capsys)
    _fails(_config(folder, ""), "image", "no image given", tmp_path, capsys)
    with pytest.raises(ConfigError, match="unknown kind of image"):
        _config(folder, tmp_path / "x.gif")


def test_text_for_a_vision_only_model(vision_models, tmp_path, capsys):
    _fails(_config(vision_models("vit"), vision_models.picture, text=TEXT), "text", "reads an image", tmp_path,
           capsys)


def test_image_for_a_text_model(tiny_models, vision_models, tmp_path, capsys):
    _fails(_config(tiny_models("bert"), vision_models.picture, text=TEXT), "image", "reads no image", tmp_path,
           capsys)


def test_image_the_processor_cannot_handle(vision_models, tmp_path, capsys):
    """A processor that resizes the shortest edge without cropping gives a wide picture pixels the model's
    position embeddings do not fit: refused at the image, naming both sizes."""
    import json
    import shutil

    folder = tmp_path / "clip-uncropped"
    shutil.copytree(vision_models("clip"), folder)
    settings = json.loads((folder / "preprocessor_config.json").read_text())
    (folder / "preprocessor_config.json").write_text(json.dumps({**settings, "do_center_crop": False}))
    square = draw_picture(tmp_path / "square.png", (40, 40))
    assert run(_config(folder, square)).layer_weights.shape[-1] == 17
    _fails(_config(folder, vision_models.picture), "image", "processor gives 43x32 pixels", tmp_path, capsys)
