"""Learner step throughput and memory: ZeRO 0/1/2/3 on one and two CPU ranks (tiny model),
side by side with a plain-torch peer.

    python benchmarks/learner_step.py [--samples 16] [--steps 3] [--ranks 1 2] [--stages 0 1 2 3]
                                      [--token-budget 1024]

Each configuration builds a `LearnerGroup` (ranks as spawned processes, gloo; `--ray` puts them
in Ray actors instead, which changes nothing in the step itself), runs one warm-up
update and `--steps` timed GRPO updates (one optimizer step each) on the same batch of image
turns, and reports:
  tokens/s       real (unpadded) prompt + response tokens trained per second of wall time
  x peer         tokens/s over the peer's (mean of its two runs, see below)
  step ms        wall time of one update (all ranks)
  peak RSS MiB   max over ranks of the process's resident-set high-water mark (includes
                 Python, torch, transformers, DeepSpeed and the model: mostly fixed cost)
  growth MiB     max over ranks of (peak RSS after the steps - RSS before the first step):
                 the training step's own working memory (grads, optimizer state, activations)

The peer (TRL-style baseline): the same update in a plain torch loop in one spawned process
with one thread (as one learner rank): the same model and samples, the same micro-batches
(`pack_micro_batches`, same token budget), the Hugging Face forward to full logits then
log_softmax / gather (as TRL does; the learner uses the chunked `webrl.kernels` path), the same
GRPO loss from `webrl.algos` with the same full-batch scale, gradient clipping 1.0 and
torch.optim.AdamW; no DeepSpeed, no torch.distributed. It runs before and after the learner
configurations; both figures are printed, the ratio uses their mean (load on a shared machine
drifts). The load average is printed at the start and the end.
On a shared 2-core machine the timings are noisy; compare configurations within one run.

Measured 2026-11-30 (defaults, 4.5 min; load average 8.4 at the start, 11.0 at the end; peer
2254 / 2415 tok/s before / after, mean 2335):
    ZeRO  ranks  tok/s  x peer  step ms  peak RSS MiB  growth MiB
    peer  1      2335   1.00     804     605           49
    0     1      1682   0.72    1114     613           12
    1     1      2528   1.08     741     666            9
    2     1      2146   0.92     873     682            4
    3     1      1716   0.73    1092     716            7
    0     2      3482   1.49     538     596           17
    1     2      3593   1.54     522     649           20
    2     2      1951   0.84     960     651           15
    3     2      1438   0.62    1303     658            3
Two ranks split the 16 turns into one micro-batch each, so ZeRO 0/1 nearly double a rank's
rate; ZeRO 2/3 pay per-pass reduce-scatter / all-gather over gloo, which on a loaded 2-core
machine costs more than the second rank gains. Single-rank differences (0.72-1.08) are mostly
load noise; the tiny model's vocabulary (1024) leaves the chunked log-prob kernel no memory to
save over the peer's full logits.
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
LR = 1e-4
#: smart_resize bounds (min, max pixels) of the benchmark's prompts: PromptConfig's defaults
PIXELS = (56 * 56, 28 * 28 * 1280)
TEMPERATURE = 1.0  # of the rollout log-probs (here: the initial policy's own)


def build_samples(processor, n: int):
    import numpy as np

    from webrl.learner import LearnerSample
    from webrl.types import Image

    size = {"shortest_edge": PIXELS[0], "longest_edge": PIXELS[1]}
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


def measure(model_path, samples, stage: int, ranks: int, steps: int, use_ray: bool, token_budget: int) -> dict:
    import dataclasses

    from webrl.learner import BatchingConfig, LearnerConfig, LearnerGroup, LearnerRun, OptimConfig

    config = LearnerConfig(zero_stage=stage, optim=OptimConfig(lr=LR),
                           batching=BatchingConfig(token_budget=token_budget))
    run = LearnerRun(model_path=model_path, seed=0, temperature=TEMPERATURE, image_min_pixels=PIXELS[0],
                     image_max_pixels=PIXELS[1])
    group = LearnerGroup(config, run, ranks, use_ray=use_ray)
    try:
        lp = group.compute_logprobs(samples).logprobs
        samples = [dataclasses.replace(s, rollout_logprobs=x.tolist()) for s, x in zip(samples, lp)]
        group.update(samples)  # warm-up: first-touch allocations, ZeRO-3 trace
        before = group.memory_stats()
        start = time.perf_counter()
        for _ in range(steps):
            group.update(samples)
        elapsed = time.perf_counter() - start
        after = group.memory_stats()
    finally:
        group.shutdown()
    tokens = sum(s.length for s in samples) * steps
    return {"stage": stage, "ranks": ranks, "tokens_per_s": tokens / elapsed, "step_ms": 1000 * elapsed / steps,
            "peak_rss_mib": max(a["peak_rss_mib"] for a in after),
            "growth_mib": max(a["peak_rss_mib"] - b.get("rss_mib", 0.0) for a, b in zip(after, before))}


def run_peer(model_path, samples, steps: int, token_budget: int) -> dict:
    """The plain-torch peer in a spawned child process (its own memory high-water mark)."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_peer_body, args=(child, model_path, samples, steps, token_budget))
    proc.start()
    result = parent.recv()
    proc.join()
    if isinstance(result, str):
        raise RuntimeError(f"peer failed:\n{result}")
    return result


