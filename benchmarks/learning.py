"""The learning benchmark: from the shipped checkpoint, held-out sampled success before RL and
after each block of iterations, for GRPO and PPO, three seeds each, with each seed's own paired
sign test and the CPU time it took.

    .venv/bin/python benchmarks/learning.py [--objectives grpo ppo] [--seeds 0 1 2]
        [--out runs/learning] [key=value ...]
    .venv/bin/python benchmarks/learning.py --from-json OUT/learning.json   # rewrite table + plot

Each (objective, seed) is one run of the main job (`webrl.run.trainer.Trainer`, in a child
process) on the embedded default with `RECIPE` on top, then `learner.objective=OBJECTIVE`,
`run.seed=SEED` and the command line's overrides. A run whose `summary.json` is already in
`--out` is not run again, so a benchmark stopped half-way continues where it stopped.

What is measured, per run:
- sampled success: the mean over the held-out tasks of each task's success over
  `eval.samples_per_task` episodes sampled at the rollout temperature (seeded from the run seed,
  the task's place and the episode, the same in every evaluation: common random numbers, since
  2026-12-07; the runs of 2026-12-05 drew each evaluation's samples independently);
  greedy success beside it.
- the rise, paired: the mean over the held-out tasks scored in both evaluations of (sampled
  success after the last block - before RL); a task whose sampled episodes all dropped in either
  evaluation leaves both (`webrl.evaluation.summary.paired_changes`). The curve's points are each
  evaluation's own mean.
- the paired test: the exact permutation (sign-flip) test of those per-task changes, the test
  the main job's table prints (`permutation_p`); tasks up / down and the sign test beside it.
- CPU seconds: user + system time of the child process and every process below it (Ray's GCS,
  raylet and workers, the Playwright drivers and Chromium), sampled every `CPU_SAMPLE_S` by
  `CpuMeter`; a process that exits loses at most its last interval.

A run passes when its sampled success rose by >= `TARGET_RISE`, with p < `TARGET_P`, in at most
`TARGET_CPU_S` CPU seconds (the evaluations included). Writes, under `--out`: one folder per run
(the run's own files plus `summary.json`), `learning.json` (every summary), `learning.md` (the
table) and `learning.png` (sampled success per iteration: GRPO solid, PPO dashed, thin per seed,
thick mean).

Why this recipe (`RECIPE`; measured 2026-12-05 on 64 tasks of seed 0, 4 samples each):
- The family: sandbox widgets level-1 `tab_button` (open a tab, then click a button inside it:
  two steps, clicks only). The shipped checkpoint partly solves it (greedy 0.53) and samples
  worse than its argmax (sampled 0.31): RL's first effect, moving probability toward rewarded
  actions, has room to show. Level-0 clicks (`benchmarks/learning_curve.py`) start at sampled
  0.64 and levelled off near 0.72 within 8 iterations at lr 5e-4 (+0.09: too little room for
  +0.15). The other level-1 kinds, submit_values (sampled 0.11) and slider (0.02), need typed
  values or drags the model rarely produces: mostly zero-reward groups, nothing to learn from.
- 64 held-out tasks x 4 samples: a task's sampled success moves in steps of 0.25, and about 45
  tasks change between evaluations, enough for a sign test to reach p < 0.01 on a 0.15 rise.
- 16 iterations at lr 5e-4 (2.5x the main job's), 8 tasks x 8 samples each, evaluated before
  and after every 8: seed 0 rose +0.21 (GRPO) and +0.24 (PPO) in 1,383 and 1,535 CPU seconds,
  both runs side by side on the 2 cores. `rollout.max_turns=4`: two steps, one slip allowed,
  and a failing episode costs at most 4 steps.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learning_curve import _outcome_rows, _polyline, eval_points, sampled_points, sign_test  # noqa: E402

from webrl.evaluation.summary import paired_changes, permutation_p  # noqa: E402

TARGET_RISE = 0.15
TARGET_P = 0.01
TARGET_CPU_S = 1800.0
CPU_SAMPLE_S = 0.5
OBJECTIVES = ("grpo", "ppo")

# The family and budget: why, in the module docstring.
RECIPE = [
    "tasks.train_levels=[1]",
    "tasks.eval_levels=[1]",
    "tasks.kinds=[tab_button]",
    "rollout.max_turns=4",
    "tasks.eval_tasks=64",
    "eval.samples_per_task=4",
    "trainer.iterations=16",
    "trainer.eval_every=8",
    "learner.optim.lr=5e-4",
]
PER_OBJECTIVE: dict[str, list[str]] = {"grpo": [], "ppo": []}


class CpuMeter:
    """User + system CPU seconds of a process and all its descendants, sampled on a thread.

    Each process is keyed by (pid, create time), so a reused pid is a new process; its CPU is the
    largest total seen for it. `stop()` ends the sampling and returns the sum."""

    def __init__(self, pid: int, interval_s: float = CPU_SAMPLE_S):
        import psutil

        self._root = psutil.Process(pid)
        self._interval = interval_s
        self._seen: dict[tuple[int, float], float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def sample(self) -> None:
        import psutil

        try:
            procs = [self._root, *self._root.children(recursive=True)]
        except psutil.Error:
            return
        for p in procs:
            try:
                key, t = (p.pid, p.create_time()), p.cpu_times()
            except psutil.Error:
                continue
            self._seen[key] = max(self._seen.get(key, 0.0), t.user + t.system)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self._interval)

    @property
    def seconds(self) -> float:
        return sum(self._seen.values())

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.seconds


def run_overrides(objective: str, seed: int, run_dir: Path, overrides: list[str]) -> list[str]:
    """The key=value list of one run: the recipe, the objective's extras, the user's, then what
    names the run (objective, seed, folder), which nothing may override."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    return [*RECIPE, *PER_OBJECTIVE[objective], *overrides, f"learner.objective={objective}",
            f"run.seed={seed}", f"run.run_dir={run_dir}"]


