"""Held-out success of GRPO from the shipped SFT checkpoint, before RL and after each block of
iterations, for several seeds: the evidence that the RL works.

    .venv/bin/python benchmarks/learning_curve.py [--seeds 0 1 2] [--config level0]
        [--block 2] [--samples-per-task 4] [--out runs/learning_curve] [key=value ...]
    .venv/bin/python benchmarks/learning_curve.py --from-json OUT/TIME/curve.json   # redraw only

Each seed is one run of the main job on `--config` (the embedded default: GRPO on sandbox
widgets level-0 tasks from `webrl:tiny-webagent-pointer`) with `run.seed=SEED` and
`trainer.eval_every=BLOCK`: greedy evaluation on the same held-out tasks (fixed by the seed; the
config's `tasks.eval_split`, fresh tasks over the training entities in the default) before RL
and after every BLOCK iterations; with `--samples-per-task K` each evaluation also samples K
episodes per task at the rollout temperature (`eval.samples_per_task`; K x eval_tasks more
episodes per evaluation). The seed changes the rollout samples and the evaluation draw; the
starting weights are the same. Writes `curve.json`, `curve.md` (a table: success per seed and
block, mean, wall time; then, from each run's `eval_outcomes.jsonl`, the tasks that flipped up
and down against the first evaluation, pooled over seeds, with an exact sign test; the same for
the sampled success per task when sampled, and each run's time without its sampled
evaluations, i.e. the time of the main job itself) and `curve.png` (drawn with PIL: greedy
solid, sampled dashed) under `--out/<time>/`.

Why the sampled line: a greedy evaluation only changes where RL moved an argmax; GRPO's first
effect is to move probability toward rewarded actions, which the sampled success sees first.
Greedy evaluation is reproducible (the sandbox is shown at a fixed origin, whatever port its
server bound); sampled evaluation is seeded from the run seed and the iteration (`webrl.policy.
seeds`), so each evaluation draws fresh samples and a rerun of one seed draws the same ones.
`benchmarks/learning.py` is the per-seed benchmark built on these helpers (GRPO and PPO, each
seed's own sign test, CPU time).

Success figures are shares of `tasks.eval_tasks` episodes: report them with that count (one
task is 1/eval_tasks). Results measured on this project's machines are in the closing notes of
the main-job issue and in README's "Learning curve" paragraph.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def run_seed(config_name: str, seed: int, block: int, out: Path, overrides: list[str]) -> dict:
    """One run: {"seed", "points": [(iteration, success, wall_s)], "wall_s"}."""
    from webrl.config import load_config
    from webrl.run.config import WebRLConfig
    from webrl.run.trainer import Trainer

    run_dir = out / f"seed{seed}"
    config = load_config(WebRLConfig, config_name, [*overrides, f"run.seed={seed}", f"trainer.eval_every={block}",
                                                     f"run.run_dir={run_dir}"])
    t0 = time.monotonic()
    Trainer(config).fit()
    wall = time.monotonic() - t0
    return {"seed": seed, "points": eval_points(run_dir / "metrics.jsonl"), "wall_s": wall,
            "sampled_eval_s": sampled_eval_seconds(run_dir / "metrics.jsonl"),
            "flips": flips(run_dir / "eval_outcomes.jsonl"),
            "sampled": sampled_points(run_dir / "eval_outcomes.jsonl"),
            "sampled_shifts": sampled_shifts(run_dir / "eval_outcomes.jsonl")}


def _outcome_rows(outcomes_file: Path) -> list[dict]:
    if not outcomes_file.exists():
        return []
    return [json.loads(line) for line in outcomes_file.read_text().splitlines() if line.strip()]


def sampled_points(outcomes_file: Path) -> list[tuple[int, float]]:
    """(iteration, mean sampled success over the tasks) of every evaluation that sampled
    (`eval.samples_per_task` > 0); tasks whose sampled episodes all dropped are skipped."""
    out = []
    for r in _outcome_rows(outcomes_file):
        means = [m for _, m in r.get("sampled", []) if m is not None]
        if means:
            out.append((int(r["iteration"]), sum(means) / len(means)))
    return out


def sampled_shifts(outcomes_file: Path) -> list[tuple[int, int, int]]:
    """(iteration, tasks up, tasks down) of every later sampled evaluation against the first:
    up = the task's mean sampled success rose (e.g. 1 of 4 episodes -> 3 of 4)."""
    return _paired(_outcome_rows(outcomes_file), "sampled")


def flips(outcomes_file: Path) -> list[tuple[int, int, int]]:
    """(iteration, tasks up, tasks down) of every later evaluation against the first ("before"):
    up = failed before and succeeded then, down = the reverse. The evaluations of a run draw the
    same tasks in the same order, so task i is compared with task i; dropped ones are skipped."""
    return _paired(_outcome_rows(outcomes_file), "outcomes")


