"""The pure parts of `benchmarks/chaos.py`: the seeded fault plan, the accounting check over a
run's metrics.jsonl and trajectory log, what the trajectories say a fault did, the incremental
report, and the checkpoint check. No processes, no Ray."""
from __future__ import annotations

import json
import random
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

NOT_INJECTED = {
    "site_server_hang": "the sandbox sites are served by a thread inside each EnvWorker process: nothing outside "
                        "stalls only the server (site_hang stops the renderers instead)",
}


# -- the plan (pure) ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Fault:
    index: int
    """Position in the plan (the report's key: a rerun skips the indices already reported)."""
    kind: str
    iteration: int
    """Fires while this iteration (1-based, as metrics.jsonl counts) collects..."""
    delay_s: float
    """...this long after the run logged iteration - 1."""


def fault_plan(seed: int, kinds: list[str], per_fault: int, first: int, last: int,
               delay_s: tuple[float, float] = (3.0, 20.0)) -> list[Fault]:
    """`per_fault` faults of each kind, shuffled by `seed` and dealt round-robin over the
    iterations first..last (one per iteration while there are iterations enough, so each
    recovery is timed alone), each with a delay drawn from `delay_s`; in firing order."""
    if per_fault < 1 or not 1 <= first <= last:
        raise ValueError(f"need per_fault >= 1 and 1 <= first <= last, got {per_fault}, {first}, {last}")
    rng = random.Random(f"chaos:{seed}")
    order = [kind for kind in kinds for _ in range(per_fault)]
    rng.shuffle(order)
    span = last - first + 1
    drawn = [(first + i % span, round(rng.uniform(*delay_s), 1), kind) for i, kind in enumerate(order)]
    return [Fault(i, kind, it, delay) for i, (it, delay, kind) in enumerate(sorted(drawn))]


# -- accounting (pure) ----------------------------------------------------------------------------
def _last_attempt(records: list[dict], starts: list[int]) -> dict[int, tuple[int, dict]]:
    """{iteration: (attempt, its last record)} over metrics records; `starts`: the first line of
    each attempt after the first."""
    out = {}
    for line, record in enumerate(records):
        if "iteration" in record and "stage" not in record:
            out[int(record["iteration"])] = (sum(line >= s for s in starts), record)
    return out


def check_accounting(metrics: list[dict], trajectories: list[dict], group_size: int, iterations: int,
                     metric_starts: list[int] = (), trajectory_starts: list[int] = ()) -> list[str]:
    """The problems found (none: the accounting holds). `metrics` / `trajectories`: the lines of
    metrics.jsonl and trajectories.jsonl in file order; `*_starts`: the line where each restarted
    attempt began in each file, so an iteration redone after a restart is checked on its redo."""
    problems, last = [], _last_attempt(metrics, list(metric_starts))
    by_attempt: dict[tuple[int, int], list[dict]] = {}
    for line, traj in enumerate(trajectories):
        attempt = sum(line >= s for s in trajectory_starts)
        by_attempt.setdefault((attempt, int(traj["group_id"].split(":")[0]) + 1), []).append(traj)
    for it in range(1, iterations + 1):
        if it not in last:
            problems.append(f"iteration {it}: no metrics record")
            continue
        attempt, m = last[it]
        logged = by_attempt.get((attempt, it), [])
        groups: dict[str, list[dict]] = {}
        for traj in logged:
            groups.setdefault(traj["group_id"], []).append(traj)
        seen = set()
        for traj in logged:
            info = traj.get("info") or {}
            key = (traj["group_id"], info.get("started_at"), info.get("finished_at"))
            if info.get("started_at") is not None and key in seen:
                problems.append(f"iteration {it}: trajectory of group {traj['group_id']} started at "
                                f"{info['started_at']} is logged twice")
            seen.add(key)
        for group_id, members in groups.items():
            if len(members) != group_size:
                problems.append(f"iteration {it}: group {group_id} holds {len(members)} trajectories, "
                                f"group_size is {group_size}")
        if "trajectories" in m and int(m["trajectories"]) != len(logged):
            problems.append(f"iteration {it}: metrics count {int(m['trajectories'])} trajectories, "
                            f"the log holds {len(logged)}")
        keys = ("drawn_groups", "trained_groups", "filtered_groups", "dropped_groups")
        if not all(k in m for k in keys):
            problems.append(f"iteration {it}: metrics lack {[k for k in keys if k not in m]}")
            continue
        drawn, trained, filtered, dropped = (int(m[k]) for k in keys)
        if drawn != trained + filtered + dropped:
            problems.append(f"iteration {it}: drawn_groups {drawn} != trained_groups {trained} + "
                            f"filtered_groups {filtered} + dropped_groups {dropped}")
        if len(groups) != drawn:
            problems.append(f"iteration {it}: the trajectory log holds {len(groups)} groups, drawn_groups is {drawn}")
        unscored = sum(not any(t["status"] == "ok" and t.get("reward") is not None for t in members)
                       for members in groups.values())
        if unscored != dropped:
            problems.append(f"iteration {it}: {unscored} logged groups have no scored trajectory, "
                            f"dropped_groups is {dropped}")
    return problems


