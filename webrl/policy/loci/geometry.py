"""Box and crop arithmetic of LOCI (Locator–Critic evidence search); pure functions.

Notation:
  (W, H)    full-resolution image (screenshot) size in pixels; x to the right, y down,
            origin at the top-left corner of the top-left pixel.
  box       (x0, y0, x1, y1) with x0 < x1, y0 < y1; half-open pixel ranges [x0, x1) x [y0, y1).
            A clamped crop box has integer corners with 0 <= x0 < x1 <= W, 0 <= y0 < y1 <= H.
  (w', h')  size of a crop after `smart_resize` (what the Locator/Critic/answerer see).
  space     coordinates a role writes boxes in: "normalized_1000" (0..1000 on both axes, Qwen3-VL
            style) or "pixels" (full-image pixels).

A point (u, v) inside an upscaled crop maps back to the full image as
    x = x0 + u * (x1 - x0) / w',   y = y0 + v * (y1 - y0) / h'
and `full_to_crop` is its exact inverse, so round trips are exact up to float rounding.

Composite: the wrapped policy takes one screenshot per step (PolicyRequest is unchanged), so
accepted crops are shown to it in a side panel to the right of the original screenshot:
canvas (W + P, H) with P = panel width; crop i sits in cell i of a vertical stack of n cells of
height H // n, scaled by s_i = min(P / cw_i, (H // n) / ch_i) (up or down) and centred. The
original stays at scale 1 in [0, W) x [0, H), so its points are unchanged; a point on a tile
maps through that tile's crop; a point on the panel's empty background is clamped to the
original's right edge (documented choice: it names no evidence).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

from webrl.policy.images import smart_resize

BOX_SPACES = ("normalized_1000", "pixels")

Box = tuple[float, float, float, float]
IntBox = tuple[int, int, int, int]


def box_to_pixels(box: Sequence[float], width: int, height: int, space: str) -> Box:
    """A role's box in `space` -> full-image pixels (floats, not clamped)."""
    if space not in BOX_SPACES:
        raise ValueError(f"box space must be one of {BOX_SPACES}, got {space!r}")
    x0, y0, x1, y1 = (float(v) for v in box)
    if space == "normalized_1000":
        return x0 * width / 1000, y0 * height / 1000, x1 * width / 1000, y1 * height / 1000
    return x0, y0, x1, y1


def clamp_box(box: Sequence[float], width: int, height: int, min_side: int = 1) -> Optional[IntBox]:
    """Integer crop box covering `box` (corners sorted, floor/ceil), clipped to the image.

    None when the clipped box is narrower or shorter than `min_side` pixels (e.g. fully outside).
    Example: (-5.5, 10.2, 30.1, 20) on 25x15 -> (0, 10, 25, 15).
    """
    x0, x1 = sorted((float(box[0]), float(box[2])))
    y0, y1 = sorted((float(box[1]), float(box[3])))
    ix0, iy0 = max(0, math.floor(x0)), max(0, math.floor(y0))
    ix1, iy1 = min(width, math.ceil(x1)), min(height, math.ceil(y1))
    if ix1 - ix0 < min_side or iy1 - iy0 < min_side:
        return None
    return ix0, iy0, ix1, iy1


def upscaled_size(box: IntBox, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """(w', h') a crop is shown at: Qwen's smart_resize of its (h, w), so small crops get bigger."""
    x0, y0, x1, y1 = box
    h, w = smart_resize(y1 - y0, x1 - x0, factor, min_pixels, max_pixels)
    return w, h


def crop_to_full(point: tuple[float, float], box: IntBox, crop_size: tuple[int, int]) -> tuple[float, float]:
    """A point in the (w', h') upscaled crop -> full-image pixels."""
    (u, v), (x0, y0, x1, y1), (cw, ch) = point, box, crop_size
    return x0 + u * (x1 - x0) / cw, y0 + v * (y1 - y0) / ch


def full_to_crop(point: tuple[float, float], box: IntBox, crop_size: tuple[int, int]) -> tuple[float, float]:
    """Inverse of `crop_to_full`."""
    (x, y), (x0, y0, x1, y1), (cw, ch) = point, box, crop_size
    return (x - x0) * cw / (x1 - x0), (y - y0) * ch / (y1 - y0)


def crop_box_to_full(inner: Sequence[float], box: IntBox, crop_size: tuple[int, int]) -> Box:
    """A box given inside the upscaled crop -> full-image pixels (both corners mapped)."""
    a = crop_to_full((inner[0], inner[1]), box, crop_size)
    b = crop_to_full((inner[2], inner[3]), box, crop_size)
    return a[0], a[1], b[0], b[1]


def crop_image(image, box: IntBox, size: Optional[tuple[int, int]] = None):
    """PIL crop of the full-resolution `image`, resized to `size` = (w', h') when given (bicubic)."""
    from PIL import Image as PILImage

    out = image.crop(box)
    return out.resize(size, PILImage.BICUBIC) if size is not None and size != out.size else out


@dataclass(frozen=True)
class Tile:
    """Where one crop sits on the composite: offset (ox, oy), scale s, drawn size, source crop box."""

    ox: int
    oy: int
    scale: float
    width: int
    height: int
    box: IntBox

    def contains(self, x: float, y: float) -> bool:
        return self.ox <= x < self.ox + self.width and self.oy <= y < self.oy + self.height


@dataclass(frozen=True)
class CompositeLayout:
    """Composite canvas (W + panel_width, H): original at (0, 0), tiles in the side panel."""

    width: int
    height: int
    panel_width: int
    tiles: tuple[Tile, ...]

    @property
    def canvas_size(self) -> tuple[int, int]:
        return self.width + self.panel_width, self.height

    def to_full(self, x: float, y: float) -> tuple[float, float]:
        """A composite point -> full-image pixels (see the module docstring)."""
        if x < self.width:
            return x, y
        for t in self.tiles:
            if t.contains(x, y):
                return crop_to_full((x - t.ox, y - t.oy), t.box, (t.width, t.height))
        return float(self.width - 1), min(max(y, 0.0), float(self.height - 1))


def composite_layout(width: int, height: int, boxes: Sequence[IntBox], panel_fraction: float = 0.5) -> CompositeLayout:
    """Layout for `boxes` stacked in a panel of width max(1, round(W * panel_fraction)).

    Example: W, H = 200, 100, one 50x25 box, fraction 0.5 -> panel 100, cell 100x100,
    s = min(100/50, 100/25) = 2, drawn 100x50 at (200, 25).
    """
    panel = max(1, round(width * panel_fraction))
    n = max(1, len(boxes))
    cell_h = max(1, height // n)
    tiles = []
    for i, b in enumerate(boxes):
        cw, ch = b[2] - b[0], b[3] - b[1]
        s = min(panel / cw, cell_h / ch)
        dw, dh = max(1, round(cw * s)), max(1, round(ch * s))
        tiles.append(Tile(width + (panel - dw) // 2, i * cell_h + (cell_h - dh) // 2, s, dw, dh, b))
    return CompositeLayout(width, height, panel, tuple(tiles))


def render_composite(image, layout: CompositeLayout, background=(255, 255, 255)):
    """PIL composite: the original and each tile's crop (cut from the full-resolution image)."""
    from PIL import Image as PILImage

    canvas = PILImage.new("RGB", layout.canvas_size, background)
    canvas.paste(image.convert("RGB"), (0, 0))
    for t in layout.tiles:
        canvas.paste(crop_image(image, t.box, (t.width, t.height)), (t.ox, t.oy))
    return canvas