def _paired(rows: list[dict], key: str) -> list[tuple[int, int, int]]:
    """Task i of each later row's `key` list ([task id, value or None]) against task i of the
    first row that has one: (iteration, values that rose, values that fell)."""
    rows = [r for r in rows if r.get(key)]
    if not rows:
        return []
    first, out = rows[0][key], []
    for r in rows[1:]:
        pairs = [(a[1], b[1]) for a, b in zip(first, r[key]) if a[0] == b[0] and None not in (a[1], b[1])]
        out.append((int(r["iteration"]), sum(a < b for a, b in pairs), sum(a > b for a, b in pairs)))
    return out


def sign_test(up: int, down: int) -> float:
    """Two-sided exact sign test (`webrl.evaluation.summary.sign_test`, what the main job's
    table prints)."""
    from webrl.evaluation.summary import sign_test as exact

    return exact(up, down)


def eval_points(metrics_file: Path) -> list[tuple[int, float, float]]:
    """(iteration, held-out success, seconds since the run's first record) of every evaluation
    row in a run's metrics.jsonl: "before" is iteration 0, "iteration k" is k."""
    rows = [json.loads(line) for line in metrics_file.read_text().splitlines() if line.strip()]
    start = rows[0]["time"] if rows else 0.0
    points = []
    for r in rows:
        if r.get("stage") != "eval":
            continue
        label = r["label"]
        if label == "before":
            it = 0
        elif label.startswith("iteration "):
            it = int(label.split()[1])
        else:
            continue
        points.append((it, float(r["success"]), float(r["time"] - start)))
    return points


def sampled_eval_seconds(metrics_file: Path) -> float:
    """Seconds the run spent on sampled evaluations (`time_eval_sampled_s` of its eval rows):
    the run's wall time less this is the time of the same run without them."""
    rows = [json.loads(line) for line in metrics_file.read_text().splitlines() if line.strip()]
    return sum(float(r.get("time_eval_sampled_s", 0.0)) for r in rows if r.get("stage") == "eval")


def table(runs: list[dict], eval_tasks: int) -> str:
    iters = sorted({it for r in runs for it, _, _ in r["points"]})
    head = "| iteration | " + " | ".join(f"seed {r['seed']}" for r in runs) + " | mean | wall s (mean) |"
    lines = [head, "|" + "---|" * (len(runs) + 3)]
    for it in iters:
        vals = [next((s for i, s, _ in r["points"] if i == it), None) for r in runs]
        walls = [next((w for i, _, w in r["points"] if i == it), None) for r in runs]
        got = [v for v in vals if v is not None]
        mean = sum(got) / len(got) if got else float("nan")
        wall = [w for w in walls if w is not None]
        lines.append(f"| {'before RL' if it == 0 else it} | " + " | ".join("-" if v is None else f"{v:.3f}" for v in vals)
                     + f" | {mean:.3f} | {sum(wall) / max(len(wall), 1):.0f} |")
    lines.append(f"\nSuccess = share of {eval_tasks} held-out episodes (greedy); one episode = {1 / eval_tasks:.3f}.")
    for it, (up, down) in sorted(_pool(runs, "flips").items()):
        lines.append(f"Iteration {it} vs before, all seeds: {up} tasks up, {down} down "
                     f"(two-sided sign test p = {sign_test(up, down):.3f}).")
    if any(r.get("sampled") for r in runs):
        lines += ["", "Sampled at the rollout temperature (`eval.samples_per_task` episodes per task, mean success):", "",
                  "| iteration | " + " | ".join(f"seed {r['seed']}" for r in runs) + " | mean |",
                  "|" + "---|" * (len(runs) + 2)]
        for it in sorted({it for r in runs for it, _ in r.get("sampled", [])}):
            vals = [next((s for i, s in r.get("sampled", []) if i == it), None) for r in runs]
            got = [v for v in vals if v is not None]
            lines.append(f"| {'before RL' if it == 0 else it} | " + " | ".join("-" if v is None else f"{v:.3f}" for v in vals)
                         + f" | {sum(got) / len(got):.3f} |")
        for it, (up, down) in sorted(_pool(runs, "sampled_shifts").items()):
            lines.append(f"Iteration {it} vs before, all seeds: sampled success rose on {up} tasks, fell on {down} "
                         f"(two-sided sign test p = {sign_test(up, down):.3f}).")
    lines.append("Run wall time per seed (s): " + ", ".join(f"{r['seed']}: {r['wall_s']:.0f}" for r in runs))
    if any(r.get("sampled_eval_s") for r in runs):
        lines.append("Without the sampled evaluations (the same run, greedy evaluations only) (s): "
                     + ", ".join(f"{r['seed']}: {r['wall_s'] - r.get('sampled_eval_s', 0.0):.0f}" for r in runs))
    return "\n".join(lines)


def _pool(runs: list[dict], key: str) -> dict[int, list[int]]:
    """{iteration: [up, down]} summed over the seeds' `key` lists of (iteration, up, down)."""
    pooled: dict[int, list[int]] = {}
    for r in runs:
        for it, up, down in r.get(key, []):
            pooled.setdefault(it, [0, 0])
            pooled[it][0] += up
            pooled[it][1] += down
    return pooled


