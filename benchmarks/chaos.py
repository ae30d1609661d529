"""Chaos: the main job (`examples/train_online_mind2web.py`) under injected faults.

A seeded `fault_plan` (seed, kinds, count per kind, iteration window -> [(iteration, delay), fault])
is replayed against a real run: each fault fires `delay_s` after the run logged iteration
`iteration - 1` (so while iteration `iteration` collects). A monitor thread tails the run's
metrics.jsonl; a fault has recovered when the run logs its next iteration (after a restart, for
the faults that end the run). Per fault the report says how often it was injected, what the run
did (trajectories retried, dropped with their reasons, the actor restarted, the run exited and
resumed from which checkpoint) and how long recovery took.

Faults (`chaos_faults.make_injectors`; each is a small class, targets found among the run's own descendants by
their Ray process titles `ray::EnvWorker`, `ray::InferenceActor`, `ray::LearnerWorker`):

    chromium          SIGKILL a Chromium browser process under one env worker
    env_worker        SIGKILL one EnvWorker actor process (Ray restarts it: max_restarts=3)
    site_hang         SIGSTOP every Chromium renderer of one env worker for --hang-s, then SIGCONT:
                      the pages stop answering, as a site whose scripts spin forever does
    inference_worker  SIGKILL the InferenceActor serving a call (the rollout's; the oldest if none is)
    learner_rank      SIGKILL a LearnerWorker; the run dies, and this script restarts it with
                      run.resume=true and checks it says which checkpoint it resumed from
    disk_full         checkpoints/ is a tmpfs (--disk-mb); the fault fills it to 1 MiB free, so
                      the next checkpoint write hits ENOSPC; the filler is removed ("the operator
                      frees space") before the run is restarted
    server_generation SIGKILL the launched `webrl serve` while the iteration collects (needs
                      rollout.engine=server rollout.server.launch=webrl among the overrides)
    server_weight_update  SIGKILL it while it loads the run's new weights (a watcher sees it
                      holding a fresh server_weights/v* file, i.e. inside POST /update_weights_from_disk)
    judge_down        SIGKILL the run's judge server (connections refused) until the run logs the
                      iteration (at most --judge-hold-s when > 0), then start it again on its port
    judge_slow        the judge server answers its next --judge-slow-requests chat requests
                      --judge-slow-s late (past reward.timeout_s=10); counted in requests, since
                      judge calls come only at the iteration's scoring (`chaos_judge.JudgeFault`)

The judge faults need a judge: the default scores with the sandbox's programmatic checker and a
hosted judge cannot be reached from this machine, so with a judge fault among --faults the script
starts a judge server of its own on 127.0.0.1 (`benchmarks/chaos_judge.py`: the chat-completions
protocol, verdicts by the widgets checker's rule read from the action history) and appends, before
the command line's overrides: reward.kind=judge reward.judge=action_history
reward.base_url=http://127.0.0.1:PORT/v1 reward.model=sandbox-checker reward.timeout_s=10
tasks.kinds=[click_button,click_link] tasks.train_levels=[0] tasks.eval_levels=[0] (the level-0
kinds whose outcome the feedback shows). webrl drops a
trajectory whose judge call fails after reward.max_retries (3) with the reason judge_timeout or
judge_connection_error, never a 0 reward; the report counts the drops by that reason.

Not implemented (NOT_INJECTED): a server-side site hang: the sandbox sites are served by a thread
inside each EnvWorker process (webrl.envs.sites.server), so nothing outside can stall only the
server; site_hang stalls the renderers instead, which the env sees the same way (a call that never
returns).

What the run does is observed, not assumed. Seen in the smoke (2026-12-07, 3 tiny iterations):
a killed LearnerWorker is noticed only at the update, after the iteration's whole collection
(ActorDiedError, the run exits 1); the restarted run resumes from the last step-N. The aborted
attempt's trajectories stayed in trajectories.jsonl under the same group ids as the redo's; since
c14c7bb `run.resume` cuts the logs back to the checkpoint, so the check reads them as they stand.

At the end the accounting check (`check_accounting`) reads metrics.jsonl and
trajectories/trajectories.jsonl: every iteration 1..N logged; drawn_groups = trained_groups +
filtered_groups + dropped_groups; the log holds exactly the drawn groups, each with group_size
trajectories (rollout.balanced off, as in the default), the groups without a scored trajectory
are the dropped ones, and no trajectory appears twice. The logs are read as they stand: a
resumed run cut them back to its checkpoint, so an iteration redone after a restart must appear
once. Every published checkpoint is verified against its manifest (sha256) and its hf/
folder loaded with plain transformers.

Output under --out (written as it happens, so a stopped run keeps its results; run again with the
same --out and the rows kept are not injected again, the run resumes from its checkpoint):
faults.jsonl (one row per fault), state.json, report.md, report.json, run-N.log, run/ (the run).

    python benchmarks/chaos.py --out /tmp/chaos --seed 0 --per-fault 1 \\
        trainer.iterations=8 tasks.eval_tasks=8

(about 10-15 minutes on 2 idle cores: the default's 8 iterations take ~3.5 min, each fault that
ends the run costs a restart (~1 min) and a redone iteration, site_hang holds --hang-s.) With
disk_full the checkpoints live on the tmpfs and go with it when the script unmounts it at the end.
The judge faults, on a run scored by the script's judge (above), in a run of their own:

    python benchmarks/chaos.py --out /tmp/chaos-judge --seed 0 --faults judge_down,judge_slow \\
        trainer.iterations=6 tasks.eval_tasks=8
"""
from __future__ import annotations

