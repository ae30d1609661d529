"""Learner memory with and without activation checkpointing, weights loaded in float32 or bfloat16.

    .venv/bin/python benchmarks/learner_memory.py [--hidden 512] [--layers 8] [--tokens 1536]
        [--samples 4] [--out runs/learner_memory.json]

A random-init Qwen2.5-VL of the given width and depth (`webrl.models.tiny_model`) trains one GRPO
update on `--samples` text turns of about `--tokens` tokens each, all in one micro-batch, on one
CPU rank (ZeRO 1). Each configuration runs in its own spawned process so that its resident-set
high-water mark is its own, and reports:
  load MiB     peak RSS after building the learner (model load, DeepSpeed, optimizer set-up)
  step MiB     peak RSS during the update minus RSS before it: the step's working memory
               (activations kept for backward, gradients, optimizer states on first use)
  step s       wall time of the update
Configurations: float32 / bfloat16 x checkpointing off / on; the ratios are taken against
float32 without checkpointing, measured in the same run. CPU RSS stands in for GPU memory here;
the GPU figures come from `benchmarks/gpu_check.py`.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
from pathlib import Path

CONFIGS = [("float32", False), ("float32", True), ("bfloat16", False), ("bfloat16", True)]


def measure(model_path: str, dtype: str, checkpointing: bool, tokens: int, samples: int, queue) -> None:
    from webrl.learner import LearnerConfig, LearnerGroup, LearnerRun, LearnerSample
    from webrl.learner.config import BatchingConfig, OptimConfig
    from webrl.learner.worker import process_memory_mib

    config = LearnerConfig(objective="grpo", zero_stage=1, dtype=dtype, gradient_checkpointing=checkpointing,
                           optim=OptimConfig(lr=1e-5),
                           batching=BatchingConfig(token_budget=samples * tokens, max_samples_per_micro_batch=samples))
    run = LearnerRun(model_path=model_path, seed=0, temperature=1.0, image_min_pixels=3136, image_max_pixels=12544)
    group = LearnerGroup(config, run, 1, use_ray=False)
    load = process_memory_mib()["peak_rss_mib"]
    prompt, response = tokens * 3 // 4, tokens - tokens * 3 // 4
    batch = [LearnerSample([5 + (i + k) % 200 for k in range(prompt)], [7 + (i + k) % 150 for k in range(response)],
                           rollout_logprobs=[-1.0] * response, advantage=1.0 if i % 2 else -1.0, group_index=0,
                           trajectory_index=i) for i in range(samples)]
    before = process_memory_mib()["rss_mib"]
    t0 = time.monotonic()
    group.update(batch)
    step_s = time.monotonic() - t0
    peak = process_memory_mib()["peak_rss_mib"]
    group.shutdown()
    queue.put({"dtype": dtype, "checkpointing": checkpointing, "load_mib": load, "step_mib": peak - before,
               "step_s": step_s})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--tokens", type=int, default=1536)
    p.add_argument("--samples", type=int, default=4)
    p.add_argument("--out", default="runs/learner_memory.json")
    args = p.parse_args(argv)
    import tempfile

    from webrl.models import tiny_model

    folder = tempfile.mkdtemp(prefix="webrl-memory-")
    path = str(tiny_model("qwen2.5-vl", out_dir=folder, hidden=args.hidden, layers=args.layers))
    ctx = multiprocessing.get_context("spawn")
    rows = []
    for dtype, checkpointing in CONFIGS:
        queue = ctx.Queue()
        proc = ctx.Process(target=measure, args=(path, dtype, checkpointing, args.tokens, args.samples, queue))
        proc.start()
        rows.append(queue.get())
        proc.join()
    base = rows[0]
    print(f"Qwen2.5-VL random init, hidden {args.hidden}, {args.layers} layers; {args.samples} turns x "
          f"{args.tokens} tokens in one micro-batch, one CPU rank, ZeRO 1")
    print("dtype     checkpointing  load MiB  step MiB  x step MiB  step s  x step s")
    for r in rows:
        print(f"{r['dtype']:<9} {str(r['checkpointing']):<13} {r['load_mib']:8.0f}  {r['step_mib']:8.0f}  "
              f"{r['step_mib'] / base['step_mib']:10.2f}  {r['step_s']:6.2f}  {r['step_s'] / base['step_s']:8.2f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "rows": rows}, indent=1))
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