def plot(runs: list[dict], path: Path) -> None:
    """Success vs iteration on a 640x400 PNG (drawn with PIL): greedy as solid lines (one per
    seed, thin; the mean thick black) and, when the runs sampled, sampled success as dashed lines
    in the same colours (the mean thick grey)."""
    from PIL import Image, ImageDraw

    w, h, m = 640, 400, 50
    img = Image.new("RGB", (w, h), "white")
    d = ImageDraw.Draw(img)
    greedy = [[(i, s) for i, s, _ in sorted(r["points"])] for r in runs]
    sampled = [sorted(tuple(p) for p in r.get("sampled", [])) for r in runs]
    iters = sorted({i for line in greedy + sampled for i, _ in line}) or [0]
    top = max(1.0, max((s for line in greedy + sampled for _, s in line), default=0.0))
    x = lambda it: m + (w - 2 * m) * (it / max(iters[-1], 1))  # noqa: E731
    y = lambda s: h - m - (h - 2 * m) * (s / top)  # noqa: E731
    d.line([(m, m), (m, h - m), (w - m, h - m)], fill="black")
    for k in range(0, 11, 2):
        d.text((5, y(top * k / 10) - 5), f"{top * k / 10:.1f}", fill="black")
    for it in iters:
        d.text((x(it) - 4, h - m + 6), str(it), fill="black")
    d.text((w // 2 - 60, h - 20), "GRPO iteration", fill="black")
    title = "held-out success per seed: greedy (solid; black = mean)"
    d.text((m, 10), title + (", sampled (dashed; grey = mean)" if any(sampled) else ""), fill="black")
    colours = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd"]
    for lines, dashed, mean_colour in ((greedy, False, "black"), (sampled, True, "#808080")):
        for n, line in enumerate(lines):
            _polyline(d, [(x(i), y(s)) for i, s in line], colours[n % len(colours)], 2, dashed)
        mean = [(x(it), y(sum(vals) / len(vals))) for it in iters
                if (vals := [s for line in lines for i, s in line if i == it])]
        _polyline(d, mean, mean_colour, 4, dashed)
    img.save(path)


def _polyline(d, pts: list[tuple[float, float]], fill: str, width: int, dashed: bool) -> None:
    """Straight segments through `pts`; dashed: 8 px drawn, 6 px left out, along each segment."""
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if not dashed:
            d.line([(x0, y0), (x1, y1)], fill=fill, width=width)
            continue
        length = max(((x1 - x0) ** 2 + (y1 - y0) ** 2) ** 0.5, 1e-9)
        for a in range(0, int(length), 14):
            b = min(a + 8, length)
            d.line([(x0 + (x1 - x0) * a / length, y0 + (y1 - y0) * a / length),
                    (x0 + (x1 - x0) * b / length, y0 + (y1 - y0) * b / length)], fill=fill, width=width)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--config", default="level0")
    p.add_argument("--block", type=int, default=2, help="GRPO iterations between evaluations")
    p.add_argument("--samples-per-task", type=int, default=0,
                   help="also evaluate this many sampled episodes per task (eval.samples_per_task)")
    p.add_argument("--out", default="runs/learning_curve")
    p.add_argument("--from-json", metavar="CURVE_JSON",
                   help="rewrite curve.md and curve.png next to an earlier run's curve.json; runs nothing")
    p.add_argument("overrides", nargs="*", metavar="key=value")
    args = p.parse_args(argv)
    if args.from_json:
        out = Path(args.from_json).parent
        done = json.loads(Path(args.from_json).read_text())
        for r in done["runs"]:  # written before the runs recorded it: read it from the run folders
            metrics = out / f"seed{r['seed']}" / "metrics.jsonl"
            if "sampled_eval_s" not in r and metrics.exists():
                r["sampled_eval_s"] = sampled_eval_seconds(metrics)
        return _write(out, done["runs"], done["eval_tasks"])
    if args.samples_per_task:
        args.overrides = [*args.overrides, f"eval.samples_per_task={args.samples_per_task}"]
    out = Path(args.out) / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    runs = [run_seed(args.config, seed, args.block, out, args.overrides) for seed in args.seeds]
    from webrl.config import load_config
    from webrl.run.config import WebRLConfig

    eval_tasks = load_config(WebRLConfig, args.config, args.overrides).tasks.eval_tasks
    (out / "curve.json").write_text(json.dumps({"config": args.config, "overrides": args.overrides,
                                                "block": args.block, "eval_tasks": eval_tasks, "runs": runs}, indent=1))
    return _write(out, runs, eval_tasks)


def _write(out: Path, runs: list[dict], eval_tasks: int) -> int:
    text = table(runs, eval_tasks)
    (out / "curve.md").write_text(text + "\n")
    plot(runs, out / "curve.png")
    print(text)
    print(f"written: {out}/curve.md, curve.json, curve.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
