"""Prompt building and multimodal context management (one code path for rollout and SFT).

Layout of a prompt at step t (ChatML, as Qwen2.5-VL / Qwen3-VL read it)::

    system     action space of the chosen format (webrl/prompts/<format>_<version>.txt)
    user       Task: <goal>   [+ "(steps 0..k-1 omitted)" when the budget dropped them]
    for each past turn i (oldest kept first):
      user       [screenshot_i if among the last K]  Step i, URL, title (elements optional)
      assistant  turn i's response, rendered per context mode
      tool       feedback of action i (read from observation i+1), or its parse error
    user       [screenshot_t]  Step t, URL, title, tabs, elements, callable skills, skill guidance
               and the site's tools (each only when the observation has it)
               (+ feedback if turn t-1 is not shown)
    assistant  <- generation starts here

Context modes (what past assistant turns keep): "full" (reasoning and call), "hide_thinking"
(call only), "action_only" (the parsed action re-rendered canonically), "last_n_reasoning"
(reasoning in the last `reasoning_turns` turns, call only before). Qwen's chat templates strip
past `<think>` blocks; we render ChatML ourselves, so past reasoning stays where the mode says
(OpenWebRL restores it after templating; same result, one step fewer).

Screenshots: the current one plus those of the last K-1 past turns (K = `num_screenshots`);
older turns are text only, without an image placeholder. Token budget: when the prompt
(visual tokens counted exactly from smart_resize) exceeds `max_prompt_tokens`, the oldest past
turns are dropped one at a time; `RenderedPrompt.history_dropped` says how many.

Feedback is read from the next observation (`feedback`, `last_action_error`), not from
`Turn.feedback`, so a turn renders the same at rollout time and when rebuilt from a stored
trajectory whatever the rollout code wrote into `Turn.feedback`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from typing import Callable, Optional, Sequence

from webrl.actions import Action
from webrl.chat.messages import ChatMessage
from webrl.models.tokens import VISION_PLACEHOLDER
from webrl.policy.formats import FORMAT_NAMES, make_format, strip_thinking
from webrl.policy.images import FAMILY_FACTOR, ImageGeometry, image_token_count
from webrl.policy.types import Observation, PolicyRequest
from webrl.types import Image, Turn

CONTEXT_MODES = ("full", "hide_thinking", "action_only", "last_n_reasoning")
PROMPT_DIR = Path(__file__).resolve().parent.parent / "prompts"


@dataclass
class PromptConfig:
    """How prompts are built."""

    action_format: str = "som"
    """"som" (element ids), "computer_use" (coordinates) or "compact" (env grammar)."""
    prompt_version: str = "v1"
    """System prompt file version: webrl/prompts/<action_format>_<version>.txt."""
    context_mode: str = "full"
    """"full", "hide_thinking", "action_only" or "last_n_reasoning"."""
    reasoning_turns: int = 2
    """last_n_reasoning: past turns (most recent) that keep their reasoning."""
    num_screenshots: int = 1
    """K: screenshots in the prompt (current + K-1 most recent past); 0 = text only."""
    max_prompt_tokens: int = 0
    """Token budget of the prompt; 0 = unlimited. Oldest history is dropped first."""
    history_elements: bool = False
    """Repeat each past observation's element list (costly); the current one always has it."""
    think: bool = True
    """Ask the model to reason in <think>...</think> before the call."""
    min_pixels: int = 56 * 56
    """smart_resize lower bound on screenshot area (pixels)."""
    max_pixels: int = 28 * 28 * 1280
    """smart_resize upper bound on screenshot area (pixels)."""

    def __post_init__(self) -> None:
        if self.action_format not in FORMAT_NAMES:
            raise ValueError(f"PromptConfig.action_format must be one of {FORMAT_NAMES}, got {self.action_format!r}")
        if self.context_mode not in CONTEXT_MODES:
            raise ValueError(f"PromptConfig.context_mode must be one of {CONTEXT_MODES}, got {self.context_mode!r}")
        for name in ("reasoning_turns", "num_screenshots", "max_prompt_tokens"):
            if getattr(self, name) < 0:
                raise ValueError(f"PromptConfig.{name} must be >= 0, got {getattr(self, name)}")
        if not 0 < self.min_pixels <= self.max_pixels:
            raise ValueError(f"PromptConfig.min_pixels/max_pixels need 0 < min <= max, "
                             f"got {self.min_pixels}, {self.max_pixels}")
        if not (PROMPT_DIR / f"{self.action_format}_{self.prompt_version}.txt").exists():
            raise ValueError(f"PromptConfig.prompt_version {self.prompt_version!r}: no file "
                             f"{self.action_format}_{self.prompt_version}.txt in {PROMPT_DIR}")


