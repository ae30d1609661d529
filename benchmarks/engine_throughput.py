"""Engine throughput: the in-process engine vs the server engine on the same 30-turn episode, and
the prompt tokens a prefix cache could reuse from turn to turn.

1. Tokens/s and time per turn, one request at a time (an agent waits for each action), greedy,
   for `GeneratorPolicy` (transformers `generate` in this process) and `ServerEngine` against
   `webrl serve` launched as its own process by `webrl.engines.launcher` (same model
   folder, same requests; their greedy ids are compared turn by turn). The HTTP path's overhead
   is the client's time per turn minus the server's own `meta_info.e2e_latency`.
2. Prefix reuse per turn: prompt tokens P_t (all recomputed by both engines here: transformers
   `generate` keeps no cache across calls and `webrl serve` reports cached_tokens = 0), and the
   reusable prefix R_t = longest common prefix of turn t's prompt with turn t-1's prompt +
   response (image pads keyed by image content), i.e. what SGLang's radix cache could skip.
   Shown for several screenshot counts K, since a screenshot leaving the prompt breaks the prefix.

    .venv/bin/python benchmarks/engine_throughput.py --out benchmarks/results/engine_throughput_2026-12-01
    .venv/bin/python benchmarks/engine_throughput.py --url http://GPU_HOST:30000 --model /ckpt   # a real SGLang

The episode is synthetic (recorded-style turns: reasoning + a click, 320x200 screenshots); the
model is the tiny random-init Qwen2.5-VL, so per-token costs are tiny and fixed overheads
(rendering, HTTP, JSON, image encoding) weigh far more than on a real model. Figures depend on
the machine and its load; printed, never asserted.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def run_engine(act, requests) -> dict:
    """Per-turn wall time and tokens of `act([request])` over the episode (one warm-up first)."""
    act(requests[:1])
    rows = []
    for request in requests:
        t0 = time.perf_counter()
        [d] = act([request])
        rows.append({"s": time.perf_counter() - t0, "prompt": len(d.prompt_ids), "response": len(d.response_ids),
                     "cached": d.stats.cached_tokens, "ids": d.response_ids})
    total_s = sum(r["s"] for r in rows)
    return {"turns": len(rows), "s_per_turn_mean": round(total_s / len(rows), 4),
            "s_per_turn_median": round(statistics.median(r["s"] for r in rows), 4),
            "generated_tokens_per_s": round(sum(r["response"] for r in rows) / total_s, 1),
            "prompt_tokens_per_s": round(sum(r["prompt"] for r in rows) / total_s, 1),
            "prompt_tokens": sum(r["prompt"] for r in rows), "cached_tokens": sum(r["cached"] for r in rows),
            "rows": rows}


def prefix_table(policy, turns, current, screenshots: int) -> list[dict]:
    """Per turn t: prompt tokens, reusable prefix from turn t-1's prompt + response, fraction."""
    from webrl.policy import Observation, PolicyRequest, PromptBuilder, PromptConfig
    from webrl.policy.backend import image_keyed, reusable_prefix

    cfg = PromptConfig(**{**policy.config.prompt.__dict__, "num_screenshots": screenshots})
    builder = PromptBuilder(cfg, policy.family, policy.count_text_tokens, factor=policy.builder.factor)
    pad = policy.tokenizer.get_vocab()["<|image_pad|>"]
    end = policy.tokenizer.get_vocab()["<|im_end|>"]
    rows, cached = [], None
    for t in range(len(turns) + 1):
        obs = current if t == len(turns) else Observation.from_turn(turns[t], current.goal)
        prompt = builder.render(PolicyRequest(obs, turns[:t]))
        ids = image_keyed(policy.prompt_ids(prompt), prompt.images, pad)
        reuse = reusable_prefix(cached, ids) if cached is not None else 0
        rows.append({"turn": t, "prompt_tokens": len(ids), "reusable": reuse, "fraction": round(reuse / len(ids), 3)})
        if t < len(turns):  # the response the server computed: the recorded text + the stop token
            response = policy.tokenizer(turns[t].response_text, add_special_tokens=False)["input_ids"] + [end]
            cached = ids + response
    return rows


