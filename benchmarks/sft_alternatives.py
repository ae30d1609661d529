"""Which action head and vocabulary learn best per CPU-minute: a pointer over the listed elements
vs generating id digits, and the recipe's tokenizer/prompt vs the project's old default.

    .venv/bin/python benchmarks/sft_alternatives.py [--minutes 6] [--seed 0] [--threads 2]
        --train runs/demos-a/demos.jsonl runs/demos-b/demos.jsonl --test runs/demos-test/demos.jsonl
        [--max-demos N] [--variants digits pointer ...]
        [--out runs/sft_alternatives.json]

Pipeline, per variant (plain torch loops: no Ray, no DeepSpeed):
  1. A tiny random-init Qwen2.5-VL (hidden 128 x 2 layers, `webrl.models.tiny_model`, seed
     `--seed`), its tokenizer trained on `corpus_lines(variant.corpus)` with `variant.vocab_size`.
  2. Turn samples of the oracle demonstrations through `sft_samples_from_trajectory` with a
     `GeneratorPolicy` of the recipe's prompt (webrl/configs/tiny_webagent_sft.yaml: compact
     actions, no thinking, one 112x112 screenshot = 12 visual tokens, 512-token budget), plus
     for each turn the token positions of every `[i] role "name"` line of the CURRENT element
     list (`element_token_spans`). Screenshots are encoded once, not every step.
  3. Training for `--minutes` of wall clock (evaluation not counted), AdamW lr 2e-3, 50 linear
     warm-up steps, clip 1.0, batch 32, samples in one seeded order shared by all variants.
       digits   next-token loss on the response (`<tool_call>click(3)</tool_call>`), the recipe.
       pointer  e_i = mean of the final hidden states over element line i, q = hidden state of
                the last prompt position, score_i = (W q) . e_i / sqrt(H) (W: H x H), cross-
                entropy over the listed elements for the target; the action kind from a linear
                head on q (cross-entropy over ACTION_KINDS). No response tokens are fed.
  4. Held-out (test-split demos): digits decodes greedily (batched, 16 tokens), parses with
     `parse_compact` and reports exact action match over all steps and element / kind accuracy
     on steps whose action has a listed element; pointer reports element accuracy (argmax
     score) and kind accuracy on the same steps. Both also report kind accuracy over all steps
     (stop / press turns included). Chance = mean 1/#elements listed on the element steps.
     Digits also reports `policy_format_ok`: the share of responses the rollout policy's own
     parser (`CompactFormat.parse`, `<tool_call>...</tool_call>` only) accepts, i.e. actions a
     rollout would execute; exact match is scored on the call inside, bare calls included.

Departures and limits: the pointer variant predicts no text arguments (typed text, select
option, answer), so it is compared with digits on the element and the kind only; its exact-
action figure is not defined. The pointer reads the element lines as the prompt renders them
(selected values and options included), a richer e_i than the name alone. The digits-vocab1024
variant has a different embedding size, so its random init differs from the other two (digits
and pointer start from identical weights). The recipe's level curriculum (level 0 first) is not
reproduced: every variant sees one shuffled mix of the demos. Screenshots are kept encoded in
memory (about 0.2 MB a turn at 12 visual tokens).

Measured 2026-11-30 on the shared 2-core CPU, `--minutes 5 --threads 1` (the other core ran
the shipped checkpoint's SFT), train = the 645 widgets episodes of webrl:tiny-webagent's model
card (1,820 turns), test = `webrl demos n=120 split=test sites=[widgets] levels=[0,1]
viewport=640x480 seed=7` (349 steps, 210 with an element; chance of a random listed element
0.119), load average 1.5-2.5:

    variant           samples  tokens/s  prompt tokens  exact  parses  element  kind   kind(all)
    digits            5440     7485      421            0.370  0.948   0.124    0.867  0.871
    pointer           5760     7822      421            -      -       0.533    0.786  0.822
    digits-vocab1024  2848     5719      588            0.244  0.711   0.067    0.471  0.530

In the same five minutes the pointer finds the named element on 53% of held-out element steps;
generating id digits stays at chance (12%) and mostly learns the format, the kind and stop().
The recipe's tokenizer and short prompt (digits) see 1.9x the samples of the old default
(digits-vocab1024: 1024 tokens, the long v1 prompt) and learn the format and kinds faster.

Notation: B samples in a batch, T padded length, H hidden size, N elements listed (padded to
the batch's largest list), K action kinds.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import torch
from torch import Tensor, nn

from webrl.actions import ACTION_KINDS, Action, format_compact, parse_compact

HEADS = ("digits", "pointer")
STOP_TEXTS = ("<|im_end|>", "<|endoftext|>")


@dataclass
class Variant:
    """One alternative trained and evaluated by this benchmark."""

    name: str
    """Row label in the table."""
    head: str = "digits"
    """"digits" (next-token loss on the response) or "pointer" (scores over listed elements)."""
    corpus: str = "sandbox"
    """Tokenizer corpus, `webrl.models.corpus.corpus_lines` name: "sandbox" or "default"."""
    vocab_size: int = 2048
    """Tokenizer vocabulary bound (= embedding rows)."""
    prompt_version: str = "brief"
    """System prompt webrl/prompts/compact_<version>.txt: "brief" or "v1"."""

    def __post_init__(self) -> None:
        if self.head not in HEADS:
            raise ValueError(f"Variant.head must be one of {HEADS}, got {self.head!r}")
        if self.corpus not in ("sandbox", "default"):
            raise ValueError(f"Variant.corpus must be 'sandbox' or 'default', got {self.corpus!r}")
        if self.prompt_version not in ("brief", "v1"):
            raise ValueError(f"Variant.prompt_version must be 'brief' or 'v1', got {self.prompt_version!r}")
        if self.vocab_size < 300:
            raise ValueError(f"Variant.vocab_size must be >= 300 (bytes + specials), got {self.vocab_size}")


VARIANTS = {v.name: v for v in (Variant("digits"), Variant("pointer", head="pointer"),
                                Variant("digits-vocab1024", corpus="default", vocab_size=1024, prompt_version="v1"))}


@dataclass
class StepExample:
    """One demonstration turn. prompt_ids (P,), response_ids (R,); element_positions[i] = token
    positions of listed element i's line; target = index of the action's element in the list
    (-1: none or not listed); kind = index in ACTION_KINDS; pixels (patches, F), grid (I, 3)."""

    prompt_ids: list[int]
    response_ids: list[int]
    element_positions: list[list[int]]
    target: int
    kind: int
    action: Action
    pixels: Optional[Tensor] = None
    grid: Optional[Tensor] = None


def element_token_spans(tokenizer, prompt_text: str, prompt_ids: Sequence[int], image_counts: Sequence[int],
                        element_ids: Sequence[int]) -> list[list[int]]:
    """Token positions of each element's line `[id] role "name" ...` in the prompt's CURRENT
    (last) element list, in `element_ids` order ([] for an id that is not listed)."""
    from webrl.policy.cascade.features import element_line_spans, span_tokens, token_offsets

    offsets, expanded = token_offsets(tokenizer, prompt_text, prompt_ids, "<|image_pad|>", image_counts)
    lines = element_line_spans(expanded, list(element_ids))
    return [span_tokens(offsets, *lines[e]) if e in lines else [] for e in element_ids]


def pooling_matrix(positions: Sequence[Sequence[Sequence[int]]], length: int) -> tuple[Tensor, Tensor]:
    """(pool (B, N, T) with 1/len on each element's positions, element_mask (B, N) bool)."""
    n = max((len(p) for p in positions), default=0)
    pool = torch.zeros(len(positions), n, length)
    mask = torch.zeros(len(positions), n, dtype=torch.bool)
    for b, elems in enumerate(positions):
        for i, pos in enumerate(elems):
            if pos:
                pool[b, i, pos] = 1.0 / len(pos)
                mask[b, i] = True
    return pool, mask


def pointer_scores(hidden: Tensor, pool: Tensor, element_mask: Tensor, query_index: Tensor, proj: Tensor) -> Tensor:
    """(B, N) score_i = (W q) . e_i / sqrt(H), -inf where element_mask is False.

    hidden (B, T, H); pool (B, N, T); query_index (B,) last prompt position; proj W (H, H).
    """
    H = hidden.shape[-1]
    elements = pool @ hidden  # (B, N, H) mean over each line's tokens
    query = hidden[torch.arange(hidden.shape[0]), query_index] @ proj.T  # (B, H)
    scores = (elements @ query.unsqueeze(-1)).squeeze(-1) / H ** 0.5  # (B, N)
    return scores.masked_fill(~element_mask, float("-inf"))


def accuracy(predicted: Sequence, expected: Sequence) -> float:
    """Share of positions where predicted == expected (nan for no positions)."""
    if not expected:
        return float("nan")
    return sum(p == e for p, e in zip(predicted, expected)) / len(expected)


def bare_call(text: str) -> str:
    """The call of a response with its `<tool_call>` wrapper (what `CompactFormat` renders for the
    demos' targets) taken off when present; a bare `click(3)` passes as is."""
    from webrl.policy.formats import extract_call

    body = extract_call(text) if "<tool_call>" in text else text
    return body if isinstance(body, str) else text


def decode_metrics(texts: Sequence[str], examples: Sequence[StepExample]) -> dict[str, float]:
    """Digits held-out figures: exact action match (all steps, both sides through the compact
    grammar), element and kind accuracy on steps with a listed target element."""
    parsed = [parse_compact(bare_call(t)) for t in texts]
    canon = [parse_compact(format_compact(ex.action)) for ex in examples]
    with_el = [j for j, ex in enumerate(examples) if ex.target >= 0]
    pred_el = [getattr(parsed[j], "element", None) for j in with_el]
    pred_kind = [getattr(parsed[j], "kind", None) for j in with_el]
    return {"exact_action": accuracy([p if isinstance(p, Action) else None for p in parsed], canon),
            "element_acc": accuracy(pred_el, [examples[j].action.element for j in with_el]),
            "kind_acc": accuracy(pred_kind, [examples[j].action.kind for j in with_el]),
            "kind_acc_all": accuracy([getattr(p, "kind", None) for p in parsed], [ex.action.kind for ex in examples])}


def chance_level(examples: Sequence[StepExample]) -> float:
    """Mean 1/#elements listed over the steps with a listed target element."""
    picks = [1.0 / len(ex.element_positions) for ex in examples if ex.target >= 0]
    return sum(picks) / len(picks) if picks else float("nan")


def build_policy(variant: Variant, seed: int, out_dir: str):
    """A tiny random-init model of the variant's tokenizer, wrapped in the recipe's GeneratorPolicy."""
    from webrl.models import tiny_model
    from webrl.models.corpus import corpus_lines
    from webrl.policy import GeneratorConfig, GeneratorPolicy, PromptConfig

    _, model, processor = tiny_model("qwen2.5-vl", corpus=corpus_lines(variant.corpus, seed), out_dir=out_dir,
                                     seed=seed, hidden=128, layers=2, vocab_size=variant.vocab_size,
                                     return_objects=True)
    prompt = PromptConfig(action_format="compact", prompt_version=variant.prompt_version, think=False,
                          max_prompt_tokens=512, num_screenshots=1, max_pixels=12544)
    return GeneratorPolicy(model, processor, GeneratorConfig(prompt=prompt))


def examples_from_trajectories(trajectories, policy) -> list[StepExample]:
    """Every demonstration turn as a StepExample (prompt rendered as in rollout and SFT)."""
    from webrl.learner.samples import encode_images
    from webrl.policy import Observation, PolicyRequest, image_token_count, sft_samples_from_trajectory

    cfg, out = policy.config.prompt, []
    for traj in trajectories:
        for sample in sft_samples_from_trajectory(traj, policy):
            t = int(sample.source.rsplit("#", 1)[1])
            turn = traj.turns[t]
            if turn.action is None:  # a logged parse error: no kind or element to learn
                continue
            prompt = policy.builder.render(PolicyRequest(Observation.from_turn(turn, traj.goal), traj.turns[:t]))
            counts = [image_token_count(*im.size, policy.builder.factor, cfg.min_pixels, cfg.max_pixels)
                      for im in prompt.images]
            ids = [int(e["id"]) for e in turn.observation.elements]
            positions = element_token_spans(policy.tokenizer, prompt.text, sample.prompt_ids, counts, ids)
            listed = [i for i, p in zip(ids, positions) if p]
            positions = [p for p in positions if p]
            action = turn.action
            target = listed.index(action.element) if action.element in listed else -1
            pixels = grid = None
            if sample.images:
                pixels, grid = encode_images(sample.images, policy.processor, cfg.min_pixels, cfg.max_pixels)
            out.append(StepExample(sample.prompt_ids, sample.response_ids, positions, target,
                                   ACTION_KINDS.index(action.kind), action, pixels, grid))
    return out


@dataclass
class BatchTensors:
    """input_ids / attention_mask / loss_mask (B, T) right-padded; query_index (B,);
    pool (B, N, T), element_mask (B, N); target, kind (B,); pixels / grid of all images."""

    input_ids: Tensor
    attention_mask: Tensor
    loss_mask: Tensor
    query_index: Tensor
    pool: Tensor
    element_mask: Tensor
    target: Tensor
    kind: Tensor
    pixels: Optional[Tensor] = None
    grid: Optional[Tensor] = None
    tokens: int = 0


def make_batch(examples: Sequence[StepExample], pad_id: int, with_response: bool) -> BatchTensors:
    rows = [ex.prompt_ids + (ex.response_ids if with_response else []) for ex in examples]
    T = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), T), pad_id, dtype=torch.long)  # (B, T)
    attention_mask = torch.zeros((len(rows), T), dtype=torch.long)
    loss_mask = torch.zeros((len(rows), T), dtype=torch.bool)
    for b, (ex, r) in enumerate(zip(examples, rows)):
        input_ids[b, :len(r)] = torch.tensor(r)
        attention_mask[b, :len(r)] = 1
        loss_mask[b, len(ex.prompt_ids):len(r)] = True
    pool, element_mask = pooling_matrix([ex.element_positions for ex in examples], T)
    imaged = [ex for ex in examples if ex.pixels is not None]
    return BatchTensors(input_ids, attention_mask, loss_mask,
                        torch.tensor([len(ex.prompt_ids) - 1 for ex in examples]), pool, element_mask,
                        torch.tensor([ex.target for ex in examples]), torch.tensor([ex.kind for ex in examples]),
                        torch.cat([ex.pixels for ex in imaged]) if imaged else None,
                        torch.cat([ex.grid for ex in imaged]) if imaged else None, sum(len(r) for r in rows))


