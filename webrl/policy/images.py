"""Screenshot geometry: Qwen's `smart_resize` and the visual-token count of an image.

Notation: (H, W) screenshot pixels; (H', W') the smart-resized size the vision tower sees;
factor = patch size x spatial merge (28 for Qwen2.5-VL, 32 for Qwen3-VL).

Screenshots stay compressed (`webrl.types.Image`, PNG bytes) until the processor needs pixels;
the geometry below only reads the PNG header.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

FAMILY_FACTOR = {"qwen2.5-vl": 28, "qwen3-vl": 32}


def smart_resize(height: int, width: int, factor: int = 28, min_pixels: int = 56 * 56,
                 max_pixels: int = 28 * 28 * 1280) -> tuple[int, int]:
    """(H', W'): each side a multiple of `factor`, H'W' within [min_pixels, max_pixels], aspect kept.

    Round each side to the nearest multiple of factor; if the area is above max_pixels, scale
    both sides by 1/beta with beta = sqrt(HW / max_pixels) and floor to the factor; if below
    min_pixels, scale by beta = sqrt(min_pixels / HW) and ceil. Same rule as Qwen's processors
    (checked against transformers' in tests), restated here so the policy can map coordinates
    and count tokens without loading pixels.
    """
    if height < 1 or width < 1:
        raise ValueError(f"image size must be positive, got {height}x{width}")
    if max(height, width) / min(height, width) > 200:
        raise ValueError(f"aspect ratio above 200: {height}x{width}")
    h = round(height / factor) * factor
    w = round(width / factor) * factor
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h = max(factor, math.floor(height / beta / factor) * factor)
        w = max(factor, math.floor(width / beta / factor) * factor)
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h = math.ceil(height * beta / factor) * factor
        w = math.ceil(width * beta / factor) * factor
    return h, w


@dataclass(frozen=True)
class ImageGeometry:
    """A screenshot's size and the size the model sees it at. Maps points between the two."""

    width: int
    height: int
    resized_width: int
    resized_height: int

    @classmethod
    def of(cls, width: int, height: int, factor: int, min_pixels: int, max_pixels: int) -> "ImageGeometry":
        rh, rw = smart_resize(height, width, factor, min_pixels, max_pixels)
        return cls(width, height, rw, rh)

    def to_model(self, x: float, y: float, space: str) -> tuple[int, int]:
        """Screenshot pixels -> integer model coordinates ("resized" pixels or "normalized_1000")."""
        sx, sy = self._scale(space)
        return round(x * sx / self.width), round(y * sy / self.height)

    def to_screen(self, x: float, y: float, space: str) -> tuple[float, float]:
        """Model coordinates -> screenshot pixels (floats; the env rounds when it clicks)."""
        sx, sy = self._scale(space)
        return x * self.width / sx, y * self.height / sy

    def model_extent(self, space: str) -> tuple[int, int]:
        """Largest valid model (x, y) in `space`."""
        return self._scale(space)

    def _scale(self, space: str) -> tuple[int, int]:
        if space == "resized":
            return self.resized_width, self.resized_height
        if space == "normalized_1000":
            return 1000, 1000
        raise ValueError(f"coordinate space must be 'resized' or 'normalized_1000', got {space!r}")


def image_token_count(width: int, height: int, factor: int, min_pixels: int, max_pixels: int) -> int:
    """Merged visual tokens for one image: (H' / factor) * (W' / factor)."""
    rh, rw = smart_resize(height, width, factor, min_pixels, max_pixels)
    return (rh // factor) * (rw // factor)


def image_grid(width: int, height: int, patch: int, merge: int, min_pixels: int, max_pixels: int) -> list[int]:
    """[t, h, w] patch grid of one image (the processor's `image_grid_thw` row): the smart_resized
    sides over the patch size, t = 1 for a still image."""
    rh, rw = smart_resize(height, width, patch * merge, min_pixels, max_pixels)
    return [1, rh // patch, rw // patch]
