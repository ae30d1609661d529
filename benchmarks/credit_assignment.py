"""Credit assignment side by side: GRPO, step-level GRPO (GiGPO), PPO, balanced adaptive rollout
and Dyna-GRPO (`dyna.every=2`, the other `dyna.*` at their defaults, and with `dyna.train_collected`, which also trains a
SimRollout iteration's collected batch) on the same task mix, seeds and iterations, in one run of
this script.

    .venv/bin/python benchmarks/credit_assignment.py [--methods grpo grpo_step ppo grpo_balanced grpo_dyna]
        [--seeds 0 1 2] [--config level0] [--out runs/credit_assignment] [key=value ...]
    .venv/bin/python benchmarks/credit_assignment.py --out DIR --report     # redraw from DIR

Each (method, seed) is one run of the main job on `--config` with the method's overrides
(`METHODS`), the given key=value overrides and `run.seed=SEED`. From each run folder it reads the
greedy held-out success before and after RL, the tasks that flipped up and down (paired over the
same held-out tasks, as `learning_curve.py`), and from `metrics.jsonl` the informative groups
(reward variance) per iteration and per minute of collection, and the wall time. Results go to
`--out/results.json` after every run, so an interrupted comparison continues where it stopped
(done pairs are skipped); `--out/results.md` holds the table (per method: mean success before /
after, pooled flips with an exact sign test, informative groups) and `results.png` a bar chart.

The methods share the iteration count and task mix; they do not share wall-clock time exactly
(PPO's value head and balanced rollout's larger groups change the collection time), which is
why the table reports informative groups per minute next to per iteration.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learning_curve import flips, sign_test  # noqa: E402

METHODS: dict[str, list[str]] = {
    "grpo": [],
    "grpo_step": ["learner.step.weight=1.0"],
    "ppo": ["learner.objective=ppo"],
    "grpo_balanced": ["rollout.balanced.enabled=true"],
    "grpo_dyna": ["dyna.every=2"],
    "grpo_dyna_collected": ["dyna.every=2", "dyna.train_collected=true"],
}
"""Method name -> the overrides that select it (on top of the config and the user's overrides)."""


def run_one(config_name: str, method: str, seed: int, out: Path, overrides: list[str]) -> dict:
    """One run of the main job; its summary (`summarize_run`)."""
    from webrl.config import load_config
    from webrl.run.config import WebRLConfig
    from webrl.run.trainer import Trainer

    run_dir = out / f"{method}-seed{seed}"
    if run_dir.exists():  # an interrupted attempt: its logs are appended to, so start it afresh
        import shutil

        shutil.rmtree(run_dir)
    config = load_config(WebRLConfig, config_name, [*overrides, *METHODS[method], f"run.seed={seed}",
                                                     f"run.run_dir={run_dir}"])
    t0 = time.monotonic()
    Trainer(config).fit()
    return {"method": method, "seed": seed, "wall_s": time.monotonic() - t0, **summarize_run(run_dir)}


def summarize_run(run_dir: Path) -> dict:
    """Greedy success before / after, flips after vs before, informative groups of a run folder.
    "after" is the last evaluation row (labelled "after", or "iteration k" with eval_every)."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    evals = [r for r in rows if r.get("stage") == "eval" and "success" in r]
    rl = [r for r in rows if "iteration" in r and r.get("stage") is None]
    changed = flips(run_dir / "eval_outcomes.jsonl")
    collect_s = sum(float(r.get("time_collect_s", 0.0)) for r in rl)
    informative = [float(r.get("informative_groups", 0.0)) for r in rl]
    before = next((float(r["success"]) for r in evals if r.get("label") == "before"), None)
    return {"before": before, "after": float(evals[-1]["success"]) if len(evals) > 1 else None,
            "up": changed[-1][1] if changed else 0, "down": changed[-1][2] if changed else 0,
            "iterations": len(rl), "informative_groups": informative,
            "informative_per_min": sum(informative) / (collect_s / 60.0) if collect_s > 0 else 0.0,
            "collect_s": collect_s}


def table(results: list[dict], methods: list[str]) -> str:
    """Markdown: one row per method, means over its seeds, flips pooled over seeds."""
    lines = ["| method | seeds | greedy before | greedy after | change | tasks up / down (sign test p) "
             "| informative groups / iteration | informative groups / collection min | wall s (mean) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for method in methods:
        runs = [r for r in results if r["method"] == method and r["before"] is not None and r["after"] is not None]
        if not runs:
            continue
        before = sum(r["before"] for r in runs) / len(runs)
        after = sum(r["after"] for r in runs) / len(runs)
        up, down = sum(r["up"] for r in runs), sum(r["down"] for r in runs)
        groups = [g for r in runs for g in r["informative_groups"]]
        per_iter = sum(groups) / len(groups) if groups else 0.0
        per_min = sum(r["informative_per_min"] for r in runs) / len(runs)
        wall = sum(r["wall_s"] for r in runs) / len(runs)
        lines.append(f"| {method} | {','.join(str(r['seed']) for r in runs)} | {before:.3f} | {after:.3f} "
                     f"| {after - before:+.3f} | {up} / {down} (p = {sign_test(up, down):.3f}) | {per_iter:.2f} "
                     f"| {per_min:.2f} | {wall:.0f} |")
    return "\n".join(lines)


def plot(results: list[dict], methods: list[str], path: Path) -> None:
    """Bars of mean greedy success before (grey) and after (blue) per method, drawn with PIL."""
    from PIL import Image, ImageDraw

    width, height, pad = 120 * max(len(methods), 1) + 80, 320, 40
    img = Image.new("RGB", (width, height), "white")
    d = ImageDraw.Draw(img)
    d.line([(pad, height - pad), (width - 10, height - pad)], fill="black")
    for k, method in enumerate(methods):
        runs = [r for r in results if r["method"] == method and r["before"] is not None and r["after"] is not None]
        if not runs:
            continue
        x = pad + 20 + 120 * k
        for j, (key, colour) in enumerate((("before", (160, 160, 160)), ("after", (40, 90, 200)))):
            value = sum(r[key] for r in runs) / len(runs)
            top = height - pad - value * (height - 2 * pad)
            d.rectangle([x + 40 * j, top, x + 40 * j + 34, height - pad], fill=colour)
            d.text((x + 40 * j, top - 12), f"{value:.2f}", fill="black")
        d.text((x, height - pad + 6), method, fill="black")
    d.text((pad, 8), "greedy held-out success: before (grey) / after (blue), mean over seeds", fill="black")
    img.save(path)


def write_report(out: Path, results: list[dict], methods: list[str]) -> str:
    text = table(results, methods)
    (out / "results.md").write_text(text + "\n")
    plot(results, methods, out / "results.png")
    return text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--config", default="level0")
    p.add_argument("--out", default="runs/credit_assignment")
    p.add_argument("--report", action="store_true", help="rewrite results.md / results.png from results.json only")
    p.add_argument("overrides", nargs="*", metavar="key=value")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    store = out / "results.json"
    saved = json.loads(store.read_text()) if store.exists() else {"config": args.config, "overrides": args.overrides,
                                                                  "results": []}
    if not args.report:
        if (saved["config"], saved["overrides"]) != (args.config, args.overrides):
            raise SystemExit(f"{store} holds runs of config {saved['config']!r} with overrides {saved['overrides']}; "
                             f"use another --out for {args.config!r} with {args.overrides}")
        for seed in args.seeds:  # seed-major: a partial comparison covers every method of its first seeds
            for method in args.methods:
                if any(r["method"] == method and r["seed"] == seed for r in saved["results"]):
                    continue
                saved["results"].append(run_one(args.config, method, seed, out, args.overrides))
                store.write_text(json.dumps(saved, indent=1))
    else:  # re-read the run folders that are still there (the summary may have been improved since)
        for r in saved["results"]:
            run_dir = out / f"{r['method']}-seed{r['seed']}"
            if (run_dir / "metrics.jsonl").exists():
                r.update(summarize_run(run_dir))
        store.write_text(json.dumps(saved, indent=1))
    methods = [m for m in METHODS if any(r["method"] == m for r in saved["results"])]
    print(write_report(out, saved["results"], methods))
    print(f"written: {out}/results.json, results.md, results.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
