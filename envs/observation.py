"""Observations: screenshot with Set-of-Mark boxes, element list, url/title/tabs, feedback.

The contract (shared with the sandbox sites' oracle solvers) lives in the briefs; in short,
`obs` holds exactly the keys of `observation_space(...)` and the structured element list goes in
`info["elements"]` (one dict per element, ids 0..N-1 in DOM order, each element marked in the
page with `data-webrl-id="N"`). "skills" lists the skills the agent may call on this page
(`search_products(query: text): Search the shop for a product`, one per line;
`webrl.envs.skill_run.skills_text`); it is "" when the env has no skill library, so the policy's
prompt is then exactly what it was before skills existed. "tools" lists the tools the agent may
call (`search_catalog(query: text): Search the catalogue ...`, one per line;
`webrl.envs.tools.tools_text`); "" when the env exposes none.

Notation:
  H, W  screenshot height and width in pixels (= viewport CSS pixels; device scale factor 1)
  N     number of collected interactive elements (<= MAX_ELEMENTS)

Elements are collected by `som.js` through `wait_for_function` rather than `evaluate`: its
timeout is enforced outside the page, so a page stuck in a script cannot hang the observation.
`ObservationConfig.discovery` chooses the candidates: "selectors" gives the element lists the
shipped checkpoints were trained on; "full" (the default) also finds what pages make clickable
without saying so (listeners, handlers delegated to a React root, `cursor: pointer`, tabindex,
open shadow roots). On pages where "selectors" missed nothing, both give the same list (the
sandbox sites are tested for it).

After an action the readiness wait and the collection run as one in-page call
(`wait_ready_and_collect`, one round trip instead of two); the env uses that list when the
observed tab and its URL are still those the call saw, and collects again otherwise.

Text fields use `AnyText`, a Gymnasium `Text` space that accepts any Unicode string up to its
maximum length, because page titles and URLs are not limited to an alphabet.
"""
from __future__ import annotations

import io
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np
from gymnasium import spaces
from PIL import Image, ImageDraw, ImageFont
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from webrl.envs.readiness import PAGE_STAMP, READINESS_PROBE, readiness_arg, readiness_result

TEXT_KEYS = ("url", "title", "goal", "elements_text", "feedback", "last_action_error", "tabs", "skills", "tools")
MAX_TEXT_CHARS = 1 << 20
MAX_STEP_INDEX = 1 << 20
DISCOVERY_MODES = ("selectors", "full")
MAX_ELEMENTS = 400
"""Collect at most this many interactive elements (DOM order); the list notes the rest."""
MAX_NAME_CHARS = 100
"""Accessible names and option labels are cut to this length."""
SOM_OVERLAY = True
"""Draw numbered Set-of-Mark boxes on obs["screenshot"] (info["raw_screenshot_png"] keeps the
screenshot without them, which is what `rollout.screenshot=raw` shows the policy)."""
_PALETTE = ((230, 25, 75), (60, 180, 75), (0, 130, 200), (245, 130, 48), (145, 30, 180),
            (0, 128, 128), (240, 50, 230), (128, 0, 0), (0, 0, 128), (128, 128, 0))


@dataclass
class ObservationConfig:
    """What an observation contains and how it is drawn."""

    discovery: str = "full"
    """How som.js finds candidates: "selectors" (native controls and ARIA widgets by CSS
    selector, the lists the shipped checkpoints were trained on) or "full" (also elements with
    pointer-event listeners, handler properties or React handler props, tabindex >= 0,
    `cursor: pointer` widgets and open shadow roots; see the header of envs/som.js)."""

    def __post_init__(self) -> None:
        if self.discovery not in DISCOVERY_MODES:
            raise ValueError(f"ObservationConfig.discovery must be one of {DISCOVERY_MODES}, got {self.discovery!r}")


class AnyText(spaces.Text):
    """A `Text` space whose `contains` accepts any `str` up to `max_length` characters.

    `sample()` still draws from the alphanumeric charset (enough for `check_env`).
    """

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"AnyText({self.min_length}, {self.max_length})"


def observation_space(height: int, width: int) -> spaces.Dict:
    """The Gymnasium space of `obs`: screenshot (H, W, 3) uint8, the TEXT_KEYS fields, step index."""
    fields: dict[str, spaces.Space] = {
        "screenshot": spaces.Box(0, 255, shape=(height, width, 3), dtype=np.uint8)}
    for key in TEXT_KEYS:
        fields[key] = AnyText(min_length=0, max_length=MAX_TEXT_CHARS)
    fields["step"] = spaces.Discrete(MAX_STEP_INDEX)
    return spaces.Dict(fields)


