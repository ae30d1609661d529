"""Evaluation pieces shared by `Trainer` and `webrl eval`: summaries, tables, exports, endpoints.

    summarize(tasks, trajectories)  -> EvalSummary  (success overall and per site/level)
    success_table(summary)          -> the per-site/level table `webrl eval` prints
    before_after_table(a, b, paired) -> the table `Trainer.fit` prints
    paired_changes(ra, rb)          -> tasks up / down and each task's change between two evaluations
    permutation_p(diffs)            -> the exact paired permutation test's p (the table's verdict)
    sign_test(up, down)             -> the two-sided exact sign test's p
    export_om2w(trajectories, dir)  -> the Online-Mind2Web v2 result folders (reward/om2w.py)
    EndpointEngineFactory           -> an inference engine over an OpenAI-compatible server

Success is `reward > 0` on trajectories that were scored; dropped ones (infrastructure or
judge failures) are counted apart and never count as failures (reward/base.py's rule).

Choices where the format is silent: task ids become folder-safe (`/` and other characters
outside `[A-Za-z0-9_.-]` become `_`), and a task evaluated twice gets `-2`, `-3` suffixes, since
the v2 format holds one trajectory per task folder.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Optional, Sequence

from webrl.types import Trajectory


@dataclass
class EvalSummary:
    """success: share of scored trajectories with reward > 0; per_site_level: "site/lN" ->
    (success, scored count); dropped: trajectories with no score; tasks: tasks attempted."""

    success: float = 0.0
    per_site_level: dict[str, tuple[float, int]] = field(default_factory=dict)
    dropped: int = 0
    tasks: int = 0

    def as_metrics(self) -> dict[str, Any]:
        return {"success": self.success, "dropped": float(self.dropped), "tasks": float(self.tasks),
                "per_site_level": {k: v for k, (v, _) in self.per_site_level.items()}}


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def summarize(tasks: Sequence[Any], trajectories: Sequence[Trajectory]) -> EvalSummary:
    """Success overall and per `site/l<level>` (from each task's spec), scored trajectories only."""
    by_key: dict[str, list[float]] = {}
    for task, traj in zip(tasks, trajectories):
        if traj.status == "ok":
            site = task.spec.site or "tasks"
            by_key.setdefault(f"{site}/l{task.spec.level}", []).append(float((traj.reward or 0) > 0))
    scored = [x for xs in by_key.values() for x in xs]
    return EvalSummary(success=_mean(scored),
                       per_site_level={k: (_mean(v), len(v)) for k, v in sorted(by_key.items())},
                       dropped=sum(t.status == "dropped" for t in trajectories), tasks=len(tasks))


def success_table(summary: EvalSummary, title: str = "success (greedy)") -> str:
    rows = [f"{title:<30} {'scored':>7} {'success':>8}"]
    for key, (rate, n) in summary.per_site_level.items():
        rows.append(f"{key:<30} {n:>7} {100 * rate:7.1f}%")
    scored = sum(n for _, n in summary.per_site_level.values())
    rows.append(f"{'overall':<30} {scored:>7} {100 * summary.success:7.1f}%")
    if summary.dropped:
        rows.append(f"({summary.dropped} of {summary.tasks} trajectories dropped: not scored, not failures)")
    return "\n".join(rows)


NOISE_P = 0.05
"""A change whose paired permutation test has p at or above this is printed as within noise."""


def sign_test(up: int, down: int) -> float:
    """Two-sided exact sign test: P(a split at least this uneven | n = up + down changed tasks,
    each equally likely to go either way); 1.0 when nothing changed. Ties leave the test."""
    from math import comb

    n, k = up + down, max(up, down)
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(comb(n, i) for i in range(k, n + 1)) / 2 ** n)


class PairedChange(NamedTuple):
    """Tasks scored in both evaluations: how many rose, how many fell, and each task's change
    (after - before: 0/1 outcomes greedy, per-task means over the samples when sampled)."""

    up: int
    down: int
    diffs: tuple[float, ...]


def paired_changes(before: dict, after: dict) -> dict[str, PairedChange]:
    """{"greedy": PairedChange} and, when both sampled, {"sampled": ...}: task i of `after`
    against task i of `before` (two evaluations' eval_outcomes.jsonl records, which draw the
    same tasks in the same order), counting only tasks scored in both."""
    out = {}
    for name, key in (("greedy", "outcomes"), ("sampled", "sampled")):
        if before.get(key) and after.get(key):
            pairs = [(a[1], b[1]) for a, b in zip(before[key], after[key]) if a[0] == b[0] and None not in (a[1], b[1])]
            out[name] = PairedChange(sum(a < b for a, b in pairs), sum(a > b for a, b in pairs),
                                     tuple(b - a for a, b in pairs))
    return out


