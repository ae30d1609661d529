"""`webrl plan`'s learner estimate against the measured CPU peak of one real learner step.

    .venv/bin/python benchmarks/memory_plan.py [--out benchmarks/results/memory_plan_2026-12-01]

Models: the shipped tiny checkpoint (webrl:tiny-webagent-pointer, element pointer: full logits)
and a mid-size random-init Qwen3-VL with the real vocabulary (151,936 rows; hidden 256, 4 layers:
the chunked log-prob kernel). Each runs one GRPO update on text-only turns (one micro-batch, one
CPU rank, ZeRO 1, float32) with checkpointing off and on, each in its own spawned process so its
resident-set high-water mark is its own (as benchmarks/learner_memory.py). Measured:

  total MiB   peak RSS during the update minus RSS just before the learner was built (after the
              imports): weights, DeepSpeed's fp32 partition, gradients, Adam states, activations
  step MiB    peak RSS during the update minus RSS before it (what the first step adds)

Predicted (`webrl.run.memory.learner_memory`, the same arithmetic `webrl plan` prints): total =
weights + gradients + optimizer + activations + log-prob path; step = total - weights - 4P (the
fp32 partition DeepSpeed builds at start-up). CPU RSS stands in for GPU memory; it also holds the
allocator's cached blocks and the process's own growth, so a ratio near 1 is the target, not equality.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import tempfile
from pathlib import Path

MIB = 1024 ** 2


def measure(model_path: str, checkpointing: bool, tokens: int, samples: int, queue) -> None:
    import importlib

    importlib.import_module("deepspeed")  # imported before the baseline, like torch and transformers

    from webrl.learner import LearnerConfig, LearnerGroup, LearnerRun, LearnerSample
    from webrl.learner.config import BatchingConfig, OptimConfig
    from webrl.learner.worker import process_memory_mib

    config = LearnerConfig(objective="grpo", zero_stage=1, dtype="float32", gradient_checkpointing=checkpointing,
                           optim=OptimConfig(lr=1e-5),
                           batching=BatchingConfig(token_budget=samples * tokens, max_samples_per_micro_batch=samples))
    run = LearnerRun(model_path=model_path, seed=0, temperature=1.0, image_min_pixels=3136, image_max_pixels=12544)
    baseline = process_memory_mib()["rss_mib"]
    group = LearnerGroup(config, run, 1, use_ray=False)
    prompt, response = tokens * 3 // 4, tokens - tokens * 3 // 4
    batch = [LearnerSample([5 + (i + k) % 200 for k in range(prompt)], [7 + (i + k) % 150 for k in range(response)],
                           rollout_logprobs=[-1.0] * response, advantage=1.0 if i % 2 else -1.0, group_index=0,
                           trajectory_index=i) for i in range(samples)]
    before = process_memory_mib()["rss_mib"]
    group.update(batch)
    peak = process_memory_mib()["peak_rss_mib"]
    group.shutdown()
    queue.put({"checkpointing": checkpointing, "total_mib": peak - baseline, "step_mib": peak - before,
               "load_mib": before - baseline})


def predicted(model_path: str, checkpointing: bool, tokens: int, samples: int) -> dict:
    from webrl.run.memory import learner_memory, load_shapes

    shapes = load_shapes(model_path)
    lm = learner_memory(shapes, ranks=1, stage=1, dtype_bytes=4, tokens=samples * tokens,
                        response_tokens=samples * (tokens - tokens * 3 // 4), checkpointing=checkpointing)
    acts = lm.activations_checkpointed if checkpointing else lm.activations
    step = lm.total - lm.weights - 4 * shapes.parameters
    return {"parameters": shapes.parameters, "weights_mib": lm.weights / MIB, "gradients_mib": lm.gradients / MIB,
            "optimizer_mib": lm.optimizer / MIB, "step_buffers_mib": lm.step_buffers / MIB,
            "activations_mib": acts / MIB, "logprobs_mib": lm.logprobs / MIB,
            "total_mib": lm.total / MIB, "step_mib": step / MIB}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", type=int, default=1024, help="tokens per turn (3/4 prompt, 1/4 response)")
    p.add_argument("--samples", type=int, default=4)
    p.add_argument("--out", default="benchmarks/results/memory_plan_2026-12-01")
    p.add_argument("--measured", default="", help="results.json of an earlier run: reuse its measurements "
                   "(and model paths) and recompute only the predictions")
    args = p.parse_args(argv)
    if args.measured:
        old = json.loads(Path(args.measured).read_text())
        rows = [_compare(r["model"], r["path"], r, old["args"]["tokens"], old["args"]["samples"]) for r in old["rows"]]
        return _write(rows, {**old["args"], "measured": args.measured}, Path(args.out))
    from webrl.models import tiny_model

    mid = str(tiny_model("qwen3-vl", out_dir=tempfile.mkdtemp(prefix="webrl-plan-"), hidden=256, layers=4,
                         intermediate=768, vocab_size=151936))
    models = {"tiny-webagent-pointer": "webrl:tiny-webagent-pointer", "qwen3-vl h256 L4 V151936": mid}
    ctx = multiprocessing.get_context("spawn")
    rows = []
    for name, path in models.items():
        for checkpointing in (False, True):
            queue = ctx.Queue()
            proc = ctx.Process(target=measure, args=(path, checkpointing, args.tokens, args.samples, queue))
            proc.start()
            got = queue.get()
            proc.join()
            rows.append(_compare(name, path, got, args.tokens, args.samples))
            print(json.dumps(rows[-1]), flush=True)
    return _write(rows, vars(args), Path(args.out))


def _compare(name: str, path: str, got: dict, tokens: int, samples: int) -> dict:
    measured = {k: got[k] for k in ("checkpointing", "total_mib", "step_mib", "load_mib")}
    want = predicted(path, got["checkpointing"], tokens, samples)
    return {"model": name, "path": path, **measured, "predicted": want,
            "ratio_total": want["total_mib"] / got["total_mib"], "ratio_step": want["step_mib"] / got["step_mib"]}


def _write(rows: list[dict], args: dict, out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"args": args, "rows": rows}, indent=1))
    lines = ["| model | checkpointing | measured total MiB | predicted total MiB | ratio | measured step MiB | "
             "predicted step MiB | ratio |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        w = r["predicted"]
        lines.append(f"| {r['model']} | {r['checkpointing']} | {r['total_mib']:.0f} | {w['total_mib']:.0f} | "
                     f"{r['ratio_total']:.2f} | {r['step_mib']:.0f} | {w['step_mib']:.0f} | {r['ratio_step']:.2f} |")
    print("\n".join(lines))
    reused = f" (measurements reused from {args['measured']})" if args.get("measured") else ""
    head = [f"Made with `.venv/bin/python benchmarks/memory_plan.py --tokens {args['tokens']} --samples "
            f"{args['samples']}`" + reused,
            "", f"One GRPO update, {args['samples']} text turns x {args['tokens']} tokens in one micro-batch, one CPU "
            "rank, ZeRO 1, float32; MiB of resident set (the script docstring). ratio = predicted / measured.", ""]
    (out / "README.md").write_text("\n".join(head + lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
