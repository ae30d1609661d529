"""benchmarks/chaos.py: the seeded fault plan, the accounting check, the report and its resume,
the actor-kill injector on a process tree of our own, and the judge endpoint with its down / slow
faults over real HTTP on 127.0.0.1 (no Ray, no browser, no run)."""
import errno
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter

import psutil
import pytest

from tests.benchmarks.helpers import load_benchmark

chaos = load_benchmark("chaos")
chaos_judge = load_benchmark("chaos_judge")
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


def test_judge_drops_are_counted_by_their_category():
    # webrl's reasons name the URL and the attempts: two timeouts from different hosts are one row
    lines = [traj("0:0:a", status="dropped"), traj("0:0:a", status="dropped"), traj("0:1:b", status="dropped")]
    lines[0]["drop_reason"] = "judge_timeout: no reply from http://127.0.0.1:1/v1 within 10.0 s (after 4 attempts)"
    lines[1]["drop_reason"] = "judge_timeout: no reply from http://127.0.0.1:2/v1 within 10.0 s (after 4 attempts)"
    lines[2]["drop_reason"] = "judge_connection_error: [Errno 111] Connection refused (after 4 attempts)"
    assert chaos.trajectory_effects(lines)["dropped"] == {"judge_timeout": 2, "judge_connection_error": 1}


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
    assert "site_server_hang" in md and "judge_down" not in md  # judge faults are injected now
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


def test_the_inference_fault_kills_the_worker_serving_a_call_not_the_idle_older_one():
    parent = subprocess.Popen(["bash", "-c", "(exec -a ray::InferenceActor sleep 60) & sleep 0.3; "
                                             "(exec -a ray::InferenceActor.act_one sleep 60) & wait"])
    try:
        deadline = time.monotonic() + 10
        while len(chaos.titled(chaos.descendants(parent.pid), "ray::InferenceActor")) < 2 \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        idle, serving = chaos.titled(chaos.descendants(parent.pid), "ray::InferenceActor")  # oldest first
        target = chaos.KillActor("InferenceActor", busy=True).inject(parent.pid, random.Random(0))
        assert target == f"ray::InferenceActor pid {serving.pid} (serving a call)"
        assert idle.is_running() and idle.status() != psutil.STATUS_ZOMBIE
    finally:
        for p in chaos.descendants(parent.pid):
            p.kill()
        parent.kill()
        parent.wait()


def test_unknown_fault_kinds_are_refused_with_the_known_ones(tmp_path):
    with pytest.raises(SystemExit, match="judge_down"):  # the known ones are listed
        chaos.make_injectors(["judge_gone"], tmp_path, 1.0, 16)


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


# -- the judge endpoint and its faults ------------------------------------------------------------
def judged(judge_url, goal, steps, timeout_s=10.0, max_retries=0):
    """A trajectory of clicks (feedback as the env writes it) and a stop, scored by webrl's own
    action-history judge over HTTP against `judge_url`."""
    from webrl.actions import Action
    from webrl.reward import ActionHistoryJudge, JudgeReward, OpenAIBackendConfig, OpenAIChatBackend
    from webrl.types import Trajectory, Turn

    turns = [Turn(action=Action.click(i), feedback=feedback) for i, feedback in enumerate(steps)]
    turns.append(Turn(action=Action.stop()))
    backend = OpenAIChatBackend(OpenAIBackendConfig(base_url=judge_url, model=chaos_judge.JUDGE_MODEL,
                                                    timeout_s=timeout_s, max_retries=max_retries))
    try:
        return JudgeReward(ActionHistoryJudge(), backend)(Trajectory(task_id="t", goal=goal, turns=turns))
    finally:
        backend.close()


@pytest.fixture
def judge():
    process = chaos.JudgeProcess()
    process.start()
    try:
        yield process
    finally:
        process.kill()