def permutation_p(diffs: Sequence[float]) -> float:
    """Two-sided exact paired permutation (sign-flip) test of the per-task changes `diffs`: the
    share of the 2^n ways of flipping their signs whose sum is at least as far from 0 as the
    observed one (a task's before and after are exchangeable under no effect). It weighs how far
    each task moved, so a sampled change of 0.75 counts for more than one of 0.25; with 0/1
    outcomes it equals the sign test. Exact: the changes are rationals (means over a few samples),
    summed as integers over their common denominator; 1.0 when nothing changed."""
    from fractions import Fraction
    from math import lcm

    fracs = [Fraction(d).limit_denominator(10_000) for d in diffs]
    fracs = [f for f in fracs if f != 0]
    if not fracs:
        return 1.0
    scale = lcm(*(f.denominator for f in fracs))
    ints = [abs(int(f * scale)) for f in fracs]
    observed = abs(sum(int(f * scale) for f in fracs))
    counts = {0: 1}  # sum of the signed magnitudes -> how many sign assignments give it
    for v in ints:
        nxt: dict[int, int] = {}
        for total, c in counts.items():
            nxt[total + v] = nxt.get(total + v, 0) + c
            nxt[total - v] = nxt.get(total - v, 0) + c
        counts = nxt
    return min(1.0, sum(c for total, c in counts.items() if abs(total) >= observed) / 2 ** len(ints))


def noise_line(name: str, change: PairedChange) -> str:
    """`name`: tasks up / down, the mean change per task, the paired permutation test's p and
    whether that is within noise."""
    p = permutation_p(change.diffs)
    verdict = "within noise" if p >= NOISE_P else f"beyond noise (p < {NOISE_P})"
    mean = sum(change.diffs) / len(change.diffs) if change.diffs else 0.0
    return (f"{name}: {change.up} tasks up, {change.down} down (mean change {100 * mean:+.1f} points), "
            f"paired permutation test p = {format_p(p)}: {verdict}")


def format_p(p: float) -> str:
    """Three decimals, or two significant digits below 0.001 (a default run's p = 0.0002 had
    printed as 0.000)."""
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def before_after_table(before: Optional[dict], after: Optional[dict],
                       paired: Optional[dict[str, tuple[int, int]]] = None) -> str:
    """The before/after success table; with `paired` (`paired_changes`), one line per kind of
    success saying how many tasks moved each way and whether that is beyond noise."""
    rows = ["held-out success (greedy)      before    after"]
    keys = sorted(set((before or {}).get("per_site_level", {})) | set((after or {}).get("per_site_level", {})))
    for key in ["overall", *keys]:
        def get(r):
            if not r:
                return "   -  "
            v = r.get("success") if key == "overall" else r.get("per_site_level", {}).get(key)
            return f"{100 * v:5.1f}%" if v is not None else "   -  "
        rows.append(f"{key:<30} {get(before):>7} {get(after):>8}")
    if any("success_sampled" in (r or {}) for r in (before, after)):
        def sampled(r):
            return f"{100 * r['success_sampled']:5.1f}%" if r and "success_sampled" in r else "   -  "
        rows.append(f"{'overall, sampled':<30} {sampled(before):>7} {sampled(after):>8}")
    for name, change in (paired or {}).items():
        rows.append(noise_line(f"change, {name}", change))
    return "\n".join(rows)


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def export_om2w(trajectories: Sequence[Trajectory], out_dir: str | Path) -> list[Path]:
    """Write each trajectory with turns as `<out_dir>/<safe task id>/result.json` (+ images)."""
    from webrl.reward.om2w import export_run

    seen: dict[str, int] = {}
    renamed = []
    for traj in trajectories:
        if not traj.turns:
            continue
        base = _UNSAFE.sub("_", traj.task_id).strip(".") or "task"
        seen[base] = seen.get(base, 0) + 1
        task_id = base if seen[base] == 1 else f"{base}-{seen[base]}"
        renamed.append(dataclasses.replace(traj, task_id=task_id))
    return export_run(renamed, out_dir)


class EndpointEngine:
    """The inference-engine interface (`act`, `load_weights`) over an `EndpointPolicy`."""

    def __init__(self, policy: Any):
        self.policy = policy

    def act(self, requests):
        return self.policy.act(requests)

    def load_weights(self, weights) -> None:
        raise RuntimeError("an endpoint serves its own weights; webrl cannot load weights into it")


@dataclass
class EndpointEngineFactory:
    """Picklable recipe for an `EndpointEngine` (built inside the inference actor)."""

    config: Any
    """An `EndpointConfig`."""

    def __call__(self) -> EndpointEngine:
        from webrl.policy.endpoint import EndpointPolicy

        return EndpointEngine(EndpointPolicy(self.config))


def endpoint_config(cfg: Any) -> Any:
    """The `EndpointConfig` `webrl eval` uses for `cfg.eval.endpoint` (greedy, the run's prompt)."""
    import os

    from webrl.policy.endpoint import EndpointConfig

    sampling = dataclasses.replace(cfg.generator.sampling, greedy=True)
    return EndpointConfig(base_url=cfg.eval.endpoint, model=cfg.eval.endpoint_model, family=cfg.model.family,
                          api_key=os.environ.get(cfg.eval.endpoint_api_key_env, "EMPTY"),
                          prompt=cfg.generator.prompt, sampling=sampling, logprobs=False)


def resolve_checkpoint(path: str) -> str:
    """A checkpoint folder (`checkpoints/step-N`, holding `hf/`), a plain HF folder or a shipped
    checkpoint (`webrl:tiny-webagent`) -> HF folder."""
    from webrl.models.shipped import resolve_shipped

    p = Path(resolve_shipped(path))
    if (p / "hf" / "config.json").exists():
        return str(p / "hf")
    if (p / "config.json").exists() or not p.exists():
        return str(p)  # a plain folder, or a hub id (transformers resolves it)
    raise FileNotFoundError(f"{path} holds neither config.json nor hf/config.json: not a checkpoint")
