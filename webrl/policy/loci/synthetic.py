"""Synthetic V*-style high-resolution questions for LOCI: small text in a large cluttered image.

Each item: a (W, H) canvas (default 1600 x 1200) of random clutter (rectangles, ellipses, lines,
distractor words), several small coloured boxes each holding a short word, one of them in a
colour no other box has. Question: "What word is written inside the small <colour> box?";
answer: that box's word (5 capital letters); `target_box` is the box in image pixels (for
oracle roles and for scoring the Locator). Text is Pillow's default font at `font_size` pixels,
so after a whole-image smart_resize to a ~1 MP budget it is a few pixels high (hard), while a
LOCI crop enlarged by smart_resize makes it legible. Deterministic in the seed.
"""
from __future__ import annotations

import random
import re
import string
from dataclasses import dataclass

from webrl.types import Image

COLOURS = {"red": (220, 30, 30), "green": (20, 160, 40), "blue": (30, 60, 220), "orange": (245, 140, 0),
           "purple": (140, 40, 180), "cyan": (0, 170, 190)}


@dataclass(frozen=True)
class VqaItem:
    """One synthetic question; `target_box` = (x0, y0, x1, y1) pixels of the answer's box."""

    image: Image
    question: str
    answer: str
    target_box: tuple[int, int, int, int]


@dataclass
class SyntheticVqaConfig:
    """Size and clutter of the synthetic images."""

    width: int = 1600
    """Image width in pixels."""
    height: int = 1200
    """Image height in pixels."""
    boxes: int = 4
    """Coloured word boxes (one target, the rest distractors in other colours), 1..len(COLOURS)."""
    clutter: int = 120
    """Random shapes and distractor words drawn first."""
    font_size: int = 12
    """Text height in pixels."""

    def __post_init__(self) -> None:
        if not 1 <= self.boxes <= len(COLOURS):
            raise ValueError(f"SyntheticVqaConfig.boxes must be in 1..{len(COLOURS)}, got {self.boxes}")
        if self.width < 200 or self.height < 200 or self.font_size < 6 or self.clutter < 0:
            raise ValueError("SyntheticVqaConfig: width and height must be >= 200, font_size >= 6, clutter >= 0")


def _word(rng: random.Random) -> str:
    return "".join(rng.choice(string.ascii_uppercase) for _ in range(5))


def make_vqa_item(seed: int, config: SyntheticVqaConfig | None = None) -> VqaItem:
    """One item, deterministic in `seed`."""
    from PIL import Image as PILImage, ImageDraw, ImageFont

    cfg, rng = config or SyntheticVqaConfig(), random.Random(seed)
    W, H = cfg.width, cfg.height
    img = PILImage.new("RGB", (W, H), (235, 235, 228))
    draw = ImageDraw.Draw(img)
    font = ImageFont.load_default(size=cfg.font_size)
    muted = lambda: tuple(rng.randint(120, 220) for _ in range(3))  # clutter avoids the saturated box colours
    for _ in range(cfg.clutter):
        x, y = rng.randrange(W), rng.randrange(H)
        w, h = rng.randint(10, W // 6), rng.randint(10, H // 6)
        kind = rng.random()
        if kind < 0.35:
            draw.rectangle((x, y, x + w, y + h), outline=muted(), width=2)
        elif kind < 0.6:
            draw.ellipse((x, y, x + w, y + h), outline=muted(), width=2)
        elif kind < 0.8:
            draw.line((x, y, x + w, y + h), fill=muted(), width=2)
        else:
            draw.text((x, y), _word(rng).lower(), fill=muted(), font=font)
    names = rng.sample(sorted(COLOURS), cfg.boxes)
    bw, bh = cfg.font_size * 5, cfg.font_size * 2
    placed: list[tuple[int, int, int, int]] = []
    words = []
    for name in names:
        for _ in range(100):  # boxes do not overlap
            x, y = rng.randrange(10, W - bw - 10), rng.randrange(10, H - bh - 10)
            box = (x, y, x + bw, y + bh)
            if all(box[2] < p[0] or box[0] > p[2] or box[3] < p[1] or box[1] > p[3] for p in placed):
                break
        placed.append(box)
        word = _word(rng)
        words.append(word)
        draw.rectangle(box, fill=(255, 255, 255), outline=COLOURS[name], width=3)
        draw.text((box[0] + cfg.font_size // 2, box[1] + cfg.font_size // 2), word, fill=(0, 0, 0), font=font)
    return VqaItem(Image.from_pil(img), f"What word is written inside the small {names[0]} box?", words[0],
                   placed[0])


def is_correct(answer: str, truth: str) -> bool:
    """Letters of the answer, upper-cased, contain the true word (models add punctuation or quotes)."""
    return truth.upper() in re.sub(r"[^A-Za-z]", "", answer).upper()