import argparse
import atexit
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

import psutil

from webrl.rollout.viewer import TRAJECTORY_LOG

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chaos_checks import (NOT_INJECTED, Fault, Report, check_accounting, check_checkpoints,  # noqa: E402,F401
                          fault_plan, trajectory_effects)
from chaos_judge import JUDGE_KINDS, JudgeFault, JudgeProcess, judge_overrides  # noqa: E402,F401
from chaos_faults import (FillDisk, HangSite, Injector, KillActor, KillChromium, KillServer,  # noqa: E402,F401
                          chromium, descendants, make_injectors, servers, titled)

ROOT = Path(__file__).resolve().parents[1]
MAIN_JOB = ROOT / "examples" / "train_online_mind2web.py"
RESUMED = re.compile(r"resumed from (\S+) \(iteration (\d+)")


class MetricsTail(threading.Thread):
    """Tails metrics.jsonl: `records` (every iteration line, in order) and `lines` (all lines).

    A resumed run cuts the log back to its checkpoint (`webrl.run.log.cut_logs`) before appending
    again: when the file is shorter than what was read, or the last line read is no longer where
    it was, the tail reads the file again from the start, so `records` is what the log holds."""

    def __init__(self, path: Path):
        super().__init__(daemon=True)
        self.path, self.records, self.lines, self.stop = path, [], 0, threading.Event()
        self._offset, self._last = 0, b""

    def poll(self) -> None:
        if not self.path.exists():
            return
        with open(self.path, "rb") as f:
            data = f.read()
        if len(data) < self._offset or data[self._offset - len(self._last):self._offset] != self._last:
            self.records, self.lines, self._offset, self._last = [], 0, 0, b""  # the log was cut
        chunk = data[self._offset:]
        whole = chunk[:chunk.rfind(b"\n") + 1]
        for line in whole.splitlines():
            self.lines += 1
            record = json.loads(line)
            if "iteration" in record and "stage" not in record:
                self.records.append(record)
        if whole:
            self._offset += len(whole)
            self._last = whole.splitlines(keepends=True)[-1]

    def run(self) -> None:
        while not self.stop.wait(0.5):
            self.poll()

    def after(self, t: float) -> Optional[dict]:
        return next((r for r in self.records if r["time"] > t), None)


def checkpointed(root: Path, iteration: int) -> bool:
    """Whether the checkpoint of `iteration` (or a later one) is published: a fault has recovered
    only when the run logged an iteration after it and saved it (a full disk fails at the save)."""
    from webrl.learner.checkpoint import list_checkpoints

    return any(int(folder.name.split("-")[-1]) >= iteration for folder in list_checkpoints(root))


def _lines(path: Path) -> int:
    return sum(1 for _ in open(path)) if path.exists() else 0


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


@dataclass
class Active:
    fault: Fault
    injected_at: float
    target: str
    attempt: int
    log_line: int
    """The trajectory log's length at the injection."""


