"""Learner step throughput and memory: ZeRO 0/1/2/3 on one and two CPU ranks (tiny model).

    python benchmarks/learner_step.py [--samples 16] [--steps 3] [--ranks 1 2] [--stages 0 1 2 3]

Each configuration builds a `LearnerGroup` (ranks as spawned processes, gloo; `--ray` puts them
in Ray actors instead, which changes nothing in the step itself), runs one warm-up
update and `--steps` timed GRPO updates (one optimizer step each) on the same batch of image
turns, and reports:
  tokens/s       real (unpadded) prompt + response tokens trained per second of wall time
  step ms        wall time of one update (all ranks)
  peak RSS MiB   max over ranks of the process's resident-set high-water mark (includes
                 Python, torch, transformers, DeepSpeed and the model: mostly fixed cost)
  growth MiB     max over ranks of (peak RSS after the steps - RSS before the first step):
                 the training step's own working memory (grads, optimizer state, activations)
On a shared 2-core machine the timings are noisy; compare configurations within one run.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


def build_samples(processor, n: int):
    import numpy as np

    from webrl.learner import LearnerSample
    from webrl.types import Image

    size = {"shortest_edge": 56 * 56, "longest_edge": 28 * 28 * 1280}
    tok, out = processor.tokenizer, []
    for i in range(n):
        img = Image.from_array(np.random.default_rng(i).integers(0, 255, (168, 224, 3), dtype=np.uint8))
        content = [{"type": "image"}, {"type": "text", "text": f"Goal: open item {i} and add it to the cart"}]
        text = processor.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True,
                                             tokenize=False)
        prompt = processor(text=[text], images=[img.to_pil()], size=size, return_tensors="pt")["input_ids"][0]
        response = tok(f"<think>item {i} is visible</think><tool_call>click({i})</tool_call><|im_end|>",
                       add_special_tokens=False)["input_ids"]
        out.append(LearnerSample(prompt.tolist(), response, images=[img], advantage=1.0 if i % 2 else -1.0,
                                 group_index=i % 4, trajectory_index=i))
    return out


def measure(model_path, samples, stage: int, ranks: int, steps: int, use_ray: bool) -> dict:
    import dataclasses

    from webrl.learner import BatchingConfig, LearnerConfig, LearnerGroup, OptimConfig

    config = LearnerConfig(model_path=model_path, zero_stage=stage, optim=OptimConfig(lr=1e-4),
                           batching=BatchingConfig(token_budget=2048))
    group = LearnerGroup(config, ranks, use_ray=use_ray)
    try:
        lp = group.compute_logprobs(samples).logprobs
        samples = [dataclasses.replace(s, rollout_logprobs=x.tolist()) for s, x in zip(samples, lp)]
        group.update(samples)  # warm-up: first-touch allocations, ZeRO-3 trace
        before = group._all("memory_stats")
        start = time.perf_counter()
        for _ in range(steps):
            group.update(samples)
        elapsed = time.perf_counter() - start
        after = group._all("memory_stats")
    finally:
        group.shutdown()
    tokens = sum(s.length for s in samples) * steps
    return {"stage": stage, "ranks": ranks, "tokens_per_s": tokens / elapsed, "step_ms": 1000 * elapsed / steps,
            "peak_rss_mib": max(a["peak_rss_mib"] for a in after),
            "growth_mib": max(a["peak_rss_mib"] - b.get("rss_mib", 0.0) for a, b in zip(after, before))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--stages", type=int, nargs="+", default=[0, 1, 2, 3])
    parser.add_argument("--family", default="qwen2.5-vl")
    parser.add_argument("--ray", action="store_true", help="ranks as Ray actors (default: child processes)")
    args = parser.parse_args()

    from webrl.models import load_model, tiny_model

    work = tempfile.mkdtemp(prefix="webrl-bench-learner-")
    path = tiny_model(args.family, out_dir=os.path.join(work, "model"))
    _, processor = load_model(path)
    samples = build_samples(processor, args.samples)
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", os.path.join(work, "torch_extensions"))
    if args.ray:
        start_ray(work, max(args.ranks))
    rows = []
    try:
        for ranks in args.ranks:
            for stage in args.stages:
                rows.append(measure(path, samples, stage, ranks, args.steps, args.ray))
                r = rows[-1]
                print(f"ZeRO {stage}, {ranks} rank(s): {r['tokens_per_s']:.0f} tok/s, {r['step_ms']:.0f} ms/step, "
                      f"peak RSS {r['peak_rss_mib']:.0f} MiB, growth {r['growth_mib']:.0f} MiB", flush=True)
    finally:
        if args.ray:
            import ray

            ray.shutdown()
    print_table(args, samples, rows)


def start_ray(work: str, num_cpus: int) -> None:
    import ray

    env = {k: os.environ[k] for k in ("RAY_USAGE_STATS_ENABLED", "HF_HUB_OFFLINE", "TORCH_EXTENSIONS_DIR")}
    for attempt in range(8):  # Ray allows its raylet 30 s to register; retry on a loaded machine
        try:
            ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
                     _temp_dir=tempfile.mkdtemp(prefix="r", dir=work), runtime_env={"env_vars": env})
            break
        except Exception:
            ray.shutdown()
            if attempt == 7:
                raise


def print_table(args, samples, rows) -> None:
    tokens = sum(s.length for s in samples)
    print(f"\n{args.family} tiny model, {args.samples} image turns ({tokens} tokens) per step, "
          f"{args.steps} timed steps, gloo on CPU")
    print("| ZeRO | ranks | tokens/s | step ms | peak RSS MiB (max rank) | step growth MiB |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['stage']} | {r['ranks']} | {r['tokens_per_s']:.0f} | {r['step_ms']:.0f} | "
              f"{r['peak_rss_mib']:.0f} | {r['growth_mib']:.0f} |")


if __name__ == "__main__":
    main()
