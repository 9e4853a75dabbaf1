"""An image file as a vision model reads it: Pillow opens it, the model's own image processor makes its pixels.

Every problem is a ConfigError on the `image` field (the CLI exits 2 with one line; the app keeps its view):
no file, not an image, a truncated file, an image the processor cannot handle.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from torch import Tensor

from attnviz.core.runs.config import ConfigError

FIX_FILE = "choose a PNG, JPEG or WebP file (Open… beside Image, or drop one onto the window)"
MAX_PIXELS = 50_000_000  # 50 MP: a large photo; a vision model reads a few hundred pixels a side



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
    from PIL import Image, ImageOps

    if not path.strip():
        raise ConfigError("image", path, "no image given: this model reads an image", FIX_FILE)
    file = Path(path).expanduser()
    if not file.is_file():
        raise ConfigError("image", path, "no such file" if not file.exists() else "not a regular file", FIX_FILE)
    try:
        with warnings.catch_warnings():  # Pillow's bomb warning: refused below in words (MAX_PIXELS is lower)
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(file) as im:
                _check_pixels(im, path)  # from the header, before a pixel is decoded
                im.load()
                return _rgb(ImageOps.exif_transpose(im))  # a phone's portrait photo stands as it was taken
    except ConfigError:
        raise
    except Image.DecompressionBombError as exc:
        raise ConfigError("image", path, f"too many pixels to read safely ({exc})", "use a smaller image") from exc
    except (OSError, ValueError, SyntaxError) as exc:  # UnidentifiedImageError is an OSError
        what = "truncated or damaged" if "truncated" in str(exc).lower() else "not an image Pillow can read"
        raise ConfigError("image", path, f"{what} ({str(exc).strip()[:100]})", FIX_FILE) from exc


def _check_pixels(im, path: str) -> None:
    width, height = im.size
    if width * height > MAX_PIXELS:
        raise ConfigError("image", path, f"{width} x {height} pixels ({width * height / 1e6:.0f} MP), over the "
                          f"{MAX_PIXELS / 1e6:.0f} MP attnviz reads (the model sees a few hundred pixels a side)",
                          "scale the image down first")


def _rgb(im):
    """RGB for the processor. 16-bit grey (a PNG of mode I;16 or I) is scaled to 8 bits: convert("RGB") would
    clip every value over 255, drawing nearly all of it white."""
    from PIL import Image

    if im.mode in ("I", "I;16", "I;16B", "I;16L", "I;16N"):
        grey = np.asarray(im, dtype=np.float64) / 257.0  # 0..65535 -> 0..255
        im = Image.fromarray(np.clip(np.rint(grey), 0, 255).astype(np.uint8), mode="L")
    return im.convert("RGB")


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
