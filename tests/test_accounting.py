"""Accounting under faults (issue #36 item 2): `Trainer.fit` over in-process stand-ins (no Ray, no
browser) with each failure the rollout core tells apart injected once, and the sums checked.

The trainer's rule for a "dropped" group (`webrl.rollout.dynamic_sampling.select_groups` over
`webrl.rollout.balanced.scored_groups`): a group is dropped when it has NO scored trajectory (every
member dropped, at rollout or at scoring). A group with some members dropped is judged on the
members left: trained when their rewards differ (and the target is not yet met), filtered
otherwise (all equal, or a single scored member). Per iteration, over every dynamic-sampling
round: drawn_groups = trained_groups + filtered_groups + dropped_groups.

The run: 3 iterations of 3 tasks x group_size 3, dynamic sampling with at most 1 extra round of
1 task (candidate_factor 1, so the extra task is the next one drawn), max_retries 1, 1 s call
timeouts (far above an in-process call, even on a loaded machine). Tasks come from a scripted
source in a fixed order; a task's id names its fault and its reward pattern
("acct/<fault>/<rewards>"), and the env, the inference stand-in and the reward function act on
that name:

    fault          where                 what happens
    clean          -                     nothing
    infra_once     env reset             the task's first reset reports info["infra_error"]: one retry
    infra_always   env reset             every reset reports info["infra_error"]: each member dropped
                                         "infrastructure error after 2 attempts: browser crashed"
    bad_task       env reset             raises ValueError (NOT_RETRIED): each member dropped at once
    step_hang_once env step              the task's first step hangs past step_timeout_s: one retry
    infer_hang     inference             member 2's every decision hangs past inference_timeout_s:
                                         member 2 dropped after 2 attempts ("timeout: ...")
    judge_drop     reward (scoring)      every member dropped "judge_timeout: ..." by the reward fn
    judge_one      reward (scoring)      the first member scored is dropped "judge_timeout: ..."

    rewards "split": the first scored member 1, the rest 0 (informative); "same": all 0.

The trajectory log (`TRAJECTORY_LOG`) records no member index, so "no trajectory twice" is
checked as "each drawn group has exactly group_size lines, and the log holds nothing else".
"""
import asyncio
import dataclasses
import json
from collections import Counter

from tests.rollout.test_coordinator_logic import AsyncInference, CountEnv
from tests.test_trainer import LocalActors
from webrl.config import load_config
from webrl.envs.task import BaseTask, TaskSpec
from webrl.envs.worker import EnvStepResult
from webrl.reward import RewardResult
from webrl.rollout.viewer import TRAJECTORY_LOG
from webrl.run.config import WebRLConfig

GROUP_SIZE = 3
HANG_S = 30.0
"""What a hanging call would take; the 1 s timeouts cut it short."""
SCHEDULE = [  # in drawing order: iteration 0 (3 + 1 extra), iteration 1 (3 + 1 extra), iteration 2 (3)
    "clean/split", "infra_once/same", "bad_task/split", "infra_always/split",
    "step_hang_once/split", "infer_hang/split", "clean/same", "judge_drop/split",
    "clean/split", "judge_one/split", "clean/split",
]
BAD_TASK_MESSAGE = "start URL http://127.0.0.1:9/ refused: an internal address"


def fault(task_id: str) -> str:
    return task_id.split("/")[1]


class ScriptedSource:
    """A train task source that hands out SCHEDULE's tasks in order, whatever the rng."""

    def __init__(self):
        self.drawn = 0

    def sample(self, rng):
        assert self.drawn < len(SCHEDULE), "the run drew more tasks than the schedule holds"
        name = SCHEDULE[self.drawn]
        self.drawn += 1
        return BaseTask(TaskSpec(id=f"acct/{name}", goal="click twice then stop", start_url="http://127.0.0.1/"))


class FaultEnv(CountEnv):
    """CountEnv (one slot, so episodes run one at a time) with the env-side faults by task id."""

    def __init__(self):
        super().__init__(target=2)
        self.task_on_slot, self.resets_of, self.steps_of = {}, Counter(), Counter()

    async def reset(self, slot, seed, options):
        task_id = options["task"].spec.id
        self.task_on_slot[slot] = task_id
        self.resets_of[task_id] += 1
        if fault(task_id) == "bad_task":
            raise ValueError(BAD_TASK_MESSAGE)
        if fault(task_id) == "infra_always" or (fault(task_id) == "infra_once" and self.resets_of[task_id] == 1):
            return EnvStepResult(slot, {}, 0.0, False, True, {"infra_error": "browser crashed"})
        return await super().reset(slot, seed, options)

    async def step(self, slot, action):
        task_id = self.task_on_slot[slot]
        self.steps_of[task_id] += 1
        if fault(task_id) == "step_hang_once" and self.steps_of[task_id] == 1:
            await asyncio.sleep(HANG_S)
        return await super().step(slot, action)


