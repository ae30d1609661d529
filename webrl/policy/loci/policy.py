"""LOCI (Locator–Critic): iterative visual evidence search, and `LociPolicy`, a policy wrapper.

Loop (per request; one image, one task or question)::

    feedback = ""
    for round in 1..max_rounds:
        Locator(question, image, feedback)      -> {"boxes": [[x0, y0, x1, y1], ...]}  (0-1000 or pixels)
        boxes -> clamp to the image -> crop from the full-resolution image -> smart_resize upscale
        Critic(question, crops)                 -> {"relevant": [bool, ...], "sufficient": bool, "missing": str}
        accepted += relevant crops
        stop if sufficient; else feedback = missing + the boxes already tried

Roles are plain callables `role(system, user, images) -> text` (`Role`), so tests drive the loop
with scripted roles; `webrl.policy.loci.roles` makes them from a local model ("policy") or an
OpenAI-compatible URL. Every reply is parsed strictly (`parse_locator`, `parse_critic`: one JSON
object with exactly the expected keys and types; the text between the first "{" and the last "}"
is parsed, so a reasoning preamble is tolerated). A failed parse (or a role that raises) is
counted, the call is retried `retries` times, and then the round proceeds without that evidence:
a failed Locator round proposes nothing, a failed Critic round accepts nothing. Nothing raises
out of `gather_evidence` or `LociPolicy.act`.

Wrapper: the wrapped policy takes one screenshot per step, so `LociPolicy` shows accepted crops
as a side panel of a composite screenshot (loci_geometry: original at scale 1 on the left, crops
stacked on the right) rather than extending `PolicyRequest`; no contract changes. Point
coordinates of the inner decision's `Action` (x, y, to_x, to_y, in composite pixels) are mapped
back to full-screenshot pixels; element-id actions pass unchanged. The recorded turn keeps the
composite image and the response text as the inner model wrote them (what it saw and sampled).
Requests without a screenshot, or with no accepted crop, go to the inner policy unchanged.
Cost of the composite: the inner policy's own smart_resize budget (max_pixels) now covers
(W + P) x H, so the original gets fewer pixels than without LOCI (P = W/2 by default: 2/3 of
the area), traded for enlarged evidence; `panel_fraction` sets the split. Set-of-Mark element
boxes stay valid because the original keeps scale 1 at the origin (this is why LociPolicy wraps
the cascade, `LociPolicy(CascadePolicy(...))`; the reverse cannot work, the cascade needs a
`GeneratorPolicy` inside). Role calls are sequential, one request at a time.

Departures (no paper text or code is public; we worked from the abstract only): the JSON
formats, prompts (webrl/prompts/loci_*_v1.txt), crops being accumulated over rounds, the
composite panel and the "missing + boxes tried" feedback are our design choices.
"""
from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from typing import Callable, Optional, Sequence

from webrl.actions import Action, ParseError
from webrl.policy.loci.geometry import (BOX_SPACES, IntBox, box_to_pixels, clamp_box, composite_layout, crop_image,
                                        render_composite, upscaled_size)
from webrl.policy.types import Decision, PolicyRequest
from webrl.types import Image
from webrl.config import fixed

PROMPT_DIR = Path(__file__).resolve().parents[2] / "prompts"
Role = Callable[[str, str, Sequence[Image]], str]
"""A Locator / Critic / answerer: (system prompt, user text, images) -> reply text."""


