"""Generator alone vs the decision-heads cascade at three thresholds, on held-out sandbox tasks.

    .venv/bin/python benchmarks/cascade.py [--family qwen2.5-vl] [--generator PATH | webrl:NAME]
        [--train-episodes 60] [--test-episodes 16] [--sites shop travel wiki widgets] [--levels 0 1]
        [--target-features visual|text|both ...] [--layer -1] [--query last+goal] [--heads-epochs 60]
        [--query-prefix "<tool_call>"] [--episode-split test|train] [--thresholds 0.5 0.8 0.95]
        [--viewport 640x480] [--max-steps 6] [--work DIR] [--json FILE]

Pipeline (CPU, everything built here, nothing downloaded):
1. oracle demonstrations on train-split sandbox tasks (`record_demos`, `--viewport`, default
   640x480, the viewport tiny-webagent was trained at); kept in `--work` and reused on reruns
   (each split is written to `<split>.partial` and renamed when complete);
2. the generator: `--generator PATH` (a shipped `webrl:NAME` too), or the tiny random-init model
   of `--family`, frozen, greedy, `--max-new-tokens` per step. Its prompt is the checkpoint's own
   (`webrl_prompt.json`, `generator_prompt`): tiny-webagent reads compact calls, the "brief"
   system prompt and a 112 x 112 px screenshot; without that file (random init) Set-of-Mark JSON
   calls at `--max-pixels` (default 48*28*28);
3. one set of heads per `--target-features` value (`HeadsConfig(layer, query, target_features)`,
   `--heads-epochs`) trained on the frozen generator's features of those demos; their held-out
   accuracy on held-out oracle demonstrations is reported with chance levels;
4. on `--test-episodes` held-out tasks, episodes through `WebEnv` driven by the generator alone
   and by each cascade at each of `--thresholds`. At every step the task's oracle is asked what
   it would do in that state. `--episode-split` picks the held-out demos and tasks: test (new
   entities: products, cities, articles, labels; every tiny policy is near zero there) or train
   (fresh tasks over the training entities: new seeds, pages, pairings and element orders).

Reported per policy: step success (the policy's action equals the oracle's action in the same
state), task success (the env's checker), generated tokens per step (tokens the generator
sampled: 0 for a heads decision, the text only for a WRITE decision), element accuracy (on steps
where the oracle's action names an element: the policy's action names the same one), policy wall
time per step (prefill + heads + decoding; env time excluded), the share of steps the heads
decided, steps.
A WRITE decision may write at most `--max-new-tokens` tokens, the generator's own budget.
Episodes are capped at `--max-steps` (a random generator never stops by itself).

With an untrained generator the success figures of the generator and of its generator-decided
steps are meaningless (it does not know the action format); they are reported anyway. The token
counts are real: they are what the cascade saves whatever the generator's quality.

Measured 2026-11-30 on the shared 2-core CPU, tiny random-init Qwen2.5-VL, `--work` holding 80
train / 40 test episodes (216 / 102 steps, four sites, levels 0-1), `--test-episodes 8
--max-steps 4 --max-new-tokens 32`. Heads (defaults) held out on the 102 test-split oracle
steps: kind 0.71 (chance 0.39), target 0.37 (chance 0.08), value 0.72, all three 0.51.
Load average 8.3 at the start, 4.3 at the end (1-minute):

    policy          step success  task success  generated tokens/step  s/step  heads share  steps
    generator       0.00          0.00          30.9                   0.28    0.00         32
    cascade @0.5    0.10          0.13          18.3                   0.31    0.57         21
    cascade @0.8    0.04          0.00          25.6                   0.34    0.20         25
    cascade @0.95   0.00          0.00          27.3                   0.36    0.15         27

The generator never produces a valid action: its success figures (and those of the cascade's
generator-decided steps) are meaningless, as expected of random weights; one cascade@0.5 episode
succeeded on heads decisions alone. Tokens: at 0.5 the cascade generates 41% fewer tokens; heads
decisions of kind type/answer with WRITE still let the generator write the text. Wall time per
step is not lower (not profiled; on this tiny model the prefill with all hidden states and the
heads' feature extraction over a ~1,100-token prompt likely cost more than 30 decoded tokens). In live
episodes the heads agree with the oracle far less than on oracle states (0.10 vs 0.51): after the
generator's first invalid step the pages leave the oracle's path and the heads' confidence drops.
Earlier runs under heavier load (36 -> 8) gave the same picture with noisier wall times
(generator 18.1 s/step at load 36). Runs differ slightly (e.g. the generator's tokens 30.9 vs
32.0 in another run at load ~9): page states of a random policy's episodes are not identical.

Trained pointer generator on fresh tasks (the measurement that tests the claim), 2026-11-30 on
the shared 2-core CPU (load 19-25: two GRPO runs beside it, so s/step says nothing):

    .venv/bin/python benchmarks/cascade.py --generator webrl:tiny-webagent-pointer --sites widgets \
        --levels 0 1 --train-episodes 200 --test-episodes 48 --episode-split train \
        --target-features text --query-prefix "<tool_call>" --thresholds 0.5 0.65 0.8 \
        --max-steps 6 --max-new-tokens 24 --work /work/ckpt/s5/cascade --json result48.json

Heads trained on 200 train-split oracle episodes (578 steps, seed 1), held out on 24 fresh
train-split episodes (70 steps, seed 2: new pages, pairings and element orders over the training
entities), text features, query after `<tool_call>`: kind 0.99, target 0.89, value 0.83, all
three 0.90 (chance 0.34 / 0.14 / 0.13). Live: 48 fresh train-split tasks (seed 3), widgets
levels 0-1, max 6 steps:

    policy          step succ.  task succ.  element acc.  gen. tokens/step  heads share  steps
    generator       0.449       0.396       0.544         7.07              0.00         156
    cascade@0.5     0.453       0.333       0.429         1.38              0.91         139
    cascade@0.65    0.430       0.333       0.473         2.55              0.76         149
    cascade@0.8     0.430       0.333       0.527         3.62              0.63         158

Does the paper's claim hold? For step success yes: at threshold 0.5 the cascade matches the
generator's step success (0.453 vs 0.449) with a fifth of its generated tokens (20%; 36% at 0.65,
51% at 0.8). Task success is lower at every threshold: 16 of 48 tasks vs 19 (-3 tasks), within
the noise of 48 episodes but not better. Where it loses: element choice in live episodes (0.43 vs
0.54 at 0.5), although on oracle states of fresh tasks the target head is right on 0.89 of element
steps: the heads were trained on oracle histories only, and live histories (the policy's own
earlier steps, its mistakes included) differ; the generator's own figure on these oracle states
was not measured. An earlier 24-task run of the
same setup (thresholds 0.5 / 0.8 / 0.95) gave generator 0.375 task success, cascade 0.292 at 0.5
and 0.375 at 0.8 and 0.95 with 61-65% of the tokens.

Why the query prefix: the last prompt position of a model trained on `<tool_call>click(...)`
predicts the constant `<tool_call>`, not the kind; after feeding `<tool_call>` it predicts the
kind token. `python -m webrl.policy.cascade.train` on the same demos (text features) gives held-out
kind / target / all three 0.76 / 0.84 / 0.64 without the prefix and 0.99 / 0.90 / 0.90 with it
(same 578 train / 70 held-out steps).

Earlier, with the id-digits generator `webrl:tiny-webagent` on test-split tasks (unseen entities,
24 tasks, no prefix, text features): heads held out kind 0.74 / target 0.53; task success 0 for
the generator and every cascade (no tiny model succeeds on unseen entities), so the claim could
not be tested there; at 0.5 the cascade generated 47% of the tokens with step success 0.078 vs
0.066.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

RANDOM_INIT_MAX_PIXELS = 48 * 28 * 28
TARGET_FEATURES = ("visual", "text", "both")


class OracleScoredAgent:
    """The policy as the episode runner's agent, each decision scored against what the task's
    oracle would do in the same state; `stats` counts agreement, tokens, policy seconds, heads."""

    def __init__(self, policy, task):
        self.policy, self.task = policy, task
        self.stats = {"steps": 0, "ok": 0, "tokens": 0, "seconds": 0.0, "heads": 0, "reward": 0.0,
                      "element_steps": 0, "element_ok": 0}

    def __call__(self, request, result):
        from webrl.actions import Action
        from webrl.envs.observation import oracle_view

        stats = self.stats
        oracle = self.task.oracle_action(oracle_view(result.observation, result.info)) or Action.stop()
        t0 = time.perf_counter()
        d = self.policy.act([request])[0]
        stats["seconds"] += time.perf_counter() - t0
        stats["steps"] += 1
        stats["ok"] += int(d.action == oracle)
        if oracle.element is not None:
            stats["element_steps"] += 1
            stats["element_ok"] += int(d.action is not None and d.action.element == oracle.element)
        stats["tokens"] += getattr(d, "generated_tokens", len(d.response_ids))
        stats["heads"] += int(getattr(d, "decided_by", "generator").startswith("heads"))
        return d


def run_episode(env, task, policy, max_steps: int, screenshot: str = "som") -> dict:
    """One episode of `policy` on `task` (the episode runner, every past turn's images kept in the
    history); per-step oracle agreement, tokens, policy seconds, path.

    `screenshot` is the generator's prompt source ("som" or "raw", `PromptConfig.screenshot_source`).
    Besides exact agreement ("ok"), "element_steps" counts steps whose oracle action names an
    element and "element_ok" those where the policy's action names the same one.
    """
    from webrl.rollout.episode import EpisodeSpec, run_episode as run_runner_episode
    from webrl.rollout.slots import GymSlot

    agent = OracleScoredAgent(policy, task)
    spec = EpisodeSpec(task, max_turns=max_steps, keep_history_images=max_steps, screenshot=screenshot)
    agent.stats["reward"] = run_runner_episode(spec, GymSlot(env), agent).trajectory.info.task_reward or 0.0
    return agent.stats


def evaluate(env, tasks, policy, max_steps: int, screenshot: str = "som") -> dict:
    """Step success, task success, element accuracy, generated tokens and policy seconds per step,
    heads share."""
    total = {"steps": 0, "ok": 0, "tokens": 0, "seconds": 0.0, "heads": 0, "reward": 0.0,
             "element_steps": 0, "element_ok": 0}
    for task in tasks:
        for k, v in run_episode(env, task, policy, max_steps, screenshot).items():
            total[k] += v
    n = max(1, total["steps"])
    return {"step_success": total["ok"] / n, "task_success": total["reward"] / len(tasks),
            "element_accuracy": total["element_ok"] / max(1, total["element_steps"]),
            "generated_tokens_per_step": total["tokens"] / n, "seconds_per_step": total["seconds"] / n,
            "heads_share": total["heads"] / n, "steps": total["steps"], "element_steps": total["element_steps"],
            "episodes": len(tasks)}


def generator_prompt(path, max_pixels=None):
    """The `PromptConfig` the benchmark's generator uses for the checkpoint at `path`: its trained
    prompt (`webrl_prompt.json`), else Set-of-Mark JSON calls at `max_pixels` or 48*28*28
    (`webrl.policy.cascade.train.generator_prompt`)."""
    from webrl.policy.cascade.train import generator_prompt as trained_or_som

    return trained_or_som(path, max_pixels, RANDOM_INIT_MAX_PIXELS)


def build_generator(path, max_new_tokens: int, max_pixels=None):
    """(GeneratorPolicy, model): the frozen greedy generator at `path` with its own prompt settings."""
    from webrl.models import load_model
    from webrl.policy import GeneratorConfig, GeneratorPolicy, SamplingConfig

    model, processor = load_model(str(path))
    return GeneratorPolicy(model, processor, GeneratorConfig(
        prompt=generator_prompt(path, max_pixels),
        sampling=SamplingConfig(greedy=True, max_new_tokens=max_new_tokens))), model


def record(work: Path, a, session) -> float:
    """Oracle demonstrations in work/train and the held-out folder (kept across runs); seconds spent.

    Each split is recorded into `<split>.partial` and renamed when complete, so an interrupted
    recording is redone rather than reused.
    """
    from webrl.recipes.demos import record_demos

    t0 = time.perf_counter()
    for folder, split, n, seed in (("train", "train", a.train_episodes, 1),
                                   (heldout_folder(a.episode_split), a.episode_split, a.test_episodes, 2)):
        if (work / folder / "demos.jsonl").exists():
            continue
        part = work / f"{folder}.partial"
        shutil.rmtree(part, ignore_errors=True)
        record_demos(n, part, seed=seed, levels=a.levels, sites=a.sites, split=split,
                     viewport=a.viewport, session=session)
        part.rename(work / folder)
    return time.perf_counter() - t0


def heldout_folder(split: str) -> str:
    """Folder of the held-out oracle demos: "test" (unseen entities) or "heldout-train" (fresh
    tasks over the training entities, other seeds than the training demos)."""
    return "test" if split == "test" else "heldout-train"


def fit_heads(gen, model, work: Path, target_features: str, a) -> tuple:
    """(heads, report): heads of `target_features` trained on work/train, scored on the held-out demos."""
    from webrl.policy.cascade.heads import HeadsConfig
    from webrl.policy.cascade.train import HeadsTrainConfig, evaluate_heads, extract, logged_steps, train_heads
    from webrl.policy.cascade.synthetic import chance_levels

    hc = HeadsConfig(layer=a.layer, query=a.query, query_prefix=a.query_prefix, target_features=target_features)
    t0 = time.perf_counter()
    train_pairs, test_pairs = logged_steps([work / "train"]), logged_steps([work / heldout_folder(a.episode_split)])
    feats = extract(gen, train_pairs, hc)
    heads, losses = train_heads(feats, model.config.text_config.hidden_size, hc,
                                HeadsTrainConfig(epochs=a.heads_epochs))
    report = {"config": dataclasses.asdict(hc), "train_steps": len(train_pairs), "final_loss": losses[-1],
              "train": evaluate_heads(heads, feats), "held_out": evaluate_heads(heads, extract(gen, test_pairs, hc)),
              "held_out_chance": chance_levels(test_pairs), "seconds": time.perf_counter() - t0}
    return heads, report


def _args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--family", default="qwen2.5-vl")
    p.add_argument("--generator", default=None,
                   help="generator checkpoint, e.g. webrl:tiny-webagent (default: tiny random model)")
    p.add_argument("--train-episodes", type=int, default=60)
    p.add_argument("--test-episodes", type=int, default=16)
    p.add_argument("--sites", nargs="+", default=["shop", "travel", "wiki", "widgets"])
    p.add_argument("--levels", type=int, nargs="+", default=[0, 1])
    p.add_argument("--thresholds", type=float, nargs=3, default=[0.5, 0.8, 0.95])
    p.add_argument("--max-steps", type=int, default=6)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--max-pixels", type=int, default=None,
                   help="screenshot area bound (default: the checkpoint's webrl_prompt.json, else 48*28*28)")
    p.add_argument("--viewport", default="640x480",
                   help="browser viewport of demos and episodes (tiny-webagent was trained at 640x480)")
    p.add_argument("--target-features", nargs="+", choices=TARGET_FEATURES, default=["visual"],
                   help="HeadsConfig.target_features; several: one set of heads (and cascades) each")
    p.add_argument("--layer", type=int, default=-1, help="HeadsConfig.layer")
    p.add_argument("--query", default="last+goal", help="HeadsConfig.query")
    p.add_argument("--query-prefix", default="", help='HeadsConfig.query_prefix (e.g. "<tool_call>")')
    p.add_argument("--episode-split", choices=("test", "train"), default="test",
                   help="split of the held-out demos and live episodes: test = unseen entities, "
                        "train = fresh tasks over the training entities")
    p.add_argument("--heads-epochs", type=int, default=60, help="HeadsTrainConfig.epochs")
    p.add_argument("--work", default=None, help="folder for demos (default: a temp folder)")
    p.add_argument("--json", default=None)
    return p.parse_args(argv)


def policy_name(target_features: str, threshold: float, several: bool) -> str:
    """`cascade@0.5`, or `cascade[text]@0.5` when several target features are compared."""
    return f"cascade[{target_features}]@{threshold}" if several else f"cascade@{threshold}"


def main(argv=None) -> dict:
    a = _args(argv)
    torch.manual_seed(0)
    import numpy as np

    from webrl.envs import BrowserSession, WebEnv, WebEnvConfig
    from webrl.envs.sites.source import SandboxTaskSource
    from webrl.models import tiny_model
    from webrl.policy.cascade.policy import CascadeConfig, CascadePolicy

    work = Path(a.work or tempfile.mkdtemp(prefix="cascade-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    session = BrowserSession()
    report = {"args": vars(a), "loadavg_start": open("/proc/loadavg").read().split()[:3]}
    try:
        report["demo_seconds"] = record(work, a, session)
        path = a.generator or tiny_model(a.family, out_dir=work / f"tiny-{a.family}", seed=0)
        gen, model = build_generator(path, a.max_new_tokens, a.max_pixels)
        report["prompt"] = dataclasses.asdict(gen.config.prompt)
        policies, several = [("generator", gen)], len(a.target_features) > 1
        for tf in a.target_features:
            heads, report[f"heads[{tf}]"] = fit_heads(gen, model, work, tf, a)
            print(f"heads[{tf}]", json.dumps(report[f"heads[{tf}]"]), flush=True)
            policies += [(policy_name(tf, th, several), CascadePolicy(gen, heads, CascadeConfig(
                threshold=th, max_text_tokens=a.max_new_tokens))) for th in a.thresholds]
        source = SandboxTaskSource(sites=tuple(a.sites), levels=tuple(a.levels), split=a.episode_split)
        rng = np.random.default_rng(3)
        tasks = [source.sample(rng) for _ in range(a.test_episodes)]
        env = WebEnv(WebEnvConfig.from_dict({"browser": {"viewport": a.viewport}}), session=session)
        try:
            for name, policy in policies:
                report[name] = evaluate(env, tasks, policy, a.max_steps, gen.config.prompt.screenshot_source)
                print(name, json.dumps(report[name]), flush=True)
        finally:
            env.close()
    finally:
        session.close()
    report["loadavg_end"] = open("/proc/loadavg").read().split()[:3]
    print(json.dumps(report, indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
