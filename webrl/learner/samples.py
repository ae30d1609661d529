"""Turn samples for the learner and their collation into a right-padded `Batch`.

Notation: B samples, T = longest prompt + response in the micro-batch, P / R one sample's prompt /
response length, I images in the micro-batch.

A `LearnerSample` is one `Turn` (token ids exactly as the rollout saw them, never re-tokenised)
plus what the algorithm stage attached: its advantage, group / trajectory index and, for PPO,
the old value and the return. `collate` turns a list of them into `Batch` tensors aligned with
input_ids (position t holds log p(input_ids[t] | input_ids[<t])); image bytes become
pixel_values / image_grid_thw only here, on the rank that trains on them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import torch
from torch import Tensor

from webrl.algos import BatchExtras
from webrl.types import Batch, Image, Trajectory, Turn


@dataclass
class LearnerSample:
    """One turn sample.

    prompt_ids: (P,) prompt token ids, image placeholders already expanded.
    response_ids: (R,) sampled (or demonstrated) response ids.
    rollout_logprobs: (R,) sampling-time log-probs, or empty (SFT / demonstrations).
    images: the prompt's images, in prompt order, as compressed bytes.
    advantage: the turn's advantage (GRPO: its trajectory's, broadcast; PPO: turn-level GAE,
      filled in by the learner at the start of the update), 0 for SFT.
    turn_index: the turn's position in its trajectory (0 = first), for per-turn metrics.
    reward: the turn's own reward r_t for GAE: the trajectory's outcome reward on its last turn
      sample, 0 on the others (outcome-only rewards, as `algos.outcome_turn_rewards`).
    old_value / value_return: PPO value targets (start-of-update prediction and GAE return).
    action_mask / coordinate_mask: (R,) optional SFT token weights' masks on the response.
    ref_logprobs / proximal_logprobs: (R,) reference-policy and start-of-update learner
      log-probs; the learner fills them in when the objective needs them.
    """

    prompt_ids: list[int]
    response_ids: list[int]
    rollout_logprobs: list[float] = field(default_factory=list)
    images: list[Image] = field(default_factory=list)
    advantage: float = 0.0
    group_index: int = 0
    trajectory_index: int = 0
    turn_index: int = 0
    reward: float = 0.0
    policy_version: int = -1
    old_value: float = 0.0
    value_return: float = 0.0
    action_mask: Optional[list[bool]] = None
    coordinate_mask: Optional[list[bool]] = None
    ref_logprobs: Optional[list[float]] = None
    proximal_logprobs: Optional[list[float]] = None

    def __post_init__(self) -> None:
        if not self.prompt_ids or not self.response_ids:
            raise ValueError("LearnerSample needs a non-empty prompt_ids and response_ids")
        for name in ("rollout_logprobs", "action_mask", "coordinate_mask", "ref_logprobs", "proximal_logprobs"):
            value = getattr(self, name)
            if value and len(value) != len(self.response_ids):
                raise ValueError(f"LearnerSample.{name} has {len(value)} entries for "
                                 f"{len(self.response_ids)} response ids")

    @property
    def length(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)

    @classmethod
    def from_turn(cls, turn: Turn, advantage: float = 0.0, **fields_: Any) -> "LearnerSample":
        return cls(prompt_ids=list(turn.prompt_ids), response_ids=list(turn.response_ids),
                   rollout_logprobs=list(turn.logprobs), images=list(turn.images), advantage=advantage,
                   policy_version=turn.policy_version, **fields_)


def samples_from_trajectories(trajectories: Sequence[Trajectory], advantages: Sequence[float],
                              keep: Optional[Sequence[bool]] = None) -> list[LearnerSample]:
    """Every turn of every kept, non-dropped trajectory, with its trajectory's advantage.

    advantages, keep: (N,) per trajectory (`webrl.algos.group_advantages`' advantages / keep).
    group_index numbers distinct group_ids in order of appearance; trajectory_index is the
    trajectory's position in `trajectories`; the last sample of a scored trajectory carries its
    reward (`LearnerSample.reward`).
    """
    groups: dict[str, int] = {}
    out = []
    for n, traj in enumerate(trajectories):
        group = groups.setdefault(traj.group_id, len(groups))
        if traj.status != "ok" or (keep is not None and not keep[n]):
            continue
        turns = [(t, turn) for t, turn in enumerate(traj.turns) if turn.response_ids]
        for k, (t, turn) in enumerate(turns):
            reward = float(traj.reward) if k == len(turns) - 1 and traj.reward is not None else 0.0
            out.append(LearnerSample.from_turn(turn, float(advantages[n]), group_index=group,
                                               trajectory_index=n, turn_index=t, reward=reward))
    return out


def encode_images(images: Sequence[Image], processor: Any, min_pixels: int, max_pixels: int
                  ) -> tuple[Tensor, Tensor]:
    """Image bytes -> (pixel_values (patches, C*t*p*p), image_grid_thw (I, 3)) through the
    processor with the same smart_resize bounds as the rollout policy
    (`webrl.policy.GeneratorPolicy.encode` passes size={shortest_edge: min, longest_edge: max})."""
    out = processor.image_processor(images=[im.to_pil() for im in images], return_tensors="pt",
                                    size={"shortest_edge": min_pixels, "longest_edge": max_pixels})
    return out["pixel_values"], out["image_grid_thw"]


def check_image_tokens(input_ids: Tensor, image_grid_thw: Tensor, image_token_id: int, merge: int) -> None:
    """Raise if the prompt's image placeholders do not match the pixel grids (a different pixel
    budget than the rollout's, or images missing from a sample)."""
    placeholders = int((input_ids == image_token_id).sum())
    from_grid = int(image_grid_thw.prod(dim=1).sum()) // (merge * merge)
    if placeholders != from_grid:
        raise ValueError(
            f"the prompts hold {placeholders} image tokens but the encoded images give {from_grid}: "
            f"LearnerRun.image_min_pixels / image_max_pixels must equal the rollout policy's "
            f"PromptConfig.min_pixels / max_pixels, and every sample must carry its prompt's images")


def collate(samples: Sequence[LearnerSample], pad_id: int, processor: Any = None,
            pixels: tuple[int, int] = (56 * 56, 28 * 28 * 1280)) -> tuple[Batch, BatchExtras]:
    """Right-padded `Batch` (B, T) and the `BatchExtras` (PPO values, SFT masks) of `samples`.

    loss_mask is 1 on response tokens; old_logprobs / advantages are 0 off it. Images are
    encoded in sample order with smart_resize bounds `pixels` = (min, max), so pixel_values line
    up with the image tokens of input_ids.
    """
    if not samples:
        raise ValueError("collate needs at least one sample")
    rows, width = len(samples), max(s.length for s in samples)
    input_ids = torch.full((rows, width), pad_id, dtype=torch.long)  # (B, T)
    attention_mask = torch.zeros((rows, width), dtype=torch.long)
    loss_mask = torch.zeros((rows, width), dtype=torch.float32)
    old_logprobs = torch.zeros((rows, width), dtype=torch.float32)
    advantages = torch.zeros((rows, width), dtype=torch.float32)
    action_mask = torch.zeros((rows, width), dtype=torch.bool)
    coordinate_mask = torch.zeros((rows, width), dtype=torch.bool)
    ref_logprobs = torch.zeros((rows, width), dtype=torch.float32)
    proximal_logprobs = torch.zeros((rows, width), dtype=torch.float32)
    for b, s in enumerate(samples):
        p, n = len(s.prompt_ids), s.length
        input_ids[b, :n] = torch.tensor(s.prompt_ids + s.response_ids, dtype=torch.long)
        attention_mask[b, :n] = 1
        loss_mask[b, p:n] = 1.0
        advantages[b, p:n] = s.advantage
        if s.rollout_logprobs:
            old_logprobs[b, p:n] = torch.tensor(s.rollout_logprobs, dtype=torch.float32)
        if s.action_mask:
            action_mask[b, p:n] = torch.tensor(s.action_mask, dtype=torch.bool)
        if s.coordinate_mask:
            coordinate_mask[b, p:n] = torch.tensor(s.coordinate_mask, dtype=torch.bool)
        if s.ref_logprobs:
            ref_logprobs[b, p:n] = torch.tensor(s.ref_logprobs, dtype=torch.float32)
        if s.proximal_logprobs:
            proximal_logprobs[b, p:n] = torch.tensor(s.proximal_logprobs, dtype=torch.float32)
    pixel_values = image_grid_thw = None
    images = [im for s in samples for im in s.images]
    if images:
        if processor is None:
            raise ValueError("collate got samples with images but no processor to encode them")
        pixel_values, image_grid_thw = encode_images(images, processor, *pixels)
    batch = Batch(
        input_ids=input_ids, attention_mask=attention_mask, loss_mask=loss_mask, old_logprobs=old_logprobs,
        advantages=advantages,
        ref_logprobs=ref_logprobs if all(s.ref_logprobs for s in samples) else None,
        group_index=torch.tensor([s.group_index for s in samples], dtype=torch.long),
        trajectory_index=torch.tensor([s.trajectory_index for s in samples], dtype=torch.long),
        policy_version=torch.tensor([s.policy_version for s in samples], dtype=torch.long),
        pixel_values=pixel_values, image_grid_thw=image_grid_thw)
    extras = BatchExtras(
        proximal_logprobs=proximal_logprobs if all(s.proximal_logprobs for s in samples) else None,
        old_values=torch.tensor([s.old_value for s in samples], dtype=torch.float32),
        returns=torch.tensor([s.value_return for s in samples], dtype=torch.float32),
        action_mask=action_mask if any(s.action_mask for s in samples) else None,
        coordinate_mask=coordinate_mask if any(s.coordinate_mask for s in samples) else None)
    return batch, extras


def scale_batch(samples: Sequence[LearnerSample]) -> tuple[Batch, BatchExtras]:
    """A response-only `Batch` (B, R_max) of `samples` with no images: enough for
    `webrl.algos.full_batch_scale`, which reads only the loss mask, trajectory_index and the
    SFT masks. Cheap enough for the controller to build over the whole update."""
    stripped = [LearnerSample([0], s.response_ids, trajectory_index=s.trajectory_index,
                              action_mask=s.action_mask, coordinate_mask=s.coordinate_mask) for s in samples]
    return collate(stripped, pad_id=0)
