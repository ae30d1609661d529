"""A synthetic Set-of-Mark step task with rendered screenshots (for heads training without a browser).

Each step is a page of N coloured boxes (button, link, textbox, combobox), each drawn filled in
a distinct named colour with its Set-of-Mark number and label, and a one-step goal:

    click     "Click the red button."                 -> click(id)
    type      'Type "blue mug" into the green textbox.' -> type(id, "blue mug")      value WRITE
    select    'Choose "Large" in the blue list.'      -> select(id, "Large")       value = option
    answer    "What does the yellow button say? Answer." -> answer(label)           value WRITE
    scroll    "Scroll down the page." / "Scroll up the page."
    back      "Go back to the previous page."          stop  "The task is already done. Stop."

`refer_by`: "color" names the target only by colour (found only in the screenshot: a test of
the visual pooling), "name" by its label (found in the element list), "mixed" either. Element
ids are shuffled 0..N-1 positions; the element list never mentions colours.

Chance levels (`chance_levels`): kind = frequency of the most common kind; target = mean 1/N over
steps with a target; value = mean 1/(M + 1) over select steps (M options + WRITE).
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

from webrl.actions import Action
from webrl.policy.cascade.features import action_kind
from webrl.policy.types import MarkedObservation, SoMElement
from webrl.policy.types import PolicyRequest
from webrl.types import Image

COLORS = {"red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 80, 220), "yellow": (235, 210, 40),
          "purple": (140, 60, 180), "orange": (245, 140, 30), "black": (20, 20, 20), "cyan": (40, 200, 220)}
LABELS = ("Search", "Submit", "Home", "Next", "Cancel", "Login", "Cart", "Help", "Menu", "Save", "Apply", "Close")
WORDS = ("blue mug", "red scarf", "green tea", "desk lamp", "yoga mat", "notebook", "backpack", "headphones")
OPTIONS = ("Small", "Medium", "Large", "Red", "Blue", "Cheapest", "Newest", "Any")
KIND_WEIGHTS = {"click": 0.35, "type": 0.2, "select": 0.2, "scroll_down": 0.05, "scroll_up": 0.05,
                "back": 0.05, "answer": 0.05, "stop": 0.05}


@dataclass(frozen=True)
class SyntheticStep:
    """One logged step: the request the policy sees and the demonstrated action."""

    request: PolicyRequest
    action: Action


@dataclass
class SyntheticConfig:
    """Page and goal generator settings."""

    width: int = 336
    """Screenshot width in pixels."""
    height: int = 224
    """Screenshot height in pixels."""
    min_elements: int = 3
    """Fewest boxes on a page."""
    max_elements: int = 6
    """Most boxes on a page (at most 6: a 3 x 2 layout)."""
    refer_by: str = "color"
    """How goals name the target: "color", "name" or "mixed"."""

    def __post_init__(self) -> None:
        if self.refer_by not in ("color", "name", "mixed"):
            raise ValueError(f"SyntheticConfig.refer_by must be 'color', 'name' or 'mixed', got {self.refer_by!r}")
        if not 1 <= self.min_elements <= self.max_elements <= 6:
            raise ValueError(f"SyntheticConfig needs 1 <= min_elements <= max_elements <= 6, "
                             f"got {self.min_elements}, {self.max_elements}")


def _line(e: SoMElement, selected: str = "") -> str:
    """The env's element-line layout (envs/observation.py `element_line`)."""
    line = f'[{e.id}] {e.role} "{e.name}"'
    if e.role == "combobox":
        line += f' selected="{selected}" options=[' + ", ".join(f'"{o}"' for o in e.options) + "]"
    return line


