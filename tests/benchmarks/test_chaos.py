"""benchmarks/chaos.py: the seeded fault plan, the accounting check, the report and its resume,
and the actor-kill injector on a process tree of our own (no Ray, no browser, no run)."""
import errno
import json
import os
import random
import subprocess
import time
from collections import Counter

import psutil
import pytest

from tests.benchmarks.helpers import load_benchmark

chaos = load_benchmark("chaos")
KINDS = ["chromium", "env_worker", "site_hang", "inference_worker", "learner_rank", "disk_full"]


# -- the plan -------------------------------------------------------------------------------------
def test_the_plan_is_seeded_and_holds_every_fault_per_fault_times_in_its_windows():
    plan = chaos.fault_plan(7, KINDS, 3, 2, 8, (3.0, 20.0))
    assert plan == chaos.fault_plan(7, KINDS, 3, 2, 8, (3.0, 20.0))
    assert plan != chaos.fault_plan(8, KINDS, 3, 2, 8, (3.0, 20.0))
    assert Counter(f.kind for f in plan) == {kind: 3 for kind in KINDS}
    assert [f.index for f in plan] == list(range(18))
    assert all(2 <= f.iteration <= 8 and 3.0 <= f.delay_s <= 20.0 for f in plan)
    assert [(f.iteration, f.delay_s) for f in plan] == sorted((f.iteration, f.delay_s) for f in plan)


def test_the_plan_worked_by_hand():
    # one kind x 3 over iterations 2..3, dealt round-robin: 2, 3, 2 -> in firing order 2, 2, 3;
    # the delay window is one point, so every delay is 5.0 whatever the seed
    assert chaos.fault_plan(0, ["chromium"], 3, 2, 3, (5.0, 5.0)) == [
        chaos.Fault(0, "chromium", 2, 5.0), chaos.Fault(1, "chromium", 2, 5.0), chaos.Fault(2, "chromium", 3, 5.0)]


def test_with_iterations_enough_each_fault_has_an_iteration_of_its_own():
    # 6 faults over iterations 2..8 (7 of them): one each, so every recovery is timed alone
    plan = chaos.fault_plan(0, KINDS, 1, 2, 8)
    assert len({f.iteration for f in plan}) == 6


@pytest.mark.parametrize("per_fault, first, last", [(0, 2, 8), (1, 0, 8), (1, 5, 4)])
def test_the_plan_refuses_empty_windows_and_counts(per_fault, first, last):
    with pytest.raises(ValueError):
        chaos.fault_plan(0, KINDS, per_fault, first, last)


# -- the accounting check -------------------------------------------------------------------------
def traj(group_id, reward=1.0, status="ok", started=None, attempts=1):
    """One trajectories.jsonl line, with the fields the check reads."""
    ok = status == "ok"
    return {"task_id": group_id.split(":")[2], "group_id": group_id, "status": status,
            "reward": reward if ok else None, "drop_reason": None if ok else "infrastructure error",
            "info": {"started_at": started, "finished_at": None if started is None else started + 1.0,
                     "attempts": attempts}}


def metrics(iteration, drawn, trained, filtered, dropped, trajectories):
    return {"time": 100.0 + iteration, "iteration": iteration, "drawn_groups": float(drawn),
            "trained_groups": float(trained), "filtered_groups": float(filtered), "dropped_groups": float(dropped),
            "trajectories": trajectories}


def good_run():
    """Group size 2, two iterations. Iteration 1: t1 rewards [1, 0] (trained), t2 [0, 0]
    (filtered). Iteration 2: t3 one scored + one dropped -> rewards [1] (filtered), t4 both
    dropped (a dropped group). So 2 = 1 + 1 + 0 and 2 = 0 + 1 + 1."""
    trajectories = [traj("0:0:t1", 1.0, started=1), traj("0:0:t1", 0.0, started=2), traj("0:1:t2", 0.0, started=3),
                    traj("0:1:t2", 0.0, started=4), traj("1:0:t3", 1.0, started=5), traj("1:0:t3", status="dropped"),
                    traj("1:1:t4", status="dropped"), traj("1:1:t4", status="dropped")]
    records = [{"time": 50.0, "stage": "eval", "label": "before"}, metrics(1, 2, 1, 1, 0, 4), metrics(2, 2, 0, 1, 1, 4)]
    return records, trajectories


def test_accounting_that_adds_up_has_no_problems():
    records, trajectories = good_run()
    assert chaos.check_accounting(records, trajectories, 2, 2) == []


