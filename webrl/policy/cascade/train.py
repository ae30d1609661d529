"""Train decision heads on logged steps with the generator frozen (`webrl heads-train`).

Steps come from stored trajectories (oracle demonstrations and rollout logs, `load_trajectories`:
every turn whose `observation.elements` holds the Set-of-Mark boxes and whose action is
known) or from the synthetic Set-of-Mark task (`webrl.policy.cascade.synthetic`). The generator
never changes, so each step's features are extracted once (one prefill, no cache) and the heads
train for many epochs on the cached features: training costs one forward per step plus a few
seconds.

Held-out steps: `--val-data` (e.g. test-split sandbox demonstrations: tasks on entities never
seen in training) or, without it, a seeded random `--val-fraction` of the training steps.

    webrl demos n=80 out=demos/train split=train "levels=[0,1]" viewport=small
    webrl demos n=40 out=demos/test split=test seed=2 "levels=[0,1]" viewport=small
    python -m webrl.policy.cascade.train --generator CKPT --data demos/train --val-data demos/test

Measured on sandbox demonstrations (2026-11-30; levels 0-1, four sites, 640x480 viewport,
48*28*28 max pixels; 216 train / 102 held-out test-split steps; the tiny random-init Qwen2.5-VL
generator, 2 layers, H = 128; 60 epochs). Held-out accuracy kind / target; chance on the held-out
steps: kind 0.39 (majority class, click), target 0.08 (mean 1/N, N = 5..35 elements):

    layer  query       visual      text        both
    0      last        0.39/0.27   0.39/0.26   0.39/0.37   (layer 0, last: a constant token)
    0      last+goal   0.46/0.40   0.46/0.42   0.46/0.48
    1      last        0.53/0.31   0.53/0.39   0.53/0.44
    1      last+goal   0.72/0.40   0.72/0.45   0.72/0.50
    -1     last        0.58/0.34   0.58/0.36   0.58/0.42
    -1     last+goal   0.71/0.37   0.71/0.42   0.71/0.39

The defaults (last layer, last+goal, visual) beat chance by about 0.3 on both heads even with a
random generator: the goal span gives the goal's words, the last position mixes in the history
(which step of the task this is), and the box-pooled visual tokens carry position and look. The
kind head needs a layer above the embeddings (at layer 0 the last position is a fixed token).

Loss: cross-entropy of kind + target (steps with an element) + value (type/select/answer steps;
the value candidates are the gold target's options plus WRITE). AdamW, full-batch shuffled
mini-batches. Heads are saved beside the generator checkpoint (`<generator>-heads/` by default),
never inside it.

Notation: B batch, N elements (padded), M options (padded), H hidden, K kinds.
"""
from __future__ import annotations

import argparse
import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional, Sequence

import torch

from webrl.actions import Action
from webrl.policy.cascade.features import StepFeatures, action_labels, prefill, step_features
from webrl.policy.types import marked_from_turn
from webrl.policy.cascade.heads import (DecisionHeads, HeadInputs, HeadsConfig, default_heads_dir, heads_loss, save_heads)
from webrl.policy.prompt import PromptConfig
from webrl.policy.types import PolicyRequest


@dataclass
class HeadsTrainConfig:
    """Optimisation of the heads (the generator is frozen)."""

    epochs: int = 60
    """Passes over the training steps."""
    batch_size: int = 32
    """Steps per optimiser step."""
    lr: float = 3e-3
    """AdamW learning rate."""
    weight_decay: float = 0.01
    """AdamW weight decay."""
    seed: int = 0
    """Seed of head initialisation and batch order."""

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.batch_size < 1:
            raise ValueError(f"HeadsTrainConfig.epochs and batch_size must be >= 1, got {self.epochs}, {self.batch_size}")
        if not self.lr > 0 or self.weight_decay < 0:
            raise ValueError(f"HeadsTrainConfig.lr must be > 0 and weight_decay >= 0, got {self.lr}, {self.weight_decay}")


@dataclass
class LabelledStep:
    """Features of one step and its labels (kind index, target index or -1, value index or -1)."""

    features: StepFeatures
    kind: int
    target: int
    value: int


def extract(policy, steps: Sequence[tuple[PolicyRequest, Action]], config: HeadsConfig) -> list[LabelledStep]:
    """One prefill per (request, action) with a `MarkedObservation`; features and labels."""
    out = []
    for request, action in steps:
        pre = prefill(policy, request, config.layer, query_prefix=config.query_prefix)
        feats = step_features(pre, request.observation, config, policy)
        out.append(LabelledStep(feats, *action_labels(action, request.observation.elements, config.kinds)))
    return out