class PointerHeads(nn.Module):
    """W (H x H) of the element score and the kind head (H -> K). W starts at I + N(0, 0.02^2), so
    the first scores are the plain similarity q . e_i / sqrt(H) rather than noise."""

    def __init__(self, hidden: int, kinds: int = len(ACTION_KINDS)):
        super().__init__()
        self.proj = nn.Parameter(torch.eye(hidden) + 0.02 * torch.randn(hidden, hidden))
        self.kind = nn.Linear(hidden, kinds)


def final_hidden(model, batch: BatchTensors) -> Tensor:
    """(B, T, H) last hidden states of the multimodal backbone."""
    out = model.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, pixel_values=batch.pixels,
                      image_grid_thw=batch.grid, use_cache=False,
                      mm_token_type_ids=(batch.input_ids == model.config.image_token_id).int())
    return out.last_hidden_state


def digits_loss(model, hidden: Tensor, batch: BatchTensors) -> Tensor:
    """Mean next-token cross-entropy over response tokens (position t-1 predicts token t)."""
    mask = batch.loss_mask[:, 1:]  # (B, T-1)
    logits = model.lm_head(hidden[:, :-1][mask])  # (M, V) only the response positions
    return nn.functional.cross_entropy(logits, batch.input_ids[:, 1:][mask])