class HangingInference(AsyncInference):
    """Member 2 of an infer_hang group never gets an answer (request ids are "group/member/turn")."""

    async def act_one(self, request):
        group_id, member, _ = request.request_id.rsplit("/", 2)
        if fault(group_id.split(":", 2)[2]) == "infer_hang" and member == "2":
            await asyncio.sleep(HANG_S)
        return await super().act_one(request)


class FaultActors(LocalActors):
    def __init__(self):
        super().__init__()
        self.env = FaultEnv()

    def start_inference(self, model_path, generator, index, count=1, endpoint=False):
        return [HangingInference(a.worker) for a in super().start_inference(model_path, generator, index, count)]


class ScriptedReward:
    """Scores by group: the rewards pattern over the members it is asked to score (score_trajectories
    never asks about a member already dropped), judge_timeout drops as the fault says."""

    name = "scripted"

    def __init__(self):
        self.asked, self.scored = Counter(), Counter()

    def __call__(self, traj):
        asked = self.asked[traj.group_id]
        self.asked[traj.group_id] += 1
        kind = fault(traj.task_id)
        if kind == "judge_drop" or (kind == "judge_one" and asked == 0):
            return RewardResult.drop("judge_timeout", "no verdict within 0.1s")
        first = self.scored[traj.group_id] == 0
        self.scored[traj.group_id] += 1
        return RewardResult(1.0 if first and traj.task_id.endswith("/split") else 0.0)


INFRA = "infrastructure error after 2 attempts: "
EXPECTED = [
    # iteration 0. Round 0: clean/split [1,0,0] trained; infra_once/same retried once, then [0,0,0]
    # filtered; bad_task all 3 dropped at once -> dropped. 1 trained of target 3, so needed 2 and
    # extra_task_count(2, 1, 3, budget 1) = min(1, ceil(2*3/1)) = 1 extra task: infra_always, all
    # 3 dropped after 2 attempts -> dropped. drawn 4 = trained 1 + filtered 1 + dropped 2.
    # retries: infra_once 1 + infra_always 3 members x 1 = 4; rollout drops 3 + 3 = 6.
    {"groups": {"trained": 1, "filtered": 1, "dropped": 2}, "retries": 4, "rollout_dropped": 6,
     "reward_dropped": 6, "judge_timeout": 0, "kept_trajectories": 3, "collects": 2},
    # iteration 1. Round 0: step_hang_once retried once, then [1,0,0] trained; infer_hang member 2
    # dropped after 2 attempts, members 0 and 1 score [1,0] -> trained (a drop inside a group does
    # not drop the group); clean/same filtered. 2 trained, needed 1: extra_task_count(1, 2, 3, 1) = 1
    # extra task: judge_drop, all 3 dropped at scoring -> dropped. drawn 4 = 2 + 1 + 1.
    # retries 1 + 1 = 2; rollout drops 1 (infer_hang member 2); reward drops 1 + 3 judge = 4.
    {"groups": {"trained": 2, "filtered": 1, "dropped": 1}, "retries": 2, "rollout_dropped": 1,
     "reward_dropped": 4, "judge_timeout": 3, "kept_trajectories": 3 + 2, "collects": 2},
    # iteration 2. clean/split trained; judge_one: first member dropped at scoring, the other two
    # [1,0] -> trained; clean/split trained. 3 of 3: no extra round. drawn 3 = 3 + 0 + 0.
    {"groups": {"trained": 3, "filtered": 0, "dropped": 0}, "retries": 0, "rollout_dropped": 0,
     "reward_dropped": 1, "judge_timeout": 1, "kept_trajectories": 3 + 2 + 3, "collects": 1},
]
OUTCOME = {  # group (by task name) -> its outcome under the trainer's rule, and its members' drop reasons
    "clean/split": ("trained", []), "infra_once/same": ("filtered", []),
    "bad_task/split": ("dropped", ["env error in task 'acct/bad_task/split' (not retried: retrying cannot fix it): "
                                   f"ValueError: {BAD_TASK_MESSAGE}"] * 3),
    "infra_always/split": ("dropped", [INFRA + "browser crashed"] * 3),
    "step_hang_once/split": ("trained", []), "infer_hang/split": ("trained", [INFRA + "timeout: "]),
    "clean/same": ("filtered", []), "judge_drop/split": ("dropped", ["judge_timeout: no verdict within 0.1s"] * 3),
    "judge_one/split": ("trained", ["judge_timeout: no verdict within 0.1s"]),
}