@dataclass
class Message:
    """One message of a prompt as the builder renders it (`render_chatml`); `parts` are text
    pieces and images in order.

    Not a `webrl.chat.ChatMessage`: it has the ChatML `tool` role (step feedback), which an
    OpenAI message cannot carry without a tool call; `to_chat_message` gives the form an
    OpenAI-compatible server gets.
    """

    role: str
    """"system", "user", "assistant" or "tool"."""
    parts: list = field(default_factory=list)

    def to_chat_message(self) -> ChatMessage:
        """The message for an OpenAI-compatible server: a `tool` message becomes a user message
        holding its text in a `<tool_response>` block, as `render_chatml` writes it."""
        if self.role == "tool":
            text = "".join(p for p in self.parts if isinstance(p, str))
            return ChatMessage("user", (f"<tool_response>\n{text}\n</tool_response>",))
        return ChatMessage(self.role, tuple(self.parts))


@dataclass
class RenderedPrompt:
    """A prompt ready for the processor: ChatML text with one placeholder per image."""

    text: str
    images: list[Image]
    messages: list[Message]
    num_tokens: int
    """Prompt length in tokens with visual tokens expanded (estimate without a tokenizer)."""
    history_dropped: int = 0
    over_budget: bool = False
    geometry: Optional[ImageGeometry] = None
    """Geometry of the current screenshot (for coordinate formats)."""


def render_chatml(messages: Sequence[Message], add_generation_prompt: bool = True) -> tuple[str, list[Image]]:
    """ChatML text (`tool` messages as user `<tool_response>` blocks) and the images in order."""
    out, images = [], []
    for m in messages:
        role = "user" if m.role == "tool" else m.role
        body = []
        for p in m.parts:
            if isinstance(p, Image):
                images.append(p)
                body.append(VISION_PLACEHOLDER)
            else:
                body.append(p)
        text = "".join(body)
        if m.role == "tool":
            text = f"<tool_response>\n{text}\n</tool_response>"
        out.append(f"<|im_start|>{role}\n{text}<|im_end|>\n")
    if add_generation_prompt:
        out.append("<|im_start|>assistant\n")
    return "".join(out), images