def pointer_loss(heads: PointerHeads, hidden: Tensor, batch: BatchTensors) -> Tensor:
    """Element cross-entropy (steps with a listed target) + kind cross-entropy (all steps)."""
    query = hidden[torch.arange(hidden.shape[0]), batch.query_index]  # (B, H)
    loss = nn.functional.cross_entropy(heads.kind(query), batch.kind)
    has = batch.target >= 0
    if has.any():
        scores = pointer_scores(hidden[has], batch.pool[has], batch.element_mask[has], batch.query_index[has],
                                heads.proj)  # (B', N)
        loss = loss + nn.functional.cross_entropy(scores, batch.target[has])
    return loss


def train(variant: Variant, policy, heads: Optional[PointerHeads], examples: list[StepExample], order: list[int],
          seconds: float, batch_size: int = 32, lr: float = 2e-3, warmup: int = 50, max_steps: int = 0) -> dict:
    """Train until `seconds` of wall clock have passed (or `max_steps` steps, 0 = no cap); cycles
    through `order` (sample indices)."""
    model = policy.model
    model.train()
    params = list(model.parameters()) + (list(heads.parameters()) if heads is not None else [])
    optim = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(optim, lambda s: min(1.0, (s + 1) / warmup))
    step = seen = tokens = 0
    losses, t0 = [], time.monotonic()
    while time.monotonic() - t0 < seconds and not (max_steps and step >= max_steps):
        idx = [order[(step * batch_size + k) % len(order)] for k in range(min(batch_size, len(order)))]
        batch = make_batch([examples[i] for i in idx], policy.backend.pad_id, with_response=variant.head == "digits")
        hidden = final_hidden(model, batch)
        loss = digits_loss(model, hidden, batch) if heads is None else pointer_loss(heads, hidden, batch)
        optim.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(params, 1.0)
        optim.step()
        sched.step()
        step, seen, tokens = step + 1, seen + len(idx), tokens + batch.tokens
        losses.append(float(loss.detach()))
    wall = time.monotonic() - t0
    model.eval()
    return {"steps": step, "samples_seen": seen, "tokens_per_s": tokens / max(wall, 1e-9), "train_s": wall,
            "final_loss": statistics.mean(losses[-10:]) if losses else float("nan")}


