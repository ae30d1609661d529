"""GUI-Libra's KL trust region in RL, measured: KL off / in the loss / in the reward, and whether
held-out step accuracy predicts online success across the checkpoints (the seed's claim).

    .venv/bin/python benchmarks/gui_libra_rl.py --heldout /tmp/klrl/demos-heldout \
        [--iterations 3] [--tasks-per-iteration 4] [--eval-tasks 24] [--seed 0] [--kl-coef 0.05] \
        [--arms kl_off kl_loss kl_reward] [--work /tmp/klrl/work] [--out benchmarks/results/gui_libra_rl_DATE]

Each arm is GRPO from the shipped `webrl:tiny-webagent-pointer` on the level0 preset's task mix (the default until 2026-12-07)
(sandbox widgets, level 0; webrl/run/config.py) with the same seed, so every arm draws the same
training tasks at iteration i and evaluates on the same held-out tasks. Only the KL settings differ
(`ARMS`), on top of the size overrides `size_overrides` writes (fewer tasks per iteration and
evaluation tasks than the default, so three arms fit in half an hour on 2 shared cores):

    kl_off     learner.reference=copy, kl_coef 0: the reference is there only to log the KL
    kl_loss    + learner.loss.kl_coef=C kl_mode=loss     (kl_coef * KL added to the loss)
    kl_reward  + learner.loss.kl_coef=C kl_mode=reward   (per-token KL off the advantage)

At every checkpoint (iteration 0 is the shipped model, shared by all arms and counted once):
  step_accuracy  greedy action == the oracle's on every turn of the held-out demonstrations, with
                 the oracle's history (`gui_libra.step_accuracy`, imported);
  success        greedy online success on `--eval-tasks` held-out tasks (the trainer's evaluator,
                 `trainer.eval_every=1`; the before-RL evaluation runs in the first arm only);
  kl             the learner's logged `kl` of that iteration's update: the KL estimate (the loss's
                 kl_estimator, k3 by default, token-mean) of the policy being trained to the frozen
                 reference, averaged over the iteration's optimizer steps (0 at iteration 0).
Then Pearson and Spearman correlation of step accuracy with success across all checkpoints of all
arms (`correlations`), with n. One seed; a handful of points: the correlations carry little weight.
Writes `results.json` (the command, settings, one row per checkpoint) and `results.md` (the tables).
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

ARMS: dict[str, list[str]] = {
    "kl_off": ["learner.reference=copy"],
    "kl_loss": ["learner.reference=copy", "learner.loss.kl_mode=loss"],
    "kl_reward": ["learner.reference=copy", "learner.loss.kl_mode=reward"],
}
"""Arm -> its KL overrides; the arms with a KL get learner.loss.kl_coef from `arm_overrides`."""


def arm_overrides(arm: str, kl_coef: float) -> list[str]:
    """The arm's overrides: `ARMS[arm]`, plus kl_coef for every arm but kl_off."""
    if arm not in ARMS:
        raise ValueError(f"arm must be one of {sorted(ARMS)}, got {arm!r}")
    if not kl_coef > 0:
        raise ValueError(f"kl_coef must be > 0 (kl_off is the arm without a KL), got {kl_coef!r}")
    return [*ARMS[arm], *([] if arm == "kl_off" else [f"learner.loss.kl_coef={kl_coef}"])]


def size_overrides(args: argparse.Namespace, run_dir: Path) -> list[str]:
    """What every arm shares besides the default config: run folder, seed, sizes, evaluation and
    a checkpoint every iteration (all of them kept)."""
    return [f"run.run_dir={run_dir}", f"run.seed={args.seed}", f"trainer.iterations={args.iterations}",
            "trainer.eval_every=1", "trainer.checkpoint_every=1", f"learner.checkpoint.keep_last={args.iterations}",
            f"tasks.tasks_per_iteration={args.tasks_per_iteration}", f"tasks.eval_tasks={args.eval_tasks}",
            *args.overrides]


def arm_config(arm: str, args: argparse.Namespace, run_dir: Path):
    from webrl.config import load_config
    from webrl.run.config import WebRLConfig

    return load_config(WebRLConfig, "level0", [*size_overrides(args, run_dir), *arm_overrides(arm, args.kl_coef)])


def run_arm(arm: str, args: argparse.Namespace, heldout: list, evaluate_before: bool) -> list[dict[str, Any]]:
    """One arm's RL run: rows (iteration, step accuracy, success, kl) of each checkpoint it made,
    and of iteration 0 when `evaluate_before`. Step accuracy is taken right after each save."""
    from gui_libra import step_accuracy

    from webrl.evaluation.summary import resolve_checkpoint
    from webrl.run.trainer import Trainer

    run_dir = Path(args.work) / arm
    if run_dir.exists():  # logs append: start afresh
        import shutil

        shutil.rmtree(run_dir)
    config = arm_config(arm, args, run_dir)
    trainer, rows, t0 = Trainer(config), [], time.monotonic()
    try:
        trainer.prepare(evaluate_before=evaluate_before)
        if evaluate_before:
            rows.append({"arm": "shipped", "iteration": 0, "checkpoint": trainer.model_path, "kl": 0.0,
                         "success": trainer.before["success"], "dropped": trainer.before.get("dropped", 0.0),
                         **step_accuracy(trainer.model_path, config, heldout)})
        while trainer.iteration < config.trainer.iterations:
            metrics = trainer.step()
            path = trainer.save(run_dir / "checkpoints" / f"step-{trainer.iteration:08d}")
            rows.append({"arm": arm, "iteration": trainer.iteration, "checkpoint": str(path),
                         "kl": metrics.get("kl"), "success": metrics.get("eval_success"),
                         "dropped": metrics.get("eval_dropped"), "train_reward": metrics.get("reward/mean"),
                         "informative_groups": metrics.get("informative_groups"),
                         **step_accuracy(resolve_checkpoint(str(path)), config, heldout)})
            print(json.dumps(rows[-1]), flush=True)
    finally:
        trainer.close()
    for r in rows:
        r["arm_wall_s"] = round(time.monotonic() - t0, 1)
    return rows