def test_the_checker_rule_worked_by_hand():
    # widgets check_click: the set of buttons clicked is exactly the task's; the toast's Dismiss
    # is not a click the page reports
    verdict = chaos_judge.checker_verdict
    assert verdict('Click the "Send" button.', "click(1) -> Clicked <button> 'Send'") is True
    assert verdict('Press "Send".', "click(1) -> Clicked <button> 'Send'\nclick(2) -> Clicked <button> 'Dismiss'") is True
    assert verdict('Press "Send".', "click(1) -> Clicked <button> 'Send'\nclick(2) -> Clicked <button> 'Done'") is False
    assert verdict('Press "Send".', "click(1) -> Clicked <a> 'Send'") is False  # a link is not the button
    assert verdict('Open the "Pricing" page.', "click(0) -> Clicked <a> 'Pricing'") is True
    assert verdict('Press "Send".', "click_at(5, 9) -> Clicked at (5, 9) on <button> 'Send'") is True
    assert verdict('Press "Bob\'s".', 'click(4) -> Clicked <button> "Bob\'s"') is True  # repr: double quotes
    assert verdict('Follow the "Pricing" link.', "stop()") is False
    assert verdict('Type "x" into the "Name" field.', "") is None  # a kind it does not read


def test_the_judge_server_answers_webrl_judge_requests_by_the_checker_rule(judge):
    # the real client (OpenAIChatBackend) -> POST /v1/chat/completions on 127.0.0.1 -> verdict
    assert judge.url.startswith("http://127.0.0.1:") and judge.port > 0
    clicked = judged(judge.url, 'Click the "Send" button.', ["Clicked <button> 'Send'"])
    assert clicked.reward == 1.0 and "Verdict: SUCCESS" in clicked.details["reply"]
    assert judged(judge.url, 'Click the "Send" button.', ["Clicked <button> 'Done'"]).reward == 0.0
    # a task it cannot read: no verdict, which webrl drops rather than scoring 0
    unread = judged(judge.url, 'Type "x" into the "Name" field.', ["Typed 'x' into <input> 'Name'"])
    assert unread.reward is None and unread.drop_reason.startswith("judge_unparseable")


def test_judge_down_refuses_connections_then_the_server_comes_back_on_its_port(judge):
    port = judge.port
    fault = chaos.JudgeFault(judge)
    assert "killed until the run logs the iteration" in fault.inject(0, random.Random(0))
    down = judged(judge.url, 'Press "Send".', ["Clicked <button> 'Send'"])
    assert down.reward is None and down.drop_reason.startswith("judge_connection_error")
    fault.release()  # chaos.py's release once the run logged the iteration
    assert judge.alive and judge.port == port
    assert judged(judge.url, 'Press "Send".', ["Clicked <button> 'Send'"]).reward == 1.0
    fault.release()
    assert judge.alive


def test_judge_slow_answers_after_the_delay_and_times_out_a_shorter_timeout(judge):
    # 5 late replies: the first judgement takes 1 (in time at a 5 s timeout), the second all 4
    # of its tries (max_retries 3, each timing out at 0.5 s: dropped), the third none of them
    fault = chaos.JudgeFault(judge, slow_s=1.5, slow_requests=5)
    assert "next 5 replies 1.5s late" in fault.inject(0, random.Random(0))
    started = time.monotonic()
    late = judged(judge.url, 'Press "Send".', ["Clicked <button> 'Send'"], timeout_s=5.0)
    assert late.reward == 1.0 and time.monotonic() - started >= 1.5
    timed_out = judged(judge.url, 'Press "Send".', ["Clicked <button> 'Send'"], timeout_s=0.5, max_retries=3)
    assert timed_out.reward is None and timed_out.drop_reason.startswith("judge_timeout")
    assert "(after 4 attempts)" in timed_out.drop_reason
    started = time.monotonic()
    assert judged(judge.url, 'Press "Send".', ["Clicked <button> 'Send'"], timeout_s=0.5).reward == 1.0
    assert time.monotonic() - started < 1.5  # counted out: on time again before the release
    fault.inject(0, random.Random(0))
    fault.release()
    started = time.monotonic()
    assert judged(judge.url, 'Press "Send".', ["Clicked <button> 'Send'"], timeout_s=0.5).reward == 1.0
    assert time.monotonic() - started < 1.5


def test_the_judge_overrides_are_accepted_by_the_config_loader():
    from webrl.config import load_config
    from webrl.run.config import WebRLConfig

    overrides = chaos.judge_overrides("http://127.0.0.1:8123/v1")
    config = load_config(WebRLConfig, None, [*overrides, "trainer.iterations=3"])
    assert (config.reward.kind, config.reward.judge, config.reward.base_url, config.reward.timeout_s) == (
        "judge", "action_history", "http://127.0.0.1:8123/v1", 10.0)
    assert config.tasks.kinds == ["click_button", "click_link"] and config.trainer.iterations == 3