@torch.no_grad()
def greedy_texts(policy, examples: Sequence[StepExample], max_new_tokens: int = 16, batch_size: int = 32) -> list[str]:
    """Batched greedy decode (left-padded) of each example's prompt; stop tokens removed."""
    out = []
    for s in range(0, len(examples), batch_size):
        chunk = examples[s:s + batch_size]
        T = max(len(ex.prompt_ids) for ex in chunk)
        ids = torch.full((len(chunk), T), policy.backend.pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for b, ex in enumerate(chunk):
            ids[b, T - len(ex.prompt_ids):] = torch.tensor(ex.prompt_ids)
            mask[b, T - len(ex.prompt_ids):] = 1
        imaged = [ex for ex in chunk if ex.pixels is not None]
        extra = dict(pixel_values=torch.cat([ex.pixels for ex in imaged]),
                     image_grid_thw=torch.cat([ex.grid for ex in imaged])) if imaged else {}
        gen = policy.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                                    do_sample=False, eos_token_id=policy.stop_ids, pad_token_id=policy.backend.pad_id,
                                    suppress_tokens=policy.backend.suppress_ids or None,
                                    mm_token_type_ids=(ids == policy.model.config.image_token_id).int(), **extra)
        for row in gen[:, T:].tolist():
            text = policy.tokenizer.decode(row, skip_special_tokens=False)
            for stop in STOP_TEXTS:
                text = text.split(stop)[0]
            out.append(text)
    return out