def ranks(xs: Sequence[float]) -> list[float]:
    """1-based ranks, ties sharing the mean of their positions: ranks([3, 1, 3]) = [2.5, 1, 2.5]."""
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    out = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def pearson(xs: Sequence[float], ys: Sequence[float]) -> Optional[float]:
    """Pearson's r; None when n < 3 or either variable is constant (r is undefined)."""
    if len(xs) != len(ys):
        raise ValueError(f"pearson needs equal lengths, got {len(xs)} and {len(ys)}")
    n = len(xs)
    if n < 3:
        return None
    mx, my = sum(xs) / n, sum(ys) / n
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    sxx, syy = sum((x - mx) ** 2 for x in xs), sum((y - my) ** 2 for y in ys)
    if sxx <= 1e-18 or syy <= 1e-18:
        return None
    return sxy / math.sqrt(sxx * syy)


def spearman(xs: Sequence[float], ys: Sequence[float]) -> Optional[float]:
    """Spearman's rho: Pearson's r of the (tie-averaged) ranks."""
    return pearson(ranks(xs), ranks(ys))


def correlations(rows: Sequence[dict]) -> dict[str, Any]:
    """Step accuracy vs online success over every row that has both: n, Pearson, Spearman."""
    pts = [(float(r["step_accuracy"]), float(r["success"])) for r in rows
           if r.get("step_accuracy") is not None and r.get("success") is not None]
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    return {"n": len(pts), "pearson": pearson(xs, ys), "spearman": spearman(xs, ys)}


def _fmt(value: Optional[float], spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table(rows: Sequence[dict], eval_tasks: int) -> str:
    """Markdown: one line per checkpoint (iteration 0 once), then the correlations."""
    steps = next((r["steps"] for r in rows if "steps" in r), 0)
    lines = [f"| arm | iteration | held-out step acc. ({steps} turns) | element acc. "
             f"| greedy success ({eval_tasks} tasks) | mean KL to reference (learner) |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['arm']} | {r['iteration']} | {_fmt(r.get('step_accuracy'), '.3f')} "
                     f"| {_fmt(r.get('element_accuracy'), '.3f')} | {_fmt(r.get('success'), '.3f')} "
                     f"| {_fmt(r.get('kl'), '.2e')} |")
    c = correlations(rows)
    lines += ["", f"Step accuracy vs greedy success over all {c['n']} checkpoints (iteration 0 once): "
              f"Pearson r = {_fmt(c['pearson'], '.3f')}, Spearman rho = {_fmt(c['spearman'], '.3f')} "
              "(- : undefined, a constant variable)."]
    for arm in sorted({r["arm"] for r in rows} - {"shipped"}):
        c = correlations([r for r in rows if r["arm"] in (arm, "shipped")])
        lines.append(f"{arm} with iteration 0: n = {c['n']}, Pearson r = {_fmt(c['pearson'], '.3f')}, "
                     f"Spearman rho = {_fmt(c['spearman'], '.3f')}.")
    return "\n".join(lines)


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--heldout", required=True, help="folder with held-out demos.jsonl (webrl demos --out)")
    p.add_argument("--iterations", type=int, default=3)
    p.add_argument("--tasks-per-iteration", type=int, default=4)
    p.add_argument("--eval-tasks", type=int, default=24)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kl-coef", type=float, default=0.05)
    p.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    p.add_argument("--threads", type=int, default=1, help="torch threads of this process (step accuracy)")
    p.add_argument("--work", default="/tmp/klrl/work")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / f"gui_libra_rl_{datetime.date.today()}"))
    p.add_argument("overrides", nargs="*", metavar="key=value", help="more overrides for every arm")
    args = p.parse_args(argv)
    if args.iterations < 1 or args.tasks_per_iteration < 1 or args.eval_tasks < 1:
        p.error("--iterations, --tasks-per-iteration and --eval-tasks must be >= 1")
    return args


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import torch

    from webrl.types import load_trajectories

    torch.set_num_threads(args.threads)
    heldout = load_trajectories(Path(args.heldout) / "demos.jsonl")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = "HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/gui_libra_rl.py " + " ".join(
        argv if argv is not None else sys.argv[1:])
    settings = {k: v for k, v in vars(args).items() if k not in ("out", "work")}
    rows: list[dict] = []
    t0 = time.monotonic()
    for n, arm in enumerate(args.arms):
        rows += run_arm(arm, args, heldout, evaluate_before=n == 0)
        (out / "results.json").write_text(json.dumps(
            {"command": command, "settings": settings, "config": "default", "arms": {a: arm_overrides(a, args.kl_coef)
             for a in args.arms}, "size_overrides": size_overrides(args, Path("RUN_DIR")),
             "wall_s": round(time.monotonic() - t0, 1), "rows": rows, "correlations": correlations(rows)},
            indent=1) + "\n")
    text = table(rows, args.eval_tasks)
    (out / "results.md").write_text(text + "\n")
    print(text)
    print(f"wrote {out / 'results.json'}, {out / 'results.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