def test_a_trajectory_counted_twice_is_named():
    records, trajectories = good_run()
    problems = chaos.check_accounting(records, trajectories + [trajectories[0]], 2, 2)
    assert "iteration 1: trajectory of group 0:0:t1 started at 1 is logged twice" in problems
    assert "iteration 1: group 0:0:t1 holds 3 trajectories, group_size is 2" in problems
    assert "iteration 1: metrics count 4 trajectories, the log holds 5" in problems


def test_a_missing_group_is_named():
    records, trajectories = good_run()
    problems = chaos.check_accounting(records, [t for t in trajectories if t["group_id"] != "0:1:t2"], 2, 2)
    assert "iteration 1: the trajectory log holds 1 groups, drawn_groups is 2" in problems


def test_counts_that_do_not_add_up_are_named():
    records, trajectories = good_run()
    records[2] = metrics(2, 3, 0, 1, 1, 4)  # one drawn group in no bucket
    records[1] = metrics(1, 2, 1, 0, 1, 4)  # a scored group called dropped
    problems = chaos.check_accounting(records, trajectories, 2, 2)
    assert "iteration 2: drawn_groups 3 != trained_groups 0 + filtered_groups 1 + dropped_groups 1" in problems
    assert "iteration 1: 0 logged groups have no scored trajectory, dropped_groups is 1" in problems


def test_a_missing_iteration_and_missing_keys_are_named():
    records, trajectories = good_run()
    without_keys = {k: v for k, v in records[1].items() if k != "filtered_groups"}
    problems = chaos.check_accounting([without_keys], trajectories, 2, 2)
    assert problems == ["iteration 1: metrics lack ['filtered_groups']", "iteration 2: no metrics record"]


def test_an_iteration_redone_after_a_restart_is_checked_on_its_redo():
    # the run died in iteration 2 after logging 3 of its trajectories (no metrics line), resumed
    # from step 1 and redid iteration 2 in full: the redo is the one checked
    records, trajectories = good_run()
    partial = [dict(t) for t in trajectories[4:7]]
    lines = trajectories[:4] + partial + trajectories[4:]
    assert chaos.check_accounting(records, lines, 2, 2, metric_starts=[2], trajectory_starts=[7]) == []
    # without the boundary the aborted attempt's trajectories count again
    assert "iteration 2: group 1:0:t3 holds 4 trajectories, group_size is 2" in chaos.check_accounting(
        records, lines, 2, 2)


def test_trajectory_effects_counts_retries_and_drop_reasons():
    lines = [traj("0:0:a", started=10, attempts=2), traj("0:0:a", started=30, attempts=3),
             traj("0:1:b", status="dropped"), traj("0:1:b", started=11, attempts=1)]
    assert chaos.trajectory_effects(lines) == {"retried": 2, "dropped": {"infrastructure error": 1}}


# -- the report and its resume --------------------------------------------------------------------
def test_the_report_is_written_per_row_and_a_rerun_keeps_the_rows(tmp_path):
    report = chaos.Report(tmp_path)
    report.add({"index": 0, "kind": "env_worker", "iteration": 2, "injected": True, "target": "pid 1",
                "outcome": "run continued", "effects": {"retried": 3, "dropped": {}}, "recovery_s": 12.0})
    report.add({"index": 1, "kind": "env_worker", "iteration": 3, "injected": True, "target": "pid 2",
                "outcome": "run continued", "effects": {"retried": 1, "dropped": {"x": 2}}, "recovery_s": 20.0})
    report.add({"index": 2, "kind": "learner_rank", "iteration": 4, "injected": False, "outcome": "not injected: none"})
    report.state["attempts"] = 2
    report.save_state()
    md = (tmp_path / "report.md").read_text()
    # env_worker: 2 of 2 injected and recovered, median of (12, 20) = 16.0, max 20.0
    assert "| env_worker | 2/2 | 2 | 16.0 / 20.0 | run continued x2 |" in md
    assert "| learner_rank | 0/1 | 0 | - | not injected: none x1 |" in md
    assert "| 1 | env_worker | 3 | pid 2 | run continued | 1 | 2 | 20.0 |" in md
    assert "judge_down" in md
    again = chaos.Report(tmp_path)
    assert again.done == {0, 1, 2} and again.state["attempts"] == 2 and len(again.rows) == 3
    summary = json.loads((tmp_path / "report.json").read_text())["summary"]
    assert summary["env_worker"]["recovery_s"] == [12.0, 20.0]


