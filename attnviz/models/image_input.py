"""An image file as a vision model reads it: Pillow opens it, the model's own image processor makes its pixels.

Every problem is a ConfigError on the `image` field (the CLI exits 2 with one line; the app keeps its view):
no file, not an image, a truncated file, an image the processor cannot handle.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from torch import Tensor

from ..core.config import ConfigError

FIX_FILE = "choose a PNG, JPEG or WebP file (Open… beside Image, or drop one onto the window)"



@dataclass(frozen=True)
class Picture:
    """The image as the model saw it (after resize, crop; before normalisation) and how its tokens tile it."""

    pixels: np.ndarray  # (H, W, 3) uint8
    grid: tuple[int, int]  # patch rows, patch columns
    prefix: tuple[str, ...]  # the tokens before the patches: [CLS], [DIST], reg0 ...
    source: str = ""  # the file read

    @property
    def tokens(self) -> tuple[str, ...]:
        rows, cols = self.grid
        return self.prefix + tuple(f"r{r}c{c}" for r in range(rows) for c in range(cols))


def read_image(path: str):
    """The file as an RGB Pillow image, fully decoded (a truncated file fails here, not later)."""
    from PIL import Image

    if not path.strip():
        raise ConfigError("image", path, "no image given: this model reads an image", FIX_FILE)
    file = Path(path).expanduser()
    if not file.is_file():
        raise ConfigError("image", path, "no such file" if not file.exists() else "not a regular file", FIX_FILE)
    try:
        with Image.open(file) as im:
            im.load()
            return im.convert("RGB")
    except Image.DecompressionBombError as exc:
        raise ConfigError("image", path, f"too many pixels to read safely ({exc})", "use a smaller image") from exc
    except (OSError, ValueError, SyntaxError) as exc:  # UnidentifiedImageError is an OSError
        what = "truncated or damaged" if "truncated" in str(exc).lower() else "not an image Pillow can read"
        raise ConfigError("image", path, f"{what} ({str(exc).strip()[:100]})", FIX_FILE) from exc


def process(processor, image, path: str) -> Tensor:
    """pixel_values (1, 3, H, W) from the model's image processor (resize, crop, normalise)."""
    try:
        pixels = processor(images=image, return_tensors="pt")["pixel_values"]
    except Exception as exc:  # noqa: BLE001 - a degenerate size, a mode the processor refuses
        raise ConfigError("image", path, f"the model's image processor cannot handle this image "
                          f"({image.width}x{image.height}: {type(exc).__name__}: {str(exc).strip()[:100]})",
                          "use an ordinary photo-sized image (tens of pixels or more each side)") from exc
    if pixels.ndim != 4 or pixels.shape[0] != 1 or pixels.shape[1] != 3:
        raise ConfigError("image", path, f"the image processor gives pixels of shape {tuple(pixels.shape)}",
                          "use the preprocessor_config.json saved with the model")
    return pixels.float()


def seen_pixels(processor, pixels: Tensor) -> np.ndarray:
    """pixel_values back to the picture the model saw: (H, W, 3) uint8, normalisation and rescaling undone."""
    x = pixels[0].permute(1, 2, 0).double().cpu().numpy()
    if getattr(processor, "do_normalize", False):
        mean = np.asarray(processor.image_mean, dtype=np.float64).reshape(1, 1, -1)
        std = np.asarray(processor.image_std, dtype=np.float64).reshape(1, 1, -1)
        x = x * std + mean
    if getattr(processor, "do_rescale", False):
        x = x / float(processor.rescale_factor)
    return np.clip(np.rint(x), 0, 255).astype(np.uint8)


def picture_of(processor, pixels: Tensor, grid: tuple[int, int], prefix: tuple[str, ...], source: str):
    return Picture(seen_pixels(processor, pixels), grid, prefix, source)
