"""Trajectory builders and stub engines shared by the reward and serve tests."""
from __future__ import annotations

import threading
from typing import Callable, Optional, Sequence

from webrl.actions import Action
from webrl.chat import ChatMessage, Completion, PreparedPrompt, SamplingParams
from webrl.types import Image, Trajectory, Turn


def screenshot(shade: int, size: tuple[int, int] = (64, 48), fmt: str = "png") -> Image:
    """A solid-colour screenshot; different shades give different bytes (and digests)."""
    from PIL import Image as PILImage

    return Image.from_pil(PILImage.new("RGB", size, (shade, 255 - shade, (shade * 7) % 256)), fmt)


def turn(action: Optional[Action], shade: int = 0, feedback: str = "", parse_error: Optional[str] = None,
         url: str = "http://127.0.0.1:8000/", text: str = "", images: Optional[list] = None) -> Turn:
    if action is None and parse_error is None:
        parse_error = "expected one call"
    return Turn(prompt_ids=[1, 2, 3], response_ids=[4, 5], logprobs=[-0.5, -0.25],
                images=images if images is not None else [screenshot(shade)],
                response_text=text or (action.to_compact() if action else "garbage"), action=action,
                parse_error=parse_error, feedback=feedback, observation={"url": url}, policy_version=3)


def trajectory(actions: Sequence[Optional[Action]], task_id: str = "task-1", goal: str = "Find a blue mug under 10 euros",
               info: Optional[dict] = None, shades: Optional[Sequence[int]] = None) -> Trajectory:
    """One turn per action (None = an unparseable turn); turn i's screenshot has shade 40*i."""
    shades = shades if shades is not None else [40 * i for i in range(len(actions))]
    feedback = ["Succeed: click on <button> 'Search'" if a is not None and not a.is_terminal else "" for a in actions]
    turns = [turn(a, s, f) for a, s, f in zip(actions, shades, feedback)]
    return Trajectory(task_id=task_id, group_id="g0", goal=goal, turns=turns, info=dict(info or {}))


def done_trajectory(answer: str = "The blue mug costs 8 euros", **kw) -> Trajectory:
    return trajectory([Action.click(3), Action.type_text("blue mug", 5), Action.answer(answer)], **kw)


class StubEngine:
    """A `ChatEngine` whose reply is `reply(messages)`; records every prepared prompt."""

    def __init__(self, reply: Callable[[Sequence[ChatMessage]], str], model_name: str = "stub"):
        self.reply, self.model_name = reply, model_name
        self.seen: list[list[ChatMessage]] = []
        self._lock = threading.Lock()

    def prepare(self, messages: Sequence[ChatMessage]) -> PreparedPrompt:
        with self._lock:
            self.seen.append(list(messages))
        text = " ".join(p for m in messages for p in m.content if isinstance(p, str))
        return PreparedPrompt(list(messages), len(text.split()) + 100 * sum(len(m.images) for m in messages))

    def generate(self, prompt: PreparedPrompt, sampling: SamplingParams) -> Completion:
        text = self.reply(prompt.inputs)
        return Completion(text, prompt.num_tokens, len(text.split()))


class RecordingEngine:
    """Wraps a real engine and records the messages of every prompt it prepares."""

    def __init__(self, engine):
        self.engine, self.model_name = engine, engine.model_name
        self.seen: list[list[ChatMessage]] = []

    def prepare(self, messages):
        self.seen.append(list(messages))
        return self.engine.prepare(messages)

    def generate(self, prompt, sampling):
        return self.engine.generate(prompt, sampling)


def user_text(messages: Sequence[ChatMessage]) -> str:
    return "\n".join(p for m in messages if m.role == "user" for p in m.content if isinstance(p, str))


def system_text(messages: Sequence[ChatMessage]) -> str:
    return "\n".join(p for m in messages if m.role == "system" for p in m.content if isinstance(p, str))


def n_images(messages: Sequence[ChatMessage]) -> int:
    return sum(len(m.images) for m in messages)