def collate(items: Sequence[LabelledStep]) -> tuple[HeadInputs, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Padded `HeadInputs` and (B,) kind / target / value labels; options are the gold target's."""
    B = len(items)
    N = max(1, max(len(s.features.element_ids) for s in items))
    H = items[0].features.options[0].shape[-1] if items[0].features.options else items[0].features.query.shape[-1]
    gold_opts = [s.features.options[s.target] if s.target >= 0 and s.features.options else torch.zeros(0, H)
                 for s in items]
    M = max(1, max(o.shape[0] for o in gold_opts))
    Fe = next((s.features.elements.shape[-1] for s in items if s.features.elements.numel()), H)
    elements, element_mask = torch.zeros(B, N, Fe), torch.zeros(B, N, dtype=torch.bool)
    options, option_mask = torch.zeros(B, M, H), torch.zeros(B, M, dtype=torch.bool)
    for b, (s, o) in enumerate(zip(items, gold_opts)):
        n = len(s.features.element_ids)
        elements[b, :n], element_mask[b, :n] = s.features.elements, True
        options[b, :o.shape[0]], option_mask[b, :o.shape[0]] = o, True
    query = torch.stack([s.features.query for s in items])  # (B, Fq)
    labels = [torch.tensor([getattr(s, k) for s in items]) for k in ("kind", "target", "value")]
    return HeadInputs(query, elements, element_mask, options, option_mask), *labels


def train_heads(train: Sequence[LabelledStep], hidden_size: int, heads_config: HeadsConfig,
                config: Optional[HeadsTrainConfig] = None) -> tuple[DecisionHeads, list[float]]:
    """Fit heads on cached features; returns the heads (eval mode) and the mean loss per epoch."""
    config = config or HeadsTrainConfig()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        heads = DecisionHeads(hidden_size, heads_config)
    opt = torch.optim.AdamW(heads.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    rng, order, losses = random.Random(config.seed), list(range(len(train))), []
    heads.train()
    for _ in range(config.epochs):
        rng.shuffle(order)
        total = 0.0
        for start in range(0, len(order), config.batch_size):
            x, kind, target, value = collate([train[i] for i in order[start:start + config.batch_size]])
            loss = heads_loss(heads(x), kind, target, value)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.detach().item() * len(kind)
        losses.append(total / len(train))
    return heads.eval(), losses


def evaluate_heads(heads: DecisionHeads, steps: Sequence[LabelledStep]) -> dict[str, float]:
    """Accuracies on `steps`: kind; target (steps with one); value (steps with one); all three together."""
    with torch.no_grad():
        x, kind, target, value = collate(steps)
        out = heads(x)
    k_ok = out.kind.argmax(-1) == kind
    t_ok = torch.where(target >= 0, out.target.argmax(-1) == target, torch.ones_like(k_ok))
    v_ok = torch.where(value >= 0, out.value.argmax(-1) == value, torch.ones_like(k_ok))
    has_t, has_v = target >= 0, value >= 0
    return {"kind": k_ok.float().mean().item(),
            "target": t_ok[has_t].float().mean().item() if has_t.any() else float("nan"),
            "value": v_ok[has_v].float().mean().item() if has_v.any() else float("nan"),
            "step": (k_ok & t_ok & v_ok).float().mean().item(), "n": len(steps)}


TRAJECTORY_FILES = ("demos.jsonl", "trajectories.jsonl")


def trajectory_files(path: str | Path) -> list[Path]:
    """A trajectory file itself, or the `demos.jsonl` / `trajectories.jsonl` files below a folder
    (what `webrl demos` and rollout runs write), sorted."""
    path = Path(path)
    if not path.is_dir():
        return [path]
    found = sorted(p for name in TRAJECTORY_FILES for p in path.rglob(name))
    if not found:
        raise FileNotFoundError(f"no {' or '.join(TRAJECTORY_FILES)} under {path}")
    return found


def logged_steps(paths: Sequence[str | Path], goal_fallback: str = "") -> list[tuple[PolicyRequest, Action]]:
    """(request, action) pairs from stored trajectories (files or folders, `trajectory_files`);
    turns without element boxes are skipped."""
    from webrl.types import load_trajectories

    out = []
    for traj_file in (f for path in paths for f in trajectory_files(path)):
        for traj in load_trajectories(traj_file):
            for t, turn in enumerate(traj.turns):
                if turn.action is None or not turn.observation.elements:
                    continue
                obs = marked_from_turn(turn, traj.goal or goal_fallback)
                out.append((PolicyRequest(obs, history=traj.turns[:t]), turn.action))
    return out


def split_steps(pairs: list, held_out: list, val_fraction: float, seed: int) -> tuple[list, list]:
    """(train, validation) steps: `held_out` when given (all of `pairs` train), else a seeded random
    `val_fraction` of `pairs` (at least one step)."""
    if held_out:
        if not pairs:
            raise SystemExit("heads-train: no usable training steps (turns need observation.elements)")
        return list(pairs), list(held_out)
    if len(pairs) < 2:
        raise SystemExit("heads-train: fewer than 2 usable steps (turns need observation.elements)")
    pairs = list(pairs)
    random.Random(seed).shuffle(pairs)
    n_val = max(1, int(len(pairs) * val_fraction))
    return pairs[n_val:], pairs[:n_val]


def generator_prompt(path, max_pixels: Optional[int] = None, default_max_pixels: int = 96 * 28 * 28):
    """The `PromptConfig` the frozen generator at `path` reads while the heads learn from it.

    A checkpoint with `webrl_prompt.json` (shipped ones, SFT outputs) gets exactly the settings it
    was trained with: the heads must see the
    states the cascade will see. `max_pixels`, when given, overrides the screenshot size. Without
    the file (a random-init model): Set-of-Mark JSON calls, no reasoning, min_pixels 1024,
    max_pixels `max_pixels` or `default_max_pixels`.
    """
    from webrl.policy.trained_prompt import trained_prompt

    settings = trained_prompt(str(path))
    if not settings:
        return PromptConfig(action_format="som", think=False, min_pixels=1024,
                            max_pixels=max_pixels or default_max_pixels)
    if max_pixels:
        settings.update(max_pixels=max_pixels, min_pixels=min(settings.get("min_pixels", max_pixels), max_pixels))
    return PromptConfig(**settings)


def heads_train_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="webrl heads-train", description=__doc__.split("\n")[0])
    p.add_argument("--generator", required=True, help="generator checkpoint folder (stays frozen)")
    p.add_argument("--data", nargs="*", default=[], help="trajectory files/folders (load_trajectories)")
    p.add_argument("--synthetic", type=int, default=0, help="add N synthetic Set-of-Mark steps")
    p.add_argument("--val-data", nargs="*", default=[],
                   help="held-out trajectory files/folders (e.g. test-split demos); replaces the random split")
    p.add_argument("--val-fraction", type=float, default=0.2, help="held-out share when --val-data is not given")
    p.add_argument("--out", default=None, help="heads folder (default: <generator>-heads)")
    p.add_argument("--layer", type=int, default=-1, help="hidden_states index the heads read (-1 = last layer)")
    p.add_argument("--query", default="last+goal", help="prompt state: last, or last+goal (plus the goal tokens' mean)")
    p.add_argument("--query-prefix", default="", help='text fed before the query is read, e.g. "<tool_call>"')
    p.add_argument("--target-features", default="visual", help="element representation: visual, text or both")
    p.add_argument("--epochs", type=int, default=60, help="passes over the training steps")
    p.add_argument("--lr", type=float, default=3e-3, help="AdamW learning rate")
    p.add_argument("--seed", type=int, default=0, help="seed of head initialisation, batch order and the split")
    p.add_argument("--max-pixels", type=int, default=None,
                   help="screenshot area bound (default: the generator's trained prompt, else 96*28*28)")
    return p


def heads_train_main(args: Optional[Sequence[str]] = None) -> dict:
    """CLI entry: extract features with the frozen generator, train, evaluate, save. Returns metrics."""
    from webrl.models import load_model
    from webrl.policy.generator import GeneratorConfig, GeneratorPolicy
    from webrl.policy.cascade.synthetic import chance_levels, make_steps

    a = heads_train_parser().parse_args(args)
    hc = HeadsConfig(layer=a.layer, query=a.query, query_prefix=a.query_prefix, target_features=a.target_features)
    model, processor = load_model(a.generator)
    policy = GeneratorPolicy(model, processor, GeneratorConfig(prompt=generator_prompt(a.generator, a.max_pixels)))
    train_pairs, val_pairs = split_steps(logged_steps(a.data) + [(s.request, s.action) for s in
                                                                  make_steps(a.synthetic, seed=a.seed)],
                                         logged_steps(a.val_data), a.val_fraction, a.seed)
    t0 = time.perf_counter()
    val, train = extract(policy, val_pairs, hc), extract(policy, train_pairs, hc)
    heads, losses = train_heads(train, model.config.text_config.hidden_size, hc,
                                HeadsTrainConfig(epochs=a.epochs, lr=a.lr, seed=a.seed))
    metrics = {"train": evaluate_heads(heads, train), "val": evaluate_heads(heads, val),
               "val_chance": chance_levels(val_pairs), "final_loss": losses[-1],
               "seconds": time.perf_counter() - t0, "config": asdict(hc)}
    out = save_heads(heads, a.out or default_heads_dir(a.generator), a.generator, metrics)
    print(json.dumps({"out": str(out), **metrics}, indent=1))
    return metrics


if __name__ == "__main__":
    heads_train_main()