def _train(overrides: list[str]) -> None:
    """The child process: one Trainer run of the default config with these overrides."""
    from webrl.config import load_config
    from webrl.run.config import WebRLConfig
    from webrl.run.trainer import Trainer

    Trainer(load_config(WebRLConfig, "default", overrides)).fit()


def summarize(objective: str, seed: int, run_dir: Path, cpu_s: float, wall_s: float) -> dict:
    """One run's figures from its metrics.jsonl and eval_outcomes.jsonl, and its verdict."""
    sampled = sampled_points(run_dir / "eval_outcomes.jsonl")
    greedy = [(it, s) for it, s, _ in eval_points(run_dir / "metrics.jsonl")]
    rise, up, down, p, sign_p = paired_rise(run_dir / "eval_outcomes.jsonl")
    return {"objective": objective, "seed": seed, "sampled": sampled, "greedy": greedy, "rise": rise,
            "up": up, "down": down, "p": p, "sign_p": sign_p, "cpu_s": cpu_s, "wall_s": wall_s,
            "passed": rise >= TARGET_RISE and p < TARGET_P and cpu_s <= TARGET_CPU_S}


def paired_rise(outcomes_file: Path) -> tuple[float, int, int, float, float]:
    """(mean per-task change, tasks up, tasks down, permutation p, sign-test p) of the last
    sampled evaluation against the first, over the tasks scored in both; (0, 0, 0, 1, 1)
    with fewer than two sampled evaluations."""
    rows = [r for r in _outcome_rows(outcomes_file) if r.get("sampled")]
    if len(rows) < 2:
        return 0.0, 0, 0, 1.0, 1.0
    change = paired_changes(rows[0], rows[-1])["sampled"]
    mean = sum(change.diffs) / len(change.diffs) if change.diffs else 0.0
    return mean, change.up, change.down, permutation_p(change.diffs), sign_test(change.up, change.down)


