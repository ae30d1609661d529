"""Shared builders for the learner tests: turn samples from the tiny model's own processor."""
from __future__ import annotations

import numpy as np
import torch

from webrl.learner import LearnerConfig, LearnerRun, LearnerSample, OptimConfig
from webrl.learner.config import BatchingConfig, CheckpointConfig
from webrl.types import Image

GOALS = ["click the blue button", "type hello into the search box", "open the cart",
         "scroll down to the footer", "select the second option", "press enter"]
ACTIONS = ["click(12)", 'type(3, "hello")', "click(7)", "scroll(down)", 'select(4, "b")', "press(Enter)"]


#: the smart_resize bounds (min, max pixels) of PromptConfig's defaults, which the samples' prompts use
PIXELS = (56 * 56, 28 * 28 * 1280)
SIZE = {"shortest_edge": PIXELS[0], "longest_edge": PIXELS[1]}


def screenshot(seed: int, width: int = 112, height: int = 84) -> Image:
    rng = np.random.default_rng(seed)
    return Image.from_array(rng.integers(0, 255, (height, width, 3), dtype=np.uint8))


def make_samples(processor, n: int = 6, images: bool = True, seed: int = 0) -> list[LearnerSample]:
    """n samples: chat prompt (with one screenshot when `images`) -> a compact action; advantages
    alternate +1 / -1 over 3 trajectories of 2 groups; rollout log-probs left empty."""
    tok = processor.tokenizer
    out = []
    for i in range(n):
        goal = GOALS[(i + seed) % len(GOALS)]
        content = ([{"type": "image"}] if images else []) + [{"type": "text", "text": f"Goal: {goal}"}]
        text = processor.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True,
                                             tokenize=False)
        imgs = [screenshot(seed * 100 + i)] if images else []
        kwargs = dict(images=[im.to_pil() for im in imgs], size=SIZE) if imgs else {}
        enc = processor(text=[text], return_tensors="pt", **kwargs)
        prompt = enc["input_ids"][0].tolist()
        response = tok(ACTIONS[(i + seed) % len(ACTIONS)] + "<|im_end|>", add_special_tokens=False)["input_ids"]
        out.append(LearnerSample(prompt, response, images=imgs, advantage=1.0 if i % 2 == 0 else -1.0,
                                 group_index=i % 2, trajectory_index=i // 2))
    return out


def naive_logprobs(model, processor, sample: LearnerSample, temperature: float) -> torch.Tensor:
    """log softmax(full logits / T) of the response tokens: what the kernel path must equal."""
    ids = torch.tensor([sample.prompt_ids + sample.response_ids])
    kwargs = {}
    if sample.images:
        enc = processor.image_processor(images=[im.to_pil() for im in sample.images], size=SIZE, return_tensors="pt")
        kwargs = dict(pixel_values=enc["pixel_values"], image_grid_thw=enc["image_grid_thw"],
                      mm_token_type_ids=(ids == model.config.image_token_id).int())
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids), **kwargs).logits[0]  # (P+R, V)
    p, r = len(sample.prompt_ids), len(sample.response_ids)
    logp = torch.log_softmax(logits[p - 1:p + r - 1].double() / temperature, -1)  # (R, V)
    return logp.gather(-1, ids[0, p:, None]).squeeze(-1).float()


def learner_config(**overrides) -> LearnerConfig:
    """A config for the tiny model: AdamW lr 1e-3 with eps 1e-3.

    Why eps 1e-3: Adam's step lr * m / (sqrt(v) + eps) is ~lr * sign(g) for |g| >> eps, so
    with eps 1e-8 a gradient of 3e-8 that differs in its 7th digit between two equivalent runs
    (float summation order) moves its weight by a visibly different amount. With eps 1e-3 the
    step is nearly linear in g below 1e-3, so comparing parameters after a step compares the
    gradients to ~lr / eps x their rounding error, and a 1e-6 tolerance still means something.
    """
    base = dict(objective="grpo", zero_stage=1,
                optim=OptimConfig(lr=1e-3, eps=1e-3, grad_clip=1.0),
                batching=BatchingConfig(token_budget=256, max_samples_per_micro_batch=4),
                checkpoint=CheckpointConfig(keep_last=2))
    base.update(overrides)
    return LearnerConfig(**base)


def learner_run(model_path: str, temperature: float = 1.0, seed: int = 0) -> LearnerRun:
    """What a run would derive for the tiny model: its folder, `seed`, sampling temperature
    `temperature` and the samples' pixel bounds (`PIXELS`)."""
    return LearnerRun(model_path=model_path, seed=seed, temperature=temperature,
                      image_min_pixels=PIXELS[0], image_max_pixels=PIXELS[1])


def with_rollout_logprobs(samples, logprobs):
    """Copies of samples whose rollout log-probs are `logprobs` (as if the policy sampled them)."""
    import dataclasses

    return [dataclasses.replace(s, rollout_logprobs=[float(x) for x in lp]) for s, lp in zip(samples, logprobs)]