@torch.no_grad()
def evaluate(variant: Variant, policy, heads: Optional[PointerHeads], examples: list[StepExample]) -> dict:
    """Held-out figures of one trained variant (see the module docstring)."""
    if heads is None:
        texts = greedy_texts(policy, examples)
        # share the rollout policy's own parser accepts (CompactFormat wants a <tool_call>)
        format_ok = accuracy([isinstance(policy.builder.format.parse(t), Action) for t in texts], [True] * len(texts))
        return {**decode_metrics(texts, examples), "policy_format_ok": format_ok}
    scores, kinds = [], []
    for s in range(0, len(examples), 32):
        batch = make_batch(examples[s:s + 32], policy.backend.pad_id, with_response=False)
        hidden = final_hidden(policy.model, batch)
        score = pointer_scores(hidden, batch.pool, batch.element_mask, batch.query_index, heads.proj)  # (B, N)
        scores += [row[:len(ex.element_positions)] for row, ex in zip(score, examples[s:s + 32])]
        kinds += heads.kind(hidden[torch.arange(hidden.shape[0]), batch.query_index]).argmax(-1).tolist()
    with_el = [j for j, ex in enumerate(examples) if ex.target >= 0]
    return {"exact_action": float("nan"), "policy_format_ok": float("nan"),
            "element_acc": accuracy([int(scores[j].argmax()) for j in with_el], [examples[j].target for j in with_el]),
            "kind_acc": accuracy([kinds[j] for j in with_el], [examples[j].kind for j in with_el]),
            "kind_acc_all": accuracy(kinds, [ex.kind for ex in examples])}


