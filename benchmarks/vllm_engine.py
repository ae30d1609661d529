"""vLLM-CPU against the in-process engine on the same checkpoint, side by side in one run.

Rows (checkpoint webrl:tiny-webagent, float32 on both, its trained prompt's pixel bounds):

    rollout tokens/s   the generator backend alone: `--rows` sampled rows (one 112x84 screenshot
                       and a ~100-token prompt each, 32 new tokens, seeded, temperature 1),
                       sent as one call: the in-process `TransformersBackend` batches them
                       (inference.max_batch_size rows per forward), `VLLMBackend` sends them
                       concurrently to a vLLM server launched by webrl's launcher; generated
                       tokens per second of wall time, `--repeats` times each
    main job           `examples/train_online_mind2web.py model.path=webrl:tiny-webagent
                       generator.prompt.action_format=compact trainer.iterations=2
                       tasks.eval_tasks=0` with rollout.engine=transformers,
                       then with the `vllm` preset's server: env steps/s of each RL iteration as
                       the metrics log them (the vLLM run's server start-up is not counted)

Each row is written to `<out>/results.json` as soon as it is measured, and a rerun with the
same --out skips what is there (resume).

    .venv/bin/python benchmarks/vllm_engine.py --out benchmarks/results/vllm_engine_2026-12-07

About 8 minutes on 2 cores. Measure on a quiet machine: the vLLM server's engine core and the
in-process model compete for the same cores as the browsers.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
ROOT = Path(__file__).resolve().parent.parent
CHECKPOINT = "webrl:tiny-webagent"


def load(out: Path) -> dict:
    path = out / "results.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def save(out: Path, results: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")


def sample_rows(processor, n: int):
    """`n` seeded rows of one screenshot each, rendered as webrl renders prompts."""
    from PIL import Image as PILImage

    from webrl.policy.backend import GenerateRequest
    from webrl.types import Image

    tok = processor.tokenizer
    vocab = tok.get_vocab()
    pad, start, end = vocab["<|image_pad|>"], vocab["<|vision_start|>"], vocab["<|vision_end|>"]
    rows = []
    for i in range(n):
        buffer = io.BytesIO()
        PILImage.new("RGB", (112, 84), (40 * i % 255, 90, 160)).save(buffer, "PNG")
        text = tok(f"<|im_start|>user\nTask {i}: open the settings page and turn on dark mode, then "
                   f"report the value shown in the status bar of row {i}.<|im_end|>\n<|im_start|>assistant\n")
        ids = text["input_ids"]
        # 112x84 at these bounds: a 6x8 patch grid, 2x2 merged -> 12 image tokens
        prompt = ids[:3] + [start] + [pad] * 12 + [end] + ids[3:]
        rows.append(GenerateRequest(prompt, [Image(buffer.getvalue(), "png")], (3136, 12544), max_new_tokens=32,
                                    temperature=1.0, seed=1000 + i, stop_ids=()))
    return rows


def tokens_per_s(backend, rows, repeats: int) -> list[float]:
    backend.generate(rows[:2])  # warm-up
    rates = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        answers = backend.generate(rows)
        rates.append(sum(len(a.ids) for a in answers) / (time.perf_counter() - t0))
    return rates


def rollout_rows(results: dict, out: Path, n: int, repeats: int) -> None:
    import torch

    from webrl.engines.vllm import VLLMBackend
    from webrl.engines.vllm_launch import vllm_environment
    from webrl.models import load_model
    from webrl.models.shipped import resolve_shipped
    from webrl.engines.transformers import TransformersBackend
    from webrl.engines.launcher import InferenceServer, free_port, launch_command, server_flags

    torch.set_num_threads(1)  # what an inference worker uses (GeneratorEngineFactory.torch_threads)
    path = resolve_shipped(CHECKPOINT)
    model, processor = load_model(path)
    rows = sample_rows(processor, n)
    if "in_process_tokens_per_s" not in results:
        results["in_process_tokens_per_s"] = tokens_per_s(TransformersBackend(model, processor, max_batch_size=8),
                                                          rows, repeats)
        save(out, results)
    if "vllm_tokens_per_s" not in results:
        port = free_port()
        log_dir = out / "server"
        log_dir.mkdir(parents=True, exist_ok=True)
        server = InferenceServer(launch_command("vllm", path, port, "127.0.0.1", server_flags("vllm", (3136, 12544))),
                                 f"http://127.0.0.1:{port}", log_dir, startup_timeout_s=400, env=vllm_environment(),
                                 cwd=str(log_dir))
        t0 = time.perf_counter()
        server.start()
        results["vllm_startup_s"] = time.perf_counter() - t0
        try:
            backend = VLLMBackend([server.url], processor, model.config, max_concurrency=8)
            results["vllm_tokens_per_s"] = tokens_per_s(backend, rows, repeats)
            backend.close()
        finally:
            server.stop()
        save(out, results)


def job_row(results: dict, out: Path, name: str, overrides: list[str]) -> None:
    if name in results:
        return
    run_root = out / "runs" / name
    command = [sys.executable, str(ROOT / "examples" / "train_online_mind2web.py"), *overrides,
               f"model.path={CHECKPOINT}", "generator.prompt.action_format=compact", "trainer.iterations=2", "tasks.eval_tasks=0",
               "tasks.train_levels=[0]", "learner.optim.lr=2e-4", f"run.output_dir={run_root}"]  # the level-0 tasks of its results
    t0 = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    (out / f"{name}.log").write_text(done.stdout + done.stderr)
    if done.returncode:
        raise SystemExit(f"{name}: exit {done.returncode}; see {out / f'{name}.log'}")
    (metrics,) = list(run_root.glob("*/metrics.jsonl"))
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    results[name] = {"env_steps_per_s": [r["env_steps_per_s"] for r in rows if "env_steps_per_s" in r],
                     "wall_s": time.perf_counter() - t0, "command": " ".join(command[1:])}
    save(out, results)


def report(results: dict) -> str:
    def mean(xs):
        return sum(xs) / len(xs)

    lines = []
    if "vllm_tokens_per_s" in results:
        a, b = mean(results["in_process_tokens_per_s"]), mean(results["vllm_tokens_per_s"])
        lines.append(f"rollout tokens/s   in-process {a:8.1f}   vLLM-CPU {b:8.1f}   vLLM / in-process {b / a:5.2f}")
    if "job_vllm" in results and "job_in_process" in results:
        a, b = mean(results["job_in_process"]["env_steps_per_s"]), mean(results["job_vllm"]["env_steps_per_s"])
        lines.append(f"main job steps/s   in-process {a:8.2f}   vLLM-CPU {b:8.2f}   vLLM / in-process {b / a:5.2f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-job", action="store_true", help="only the rollout tokens/s rows")
    args = parser.parse_args()
    results = load(args.out)
    results.setdefault("command", " ".join(sys.argv))
    rollout_rows(results, args.out, args.rows, args.repeats)
    if not args.skip_job:
        job_row(results, args.out, "job_in_process", [])
        job_row(results, args.out, "job_vllm", ["--config", "vllm"])
    text = report(results)
    (args.out / "report.txt").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