def test_a_rerun_skips_the_faults_already_reported(tmp_path):
    plan = chaos.fault_plan(0, ["chromium", "env_worker"], 1, 2, 3)
    chaos.Report(tmp_path).add({"index": 0, "kind": plan[0].kind, "outcome": "run continued", "injected": True})
    runner = chaos.Chaos(tmp_path, plan, {}, [], 0, stall_s=60, max_restarts=0)
    assert runner.pending == plan[1:]


# -- injectors on a process tree of our own -------------------------------------------------------
def test_kill_actor_kills_the_titled_descendant_and_says_so_when_there_is_none():
    parent = subprocess.Popen(["bash", "-c", "(exec -a ray::EnvWorker sleep 60) & wait"])
    try:
        deadline = time.monotonic() + 10
        while not chaos.titled(chaos.descendants(parent.pid), "ray::EnvWorker") and time.monotonic() < deadline:
            time.sleep(0.05)
        victim = chaos.titled(chaos.descendants(parent.pid), "ray::EnvWorker")[0]
        with pytest.raises(LookupError):
            chaos.KillActor("LearnerWorker").inject(parent.pid, random.Random(0))
        target = chaos.KillActor("EnvWorker").inject(parent.pid, random.Random(0))
        assert target == f"ray::EnvWorker pid {victim.pid}"
        assert parent.wait(timeout=10) == 0  # bash's `wait` returns once its child is gone
        assert not psutil.pid_exists(victim.pid) or victim.status() == psutil.STATUS_ZOMBIE
    finally:
        parent.kill()
        parent.wait()


def test_unknown_fault_kinds_are_refused_with_the_known_ones(tmp_path):
    with pytest.raises(SystemExit, match="judge_down"):
        chaos.make_injectors(["judge_down"], tmp_path, 1.0, 16)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_fill_disk_leaves_a_mebibyte_so_a_checkpoint_write_fails_until_released(tmp_path):
    disk = chaos.FillDisk(tmp_path / "checkpoints", size_mb=8)
    try:
        assert os.path.ismount(tmp_path / "checkpoints")
        disk.inject(0, random.Random(0))
        with pytest.raises(OSError) as raised:  # 2 MiB do not fit in the 1 MiB left
            (tmp_path / "checkpoints" / "weights.bin").write_bytes(b"\0" * (2 << 20))
        assert raised.value.errno == errno.ENOSPC
        disk.release()
        (tmp_path / "checkpoints" / "weights.bin").write_bytes(b"\0" * (2 << 20))
    finally:
        disk.unmount()
    assert not os.path.ismount(tmp_path / "checkpoints")


def test_the_metrics_tail_follows_a_log_cut_back_by_a_resume(tmp_path):
    """Iterations 1-3 read; the resume cuts the log back to iteration 1 and appends 2' (and half
    a line): the tail then holds [1, 2'], not [1, 2, 3] nor a broken line; a cut that is longer
    again by the next poll (2' and 3' appended) is found by the last line read moving."""
    log = tmp_path / "metrics.jsonl"
    line = lambda it, t: json.dumps({"iteration": it, "time": t}) + "\n"  # noqa: E731
    log.write_text(line(1, 1.0) + line(2, 2.0) + line(3, 3.0))
    tail = chaos.MetricsTail(log)
    tail.poll()
    assert [(r["iteration"], r["time"]) for r in tail.records] == [(1, 1.0), (2, 2.0), (3, 3.0)]
    log.write_text(line(1, 1.0) + line(2, 20.0) + '{"iteration": 3, "ti')
    tail.poll()
    assert [(r["iteration"], r["time"]) for r in tail.records] == [(1, 1.0), (2, 20.0)] and tail.lines == 2
    log.write_text(line(1, 1.0) + line(2, 200.0) + line(3, 300.0) + line(4, 400.0))
    tail.poll()
    assert [r["time"] for r in tail.records] == [1.0, 200.0, 300.0, 400.0]


def test_a_fault_recovers_only_once_a_later_iteration_is_checkpointed(tmp_path):
    from webrl.learner.checkpoint import MANIFEST

    root = tmp_path / "checkpoints"
    assert not chaos.checkpointed(root, 3)
    (root / "step-00000003").mkdir(parents=True)
    assert not chaos.checkpointed(root, 3)  # unpublished (no manifest): a save that failed half-way
    (root / "step-00000003" / MANIFEST).write_text("{}")
    assert chaos.checkpointed(root, 3) and chaos.checkpointed(root, 2) and not chaos.checkpointed(root, 4)