def _peer_body(conn, model_path, samples, steps: int, token_budget: int) -> None:
    import traceback

    try:
        conn.send(_peer_measure(model_path, samples, steps, token_budget))
    except Exception:
        conn.send(traceback.format_exc())


def _peer_measure(model_path, samples, steps: int, token_budget: int) -> dict:
    """Warm-up + `steps` timed updates of the TRL-style loop (see the module docstring)."""
    import dataclasses

    import torch

    from webrl.algos import OBJECTIVES, LearnerOutputs, full_batch_scale
    from webrl.learner import LearnerConfig
    from webrl.learner.batching import pack_micro_batches
    from webrl.learner.samples import scale_batch
    from webrl.learner.model import pad_id as _pad_id
    from webrl.learner.worker import process_memory_mib
    from webrl.models import load_model

    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = LearnerConfig()  # only for its defaults: GRPO config, AdamW settings
    model, processor = load_model(model_path, dtype="float32")
    pad_id = _pad_id(processor, model)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=LR,
                                  betas=config.optim.betas, eps=config.optim.eps,
                                  weight_decay=config.optim.weight_decay)  # the learner's (not torch's 0.01)
    micro_batches = pack_micro_batches([s.length for s in samples], token_budget, 64)

    def forward(batch_samples):
        return _peer_forward(model, processor, pad_id, config, batch_samples)

    with torch.no_grad():  # rollout log-probs = the initial policy's, as in `measure`
        for rows in micro_batches:
            _, _, token, _ = forward([samples[i] for i in rows])
            for b, i in enumerate(rows):
                p = len(samples[i].prompt_ids)
                samples[i] = dataclasses.replace(samples[i], rollout_logprobs=token[b, p:samples[i].length].tolist())
    scale_inputs, scale_extras = scale_batch(samples)
    scale = full_batch_scale(scale_inputs, config.objective_config, scale_extras)  # over the whole step, as the group
    params = [p for p in model.parameters() if p.requires_grad]

    def update():
        model.train()
        for rows in micro_batches:
            batch, extras, token, entropy = forward([samples[i] for i in rows])
            loss, _ = OBJECTIVES["grpo"](LearnerOutputs(token, entropy), batch, config.objective_config, extras=extras,
                                         scale=scale.select(torch.tensor(rows)))
            loss.backward()
        torch.nn.utils.clip_grad_norm_(params, config.optim.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    update()  # warm-up
    before = process_memory_mib()
    start = time.perf_counter()
    for _ in range(steps):
        update()
    elapsed = time.perf_counter() - start
    after = process_memory_mib()
    tokens = sum(s.length for s in samples) * steps
    return {"stage": None, "ranks": 1, "tokens_per_s": tokens / elapsed, "step_ms": 1000 * elapsed / steps,
            "peak_rss_mib": after["peak_rss_mib"], "growth_mib": after["peak_rss_mib"] - before["rss_mib"]}


def _peer_forward(model, processor, pad_id: int, config, batch_samples):
    """TRL-style log-probs: full logits (B, T, V), log_softmax, gather. Returns (batch, extras,
    logprobs (B, T), entropy (B, T)) aligned with input_ids like `PolicyModule.forward`."""
    import torch

    from webrl.learner import collate

    batch, extras = collate(batch_samples, pad_id, processor, PIXELS)
    ids = batch.input_ids  # (B, T)
    logits = model(input_ids=ids, attention_mask=batch.attention_mask, pixel_values=batch.pixel_values,
                   image_grid_thw=batch.image_grid_thw,
                   mm_token_type_ids=(ids == model.config.image_token_id).int()).logits  # (B, T, V)
    logp = torch.log_softmax(logits[:, :-1].float() / TEMPERATURE, dim=-1)  # (B, T-1, V)
    token = logp.gather(-1, ids[:, 1:, None]).squeeze(-1)  # (B, T-1)
    entropy = -(logp.exp() * logp).sum(-1)
    mask = batch.loss_mask[:, 1:]
    zeros = token.new_zeros((ids.shape[0], 1))
    return batch, extras, torch.cat([zeros, token * mask], 1), torch.cat([zeros, entropy * mask], 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--stages", type=int, nargs="+", default=[0, 1, 2, 3])
    parser.add_argument("--token-budget", type=int, default=1024,
                        help="padded tokens per micro-batch (default: 16 turns make 2 micro-batches, one per rank)")
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
    loads = [load_average()]
    rows = []
    peers = [run_peer(path, samples, args.steps, args.token_budget)]
    print_row(peers[0])
    try:
        for ranks in args.ranks:
            for stage in args.stages:
                rows.append(measure(path, samples, stage, ranks, args.steps, args.ray, args.token_budget))
                print_row(rows[-1])
    finally:
        if args.ray:
            import ray

            ray.shutdown()
    peers.append(run_peer(path, samples, args.steps, args.token_budget))
    print_row(peers[1])
    loads.append(load_average())
    print_table(args, samples, rows, peers, loads)


def load_average() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def print_row(r: dict) -> None:
    name = "peer (plain torch)" if r["stage"] is None else f"ZeRO {r['stage']}, {r['ranks']} rank(s)"
    print(f"{name}: {r['tokens_per_s']:.0f} tok/s, {r['step_ms']:.0f} ms/step, "
          f"peak RSS {r['peak_rss_mib']:.0f} MiB, growth {r['growth_mib']:.0f} MiB", flush=True)


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


def print_table(args, samples, rows, peers, loads) -> None:
    tokens = sum(s.length for s in samples)
    peer = sum(p["tokens_per_s"] for p in peers) / len(peers)
    print(f"\n{args.family} tiny model, {args.samples} image turns ({tokens} tokens) per step, "
          f"{args.steps} timed steps, token budget {args.token_budget}, gloo on CPU, 1 thread per rank; load average {loads[0]} at the start, "
          f"{loads[-1]} at the end")
    print(f"peer: plain torch loop, 1 process: {peers[0]['tokens_per_s']:.0f} tok/s before, "
          f"{peers[1]['tokens_per_s']:.0f} after (mean {peer:.0f})")
    print("| ZeRO | ranks | tokens/s | x peer | step ms | peak RSS MiB (max rank) | step growth MiB |")
    print("|---|---|---|---|---|---|---|")
    step_ms = sum(p["step_ms"] for p in peers) / len(peers)
    print(f"| peer | 1 | {peer:.0f} | 1.00 | {step_ms:.0f} | {max(p['peak_rss_mib'] for p in peers):.0f} | "
          f"{max(p['growth_mib'] for p in peers):.0f} |")
    for r in rows:
        print(f"| {r['stage']} | {r['ranks']} | {r['tokens_per_s']:.0f} | {r['tokens_per_s'] / peer:.2f} | "
              f"{r['step_ms']:.0f} | {r['peak_rss_mib']:.0f} | {r['growth_mib']:.0f} |")


if __name__ == "__main__":
    main()
