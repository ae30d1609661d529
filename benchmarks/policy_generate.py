"""Policy benchmark on the tiny model: generation throughput and prompt growth per context mode.

1. Generated tokens/s, batched `act` vs one request at a time (greedy, fixed max_new_tokens,
   screenshots of different sizes so batching pads and mixes image grids).
2. Prompt tokens per turn over a 30-turn episode for each context mode (K screenshots,
   optional budget), counted exactly as the processor expands them.

    .venv/bin/python benchmarks/policy_generate.py --family qwen2.5-vl --batch 8 --new-tokens 32

Speed depends on the machine and its load; the figures are printed, never asserted.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def synthetic_episode(n_turns: int, fmt, size=(320, 200)):
    """n_turns recorded turns with reasoning + a call, and the next observation."""
    from PIL import Image as PILImage

    from webrl.actions import Action
    from webrl.policy import Decision, Observation
    from webrl.types import Image

    def obs(t):
        shot = Image.from_pil(PILImage.new("RGB", size, (t * 9 % 256, 120, 200)))
        elements = "\n".join(f'[{i}] button "Item {i} of page {t}"' for i in range(12))
        return Observation(goal="Find the cheapest blue ceramic mug and add it to the cart.",
                           url=f"http://127.0.0.1:8000/shop/{t}", title=f"Shop page {t}", elements_text=elements,
                           feedback=f"Succeed: step {t - 1}" if t else "", step=t, screenshot=shot)

    turns = []
    for t in range(n_turns):
        o = obs(t)
        action = Action.click(t % 12)
        text = f"<think>Page {t} lists items; element {t % 12} looks closest to the goal, so I click it.</think>"
        turns.append(Decision(action, text + fmt.render(action), images=[o.screenshot]).to_turn(o))
    return turns, obs(n_turns)


def throughput(policy, requests, repeats: int = 2) -> dict:
    policy.act(requests[:1])  # warm-up
    out = {}
    for name, run in (("batched", lambda: policy.act(requests)),
                      ("one_by_one", lambda: [policy.act([r])[0] for r in requests])):
        best = None
        for _ in range(repeats):
            t0 = time.perf_counter()
            decisions = run()
            dt = time.perf_counter() - t0
            tokens = sum(len(d.response_ids) for d in decisions)
            best = max(best or 0.0, tokens / dt)
        out[name] = {"tokens_per_s": round(best, 1), "tokens": tokens}
    out["speedup"] = round(out["batched"]["tokens_per_s"] / out["one_by_one"]["tokens_per_s"], 2)
    return out


def prompt_growth(policy, turns, current, modes, budget: int, k: int) -> dict:
    from webrl.policy import Observation, PolicyRequest, PromptBuilder, PromptConfig

    rows = {}
    for mode in modes:
        cfg = PromptConfig(**{**policy.config.prompt.__dict__, "context_mode": mode, "num_screenshots": k,
                              "max_prompt_tokens": budget})
        builder = PromptBuilder(cfg, policy.family, policy.count_text_tokens, factor=policy.builder.factor)
        tokens, dropped = [], []
        for t in range(len(turns) + 1):
            obs = current if t == len(turns) else Observation.from_turn(turns[t], current.goal)
            p = builder.render(PolicyRequest(obs, turns[:t]))
            tokens.append(p.num_tokens)
            dropped.append(p.history_dropped)
        rows[mode] = {"turn_1": tokens[1], "turn_5": tokens[5], "turn_10": tokens[10], "turn_20": tokens[20],
                      "turn_30": tokens[30], "mean": round(sum(tokens) / len(tokens), 1),
                      "dropped_at_30": dropped[30]}
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", default="qwen2.5-vl", choices=["qwen2.5-vl", "qwen3-vl"])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--budget", type=int, default=0, help="prompt token budget for the growth table (0 = none)")
    ap.add_argument("--screenshots", type=int, default=1, help="K screenshots in the growth table")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch default)")
    ap.add_argument("--json", default="", help="write the results here too")
    args = ap.parse_args()

    import torch

    from webrl.models import load_model, tiny_model
    from webrl.policy import (CONTEXT_MODES, GeneratorConfig, GeneratorPolicy, PolicyRequest, PromptConfig,
                              SamplingConfig)

    if args.threads:
        torch.set_num_threads(args.threads)
    path = tiny_model(args.family, out_dir=tempfile.mkdtemp(prefix="bench-tiny-"))
    model, processor = load_model(path)
    cfg = GeneratorConfig(prompt=PromptConfig(min_pixels=1024, max_pixels=64 * 28 * 28),
                          sampling=SamplingConfig(greedy=True, max_new_tokens=args.new_tokens, stop_at_tool_call=False),
                          max_batch_size=args.batch)
    policy = GeneratorPolicy(model, processor, cfg)
    turns, current = synthetic_episode(30, policy.builder.format)
    sizes = [(320, 200), (200, 320), (400, 240), (256, 256)]
    requests = []
    for i in range(args.batch):
        obs = synthetic_episode(i % 3, policy.builder.format, sizes[i % len(sizes)])[1]
        requests.append(PolicyRequest(obs, turns[: i % 3]))
    results = {"family": args.family, "batch": args.batch, "new_tokens": args.new_tokens,
               "torch_threads": torch.get_num_threads(), "throughput": throughput(policy, requests),
               "prompt_tokens_per_turn": prompt_growth(policy, turns, current, CONTEXT_MODES, args.budget,
                                                       args.screenshots)}
    print(json.dumps(results, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