@dataclass
class LociConfig:
    """Locator–Critic search and how crops reach the wrapped policy."""

    max_rounds: int = 3
    """Locator–Critic rounds at most (>= 1)."""
    max_boxes: int = fixed(3, "boxes kept per Locator reply")
    """Boxes per Locator reply kept (extra ones are dropped, most promising first)."""
    box_space: str = fixed("normalized_1000", "the Locator prompt's coordinate space")
    """Coordinates the Locator writes: "normalized_1000" or "pixels" (full-image pixels)."""
    min_box_side: int = fixed(4, "clamped boxes smaller than this are dropped")
    """Clamped boxes narrower or shorter than this (pixels) are dropped."""
    factor: int = fixed(0, "0 = the wrapped generator's image factor: 28 Qwen2.5-VL, 32 Qwen3-VL")
    """smart_resize factor for the crops (28 Qwen2.5-VL, 32 Qwen3-VL); 0 = the wrapped generator's
    (`webrl.policy.stack` fills it in), 28 for a policy without one."""
    crop_min_pixels: int = fixed(256 * 28 * 28, "the smallest upscaled crop")
    """Lower pixel bound of an upscaled crop (smart_resize min_pixels): small crops get enlarged."""
    crop_max_pixels: int = fixed(1024 * 28 * 28, "the largest upscaled crop")
    """Upper pixel bound of an upscaled crop (smart_resize max_pixels)."""
    locator: str = "policy"
    """Locator source: "policy" (the wrapped policy's model with role prompts) or an http(s) endpoint URL."""
    critic: str = "policy"
    """Critic source: "policy" or an http(s) endpoint URL."""
    retries: int = 1
    """Extra calls after a reply that fails to parse (then the round proceeds without it)."""
    panel_fraction: float = fixed(0.5, "the crop panel's width in the composite image")
    """Width of the composite's crop panel as a fraction of the screenshot width (0, 2]."""
    prompt_version: str = fixed("v1", "the shipped role prompts, webrl/prompts/loci_*_v1.txt")
    """Version of webrl/prompts/loci_{locator,critic,answer}_<version>.txt."""

    def __post_init__(self) -> None:
        if self.max_rounds < 1 or self.max_boxes < 1:
            raise ValueError(f"LociConfig.max_rounds and max_boxes must be >= 1, got {self.max_rounds}, {self.max_boxes}")
        if self.box_space not in BOX_SPACES:
            raise ValueError(f"LociConfig.box_space must be one of {BOX_SPACES}, got {self.box_space!r}")
        if self.min_box_side < 1 or self.factor < 0:
            raise ValueError(f"LociConfig.min_box_side must be >= 1 and factor >= 0, got {self.min_box_side}, {self.factor}")
        if not 0 < self.crop_min_pixels <= self.crop_max_pixels:
            raise ValueError("LociConfig.crop_min_pixels must be > 0 and <= crop_max_pixels, "
                             f"got {self.crop_min_pixels}, {self.crop_max_pixels}")
        for name in ("locator", "critic"):
            value = getattr(self, name)
            if value != "policy" and not value.startswith(("http://", "https://")):
                raise ValueError(f"LociConfig.{name} must be 'policy' or an http(s):// URL, got {value!r}")
        if self.retries < 0:
            raise ValueError(f"LociConfig.retries must be >= 0, got {self.retries}")
        if not 0 < self.panel_fraction <= 2:
            raise ValueError(f"LociConfig.panel_fraction must be in (0, 2], got {self.panel_fraction}")
        for role in ("locator", "critic", "answer"):
            if not (PROMPT_DIR / f"loci_{role}_{self.prompt_version}.txt").exists():
                raise ValueError(f"LociConfig.prompt_version {self.prompt_version!r}: no webrl/prompts/loci_{role}_"
                                 f"{self.prompt_version}.txt")


def load_role_prompt(role: str, version: str = "v1") -> tuple[str, str]:
    """(system, user template) of webrl/prompts/loci_<role>_<version>.txt ([system] / [user] sections)."""
    text = (PROMPT_DIR / f"loci_{role}_{version}.txt").read_text(encoding="utf-8")
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    m = re.fullmatch(r"\s*\[system\]\n(.*?)\n\[user\]\n(.*)", body, re.S)
    if m is None:
        raise ValueError(f"loci_{role}_{version}.txt needs a [system] then a [user] section")
    return m.group(1).strip(), m.group(2).strip()


def render_role_prompt(role: str, version: str, **values: object) -> tuple[str, str]:
    """(system, user) with `$field`s filled verbatim (values are never re-parsed as templates)."""
    system, user = load_role_prompt(role, version)
    return system, Template(user).substitute({k: str(v) for k, v in values.items()}).strip()


# ---------------------------------------------------------------------------------------------
# strict parsing
# ---------------------------------------------------------------------------------------------
def _json_object(text: str) -> dict | ParseError:
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        return ParseError("no JSON object in the reply", text)
    try:
        obj = json.loads(text[start:end + 1])
    except ValueError as e:
        return ParseError(f"invalid JSON: {e}", text)
    return obj if isinstance(obj, dict) else ParseError("reply is not a JSON object", text)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def parse_locator(text: str, max_boxes: int) -> list[tuple[float, float, float, float]] | ParseError:
    """{"boxes": [[x0, y0, x1, y1], ...]} -> the first `max_boxes` boxes; anything else is a ParseError."""
    obj = _json_object(text)
    if isinstance(obj, ParseError):
        return obj
    if set(obj) != {"boxes"} or not isinstance(obj["boxes"], list):
        return ParseError('expected exactly {"boxes": [...]}', text)
    boxes = []
    for b in obj["boxes"]:
        if not (isinstance(b, list) and len(b) == 4 and all(_is_number(v) for v in b)):
            return ParseError(f"a box must be 4 numbers, got {b!r}", text)
        boxes.append(tuple(float(v) for v in b))
    return boxes[:max_boxes]


