"""Generator alone vs the decision-heads cascade at three thresholds, on held-out steps.

    .venv/bin/python benchmarks/cascade.py [--family qwen2.5-vl] [--sft-steps 150] [--train 240] [--eval 60]

Pipeline (all on CPU, everything built here, nothing downloaded):
1. a tiny Qwen-VL generator (`tiny_model`), briefly supervised (`--sft-steps` AdamW steps, loss
   on the response tokens only) on synthetic Set-of-Mark steps (`webrl.policy.synthetic_som`)
   in the "som" tool-call format without reasoning;
2. heads trained on the frozen generator's features of the same training steps;
3. on held-out steps (new pages and goals, same generator of pages): greedy decisions by the
   generator alone and by the cascade at `--thresholds`.

Reported per policy: step success (exact action match, typed text included), task success (the
synthetic tasks are one step long, so it equals step success here: stated, not hidden),
generated tokens per step, wall time per step, and the share of steps the heads decided.
The sandbox sites were not used: their demonstrations were not ready when this was written.

Measured 2026-11-30 on the shared 2-core CPU (load average ~25, so wall times are inflated),
`--sft-steps 60 --train 120 --eval 30`, Qwen2.5-VL tiny, goals by colour. Chance: target 0.23,
kind 0.47 (majority). Heads held out: kind 0.97, target 0.27, value 0.90.

    policy          step/task success  generated tokens/step  s/step  heads share
    generator       0.00               48.0 (never stops)     6.9     0.00
    cascade @0.5    0.30               33.1                   5.1     0.40
    cascade @0.8    0.13               41.6                   5.5     0.13
    cascade @0.95   0.10               43.2                   3.9     0.10

The 60-step generator has not learned the format, so "comparable success with less than half
the tokens" cannot be tested at this budget: rerun with more --sft-steps and --train.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def sft(policy, steps, n_steps: int, lr: float, seed: int) -> list[float]:
    """Response-only cross-entropy on rendered prompts; one step per optimiser update."""
    model = policy.model
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    rng, losses = random.Random(seed), []
    for i in range(n_steps):
        s = rng.choice(steps)
        prompt = policy.builder.render(s.request)
        batch = policy.encode([prompt])
        target = policy.tokenizer(policy.builder.format.render(s.action) + "<|im_end|>",
                                  add_special_tokens=False)["input_ids"]
        P = batch["input_ids"].shape[1]
        ids = torch.cat([batch["input_ids"], torch.tensor([target])], 1)
        mm = torch.cat([batch["mm_token_type_ids"], torch.zeros(1, len(target), dtype=torch.long)], 1)
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids), mm_token_type_ids=mm,
                    pixel_values=batch["pixel_values"], image_grid_thw=batch["image_grid_thw"])
        logits = out.logits[0, P - 1:-1]
        loss = torch.nn.functional.cross_entropy(logits.float(), torch.tensor(target))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.detach().item())
    model.eval()
    return losses


def evaluate(policy, steps) -> dict:
    """Step success, generated tokens, wall time per step and heads share of `policy` on `steps`."""
    ok = tokens = heads = 0
    t0 = time.perf_counter()
    for s in steps:
        d = policy.act([s.request])[0]
        ok += int(d.action == s.action)
        tokens += getattr(d, "generated_tokens", len(d.response_ids))
        heads += int(getattr(d, "decided_by", "generator").startswith("heads"))
    n = len(steps)
    return {"step_success": ok / n, "task_success": ok / n, "generated_tokens_per_step": tokens / n,
            "seconds_per_step": (time.perf_counter() - t0) / n, "heads_share": heads / n, "n": n}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--family", default="qwen2.5-vl")
    p.add_argument("--sft-steps", type=int, default=150)
    p.add_argument("--sft-lr", type=float, default=2e-3)
    p.add_argument("--train", type=int, default=240)
    p.add_argument("--eval", type=int, default=60)
    p.add_argument("--thresholds", type=float, nargs=3, default=[0.5, 0.8, 0.95])
    p.add_argument("--refer-by", default="color")
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    torch.manual_seed(0)
    from webrl.models import tiny_model
    from webrl.policy import GeneratorConfig, GeneratorPolicy, PromptConfig, SamplingConfig
    from webrl.policy.cascade import CascadeConfig, CascadePolicy
    from webrl.policy.heads import HeadsConfig
    from webrl.policy.heads_train import evaluate_heads, extract, train_heads
    from webrl.policy.synthetic_som import SyntheticConfig, chance_levels, make_steps

    _, model, processor = tiny_model(a.family, seed=0, return_objects=True)
    gen = GeneratorPolicy(model, processor, GeneratorConfig(
        prompt=PromptConfig(action_format="som", think=False, min_pixels=1024, max_pixels=96 * 28 * 28),
        sampling=SamplingConfig(greedy=True, max_new_tokens=48)))
    syn = SyntheticConfig(refer_by=a.refer_by)
    train_steps, eval_steps = make_steps(a.train, seed=1, config=syn), make_steps(a.eval, seed=2, config=syn)
    report = {"family": a.family, "chance": chance_levels(eval_steps), "args": vars(a)}
    t0 = time.perf_counter()
    losses = sft(gen, train_steps, a.sft_steps, a.sft_lr, seed=0)
    report["sft"] = {"steps": a.sft_steps, "first_loss": losses[:1], "last10_loss": sum(losses[-10:]) / 10,
                     "seconds": time.perf_counter() - t0}
    hc = HeadsConfig()
    t0 = time.perf_counter()
    feats = extract(gen, [(s.request, s.action) for s in train_steps], hc)
    heads, _ = train_heads(feats, model.config.text_config.hidden_size, hc)
    held = extract(gen, [(s.request, s.action) for s in eval_steps], hc)
    report["heads"] = {"train": evaluate_heads(heads, feats), "held_out": evaluate_heads(heads, held),
                       "seconds": time.perf_counter() - t0}
    report["generator"] = evaluate(gen, eval_steps)
    for th in a.thresholds:
        report[f"cascade@{th}"] = evaluate(CascadePolicy(gen, heads, CascadeConfig(threshold=th)), eval_steps)
    print(json.dumps(report, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
    return report


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
