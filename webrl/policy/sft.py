"""Supervised samples: per-turn samples from trajectories, and ShareGPT-with-images JSON files.

`sft_samples_from_trajectory` renders turn t of a trajectory through the same
`PromptBuilder.render` + `GeneratorPolicy.encode` path as rollout: the request is
(`Observation.from_turn(turns[t])`, `turns[:t]`), so a sampled turn's prompt ids and its SFT
prompt ids are token-identical (tested). The target is the turn's sampled `response_ids` when
present, else its `response_text` tokenised, else (oracle demos) its action rendered in the
policy's format. A target that does not end in a stop token gets `<|im_end|>` appended so the
model learns to stop; one ending in `</tool_call>` does not (generation stops there).

Action-aware SFT (GUI-Libra, `webrl.algos.sft`): every sample carries `action_mask` /
`coordinate_mask` (R,) over its response tokens: the action block and its numeric literals
(`<e3>` in the pointer format's `click(<e3>)`, `12` in a Set-of-Mark tool call's
`"element": 12`, `[512, 300]` in a computer-use call), found on the response text
(`action_char_spans`) and mapped to tokens by the tokenizer's offset mapping. Sampled
`response_ids` are mapped through the cumulative lengths of their decoded prefixes instead, so
they are never re-tokenised. With `direct=True`, a turn whose response has a `<think>` block
also yields its direct-action variant (`strip_reasoning`, `variant="direct"`, same `source`);
the SFT stage decides how many of those it trains on (`ReasoningMixSampler`).

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

from webrl.models.tokens import IM_END
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
    action_mask / coordinate_mask: (R,) response tokens inside the action / on its coordinates
    or element ids (empty when the sample was built without them).
    variant: "plain" (no reasoning in the response), "reasoning" (it has a `<think>` block) or
    "direct" (the reasoning variant with the block removed).
    """

    prompt_ids: list[int]
    response_ids: list[int]
    images: list[Image] = field(default_factory=list)
    source: str = ""
    action_mask: list[bool] = field(default_factory=list)
    coordinate_mask: list[bool] = field(default_factory=list)
    variant: str = "plain"


def _target(policy, text: str, response_ids: list[int]) -> tuple[list[int], list[tuple[int, int]], str]:
    """(ids (R,), each id's (start, end) character offsets in `text`, text): the target tokens and
    where each lies in the text the action spans are found on."""
    tokenizer = policy.tokenizer
    if response_ids:
        ids = list(response_ids)
        end_of_turn = {tokenizer.convert_tokens_to_ids(IM_END), tokenizer.eos_token_id}
        body = ids[:-1] if ids[-1] in end_of_turn else ids  # a closing stop token is no part of the action
        ends = [len(tokenizer.decode(body[:k + 1])) for k in range(len(body))]
        text = tokenizer.decode(body)
        return ids, list(zip([0] + ends[:-1], ends)) + [(len(text), len(text))] * (len(ids) - len(body)), text
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = list(encoded["input_ids"]), [tuple(o) for o in encoded["offset_mapping"]]
    if not ids or ids[-1] not in policy.stop_ids:
        ids.append(tokenizer.convert_tokens_to_ids(IM_END))
        offsets.append((len(text), len(text)))  # the appended stop token overlaps no span
    return ids, offsets, text


def response_masks(offsets, text: str) -> tuple[list[bool], list[bool]]:
    """(action_mask (R,), coordinate_mask (R,)) of tokens at `offsets` over `text`."""
    from webrl.algos.sft import action_char_spans, spans_to_token_mask

    action_spans, coordinate_spans = action_char_spans(text)
    return (spans_to_token_mask(offsets, action_spans).tolist(),
            spans_to_token_mask(offsets, coordinate_spans).tolist())


def _sample(policy, prompt: RenderedPrompt, text: str, response_ids: list[int], source: str,
            variant: str) -> SFTSample:
    ids, offsets, span_text = _target(policy, text, response_ids)
    action, coordinate = response_masks(offsets, span_text)
    return SFTSample(policy.prompt_ids(prompt), ids, list(prompt.images), source, action, coordinate, variant)


def sft_samples_from_trajectory(traj: Trajectory, policy, *, direct: bool = False) -> list[SFTSample]:
    """Per-turn samples of `traj` rendered exactly as `policy` (a GeneratorPolicy) renders prompts,
    with their action / coordinate masks; with `direct`, each reasoning turn's direct-action
    variant follows it (same prompt: the history is not changed)."""
    from webrl.algos.sft import strip_reasoning

    out = []
    for t, turn in enumerate(traj.turns):
        request = PolicyRequest(Observation.from_turn(turn, traj.goal), traj.turns[:t])
        prompt = policy.builder.render(request)
        text = policy.builder.response_text(turn, prompt.geometry)
        if not text and not turn.response_ids:
            continue  # nothing to learn from
        source = f"{traj.task_id}#{t}"
        stripped = strip_reasoning(text) if text else text
        reasoning = bool(stripped) and stripped != text.lstrip()
        out.append(_sample(policy, prompt, text, turn.response_ids, source, "reasoning" if reasoning else "plain"))
        if direct and reasoning:
            out.append(_sample(policy, prompt, stripped, [], source, "direct"))
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
            samples.append(_sample(policy, prompt, target, [], f"{path.name}[{i}]#{j}", "plain"))
    return samples
