"""GUI-Libra action-aware SFT vs uniform SFT, at equal optimizer steps, on the shipped recipe.

    .venv/bin/python benchmarks/gui_libra.py --train /tmp/libra/demos-train --heldout /tmp/libra/demos-heldout \
        [--epochs 6] [--batch-size 16] [--episodes 24] [--threads 1] [--out benchmarks/results/gui_libra_DATE]

Recipe (webrl/assets/tiny-webagent-pointer/MODEL_CARD.md, config `tiny_webagent_pointer_sft`): a
tiny random-init Qwen2.5-VL with the element pointer (hidden 128 x 2 layers, vocab 2048 with 128
element tokens, seed 0; the base the shipped checkpoint was trained from: nothing is downloaded),
the pointer action format (`<tool_call>click(<e3>)</tool_call>`), AdamW lr 2e-3 constant after 50
warm-up steps, batch 16. Both variants start from the same initial weights and see the same
turns in the same seeded order (`webrl.recipes.sft.sft_stage`, the code `webrl sft` runs, with
an in-process learner instead of Ray actors), so they take the same number of optimizer steps:

    uniform       sft.action_weight=1 coordinate_factor=1   (the shipped default)
    action_aware  sft.action_weight=2 coordinate_factor=2   (GUI-Libra's numbers)

The reasoning/direct mix is not exercised: oracle demonstrations have no reasoning, and the
shipped prompt asks for none (think=false), so direct_fraction has nothing to act on.

Measured per variant:
  step_accuracy  greedy action == the oracle's action on every held-out demonstration turn,
                 given the oracle's history (fresh train-split tasks, new seeds);
  task_success   greedy episodes on fresh train-split widgets level-0 tasks (`--episodes`,
                 rollout.max_turns 4, the `webrl eval` evaluator; Ray + Chromium). 0 skips.
Small N (a few hundred turns, tens of episodes): differences of a few points are noise; the
JSON records N so the reader can put a binomial interval on each figure.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

VARIANTS = {
    "uniform": ["sft.action_weight=1.0", "sft.coordinate_factor=1.0"],
    "action_aware": ["sft.action_weight=2.0", "sft.coordinate_factor=2.0"],
}


class LocalActors:
    """What `sft_stage` needs of `webrl.run.actors`: a learner in this process (no Ray)."""

    def start_learner(self, section, run):
        from webrl.learner import LearnerGroup

        return LearnerGroup(section, run, 1, use_ray=False)

    def stop_learner(self, learner) -> None:
        learner.shutdown()


def recipe_config(run_dir: Path, train: str, args, variant: str):
    from webrl.config import load_config
    from webrl.run.config import WebRLConfig

    overrides = [f"run.run_dir={run_dir}", f"sft.demos_dir={train}", "sft.curriculum=[]", f"sft.epochs={args.epochs}",
                 f"sft.batch_size={args.batch_size}", "tasks.eval_split=train", "tasks.eval_levels=[0]",
                 "tasks.train_levels=[0]", f"tasks.eval_tasks={args.episodes}", "rollout.max_turns=4",
                 "resources.num_cpus=2", *VARIANTS[variant]]
    return load_config(WebRLConfig, "tiny_webagent_pointer_sft", overrides)


def initial_model(config, out: Path) -> str:
    """The recipe's random-init base (the trainer builds the same one for model.path='')."""
    from webrl.models import tiny_model
    from webrl.models.corpus import corpus_lines

    m = config.model
    if (out / "config.json").exists():
        return str(out)
    return str(tiny_model(m.family, corpus=corpus_lines(m.tiny_corpus, config.run.seed), out_dir=out,
                          seed=config.run.seed, hidden=m.tiny_hidden, layers=m.tiny_layers, vocab_size=m.tiny_vocab,
                          element_tokens=m.tiny_element_tokens))