@dataclass(frozen=True)
class Verdict:
    """The Critic's judgement of one round's crops."""

    relevant: tuple[bool, ...]
    sufficient: bool
    missing: str


def parse_critic(text: str, n_crops: int) -> Verdict | ParseError:
    """{"relevant": [bool] * n_crops, "sufficient": bool, "missing": str} -> `Verdict`."""
    obj = _json_object(text)
    if isinstance(obj, ParseError):
        return obj
    if set(obj) != {"relevant", "sufficient", "missing"}:
        return ParseError('expected keys "relevant", "sufficient", "missing"', text)
    rel, suff, missing = obj["relevant"], obj["sufficient"], obj["missing"]
    if not (isinstance(rel, list) and len(rel) == n_crops and all(isinstance(r, bool) for r in rel)):
        return ParseError(f'"relevant" must be {n_crops} booleans, got {rel!r}', text)
    if not isinstance(suff, bool) or not isinstance(missing, str):
        return ParseError('"sufficient" must be a boolean and "missing" a string', text)
    return Verdict(tuple(rel), suff, missing.strip())


# ---------------------------------------------------------------------------------------------
# the loop
# ---------------------------------------------------------------------------------------------
@dataclass
class LociStats:
    """Counts of one evidence search."""

    rounds: int = 0
    locator_calls: int = 0
    critic_calls: int = 0
    locator_parse_failures: int = 0
    critic_parse_failures: int = 0
    boxes_proposed: int = 0
    crops_accepted: int = 0
    sufficient: bool = False
    error: str = ""
    """Set when the search itself failed (e.g. an unreadable image); the request then went on without evidence."""

    @property
    def calls(self) -> int:
        return self.locator_calls + self.critic_calls

    @property
    def parse_failures(self) -> int:
        return self.locator_parse_failures + self.critic_parse_failures


@dataclass(frozen=True)
class EvidenceCrop:
    """An accepted crop: its box on the full image, the upscaled crop (w', h') and the round found."""

    box: IntBox
    image: Image
    round: int


@dataclass
class Evidence:
    """The outcome of `gather_evidence`; `locator_feedback[r]` is the feedback text of round r's Locator prompt."""

    crops: list[EvidenceCrop] = field(default_factory=list)
    stats: LociStats = field(default_factory=LociStats)
    locator_feedback: list[str] = field(default_factory=list)


def _call(role: Role, prompt: tuple[str, str], images: Sequence[Image], parse, retries: int) -> tuple[object, int, int]:
    """(parsed or None, calls made, failures): a role that raises counts as a parse failure."""
    calls = failures = 0
    for _ in range(1 + retries):
        calls += 1
        try:
            parsed = parse(role(prompt[0], prompt[1], images))
        except Exception as e:  # a role's transport error must not escape the wrapper
            parsed = ParseError(f"role error: {type(e).__name__}: {e}")
        if not isinstance(parsed, ParseError):
            return parsed, calls, failures
        failures += 1
    return None, calls, failures


def _feedback(missing: str, tried: Sequence[IntBox], width: int, height: int, space: str) -> str:
    if not tried and not missing:
        return "This is the first search round."
    lines = [f"The Critic says this is still missing: {missing}" if missing else "The Critic found the evidence insufficient."]
    if tried:  # in the Locator's own coordinate space
        sx, sy = (1.0, 1.0) if space == "pixels" else (1000 / width, 1000 / height)
        as_space = [[round(b[0] * sx), round(b[1] * sy), round(b[2] * sx), round(b[3] * sy)] for b in tried]
        lines.append("Regions already looked at (do not repeat them): " + json.dumps(as_space))
    return "\n".join(lines)


def _crops(pil, boxes, config: LociConfig) -> list[tuple[IntBox, Image]]:
    W, H = pil.size
    out = []
    for b in boxes:
        box = clamp_box(box_to_pixels(b, W, H, config.box_space), W, H, config.min_box_side)
        if box is not None and box not in [c[0] for c in out]:
            size = upscaled_size(box, config.factor or 28, config.crop_min_pixels, config.crop_max_pixels)
            out.append((box, Image.from_pil(crop_image(pil, box, size))))
    return out


