"""Supervised samples: per-turn samples from trajectories, and ShareGPT-with-images JSON files.

`sft_samples_from_trajectory` renders turn t of a trajectory through the same
`PromptBuilder.render` + `GeneratorPolicy.encode` path as rollout: the request is
(`Observation.from_turn(turns[t])`, `turns[:t]`), so a sampled turn's prompt ids and its SFT
prompt ids are token-identical (tested). The target is the turn's sampled `response_ids` when
present, else its `response_text` tokenised, else (oracle demos) its action rendered in the
policy's format. A target that does not end in a stop token gets `<|im_end|>` appended so the
model learns to stop; one ending in `</tool_call>` does not (generation stops there).

ShareGPT-with-images (the LLaMA-Factory convention): a JSON list of records
``{"messages": [{"role": "user", "content": "<image>Find ..."}, {"role": "assistant", ...}],
"images": ["shots/a.png"]}`` or ``{"conversations": [{"from": "human", "value": ...}], ...}``;
each `<image>` consumes the next image (paths relative to the JSON file). Every assistant
message becomes one sample whose prompt is everything before it, rendered as
ChatML as is (no system prompt is added: the record's own one, if any, is used).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webrl.chat.tokens import IM_END
from webrl.policy.prompt import Message, RenderedPrompt, render_chatml
from webrl.policy.types import Observation, PolicyRequest
from webrl.types import Image, Trajectory

_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system",
          "tool": "tool", "function": "tool", "observation": "tool", "function_call": "assistant"}


@dataclass
class SFTSample:
    """One supervised turn: the loss is on `response_ids` only.

    prompt_ids: (P,) ids with visual placeholders expanded; response_ids: (R,) target ids.
    images: the prompt's images in order (PNG/JPEG bytes).
    """

    prompt_ids: list[int]
    response_ids: list[int]
    images: list[Image] = field(default_factory=list)
    source: str = ""


def _target_ids(policy, text: str, response_ids: list[int]) -> list[int]:
    if response_ids:
        return list(response_ids)
    ids = policy.tokenizer(text, add_special_tokens=False)["input_ids"]
    if not ids or ids[-1] not in policy.stop_ids:
        ids.append(policy.tokenizer.convert_tokens_to_ids(IM_END))
    return ids


def sft_samples_from_trajectory(traj: Trajectory, policy) -> list[SFTSample]:
    """Per-turn samples of `traj` rendered exactly as `policy` (a GeneratorPolicy) renders prompts."""
    out = []
    for t, turn in enumerate(traj.turns):
        request = PolicyRequest(Observation.from_turn(turn, traj.goal), traj.turns[:t])
        prompt = policy.builder.render(request)
        text = policy.builder.response_text(turn, prompt.geometry)
        if not text and not turn.response_ids:
            continue  # nothing to learn from
        out.append(SFTSample(policy.prompt_ids(prompt), _target_ids(policy, text, turn.response_ids),
                             list(prompt.images), f"{traj.task_id}#{t}"))
    return out


def _record_messages(record: dict[str, Any], base: Path, where: str) -> list[Message]:
    turns = record.get("messages", record.get("conversations"))
    if not isinstance(turns, list):
        raise ValueError(f"{where}: needs a 'messages' or 'conversations' list")
    paths = list(record.get("images", []))
    images = [Image((base / p).read_bytes(), "jpeg" if str(p).lower().endswith((".jpg", ".jpeg")) else "png")
              for p in paths]
    used, msgs = 0, []
    for j, m in enumerate(turns):
        role = _ROLES.get(m.get("role", m.get("from")))
        content = m.get("content", m.get("value"))
        if role is None or not isinstance(content, str):
            raise ValueError(f"{where}: message {j} needs a known role and string content, got {m!r}"[:300])
        parts: list = []
        for k, piece in enumerate(content.split("<image>")):
            if k:
                if used >= len(images):
                    raise ValueError(f"{where}: more <image> tags than images ({len(images)})")
                parts.append(images[used])
                used += 1
            if piece:
                parts.append(piece)
        msgs.append(Message(role, parts))
    if used != len(images):
        raise ValueError(f"{where}: {len(images)} images but {used} <image> tags")
    return msgs


def load_sharegpt(path: str | Path, policy) -> list[SFTSample]:
    """SFT samples from a ShareGPT-with-images JSON file, one per assistant message."""
    path = Path(path)
    records = json.loads(path.read_text())
    if not isinstance(records, list):
        raise ValueError(f"{path}: expected a JSON list of records")
    samples = []
    for i, record in enumerate(records):
        msgs = _record_messages(record, path.parent, f"{path}[{i}]")
        for j, m in enumerate(msgs):
            if m.role != "assistant":
                continue
            text, images = render_chatml(msgs[:j])
            prompt = RenderedPrompt(text, images, msgs[:j], 0)
            target = "".join(p for p in m.parts if isinstance(p, str))
            samples.append(SFTSample(policy.prompt_ids(prompt), _target_ids(policy, target, []),
                                     images, f"{path.name}[{i}]#{j}"))
    return samples