def step_accuracy(model_path: str, config, heldout: list) -> dict[str, float]:
    """Greedy action == oracle action on every held-out turn (with the oracle's history)."""
    from webrl.models import load_model
    from webrl.policy import GeneratorPolicy, Observation, PolicyRequest

    model, processor = load_model(model_path)
    generator = dataclasses.replace(config.generator,
                                    sampling=dataclasses.replace(config.generator.sampling, greedy=True))
    policy = GeneratorPolicy(model, processor, generator)
    requests, targets = [], []
    for traj in heldout:
        for t, turn in enumerate(traj.turns):
            if turn.action is not None:
                requests.append(PolicyRequest(Observation.from_turn(turn, traj.goal), traj.turns[:t]))
                targets.append(turn.action)
    decisions = policy.act(requests)
    right = sum(d.action == a for d, a in zip(decisions, targets))
    kind = sum(getattr(d.action, "kind", None) == a.kind for d, a in zip(decisions, targets))
    element_steps = [(d, a) for d, a in zip(decisions, targets) if a.element is not None]
    element = sum(getattr(d.action, "element", None) == a.element for d, a in element_steps)
    return {"steps": len(targets), "step_accuracy": right / max(len(targets), 1),
            "kind_accuracy": kind / max(len(targets), 1), "element_steps": len(element_steps),
            "element_accuracy": element / max(len(element_steps), 1)}


def task_success(model_path: str, config) -> dict[str, Any]:
    """Greedy episodes of the `webrl eval` evaluator on fresh level-0 tasks."""
    from webrl.evaluation.summary import summarize
    from webrl.run.trainer import Trainer

    cfg = dataclasses.replace(config, model=dataclasses.replace(config.model, path=model_path),
                              trainer=dataclasses.replace(config.trainer, stages=["eval"]))
    trainer = Trainer(cfg)
    try:
        trainer.start_actors(rollout=False)
        result = trainer.parts.evaluator.evaluate("eval", 0)
        summary = summarize(result.tasks, result.trajectories)
    finally:
        trainer.close()
    scored = sum(n for _, n in summary.per_site_level.values())
    return {"episodes": scored, "task_success": summary.success, "dropped": summary.dropped}


def run_variant(variant: str, args, work: Path, heldout: list) -> dict[str, Any]:
    from webrl.recipes.sft import sft_stage
    from webrl.run.config import sft_learners

    run_dir = work / variant
    config = recipe_config(run_dir, args.train, args, variant)
    init = initial_model(config, work / "model-init")
    log_rows: list[dict] = []
    t0 = time.monotonic()
    path = sft_stage(config, run_dir, init, LocalActors(), log_rows.append, sft_learners(config, init))
    train_s = time.monotonic() - t0
    epochs = [r for r in log_rows if r.get("stage") == "sft"]
    row = {"variant": variant, "overrides": VARIANTS[variant], "train_s": round(train_s, 1),
           "optimizer_steps": sum(int(r["optimizer_steps"]) for r in epochs),
           "turns": next((r["turns"] for r in log_rows if r.get("stage") == "sft_data"), 0),
           "final_loss": epochs[-1]["loss"] if epochs else None, "final_nll": epochs[-1].get("nll") if epochs else None,
           "final_action_nll": epochs[-1].get("action_nll") if epochs else None,
           "final_coordinate_nll": epochs[-1].get("coordinate_nll") if epochs else None,
           **step_accuracy(path, config, heldout),
           "epochs": [{k: r[k] for k in ("epoch", "samples", "optimizer_steps", "loss", "nll", "action_nll",
                                         "coordinate_nll", "time_s") if k in r} for r in epochs]}
    if args.episodes:
        row.update(task_success(path, config))
    print(json.dumps(row), flush=True)
    return row


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train", required=True, help="folder with demos.jsonl (webrl demos --out)")
    parser.add_argument("--heldout", required=True, help="folder with held-out demos.jsonl")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--episodes", type=int, default=24, help="greedy held-out episodes per variant (0: skip)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--work", default="/tmp/libra/gui_libra_work")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / f"gui_libra_{datetime.date.today()}"))
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import torch

    from webrl.types import load_trajectories

    torch.set_num_threads(args.threads)
    heldout = load_trajectories(Path(args.heldout) / "demos.jsonl")
    rows = [run_variant(v, args, Path(args.work), heldout) for v in args.variants]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = "HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/gui_libra.py " + " ".join(argv if argv is not None else sys.argv[1:])
    (out / "results.json").write_text(json.dumps({"command": command, "rows": rows}, indent=2) + "\n")
    (out / "command.txt").write_text(command + "\n")
    print(f"wrote {out / 'results.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