def summarise_prefix(rows: list[dict]) -> dict:
    prompt, reuse = sum(r["prompt_tokens"] for r in rows), sum(r["reusable"] for r in rows)
    return {"prompt_tokens": prompt, "reusable": reuse, "fraction": round(reuse / prompt, 3),
            "recomputed_in_process": prompt, "recomputed_with_prefix_cache": prompt - reuse}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=30)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--url", default="", help="a running SGLang-native server instead of launching webrl serve")
    ap.add_argument("--model", default="", help="checkpoint folder (default: a tiny random-init Qwen2.5-VL)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads, here and in the server (0 = default)")
    ap.add_argument("--timed-turns", type=int, default=0,
                    help="time only this many turns, spread evenly over the episode (0 = all)")
    ap.add_argument("--out", default="", help="folder for results.json")
    args = ap.parse_args()

    import torch
    from policy_generate import synthetic_episode

    from webrl.models import load_model, tiny_model
    from webrl.policy import (GeneratorConfig, GeneratorPolicy, Observation, PolicyRequest, PromptConfig,
                              SamplingConfig)
    from webrl.engines.sglang import ServerEngine
    from webrl.engines.launcher import InferenceServer, free_port, launch_command, server_flags

    if args.threads:
        torch.set_num_threads(args.threads)
    path = args.model or tiny_model("qwen2.5-vl", out_dir=tempfile.mkdtemp(prefix="bench-tiny-"))
    model, processor = load_model(path)
    cfg = GeneratorConfig(prompt=PromptConfig(min_pixels=1024, max_pixels=64 * 28 * 28),
                          sampling=SamplingConfig(greedy=True, max_new_tokens=args.new_tokens, stop_at_tool_call=False))
    policy = GeneratorPolicy(model, processor, cfg)
    turns, current = synthetic_episode(args.turns, policy.builder.format)
    # turn t's request: the observation turn t was decided on and the turns before it
    requests = [PolicyRequest(Observation.from_turn(turns[t], current.goal), turns[:t]) for t in range(args.turns)]
    if args.timed_turns:
        picked = sorted({round(i * (args.turns - 1) / max(1, args.timed_turns - 1)) for i in range(args.timed_turns)})
        requests = [requests[t] for t in picked]
    else:
        picked = list(range(args.turns))

    results = {"turns": args.turns, "timed_turns": picked, "new_tokens": args.new_tokens, "torch_threads": torch.get_num_threads(),
               "model": args.model or "tiny random-init qwen2.5-vl (webrl.models.tiny_model)"}
    results["in_process"] = run_engine(policy.act, requests)

    server = None
    if args.url:
        url = args.url
    else:
        port = free_port()
        env = {**os.environ, **({"OMP_NUM_THREADS": str(args.threads)} if args.threads else {})}
        flags = server_flags("webrl", (cfg.prompt.min_pixels, cfg.prompt.max_pixels))  # images counted alike
        server = InferenceServer(launch_command("webrl", path, port, launch_args=flags), f"http://127.0.0.1:{port}",
                                 tempfile.mkdtemp(prefix="bench-serve-"), startup_timeout_s=600, env=env)
        t0 = time.perf_counter()
        url = server.start()
        results["server_start_s"] = round(time.perf_counter() - t0, 1)
    engine = ServerEngine([url], processor, cfg, policy.family)
    server_s = []
    post = engine.backend.http.post

    def timed_post(u, route, body):  # the server's own time per request, for the HTTP overhead
        answer = post(u, route, body)
        server_s.append(float(answer.get("meta_info", {}).get("e2e_latency") or 0.0))
        return answer

    engine.backend.http.post = timed_post
    try:
        results["server"] = run_engine(engine.act, requests)
    finally:
        engine.close()
        if server is not None:
            server.stop()
    results["in_process_again"] = run_engine(policy.act, requests)  # the load drifts: bracket the server run
    server_turn_s = server_s[1:]  # without the warm-up
    client = [r["s"] for r in results["server"]["rows"]]
    results["http_overhead_s_per_turn_mean"] = round(statistics.mean(c - s for c, s in zip(client, server_turn_s)), 4)
    results["server_e2e_s_per_turn_mean"] = round(statistics.mean(server_turn_s), 4)
    same = sum(a["ids"] == b["ids"] for a, b in zip(results["in_process"]["rows"], results["server"]["rows"]))
    results["greedy_ids_equal_turns"] = f"{same}/{len(picked)}"
    results["prefix_reuse"] = {}
    for k in (1, 2, 3):
        rows = prefix_table(policy, turns, current, k)
        results["prefix_reuse"][f"screenshots_{k}"] = {"summary": summarise_prefix(rows), "per_turn": rows}
    for name in ("in_process", "server", "in_process_again"):
        for r in results[name]["rows"]:
            del r["ids"]
    print_report(results)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "results.json").write_text(json.dumps(results, indent=1))


def print_report(results: dict) -> None:
    print(f"{'engine':<17}{'s/turn':>9}{'median':>9}{'gen tok/s':>11}{'prompt tok/s':>14}{'prompt tok':>12}"
          f"{'cached':>8}")
    for name in ("in_process", "server", "in_process_again"):
        r = results[name]
        print(f"{name:<17}{r['s_per_turn_mean']:>9}{r['s_per_turn_median']:>9}{r['generated_tokens_per_s']:>11}"
              f"{r['prompt_tokens_per_s']:>14}{r['prompt_tokens']:>12}{r['cached_tokens']:>8}")
    print(f"server e2e {results['server_e2e_s_per_turn_mean']} s/turn; HTTP path overhead "
          f"{results['http_overhead_s_per_turn_mean']} s/turn; greedy ids equal {results['greedy_ids_equal_turns']}")
    for k, block in results["prefix_reuse"].items():
        s = block["summary"]
        per = block["per_turn"]
        picks = [per[i] for i in (1, 5, 10, 20, len(per) - 1) if i < len(per)]
        print(f"prefix reuse {k}: {s['reusable']}/{s['prompt_tokens']} prompt tokens reusable ({s['fraction']}); "
              + ", ".join(f"t{r['turn']}: {r['reusable']}/{r['prompt_tokens']}" for r in picks))


if __name__ == "__main__":
    main()