def test_the_judge_faults_are_planned_and_made(tmp_path):
    plan = chaos.fault_plan(0, ["judge_down", "judge_slow"], 1, 2, 3)
    assert sorted(f.kind for f in plan) == ["judge_down", "judge_slow"]
    assert "judge_down" not in chaos.NOT_INJECTED and "judge_slow" not in chaos.NOT_INJECTED
    made = chaos.make_injectors(["judge_down", "judge_slow"], tmp_path, 1.0, 16, chaos.JudgeProcess(), 30.0, 12.0, 6)
    assert (made["judge_down"].slow_s, made["judge_slow"].slow_s, made["judge_slow"].hold_s,
            made["judge_slow"].slow_requests) == (None, 12.0, 30.0, 6)
    args = chaos.parse_args(["--out", str(tmp_path), "--faults", "judge_down,judge_slow"])
    assert (args.faults, args.judge_hold_s, args.judge_slow_s, args.judge_slow_requests) == (
        "judge_down,judge_slow", 0.0, 15.0, 8)


FAKE_SERVER = """
import mmap, pathlib, sys, time
folder = pathlib.Path(sys.argv[3])
while not (folder / "model.safetensors").exists():
    time.sleep(0.01)
with open(folder / "model.safetensors", "rb") as f:
    mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)  # as from_pretrained's safe_open
    time.sleep(60)
"""


def _fake_server(tmp_path, folder):
    """A process whose command line holds `-m webrl.serve` (as the launcher's `python -m
    webrl.serve ...`), which maps `folder`/model.safetensors once it exists."""
    script = tmp_path / "fake_serve.py"
    script.write_text(FAKE_SERVER)
    return subprocess.Popen([sys.executable, str(script), "-m", "webrl.serve", str(folder)])


def test_the_server_faults_kill_webrl_serve_at_once_or_while_it_loads_new_weights(tmp_path):
    """server_generation kills the launched server at once; with none, LookupError.
    server_weight_update is armed (LookupError) while the server maps nothing new: v00000001
    existed at arming, and a fresh v00000002 folder without its file is not yet a load; once the
    server maps v00000002/model.safetensors the watcher kills it and the next inject names it."""
    weights = tmp_path / "run" / "server_weights"
    (weights / "v00000001").mkdir(parents=True)
    (weights / "v00000001" / "model.safetensors").write_bytes(b"old" * 100)
    parent = subprocess.Popen(["bash", "-c", "sleep 60"])  # not a server: nothing to kill
    with pytest.raises(LookupError, match="no webrl serve process"):
        chaos.KillServer(tmp_path / "run", during_update=False).inject(parent.pid, random.Random(0))
    parent.kill()
    parent.wait()

    loading = _fake_server(tmp_path, weights / "v00000001")  # maps the OLD folder: not the fault's moment
    waiter = _fake_server(tmp_path, weights / "v00000002")
    fault = chaos.KillServer(tmp_path / "run", during_update=True, poll_s=0.01)
    try:
        me = os.getpid()
        deadline = time.monotonic() + 10
        while len(chaos.servers(chaos.descendants(me))) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [p.pid for p in chaos.servers(chaos.descendants(me))] == [loading.pid, waiter.pid]
        for _ in range(3):
            with pytest.raises(LookupError, match="armed"):
                fault.inject(me, random.Random(0))
            time.sleep(0.2)
        (weights / "v00000002").mkdir()
        time.sleep(0.3)
        with pytest.raises(LookupError):  # a folder, nothing mapped yet
            fault.inject(me, random.Random(0))
        (weights / "v00000002" / "model.safetensors").write_bytes(b"new" * 100)
        deadline, target = time.monotonic() + 10, None
        while target is None and time.monotonic() < deadline:
            try:
                target = fault.inject(me, random.Random(0))
            except LookupError:
                time.sleep(0.05)
        assert target == f"webrl serve pid {waiter.pid} (loading v00000002/model.safetensors)"
        assert waiter.wait(timeout=10) == -signal.SIGKILL
        assert loading.poll() is None  # the one holding only the old weights lives

        target = chaos.KillServer(tmp_path / "run", during_update=False).inject(me, random.Random(0))
        assert target == f"webrl serve pid {loading.pid} (generating)"
        assert loading.wait(timeout=10) == -signal.SIGKILL
    finally:
        fault.release()
        for p in (loading, waiter):
            p.kill()
            p.wait()