def run_variant(variant: Variant, train_trajs, test_trajs, args, work: str) -> dict:
    load_start = os.getloadavg()[0]
    torch.manual_seed(args.seed)
    policy = build_policy(variant, args.seed, tempfile.mkdtemp(prefix=f"{variant.name}-", dir=work))
    train_ex = examples_from_trajectories(train_trajs, policy)
    test_ex = examples_from_trajectories(test_trajs, policy)
    order = list(range(len(train_ex)))
    random.Random(args.seed).shuffle(order)
    heads = None
    if variant.head == "pointer":
        torch.manual_seed(args.seed)
        heads = PointerHeads(policy.model.config.text_config.hidden_size)
    fit = train(variant, policy, heads, train_ex, order, args.minutes * 60)
    return {"variant": variant.name, **fit, **evaluate(variant, policy, heads, test_ex),
            "median_prompt_tokens": statistics.median(len(ex.prompt_ids) for ex in train_ex),
            "train_steps_available": len(train_ex), "test_steps": len(test_ex),
            "test_element_steps": sum(ex.target >= 0 for ex in test_ex), "chance_element": chance_level(test_ex),
            "load_start": load_start, "load_end": os.getloadavg()[0]}


COLUMNS = ("variant", "samples_seen", "tokens_per_s", "median_prompt_tokens", "final_loss", "exact_action",
           "policy_format_ok", "element_acc", "kind_acc", "kind_acc_all", "chance_element", "test_element_steps",
           "load_start", "load_end")


def table(rows: Sequence[dict]) -> str:
    def cell(v):
        return f"{v:.3f}" if isinstance(v, float) and abs(v) < 10 else (f"{v:.0f}" if isinstance(v, float) else str(v))
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cell(r[c]) for c in COLUMNS) + " |" for r in rows]
    return "\n".join(lines)


def load_demos(paths: Sequence[str], limit: int) -> list:
    from webrl.types import load_trajectories

    trajs = [t for p in paths for t in load_trajectories(p)]
    return trajs[:limit] if limit else trajs


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=6.0, help="training wall clock per variant")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    p.add_argument("--train", nargs="+", required=True, help="train-split demos.jsonl files (`webrl demos`)")
    p.add_argument("--test", nargs="+", required=True, help="test-split demos.jsonl files (`webrl demos split=test`)")
    p.add_argument("--max-demos", type=int, default=0, help="first N trajectories of train and of test (0 = all)")
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--out", default="runs/sft_alternatives.json")
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(args.threads)
    train_trajs, test_trajs = load_demos(args.train, args.max_demos), load_demos(args.test, args.max_demos)
    rows = []
    with tempfile.TemporaryDirectory(prefix="sft-alt-") as work:
        for name in args.variants:
            rows.append(run_variant(VARIANTS[name], train_trajs, test_trajs, args, work))
            print(f"{name}: {json.dumps(rows[-1])}", flush=True)
    text = table(rows)
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "rows": rows, "table": text}, indent=1))
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