def run_with_faults(tmp_path, monkeypatch):
    """Trainer.fit over FaultActors, ScriptedSource and ScriptedReward; returns the RL rows of
    metrics.jsonl, the coordinator's (iteration, first group, task ids, stats) per collect, and
    the trajectory log's lines."""
    import webrl.run.parts as parts_module
    import webrl.run.trainer as trainer_module

    real_sources = parts_module.task_sources
    monkeypatch.setattr(parts_module, "task_sources", lambda *a, **k: (ScriptedSource(), real_sources(*a, **k)[1]))
    monkeypatch.setattr(parts_module, "build_reward", lambda *a, **k: ScriptedReward())
    config = load_config(WebRLConfig, None, [
        f"run.run_dir={tmp_path}", "trainer.iterations=3", "tasks.tasks_per_iteration=3", "tasks.eval_tasks=0",
        f"rollout.group_size={GROUP_SIZE}", "rollout.max_retries=1", "rollout.step_timeout_s=1",
        "rollout.inference_timeout_s=1", "rollout.dynamic_sampling.max_rounds=1",
        "rollout.dynamic_sampling.max_extra_tasks=1", "rollout.dynamic_sampling.candidate_factor=1"])
    config.rollout.retry_backoff_s = 0.01  # a fixed setting: code that builds the run may set it
    collects = []
    original_start_parts = parts_module.start_parts

    def recording_start_parts(*args, **kwargs):
        parts = original_start_parts(*args, **kwargs)
        collect = parts.coordinator.collect

        def recording_collect(tasks, iteration=0, group_sizes=None, first_group=0):
            trajectories, stats = collect(tasks, iteration, group_sizes, first_group=first_group)
            # a copy: the trainer adds a later round's stats into the first round's object
            collects.append((iteration, first_group, [t.spec.id for t in tasks], dataclasses.replace(stats)))
            return trajectories, stats

        parts.coordinator.collect = recording_collect
        return parts

    monkeypatch.setattr(trainer_module, "start_parts", recording_start_parts)
    trainer_module.Trainer(config, actors=FaultActors()).fit()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rows if "iteration" in r and r.get("stage") is None]
    logged = [json.loads(line) for line in (tmp_path / TRAJECTORY_LOG).read_text().splitlines()]
    return rl, collects, logged


def test_every_injected_fault_is_accounted_for_once_in_the_metrics_and_the_trajectory_log(tmp_path, monkeypatch):
    rl, collects, logged = run_with_faults(tmp_path, monkeypatch)
    assert [r["iteration"] for r in rl] == [1, 2, 3]
    assert [c[0] for c in collects] == [0, 0, 1, 1, 2]  # extra rounds in iterations 0 and 1 only
    for i, (row, expected) in enumerate(zip(rl, EXPECTED)):
        mine = [c for c in collects if c[0] == i]
        assert len(mine) == expected["collects"]
        counts = {k: row[f"{k}_groups"] for k in ("trained", "filtered", "dropped")}
        assert counts == expected["groups"], f"iteration {i}: {counts}"
        drawn = sum(len(ids) for _, _, ids, _ in mine)
        assert row["drawn_groups"] == drawn == sum(expected["groups"].values())
        assert row["drawn_groups"] == row["trained_groups"] + row["filtered_groups"] + row["dropped_groups"]
        assert row["retries"] == sum(s.retries for *_, s in mine) == expected["retries"], f"iteration {i}"
        assert row["dropped"] == sum(s.dropped for *_, s in mine) == expected["rollout_dropped"]
        assert row["trajectories"] == row["reward/n"] == drawn * GROUP_SIZE
        assert row["reward/n_dropped"] == expected["reward_dropped"]
        assert row.get("reward/dropped/judge_timeout", 0.0) == expected["judge_timeout"]
        assert row["num_groups"] == row["trained_groups"] and row["kept_trajectories"] == expected["kept_trajectories"]

    # the trajectory log: each drawn group exactly once with its group_size members, nothing else
    drawn_ids = [f"{it}:{first + k}:{task_id}" for it, first, ids, _ in collects for k, task_id in enumerate(ids)]
    assert len(drawn_ids) == len(set(drawn_ids)) == 11 and [g.split(":", 2)[2] for g in drawn_ids] == [
        f"acct/{name}" for name in SCHEDULE]
    lines_per_group = Counter(t["group_id"] for t in logged)
    assert lines_per_group == {g: GROUP_SIZE for g in drawn_ids}
    assert len(logged) == sum(r["drawn_groups"] for r in rl) * GROUP_SIZE == 33
    for group_id in drawn_ids:
        members = [t for t in logged if t["group_id"] == group_id]
        outcome, reasons = OUTCOME[group_id.split("/", 1)[1]]
        dropped = sorted(t["drop_reason"] for t in members if t["status"] == "dropped")
        assert len(dropped) == len(reasons) and all(got.startswith(want) for got, want in zip(dropped, reasons)), (
            group_id, dropped)
        assert all(t["reward"] is None for t in members if t["status"] == "dropped")
        scored = [t["reward"] for t in members if t["status"] == "ok"]
        assert outcome == ("dropped" if not scored else "trained" if len(set(scored)) > 1 else "filtered"), group_id
    timeouts = [t["drop_reason"] for t in logged if (t["drop_reason"] or "").startswith(INFRA + "timeout: ")]
    assert len(timeouts) == 1 and "an inference call over 1.0s" in timeouts[0]
    retried = {t["group_id"].split("/", 1)[1]: t["info"]["attempts"] for t in logged if t["info"]["attempts"] > 1
               and t["status"] == "ok"}
    assert retried == {"infra_once/same": 2, "step_hang_once/split": 2}