def measure(objective: str, seed: int, out: Path, overrides: list[str]) -> dict:
    """Run one (objective, seed) in a child process under a CpuMeter; its summary, also written
    to <out>/<objective>-seed<seed>/summary.json."""
    run_dir = out / f"{objective}-seed{seed}"
    args = run_overrides(objective, seed, run_dir, overrides)
    env = {"RAY_USAGE_STATS_ENABLED": "0", "HF_HUB_OFFLINE": "1", **os.environ}
    t0 = time.monotonic()
    child = subprocess.Popen([sys.executable, __file__, "--train", *args], env=env)
    meter = CpuMeter(child.pid)
    rc = child.wait()
    cpu_s, wall_s = meter.stop(), time.monotonic() - t0
    if rc != 0:
        raise RuntimeError(f"{objective} seed {seed}: the run exited with {rc}; its files are in {run_dir}")
    summary = {**summarize(objective, seed, run_dir, cpu_s, wall_s), "overrides": args}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def table(runs: list[dict]) -> str:
    """Markdown: one row per run, then the mean sampled success per objective and evaluation."""
    lines = ["| objective | seed | sampled before | sampled after | paired rise | tasks up / down "
             "| permutation p | sign test p | greedy before -> after | CPU s | wall s | passes |", "|" + "---|" * 12]
    for r in runs:
        s, g = r["sampled"], r["greedy"]
        lines.append(f"| {r['objective']} | {r['seed']} | {s[0][1]:.3f} | {s[-1][1]:.3f} | {r['rise']:+.3f} "
                     f"| {r['up']} / {r['down']} | {r['p']:.2g} | {r.get('sign_p', r['p']):.2g} | {g[0][1]:.3f} -> {g[-1][1]:.3f} "
                     f"| {r['cpu_s']:.0f} | {r['wall_s']:.0f} | {'yes' if r['passed'] else 'no'} |")
    lines += ["", f"Passes: sampled success up by >= {TARGET_RISE} (mean per-task change over the tasks scored "
              f"in both), paired permutation p < {TARGET_P} (that seed's own tasks, after vs before), CPU <= {TARGET_CPU_S:.0f} s (evaluations included).", "",
              "| iteration | " + " | ".join(f"{o} mean sampled" for o in _objectives(runs)) + " |",
              "|" + "---|" * (len(_objectives(runs)) + 1)]
    for it in sorted({i for r in runs for i, _ in r["sampled"]}):
        cells = []
        for o in _objectives(runs):
            vals = [s for r in runs if r["objective"] == o for i, s in r["sampled"] if i == it]
            cells.append(f"{sum(vals) / len(vals):.3f} ({len(vals)} seeds)" if vals else "-")
        lines.append(f"| {'before RL' if it == 0 else it} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _objectives(runs: list[dict]) -> list[str]:
    return [o for o in OBJECTIVES if any(r["objective"] == o for r in runs)]


def plot(runs: list[dict], path: Path) -> None:
    """Sampled success vs iteration on a 640x400 PNG (PIL): GRPO blue solid, PPO orange dashed,
    thin per seed, thick mean; the target (before + TARGET_RISE of the means) as a grey tick."""
    from PIL import Image, ImageDraw

    w, h, m = 640, 400, 50
    img = Image.new("RGB", (w, h), "white")
    d = ImageDraw.Draw(img)
    last = max((i for r in runs for i, _ in r["sampled"]), default=1) or 1
    x = lambda it: m + (w - 2 * m) * it / last  # noqa: E731
    y = lambda s: h - m - (h - 2 * m) * s  # noqa: E731
    d.line([(m, m), (m, h - m), (w - m, h - m)], fill="black")
    for k in range(0, 11, 2):
        d.text((5, y(k / 10) - 5), f"{k / 10:.1f}", fill="black")
    for it in sorted({i for r in runs for i, _ in r["sampled"]}):
        d.text((x(it) - 4, h - m + 6), str(it), fill="black")
    d.text((w // 2 - 40, h - 20), "RL iteration", fill="black")
    d.text((m, 10), "held-out sampled success: GRPO (blue, solid), PPO (orange, dashed); thick = mean", fill="black")
    for objective, colour, dashed in (("grpo", "#1f77b4", False), ("ppo", "#ff7f0e", True)):
        mine = [r for r in runs if r["objective"] == objective]
        for r in mine:
            _polyline(d, [(x(i), y(s)) for i, s in r["sampled"]], colour, 1, dashed)
        iters = sorted({i for r in mine for i, _ in r["sampled"]})
        mean = [(it, sum(v) / len(v)) for it in iters
                if (v := [s for r in mine for i, s in r["sampled"] if i == it])]
        _polyline(d, [(x(i), y(s)) for i, s in mean], colour, 4, dashed)
        if mean:
            goal = y(mean[0][1] + TARGET_RISE)
            d.line([(w - m - 12, goal), (w - m, goal)], fill=colour, width=2)
    img.save(path)


def write(out: Path, runs: list[dict]) -> str:
    text = table(runs)
    (out / "learning.json").write_text(json.dumps({"recipe": RECIPE, "per_objective": PER_OBJECTIVE,
                                                   "targets": {"rise": TARGET_RISE, "p": TARGET_P,
                                                               "cpu_s": TARGET_CPU_S}, "runs": runs}, indent=1))
    (out / "learning.md").write_text(text + "\n")
    plot(runs, out / "learning.png")
    return text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--objectives", nargs="+", default=list(OBJECTIVES), choices=OBJECTIVES)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--out", default="runs/learning", help="the folder of the runs (kept runs are not redone)")
    p.add_argument("--from-json", metavar="LEARNING_JSON", help="rewrite learning.md and .png; runs nothing")
    p.add_argument("--train", action="store_true", help=argparse.SUPPRESS)  # the child process
    p.add_argument("overrides", nargs="*", metavar="key=value")
    args = p.parse_args(argv)
    if args.train:
        _train(args.overrides)
        return 0
    if args.from_json:
        path = Path(args.from_json)
        print(write(path.parent, json.loads(path.read_text())["runs"]))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    for objective in args.objectives:
        for seed in args.seeds:
            done = out / f"{objective}-seed{seed}" / "summary.json"
            runs.append(json.loads(done.read_text()) if done.exists() else measure(objective, seed, out, args.overrides))
            write(out, runs)
    text = write(out, runs)
    print(text)
    print(f"written: {out}/learning.md, learning.json, learning.png")
    return 0 if all(r["passed"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