def _page(rng: random.Random, cfg: SyntheticConfig) -> tuple[list[SoMElement], list[str]]:
    n = rng.randint(cfg.min_elements, cfg.max_elements)
    slots = rng.sample(range(6), n)
    colors = rng.sample(sorted(COLORS), n)
    roles = [rng.choice(("button", "link", "textbox", "combobox")) for _ in range(n)]
    labels = rng.sample(LABELS, n)
    sw, sh = cfg.width / 3, cfg.height / 2
    elements = []
    for i, slot in enumerate(slots):
        w, h = rng.uniform(0.55, 0.9) * sw, rng.uniform(0.4, 0.8) * sh
        x = (slot % 3) * sw + rng.uniform(0, sw - w)
        y = (slot // 3) * sh + rng.uniform(0, sh - h)
        opts = tuple(rng.sample(OPTIONS, 3)) if roles[i] == "combobox" else ()
        elements.append(SoMElement(i, (round(x), round(y), round(w), round(h)), opts, roles[i], labels[i]))
    return elements, colors


def _draw(elements: Sequence[SoMElement], colors: Sequence[str], cfg: SyntheticConfig) -> Image:
    from PIL import Image as PILImage, ImageDraw

    img = PILImage.new("RGB", (cfg.width, cfg.height), (245, 245, 245))
    draw = ImageDraw.Draw(img)
    for e, c in zip(elements, colors):
        x, y, w, h = e.bbox
        draw.rectangle([x, y, x + w - 1, y + h - 1], fill=COLORS[c], outline=(0, 0, 0))
        draw.text((x + 3, y + 2), str(e.id), fill=(255, 255, 255))
        draw.text((x + 3, y + h / 2), e.name, fill=(255, 255, 255))
    return Image.from_pil(img)


def _goal(rng: random.Random, kind: str, e: SoMElement, color: str, cfg: SyntheticConfig) -> tuple[str, Action]:
    by_color = cfg.refer_by == "color" or (cfg.refer_by == "mixed" and rng.random() < 0.5)
    ref = f"the {color} {e.role}" if by_color else f'the {e.role} "{e.name}"'
    if kind == "click":
        return f"Click {ref}.", Action.click(e.id)
    if kind == "type":
        word = rng.choice(WORDS)
        return f'Type "{word}" into {ref}.', Action.type_text(word, e.id)
    if kind == "select":
        opt = rng.choice(e.options)
        return f'Choose "{opt}" in {ref}.', Action.select(e.id, opt)
    if kind == "answer":
        return f"What does {ref} say? Answer.", Action.answer(e.name)
    if kind.startswith("scroll_"):
        d = kind.removeprefix("scroll_")
        return f"Scroll {d} the page.", Action.scroll(d)
    return ("Go back to the previous page.", Action("back")) if kind == "back" else \
        ("The task is already done. Stop.", Action.stop())


def make_steps(n: int, seed: int = 0, config: SyntheticConfig | None = None) -> list[SyntheticStep]:
    """`n` independent one-step episodes, deterministic in `seed`."""
    cfg, rng = config or SyntheticConfig(), random.Random(seed)
    kinds, weights = zip(*KIND_WEIGHTS.items())
    steps = []
    for i in range(n):
        elements, colors = _page(rng, cfg)
        kind = rng.choices(kinds, weights)[0]
        need = {"click": ("button", "link"), "type": ("textbox",), "select": ("combobox",)}.get(kind)
        pool = [j for j, e in enumerate(elements) if need is None or e.role in need]
        if not pool:
            kind, pool = "click", list(range(len(elements)))
            elements = [SoMElement(e.id, e.bbox, (), "button" if e.role == "combobox" else e.role, e.name)
                        if e.role == "combobox" else e for e in elements]
        j = rng.choice(pool)
        goal, action = _goal(rng, kind, elements[j], colors[j], cfg)
        text = "\n".join(_line(e, e.options[0] if e.options else "") for e in elements)
        obs = MarkedObservation(goal=goal, url=f"http://127.0.0.1:8000/synthetic/{seed}/{i}", title="Synthetic page",
                                elements_text=text, screenshot=_draw(elements, colors, cfg), elements=tuple(elements))
        steps.append(SyntheticStep(PolicyRequest(obs, request_id=f"synthetic-{seed}-{i}"), action))
    return steps


def chance_levels(steps: Sequence[SyntheticStep | tuple[PolicyRequest, Action]]) -> dict[str, float]:
    """Chance accuracy of each head (see the module docstring) on steps or (request, action) pairs."""
    pairs = [(s.request, s.action) if isinstance(s, SyntheticStep) else tuple(s) for s in steps]
    kinds = [action_kind(a) for _, a in pairs]
    majority = max(kinds.count(k) for k in set(kinds)) / len(kinds)
    targets = [1 / len(r.observation.elements) for (r, _), k in zip(pairs, kinds) if k in ("click", "type", "select")]
    values = [1 / (1 + len(next((e.options for e in r.observation.elements if e.id == a.element), ())))
              for (r, a), k in zip(pairs, kinds) if k == "select"]
    return {"kind": majority, "target": sum(targets) / max(1, len(targets)),
            "value_select": sum(values) / max(1, len(values))}