@lru_cache(maxsize=1)
def som_script() -> str:
    """The element-collection function (envs/som.js) as a JS function expression."""
    return (Path(__file__).with_name("som.js")).read_text()


@lru_cache(maxsize=1)
def listeners_init_script() -> str:
    """The listener registry (envs/listeners.js) that som.js's "full" discovery reads; an init
    script, installed in every context by `BrowserSession.new_context`."""
    return (Path(__file__).with_name("listeners.js")).read_text()


def collect_elements(page: Any, config: ObservationConfig, timeout_s: float) -> dict[str, Any]:
    """Run som.js in `page`: {"elements": [...], "truncated": int, "scrollY": ..., ...}.

    Raises playwright's TimeoutError if the page does not answer within `timeout_s`.
    """
    handle = page.wait_for_function(som_script(), arg=som_arg(config), timeout=max(1.0, timeout_s * 1000))
    try:
        return handle.json_value()
    finally:
        handle.dispose()


def som_arg(config: ObservationConfig) -> dict[str, Any]:
    """som.js's argument: the element cap, the name length cap and the discovery mode."""
    return {"maxElements": MAX_ELEMENTS, "maxNameChars": MAX_NAME_CHARS, "discovery": config.discovery}


@lru_cache(maxsize=1)
def ready_and_collect_script() -> str:
    """The readiness probe and som.js in one in-page function: false until the page is ready,
    then {ready, collected}; `collected` is null when a tab may be coming (the tabs change)."""
    return (f"(arg) => {{ const ready = ({READINESS_PROBE})(arg.ready); if (!ready) return false;\n"
            f"  const s = window.__webrl, stamp = s ? {PAGE_STAMP} : null;\n"
            f"  return {{ready, stamp, collected: ready.popup ? null : ({som_script()})(arg.som)}}; }}")


def wait_ready_and_collect(page: Any, config: ObservationConfig, timeout_s: float,
                           token: int) -> tuple[Optional[dict], Optional[dict[str, Any]]]:
    """`readiness.wait_until_ready` and `collect_elements` in one round trip: (ready, collected).

    (None, None) when the page was not ready within `timeout_s` (the caller observes it as it
    is); collected is None when the probe saw a popup hint. Same som.js and arguments as
    `collect_elements`, so the element list is the one a separate collection returns. `ready`
    carries the page's `PAGE_STAMP` at the ready answer under "stamp".
    """
    arg = {"ready": readiness_arg(token), "som": som_arg(config)}
    try:
        handle = page.wait_for_function(ready_and_collect_script(), arg=arg, polling=10,
                                        timeout=max(1.0, timeout_s * 1000))
    except PlaywrightTimeout:
        return None, None
    try:
        value = handle.json_value()
    finally:
        handle.dispose()
    return {**readiness_result(value["ready"]), "stamp": value.get("stamp")}, value["collected"]


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def element_line(element: dict[str, Any]) -> str:
    """`[12] button "Add to cart"` plus the state an agent needs (value, checked, options)."""
    parts = [f"[{element['id']}]", element["role"] if element["role"] != "generic" else element["tag"]]
    parts.append(_quote(element["name"]))
    if element["role"] in ("textbox", "searchbox", "spinbutton") and element["type"] not in ("", "text"):
        parts.append(f"type={element['type']}")
    if element["value"] and element["tag"] != "select" and element["type"] not in ("checkbox", "radio"):
        parts.append(f"value={_quote(element['value'])}")
    if element["placeholder"] and element["placeholder"] != element["name"]:
        parts.append(f"placeholder={_quote(element['placeholder'])}")
    if element["checked"] is not None:
        parts.append("checked" if element["checked"] else "unchecked")
    if element["tag"] == "select":
        parts.append(f"selected={_quote(element['selected'])}")
        parts.append("options=[" + ", ".join(_quote(o) for o in element["options"]) + "]")
    if not element["in_viewport"]:
        parts.append("(offscreen)")
    return " ".join(parts)


def format_elements_text(elements: Sequence[dict[str, Any]], truncated: int = 0,
                         list_offscreen: bool = True) -> str:
    """One line per element; a last line says how many candidates were not collected."""
    lines = [element_line(e) for e in elements if list_offscreen or e["in_viewport"]]
    if truncated:
        lines.append(f"... up to {truncated} more elements not listed (element limit reached)")
    return "\n".join(lines)[:MAX_TEXT_CHARS]


def decode_png(png: bytes) -> np.ndarray:
    """PNG bytes -> (H, W, 3) uint8."""
    with Image.open(io.BytesIO(png)) as image:
        return np.asarray(image.convert("RGB"))