class Chaos:
    """Runs the main job, injects the plan's faults, restarts it with run.resume=true when it dies."""

    def __init__(self, out: Path, plan: list[Fault], injectors: dict[str, Injector], overrides: list[str],
                 seed: int, stall_s: float, max_restarts: int):
        self.out, self.run_dir, self.report = out, out / "run", Report(out)
        self.pending = [f for f in plan if f.index not in self.report.done]
        self.injectors, self.overrides, self.rng = injectors, overrides, random.Random(f"chaos-targets:{seed}")
        self.stall_s, self.max_restarts = stall_s, max_restarts
        self.tail = MetricsTail(self.run_dir / "metrics.jsonl")
        self.active: Optional[Active] = None
        self.proc: Optional[subprocess.Popen] = None

    def start(self) -> float:
        from webrl.learner.checkpoint import latest_checkpoint

        state, attempt = self.report.state, self.report.state["attempts"]
        for key, name in (("metric_starts", "metrics.jsonl"), ("trajectory_starts", TRAJECTORY_LOG)):
            lines = _lines(self.run_dir / name)
            if lines:
                state[key].append(lines)
        state["attempts"] = attempt + 1
        self.report.save_state()
        resume = latest_checkpoint(self.run_dir / "checkpoints") is not None
        cmd = [sys.executable, str(MAIN_JOB), *self.overrides, f"run.run_dir={self.run_dir}",
               "rollout.log_trajectories=all", *(["run.resume=true"] if resume else [])]
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "HF_HUB_OFFLINE": "1"}
        log = open(self.out / f"run-{attempt}.log", "w")
        print(f"chaos: attempt {attempt}: {' '.join(cmd[1:])}", flush=True)
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                     start_new_session=True)
        return time.time()

    def kill_run(self) -> None:
        """SIGKILL the run and every process under it (all started by this script)."""
        for p in [*descendants(self.proc.pid), psutil.Process(self.proc.pid)]:
            try:
                p.kill()
            except psutil.Error:
                pass
        self.proc.wait()

    def resumed_line(self) -> str:
        text = (self.out / f"run-{self.report.state['attempts'] - 1}.log").read_text(errors="replace")
        found = RESUMED.search(text)
        return f"resumed from {Path(found.group(1)).name} (iteration {found.group(2)})" if found else "not resumed"

    def maybe_inject(self, now: float, started: float) -> None:
        """Fire the next fault `delay_s` after iteration - 1 was logged (or this attempt started,
        when later: a resumed run redoes the iteration; iteration 1 counts from the start)."""
        fault = self.pending[0]
        anchor = [r["time"] for r in self.tail.records if r["iteration"] == fault.iteration - 1]
        if fault.iteration > 1 and not anchor:
            return
        at = max([started, *anchor[-1:]]) + fault.delay_s
        if now < at:
            return
        try:
            target = self.injectors[fault.kind].inject(self.proc.pid, self.rng)
        except LookupError as e:  # e.g. actors still starting: try again on the next tick, for 120 s
            if now > at + getattr(self.injectors[fault.kind], "patience_s", 120.0):  # (an armed fault: longer)
                self.injectors[fault.kind].release()  # an armed watcher stops too
                self.pending.pop(0)
                self.report.add({**asdict(fault), "injected": False, "outcome": f"not injected: {e}"})
            return
        self.pending.pop(0)
        self.active = Active(fault, time.time(), target, self.report.state["attempts"],
                             _lines(self.run_dir / TRAJECTORY_LOG))
        print(f"chaos: injected {fault.kind} in iteration {fault.iteration}: {target}", flush=True)

    def finish(self, outcome: str, recovered_at: Optional[float]) -> None:
        a = self.active
        self.injectors[a.fault.kind].release()
        effects = trajectory_effects(_read_jsonl(self.run_dir / TRAJECTORY_LOG)[a.log_line:])
        self.report.add({**asdict(a.fault), "injected": True, "injected_at": a.injected_at, "target": a.target,
                         "outcome": outcome, "effects": effects,
                         "recovery_s": None if recovered_at is None else round(recovered_at - a.injected_at, 1)})
        print(f"chaos: {a.fault.kind}: {outcome} ({effects})", flush=True)
        self.active = None

    def watch(self, started: float) -> Optional[int]:
        """Until the run exits (its return code) or stalls (None, after killing it)."""
        while self.proc.poll() is None:
            time.sleep(1.0)
            now, a = time.time(), self.active
            if a is not None:
                after = self.tail.after(max(a.injected_at, started))
                if after is not None and checkpointed(self.run_dir / "checkpoints", after["iteration"]):
                    restarted = self.report.state["attempts"] > a.attempt
                    self.finish(f"{'run restarted, ' + self.resumed_line() if restarted else 'run continued'}",
                                after["time"])
            elif self.pending:
                self.maybe_inject(now, started)
            last = max([started, *(r["time"] for r in self.tail.records)])
            if now - last > self.stall_s:
                print(f"chaos: no iteration logged for {self.stall_s:g}s: killing the run", flush=True)
                self.kill_run()
                return None
        return self.proc.returncode

    def run(self) -> None:
        self.tail.start()
        restarts = 0
        while True:
            rc = self.watch(self.start())
            if rc == 0:
                if self.active is not None:  # the run ended before logging another iteration
                    self.finish("run finished without logging another iteration", None)
                for fault in self.pending:
                    self.report.add({**asdict(fault), "injected": False, "outcome": "not injected: the run ended"})
                break
            what = "stalled (killed)" if rc is None else f"exited rc={rc}"
            if self.active is not None:
                self.injectors[self.active.fault.kind].release()  # e.g. free the disk before resuming
                self.active.target += f"; the run {what}"
            else:
                self.report.add({"kind": "unplanned", "injected": False, "outcome": f"the run {what} with no fault"})
            restarts += 1
            if restarts > self.max_restarts:
                if self.active is not None:
                    self.finish(f"the run {what}; restarts exhausted", None)
                break
        self.tail.stop.set()


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path, help="output folder (keep it short: Ray's sockets)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--faults", default="chromium,env_worker,site_hang,inference_worker,learner_rank,disk_full")
    parser.add_argument("--per-fault", type=int, default=1)
    parser.add_argument("--first-iteration", type=int, default=2, help="earliest iteration a fault fires in")
    parser.add_argument("--delay", default="3,20", help="seconds after the previous iteration's log line: lo,hi")
    parser.add_argument("--hang-s", type=float, default=75.0, help="site_hang: how long the renderers stay stopped")
    parser.add_argument("--disk-mb", type=int, default=2048, help="disk_full: the checkpoints tmpfs size")
    parser.add_argument("--judge-hold-s", type=float, default=0.0,
                        help="judge_down / judge_slow: at most this long (0: until the run logs the iteration)")
    parser.add_argument("--judge-slow-s", type=float, default=15.0, help="judge_slow: reply delay (> 10 s timeout)")
    parser.add_argument("--judge-slow-requests", type=int, default=8, help="judge_slow: how many replies are late")
    parser.add_argument("--stall-s", type=float, default=420.0, help="no iteration this long: kill and resume")
    parser.add_argument("--max-restarts", type=int, default=8)
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    from webrl.config import load_config
    from webrl.run.config import WebRLConfig

    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stopped: still kill the run and release (finally)
    out = args.out.resolve()
    kinds = [k for k in args.faults.split(",") if k]
    judge = JudgeProcess() if set(kinds) & set(JUDGE_KINDS) else None
    if judge is not None:  # the run's judge: started here, before the run, and stopped here
        judge.start()
        atexit.register(judge.kill)  # after the finally below has released (restarted) it
        args.overrides = [*judge_overrides(judge.url), *args.overrides]
    config = load_config(WebRLConfig, None, args.overrides)
    iterations = config.trainer.iterations
    lo, hi = (float(x) for x in args.delay.split(","))
    plan = fault_plan(args.seed, kinds, args.per_fault, min(args.first_iteration, iterations), iterations, (lo, hi))
    (out / "run").mkdir(parents=True, exist_ok=True)
    (out / "plan.json").write_text(json.dumps([asdict(f) for f in plan], indent=1))
    injectors = make_injectors(kinds, out / "run", args.hang_s, args.disk_mb, judge, args.judge_hold_s,
                               args.judge_slow_s, args.judge_slow_requests)
    chaos = Chaos(out, plan, injectors, args.overrides, args.seed, args.stall_s, args.max_restarts)
    accounting = ["not checked: the benchmark stopped early"]
    try:
        chaos.run()
        state = chaos.report.state
        # a resumed run cuts its logs back to its checkpoint (webrl.run.log.cut_logs), so the logs
        # as they stand must hold every iteration once: no attempt boundaries to split them by
        accounting = check_accounting(_read_jsonl(out / "run/metrics.jsonl"),
                                      _read_jsonl(out / "run" / TRAJECTORY_LOG),
                                      config.rollout.group_size, iterations)
        checkpoints = check_checkpoints(out / "run/checkpoints")
        chaos.report.write({"accounting": accounting, "checkpoints": checkpoints, "attempts": state["attempts"]})
    finally:
        if chaos.proc is not None and chaos.proc.poll() is None:
            chaos.kill_run()
        if chaos.active is not None:  # stopped mid-fault: keep what is known (a rerun skips it)
            chaos.finish("benchmark stopped before the run recovered", None)
        for injector in injectors.values():
            injector.release()
        if "disk_full" in injectors:
            injectors["disk_full"].unmount()
    print((out / "report.md").read_text())
    return 0 if not accounting else 1


if __name__ == "__main__":
    sys.exit(main())