def gather_evidence(image: Image, question: str, locator: Role, critic: Role,
                    config: Optional[LociConfig] = None) -> Evidence:
    """Run the Locator–Critic loop on one image (see the module docstring); never raises on role output."""
    config = config or LociConfig()
    pil = image.to_pil()
    W, H = pil.size
    ev, missing, tried = Evidence(), "", []
    st = ev.stats
    for rnd in range(config.max_rounds):
        st.rounds += 1
        feedback = _feedback(missing, tried, W, H, config.box_space)
        ev.locator_feedback.append(feedback)
        prompt = render_role_prompt("locator", config.prompt_version, question=question, width=W, height=H,
                                    max_boxes=config.max_boxes, feedback=feedback)
        boxes, calls, fails = _call(locator, prompt, [image], lambda t: parse_locator(t, config.max_boxes),
                                    config.retries)
        st.locator_calls += calls
        st.locator_parse_failures += fails
        crops = _crops(pil, boxes or [], config)
        st.boxes_proposed += len(crops)
        tried.extend(c[0] for c in crops if c[0] not in tried)
        if not crops:
            continue
        regions = "; ".join(f"crop {i + 1} = pixels {list(b)}" for i, (b, _) in enumerate(crops))
        prompt = render_role_prompt("critic", config.prompt_version, question=question, count=len(crops),
                                    regions=regions)
        verdict, calls, fails = _call(critic, prompt, [c[1] for c in crops],
                                      lambda t, n=len(crops): parse_critic(t, n), config.retries)
        st.critic_calls += calls
        st.critic_parse_failures += fails
        if verdict is None:
            continue
        known = {c.box for c in ev.crops}
        ev.crops.extend(EvidenceCrop(b, im, rnd) for (b, im), ok in zip(crops, verdict.relevant) if ok and b not in known)
        st.crops_accepted = len(ev.crops)
        missing = verdict.missing
        if verdict.sufficient:
            st.sufficient = True
            break
    return ev


# ---------------------------------------------------------------------------------------------
# the policy wrapper
# ---------------------------------------------------------------------------------------------
def map_action(action: Action, to_full: Callable[[float, float], tuple[float, float]]) -> Action:
    """An action with composite-pixel points -> the same action in full-screenshot pixels."""
    changes = {}
    for xs, ys in (("x", "y"), ("to_x", "to_y")):
        x, y = getattr(action, xs), getattr(action, ys)
        if x is not None and y is not None:
            changes[xs], changes[ys] = to_full(x, y)
    return dataclasses.replace(action, **changes) if changes else action


class LociPolicy:
    """`Policy` wrapper: Locator–Critic evidence first, then the inner policy on a composite screenshot.

    Each returned decision is the inner policy's (its class kept, e.g. `CascadeDecision`) with
    point coordinates mapped to the full screenshot and an added attribute `loci` (`LociStats`);
    `last_stats` holds the same list for the last `act` call.
    """

    def __init__(self, inner, config: Optional[LociConfig] = None, locator: Optional[Role] = None,
                 critic: Optional[Role] = None):
        if locator is None or critic is None:
            raise ValueError("LociPolicy needs locator and critic roles (see webrl.policy.loci.roles.make_roles)")
        self.inner, self.config = inner, config or LociConfig()
        self.locator, self.critic = locator, critic
        self.last_stats: list[LociStats] = []

    def _prepare(self, request: PolicyRequest):
        obs = request.observation
        if obs.screenshot is None:
            return request, None, LociStats()
        try:
            ev = gather_evidence(obs.screenshot, obs.goal, self.locator, self.critic, self.config)
            if not ev.crops:
                return request, None, ev.stats
            pil = obs.screenshot.to_pil()
            layout = composite_layout(*pil.size, [c.box for c in ev.crops], self.config.panel_fraction)
            shot = Image.from_pil(render_composite(pil, layout))
            new = dataclasses.replace(request, observation=dataclasses.replace(obs, screenshot=shot))
            return new, layout, ev.stats
        except Exception as e:  # evidence is optional: the inner policy still decides
            return request, None, LociStats(error=f"{type(e).__name__}: {e}")

    def act(self, requests: Sequence[PolicyRequest]) -> list[Decision]:
        prepared = [self._prepare(r) for r in requests]
        decisions = self.inner.act([p[0] for p in prepared])
        out = []
        for d, (_, layout, stats) in zip(decisions, prepared):
            if layout is not None and isinstance(d.parsed, Action):
                d = dataclasses.replace(d, parsed=map_action(d.parsed, layout.to_full))
            d.loci = stats
            out.append(d)
        self.last_stats = [p[2] for p in prepared]
        return out