def trajectory_effects(trajectories: list[dict]) -> dict[str, Any]:
    """What the run did to the trajectories logged in a fault's window (the log's lines from the
    injection to the recovery; a dropped trajectory may have no time stamps, so lines, not times):
    how many were retried (attempts > 1) and the dropped ones by reason: a judge failure by its
    category ("judge_timeout: no reply from ... (after 4 attempts)" -> judge_timeout, as webrl's
    metrics count it: the rest names the URL), any other reason by its first 80 characters."""
    retried, dropped = 0, {}
    for traj in trajectories:
        retried += int((traj.get("info") or {}).get("attempts") or 0) > 1
        if traj["status"] == "dropped":
            reason = traj.get("drop_reason") or ""
            reason = reason.split(":", 1)[0] if reason.startswith("judge_") else reason[:80]
            dropped[reason] = dropped.get(reason, 0) + 1
    return {"retried": retried, "dropped": dropped}


# -- the report (incremental, resumable) ----------------------------------------------------------
class Report:
    """faults.jsonl (a row per fault, appended as it ends), state.json (attempt boundaries), and
    report.md / report.json rewritten from them after every row."""

    def __init__(self, out: Path):
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        self.rows_path, self.state_path = out / "faults.jsonl", out / "state.json"
        self.rows = [json.loads(line) for line in self.rows_path.read_text().splitlines()
                     if line.strip()] if self.rows_path.exists() else []
        self.state = json.loads(self.state_path.read_text()) if self.state_path.exists() else {
            "metric_starts": [], "trajectory_starts": [], "attempts": 0}

    @property
    def done(self) -> set[int]:
        return {row["index"] for row in self.rows if "index" in row}

    def add(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        with open(self.rows_path, "a") as f:
            f.write(json.dumps(row, default=str) + "\n")
        self.write()

    def save_state(self) -> None:
        self.state_path.write_text(json.dumps(self.state, indent=1))

    def summary(self) -> dict[str, dict[str, Any]]:
        kinds: dict[str, dict[str, Any]] = {}
        for row in self.rows:
            k = kinds.setdefault(row["kind"], {"planned": 0, "injected": 0, "recovered": 0, "outcomes": {},
                                               "recovery_s": []})
            k["planned"] += 1
            k["injected"] += bool(row.get("injected"))
            k["recovered"] += row.get("recovery_s") is not None
            k["outcomes"][row.get("outcome", "")] = k["outcomes"].get(row.get("outcome", ""), 0) + 1
            if row.get("recovery_s") is not None:
                k["recovery_s"].append(row["recovery_s"])
        return kinds

    def write(self, final: Optional[dict[str, Any]] = None) -> None:
        summary = self.summary()
        lines = ["| fault | injected | recovered | recovery s (median / max) | what the run did |",
                 "|---|---|---|---|---|"]
        for kind, k in sorted(summary.items()):
            rec = k["recovery_s"]
            times = f"{statistics.median(rec):.1f} / {max(rec):.1f}" if rec else "-"
            did = "; ".join(f"{o} x{n}" for o, n in k["outcomes"].items())
            lines.append(f"| {kind} | {k['injected']}/{k['planned']} | {k['recovered']} | {times} | {did} |")
        lines += ["", "| # | fault | iteration | target | outcome | retried | dropped | recovery s |",
                  "|---|---|---|---|---|---|---|---|"]
        for row in self.rows:
            eff = row.get("effects") or {}
            lines.append(f"| {row.get('index', '-')} | {row['kind']} | {row.get('iteration', '-')} | "
                         f"{row.get('target', '')} | {row.get('outcome', '')} | {eff.get('retried', '-')} | "
                         f"{sum((eff.get('dropped') or {}).values()) if eff else '-'} | {row.get('recovery_s')} |")
        lines += ["", "Not injected: " + "; ".join(f"{k}: {why}" for k, why in NOT_INJECTED.items())]
        if final is not None:
            lines += ["", f"Accounting problems: {final['accounting'] or 'none'}",
                      f"Checkpoints: {final['checkpoints']}"]
        (self.out / "report.md").write_text("\n".join(lines) + "\n")
        (self.out / "report.json").write_text(json.dumps(
            {"summary": summary, "rows": self.rows, "not_injected": NOT_INJECTED, "final": final}, indent=1,
            default=str))


def check_checkpoints(root: Path) -> list[str]:
    """Each published checkpoint: manifest (sha256), learner state, hf/ loaded by plain transformers."""
    import torch
    from transformers import AutoModelForImageTextToText

    from webrl.learner.checkpoint import list_checkpoints, read_state, verify_checkpoint

    found, out = list_checkpoints(root), []
    for folder in found:
        try:
            verify_checkpoint(folder)
            state = read_state(folder)
            AutoModelForImageTextToText.from_pretrained(str(folder / "hf"), dtype=torch.float32)
            out.append(f"{folder.name}: ok (iteration {(state.get('client_state') or {}).get('iteration')})")
        except Exception as e:  # any failure to load is the finding
            out.append(f"{folder.name}: NOT loadable ({type(e).__name__}: {e})")
    leftovers = sorted(p.name for p in root.iterdir() if p.is_dir() and p not in found) if root.is_dir() else []
    return out + ([f"unpublished folders left: {leftovers}"] if leftovers else [])