def encode_png(image: np.ndarray, compress_level: int = 1) -> bytes:
    """(H, W, 3) uint8 -> PNG bytes (level 1: fast, still lossless)."""
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG", compress_level=compress_level)
    return buffer.getvalue()


@lru_cache(maxsize=1)
def _label_font() -> ImageFont.ImageFont:
    return ImageFont.load_default()


def draw_set_of_mark(image: np.ndarray, elements: Sequence[dict[str, Any]]) -> np.ndarray:
    """Numbered boxes for the in-viewport elements on a copy of `image` (H, W, 3) uint8."""
    canvas = Image.fromarray(image)
    draw = ImageDraw.Draw(canvas)
    font = _label_font()
    height, width = image.shape[:2]
    for element in elements:
        if not element["in_viewport"]:
            continue
        x, y, w, h = element["bbox"]
        x0, y0 = max(0, x), max(0, y)
        x1, y1 = min(width - 1, x + w), min(height - 1, y + h)
        if x1 <= x0 or y1 <= y0:
            continue
        color = _PALETTE[element["id"] % len(_PALETTE)]
        draw.rectangle((x0, y0, x1, y1), outline=color, width=2)
        label = str(element["id"])
        left, top, right, bottom = draw.textbbox((0, 0), label, font=font)
        lw, lh = right - left + 4, bottom - top + 4
        ly = y0 - lh if y0 - lh >= 0 else y0
        draw.rectangle((x0, ly, x0 + lw, ly + lh), fill=color)
        draw.text((x0 + 2 - left, ly + 2 - top), label, fill=(255, 255, 255), font=font)
    return np.asarray(canvas)


def tabs_text(titles_urls: Sequence[tuple[str, str]], active: int) -> str:
    """`[0] "Title" http://... (current)`, one line per open tab."""
    lines = []
    for index, (title, url) in enumerate(titles_urls):
        mark = " (current)" if index == active else ""
        lines.append(f"[{index}] {_quote(title)} {url}{mark}")
    return "\n".join(lines)


def blank_observation(height: int, width: int, goal: str, step: int, feedback: str = "",
                      error: str = "") -> dict[str, Any]:
    """An observation with a black screenshot, for episodes whose page is gone (infra errors)."""
    return {"screenshot": np.zeros((height, width, 3), dtype=np.uint8), "url": "", "title": "",
            "goal": goal, "elements_text": "", "feedback": feedback,
            "last_action_error": error, "tabs": "", "skills": "", "tools": "", "step": step}


def build_observation(*, screenshot_png: bytes, elements: list[dict[str, Any]], truncated: int,
                      url: str, title: str, goal: str, tabs: str, step: int, feedback: str,
                      error: str, config: ObservationConfig, skills: str = "", tools: str = "") -> dict[str, Any]:
    """Assemble `obs` (space keys only) from what the page returned."""
    image = decode_png(screenshot_png)  # (H, W, 3)
    if SOM_OVERLAY and elements:
        image = draw_set_of_mark(image, elements)
    return {"screenshot": image, "url": url[:MAX_TEXT_CHARS], "title": title[:MAX_TEXT_CHARS],
            "goal": goal[:MAX_TEXT_CHARS],
            "elements_text": format_elements_text(elements, truncated),
            "feedback": feedback[:MAX_TEXT_CHARS], "last_action_error": error[:MAX_TEXT_CHARS],
            "tabs": tabs[:MAX_TEXT_CHARS], "skills": skills[:MAX_TEXT_CHARS],
            "tools": tools[:MAX_TEXT_CHARS], "step": int(step)}


def oracle_view(obs: dict[str, Any], info: dict[str, Any]) -> dict[str, Any]:
    """What `Task.oracle_action` receives: obs without the screenshot plus info["elements"]."""
    view = {k: v for k, v in obs.items() if k != "screenshot"}
    view["elements"] = info.get("elements", [])
    return view


ELEMENT_KEYS = ("id", "bbox", "role", "tag", "name", "in_viewport")


def compact_elements(elements: Sequence[dict]) -> list[dict]:
    """The fields of each contract element dict the decision heads read (`SoMElement.from_dict`).

    bbox [x, y, w, h] in screenshot pixels (viewport CSS pixels); options / selected only for
    elements that have options (selects), so that a button costs about 80 bytes of JSON.
    """
    out = []
    for e in elements:
        rec = {k: e[k] for k in ELEMENT_KEYS if k in e}
        rec["bbox"] = [int(round(float(v))) for v in e["bbox"]]
        if e.get("options"):
            rec["options"], rec["selected"] = list(e["options"]), e.get("selected", "")
        out.append(rec)
    return out