class PromptBuilder:
    """Renders requests into prompts for one model family and one `PromptConfig`.

    count_text_tokens: tokens of a text with each image as one placeholder token (the
    tokenizer's length); None estimates 3 characters a token (endpoint use without a tokenizer).
    """

    def __init__(self, config: PromptConfig, family: str = "qwen2.5-vl",
                 count_text_tokens: Optional[Callable[[str], int]] = None, factor: Optional[int] = None):
        if family not in FAMILY_FACTOR:
            raise ValueError(f"family must be one of {sorted(FAMILY_FACTOR)}, got {family!r}")
        self.config, self.family = config, family
        self.factor = factor or FAMILY_FACTOR[family]
        self.format = make_format(config.action_format, family)
        self.count_text_tokens = count_text_tokens or (lambda text: len(text) // 3 + 1)
        self.system_prompt = self._system_prompt()
        self.skill_call = self._skill_call()
        self.tool_call = self._example_call(Action("tool", text="name", args={"param": "value"}),
                                            'tool("name", param="value")')

    def _skill_call(self) -> str:
        """How this format writes a skill call, shown with the callable skills (grounded mode)."""
        example = Action("skill", text="name", args={"param": "value"})
        try:
            return self.format.render(example, None) if self.format.can_render(example) else 'skill("name", param="value")'
        except ValueError:
            return 'skill("name", param="value")'

    def _example_call(self, example: Action, fallback: str) -> str:
        """How this format writes `example` (a skill or tool call), shown with the callable ones."""
        try:
            return self.format.render(example, None) if self.format.can_render(example) else fallback
        except ValueError:
            return fallback

    def _system_prompt(self) -> str:
        template = Template((PROMPT_DIR / f"{self.config.action_format}_{self.config.prompt_version}.txt").read_text())
        think = ("First think step by step inside <think>...</think>." if self.config.think
                 else "Do not write any reasoning.")
        space = getattr(self.format, "space", "resized")
        coords = ("Coordinates [x, y] are pixels of the screenshot as you see it (its size is given each turn)."
                  if space == "resized" else
                  "Coordinates [x, y] are relative: 0..1000 from the left and from the top of the screenshot.")
        return template.substitute(think_note=think, coordinate_note=coords).strip()

    def geometry(self, image: Optional[Image]) -> Optional[ImageGeometry]:
        if image is None:
            return None
        w, h = image.size
        return ImageGeometry.of(w, h, self.factor, self.config.min_pixels, self.config.max_pixels)

    # -- pieces ---------------------------------------------------------------------------------
    def response_text(self, turn: Turn, geometry: Optional[ImageGeometry]) -> str:
        """A turn's response. An oracle turn (`decided_by="oracle"`: its text is the env grammar,
        not a model's output) or a turn without text gets its action rendered in this format, so
        SFT targets and the history of demonstrations read like the model's own turns."""
        render = turn.decided_by == "oracle" or not turn.response_text
        if render and turn.action is not None and self.format.can_render(turn.action):
            try:
                return self.format.render(turn.action, geometry)
            except ValueError:  # e.g. an element action in a coordinate format without its box
                pass
        return turn.response_text or ""

    def _assistant_text(self, turn: Turn, age: int, geometry: Optional[ImageGeometry]) -> str:
        """age: 0 for the most recent past turn."""
        text, mode = self.response_text(turn, geometry), self.config.context_mode
        if mode == "full" or (mode == "last_n_reasoning" and age < self.config.reasoning_turns):
            return text
        if mode == "action_only" and turn.action is not None and self.format.can_render(turn.action):
            try:
                return self.format.render(turn.action, geometry)
            except ValueError:  # e.g. a coordinate action whose screenshot is unknown
                pass
        return strip_thinking(text)

    def _observation_text(self, obs: Observation, current: bool, geometry: Optional[ImageGeometry]) -> str:
        lines = [f"Step {obs.step}", f"URL: {obs.url}"]
        if obs.title:
            lines.append(f"Title: {obs.title}")
        if current and geometry is not None and getattr(self.format, "space", "") == "resized":
            lines.append(f"Screenshot size: {geometry.resized_width}x{geometry.resized_height}")
        if current and obs.tabs:
            lines.append(f"Open tabs:\n{obs.tabs}")
        if obs.elements_text and (current or self.config.history_elements):
            render = getattr(self.format, "render_elements", None)
            lines.append(f"Elements:\n{render(obs.elements_text) if render else obs.elements_text}")
        if current and obs.skills:
            lines.append(f"Skills (one action runs all of a skill's steps; call one as {self.skill_call}):\n{obs.skills}")
        if current and obs.skill_guidance:
            lines.append(f"Skill guidance (steps that worked on pages like this one):\n{obs.skill_guidance}")
        if current and obs.tools:
            lines.append(f"Tools (one action calls a tool of this site and shows its result; call one as "
                         f"{self.tool_call}):\n{obs.tools}")
        return "\n".join(lines)

    def messages(self, request: PolicyRequest, drop: int = 0) -> list[Message]:
        """The chat for `request` with the `drop` oldest past turns left out."""
        obs, history = request.observation, list(request.history)
        k = self.config.num_screenshots
        first_imaged = len(history) - (k - 1) if k > 0 else len(history) + 1
        note = f"\n(Steps before step {drop} are omitted to fit the context.)" if drop else ""
        msgs = [Message("system", [self.system_prompt]), Message("user", [f"Task: {obs.goal}{note}"])]
        past = [Observation.from_turn(t, obs.goal) for t in history] + [obs]
        for i in range(drop, len(history)):
            turn, o = history[i], past[i]
            geometry = self.geometry(o.screenshot)
            image = [o.screenshot] if (i >= first_imaged and o.screenshot is not None) else []
            msgs.append(Message("user", image + [self._observation_text(o, False, geometry)]))
            msgs.append(Message("assistant", [self._assistant_text(turn, len(history) - 1 - i, geometry)]))
            feedback = (f"Invalid action: {turn.parse_error}" if turn.parse_error
                        else past[i + 1].feedback_text or "(no feedback)")
            msgs.append(Message("tool", [feedback]))
        text = self._observation_text(obs, True, self.geometry(obs.screenshot))
        if drop >= len(history) and obs.feedback_text:
            text += f"\nFeedback: {obs.feedback_text}"
        image = [obs.screenshot] if (k > 0 and obs.screenshot is not None) else []
        msgs.append(Message("user", image + [text]))
        return msgs

    def count_tokens(self, text: str, images: Sequence[Image]) -> int:
        """Prompt tokens after the processor expands each image placeholder."""
        visual = sum(image_token_count(*im.size, self.factor, self.config.min_pixels, self.config.max_pixels) - 1
                     for im in images)
        return self.count_text_tokens(text) + visual

    def render(self, request: PolicyRequest) -> RenderedPrompt:
        """Render within the budget, dropping the oldest past turns first."""
        budget, n_history = self.config.max_prompt_tokens, len(request.history)
        drop = 0
        while True:
            msgs = self.messages(request, drop)
            text, images = render_chatml(msgs)
            n = self.count_tokens(text, images)
            if not budget or n <= budget or drop >= n_history:
                break
            drop += 1
        return RenderedPrompt(text, images, msgs, n, history_dropped=drop,
                              over_budget=bool(budget) and n > budget,
                              geometry=self.geometry(request.observation.screenshot))
