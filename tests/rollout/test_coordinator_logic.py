"""Coordinator and batcher logic with in-process stand-ins that follow the real signatures.

The stand-ins (an async counter env and a scripted engine) let these tests pin down grouping,
retries, drops, version stamping and batching exactly; tests/rollout/test_rollout_ray.py runs
the same code over real Ray actors, Chromium and the tiny model.
"""
import asyncio
import concurrent.futures

import pytest

from webrl.actions import Action, ParseError
from webrl.envs.task import BaseTask, TaskSpec
from webrl.envs.worker import EnvStepResult
from webrl.policy.seeds import derive_seed, sub_seed
from webrl.policy.types import Decision, DecisionStats
from webrl.rollout import DynamicBatcher, InferenceConfig, InferenceWorker, RolloutConfig, RolloutCoordinator
from webrl.rollout.coordinator import run_coroutine


class CountEnv:
    """Episode ends with reward 1 when the agent stops after exactly `target` clicks."""

    def __init__(self, target=2, crash_on_reset=0, delay=0.0):
        self.target, self.crash_on_reset, self.delay = target, crash_on_reset, delay
        self.clicks, self.resets = {}, 0

    def _obs(self, slot, step):
        return {"goal": "click twice then stop", "url": "http://127.0.0.1/", "step": step,
                "feedback": f"clicks={self.clicks[slot]}", "last_action_error": ""}, {
                    "elements": [{"id": 0, "bbox": [1, 2, 3, 4]}]}

    async def reset(self, slot, seed, options):
        self.resets += 1
        if self.resets <= self.crash_on_reset:
            return EnvStepResult(slot, {}, 0.0, False, True, {"infra_error": "browser crashed"})
        self.clicks[slot] = 0
        return EnvStepResult(slot, *self._obs(slot, 0)[:1], 0.0, False, False, self._obs(slot, 0)[1])

    async def step(self, slot, action):
        await asyncio.sleep(self.delay)
        if isinstance(action, Action) and action.kind == "click":
            self.clicks[slot] += 1
            return EnvStepResult(slot, *self._obs(slot, 0)[:1], 0.0, False, False, self._obs(slot, 0)[1])
        done = isinstance(action, Action) and action.kind == "stop"
        reward = float(done and self.clicks[slot] == self.target)
        return EnvStepResult(slot, self._obs(slot, 0)[0], reward, done, False, self._obs(slot, 0)[1])


class ScriptedEngine:
    """Clicks until the feedback says clicks=2, then stops; records batch sizes."""

    def __init__(self):
        self.batches, self.weights = [], None

    def act(self, requests):
        self.batches.append(len(requests))
        out = []
        for r in requests:
            action = Action.stop() if r.observation.feedback == "clicks=2" else Action.click(0)
            out.append(Decision(parsed=action, response_text=action.to_compact()))
        return out

    def load_weights(self, weights):
        self.weights = weights


class AsyncInference:
    def __init__(self, worker):
        self.worker = worker

    async def act_one(self, request):
        return await self.worker.act_one(request)


def _tasks(n):
    return [BaseTask(TaskSpec(id=f"t{i}", goal="click twice then stop", start_url="http://127.0.0.1/")) for i in range(n)]


def _coordinator(env, slots=3, **cfg):
    worker = InferenceWorker(ScriptedEngine(), InferenceConfig(batch_window_s=0.01, max_batch_size=8), version=3)
    config = RolloutConfig(**{"group_size": 4, "max_turns": 5, "retry_backoff_s": 0.01, **cfg})
    return RolloutCoordinator([(env, i) for i in range(slots)], [AsyncInference(worker)], config), worker


def test_groups_come_back_complete_with_the_checker_outcome():
    env = CountEnv()
    coord, _ = _coordinator(env)
    trajs, stats = coord.collect(_tasks(3))
    assert len(trajs) == 12 and stats.trajectories == 12 and stats.dropped == 0
    groups = {}
    for t in trajs:
        groups.setdefault(t.group_id, []).append(t)
    assert sorted(len(g) for g in groups.values()) == [4, 4, 4]
    for t in trajs:
        # click, click, stop: 3 turns, checker 1, every turn stamped with the worker's version 3
        assert [turn.action.kind for turn in t.turns] == ["click", "click", "stop"]
        assert t.info.task_reward == 1.0 and all(turn.policy_version == 3 for turn in t.turns)
        # no reward function has run: the score is the reward function's to write
        assert t.reward is None and (t.info.terminated, t.info.truncated, t.info.needs_judge) == (True, False, False)
        assert (t.info.level, t.info.split, t.info.attempts) == (0, "train", 1)
        assert t.info.started_at <= t.info.finished_at
        assert t.turns[0].observation.action_bbox == [1, 2, 3, 4] and t.turns[2].observation.action_bbox is None
        # the policy saw the Set-of-Mark boxes (cascade heads need them) and the log keeps them
        assert t.turns[0].observation.elements[0]["bbox"] == [1.0, 2.0, 3.0, 4.0]
    assert stats.env_steps == 36 and stats.successes == 12


def test_collect_works_while_the_thread_already_runs_an_event_loop():
    """Playwright's sync API (or a notebook) leaves a running loop in the calling thread."""
    coord, _ = _coordinator(CountEnv())

    async def inside_a_loop():
        return coord.collect(_tasks(1))  # synchronous call from inside a running loop

    # A fresh thread, because this test's own thread may already hold Playwright's loop.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        trajs, stats = pool.submit(asyncio.run, inside_a_loop()).result()
    assert len(trajs) == 4 and stats.successes == 4 and stats.dropped == 0


def test_infra_errors_retry_then_succeed():
    env = CountEnv(crash_on_reset=2)  # the first two resets report a crashed browser
    coord, _ = _coordinator(env, max_retries=2)
    trajs, stats = coord.collect(_tasks(1))
    assert stats.dropped == 0 and stats.retries == 2
    # 3 slots: the first three resets run at once and the first two crash -> two retried once
    assert sorted(t.info.attempts for t in trajs) == [1, 1, 2, 2]


def test_infra_errors_past_the_limit_drop_with_reason_not_zero():
    env = CountEnv(crash_on_reset=100)
    coord, _ = _coordinator(env, max_retries=1)
    trajs, stats = coord.collect(_tasks(1))
    assert stats.dropped == 4 and stats.successes == 0
    for t in trajs:
        assert t.status == "dropped" and t.reward is None and t.info.attempts == 2
        assert "browser crashed" in t.drop_reason and "2 attempts" in t.drop_reason


def test_horizon_truncates_and_schedule_applies():
    env = CountEnv(target=10)  # the scripted engine stops after 2 clicks, so reward stays 0
    coord, _ = _coordinator(env, max_turns=2, horizon_schedule=[[5, 3]])
    trajs, _ = coord.collect(_tasks(1), iteration=0)
    assert all(len(t.turns) == 2 and t.info.truncated and t.info.task_reward == 0.0 for t in trajs)
    trajs, _ = coord.collect(_tasks(1), iteration=5)
    assert all(len(t.turns) == 3 and t.info.task_reward == 0.0 for t in trajs)


def test_step_timeout_is_an_infrastructure_error():
    env = CountEnv(delay=0.5)
    coord, _ = _coordinator(env, slots=2, step_timeout_s=0.1, max_retries=0)
    trajs, stats = coord.collect(_tasks(1))
    assert stats.dropped == 4 and all("timeout" in t.drop_reason for t in trajs)


class SlowInference(AsyncInference):
    async def act_one(self, request):
        await asyncio.sleep(0.3)  # a long inference queue
        return await self.worker.act_one(request)


def test_inference_waits_are_not_held_to_the_env_step_timeout():
    env = CountEnv()
    coord, worker = _coordinator(env, step_timeout_s=0.2, inference_timeout_s=5.0)
    coord.inference = [SlowInference(worker)]
    trajs, stats = coord.collect(_tasks(1))
    assert stats.dropped == 0 and all(t.info.task_reward == 1.0 for t in trajs)
    coord, worker = _coordinator(env, inference_timeout_s=0.1, max_retries=0)
    coord.inference = [SlowInference(worker)]
    trajs, stats = coord.collect(_tasks(1))
    assert stats.dropped == 4 and all("timeout" in t.drop_reason for t in trajs)


class BabblingEngine(ScriptedEngine):
    """Never emits an action (every response fails to parse)."""

    def act(self, requests):
        return [Decision(parsed=ParseError("no action found", "hmm"), response_text="hmm") for _ in requests]


@pytest.mark.parametrize("limit, turns", [(3, 3), (0, 5)])
def test_episodes_stop_after_the_configured_run_of_parse_failures(limit, turns):
    worker = InferenceWorker(BabblingEngine(), InferenceConfig(batch_window_s=0.0), version=0)
    config = RolloutConfig(group_size=2, max_turns=5, stop_after_parse_failures=limit)
    coord = RolloutCoordinator([(CountEnv(), 0)], [AsyncInference(worker)], config)
    trajs, _ = coord.collect(_tasks(1))
    assert [len(t.turns) for t in trajs] == [turns, turns]  # 0: the step limit (5) ends them
    assert all(t.info.stopped_by == ("parse_failures" if limit else "") for t in trajs)
    assert all(t.info.task_reward == 0.0 and t.info.truncated for t in trajs)


class SometimesBabblingEngine(ScriptedEngine):
    """Fails to parse on steps 0, 1, 3, 4 and clicks on 2 and 5: never 3 failures in a row."""

    def act(self, requests):
        return [Decision(parsed=Action.click(0), response_text="click(0)") if r.observation.step in (2, 5) or
                len(r.history) in (2, 5) else Decision(parsed=ParseError("no action", "hmm"), response_text="hmm")
                for r in requests]


def test_a_parsed_turn_resets_the_parse_failure_count():
    worker = InferenceWorker(SometimesBabblingEngine(), InferenceConfig(batch_window_s=0.0), version=0)
    config = RolloutConfig(group_size=1, max_turns=6, stop_after_parse_failures=3)
    trajs, _ = RolloutCoordinator([(CountEnv(target=9), 0)], [AsyncInference(worker)], config).collect(_tasks(1))
    assert len(trajs[0].turns) == 6 and trajs[0].info.stopped_by == ""  # 2 failures at most in a row


def test_rollout_timeouts_and_the_parse_failure_limit_are_checked():
    with pytest.raises(ValueError, match="rollout.inference_timeout_s must be > 0"):
        RolloutConfig(inference_timeout_s=0)
    with pytest.raises(ValueError, match="rollout.stop_after_parse_failures must be an integer >= 0"):
        RolloutConfig(stop_after_parse_failures=-1)


def test_batcher_groups_concurrent_requests():
    calls = []

    def fn(items):
        calls.append(list(items))
        return [x * 10 for x in items]

    async def main(max_batch):
        batcher = DynamicBatcher(fn, window_s=0.2, max_batch=max_batch)
        return await asyncio.gather(*(batcher.submit(i) for i in range(5)))

    assert run_coroutine(main(8)) == [0, 10, 20, 30, 40] and calls == [[0, 1, 2, 3, 4]]
    calls.clear()
    assert run_coroutine(main(2)) == [0, 10, 20, 30, 40] and [len(c) for c in calls] == [2, 2, 1]


def test_batcher_failure_reaches_every_waiter_and_recovers():
    def fn(items):
        if 0 in items:
            raise RuntimeError("engine failed")
        return items

    async def main():
        batcher = DynamicBatcher(fn, window_s=0.05, max_batch=8)
        first = await asyncio.gather(batcher.submit(0), batcher.submit(1), return_exceptions=True)
        second = await batcher.submit(2)
        return first, second

    first, second = run_coroutine(main())
    assert all(isinstance(e, RuntimeError) for e in first) and second == 2


def test_set_weights_bumps_version_and_rejects_older():
    engine = ScriptedEngine()
    worker = InferenceWorker(engine, version=1)
    worker.set_weights({"w": 1}, 2)
    assert worker.version == 2 and engine.weights == {"w": 1}
    with pytest.raises(ValueError, match="older"):
        worker.set_weights({"w": 0}, 1)


class CachingEngine(ScriptedEngine):
    """ScriptedEngine whose decisions report 10 prompt tokens, 4 of them from a prefix cache."""

    def act(self, requests):
        out = super().act(requests)
        for decision in out:
            decision.stats = DecisionStats(prompt_tokens=10, cached_tokens=4)
        return out


def test_prompt_and_cached_tokens_are_summed_over_every_decision():
    worker = InferenceWorker(CachingEngine(), InferenceConfig(batch_window_s=0.01, max_batch_size=8), version=0)
    config = RolloutConfig(group_size=2, max_turns=5, retry_backoff_s=0.01)
    coord = RolloutCoordinator([(CountEnv(), i) for i in range(2)], [AsyncInference(worker)], config)
    _, stats = coord.collect(_tasks(2))
    # 4 trajectories x 3 decisions (click, click, stop), 10 prompt tokens each, 4 cached
    assert (stats.prompt_tokens, stats.cached_tokens) == (120, 48)


class SeedRecordingEngine(ScriptedEngine):
    """ScriptedEngine that records each request's id and seed."""

    def __init__(self):
        super().__init__()
        self.seen = {}

    def act(self, requests):
        self.seen.update((r.request_id, r.seed) for r in requests)
        return super().act(requests)


def _seeds(seed, slots=3, iteration=4, group_prefix=None):
    engine = SeedRecordingEngine()
    worker = InferenceWorker(engine, InferenceConfig(batch_window_s=0.01, max_batch_size=8), version=3)
    coord = RolloutCoordinator([(CountEnv(), i) for i in range(slots)], [AsyncInference(worker)],
                               RolloutConfig(group_size=3, max_turns=5), seed=seed)
    coord.collect(_tasks(2), iteration=iteration, group_prefix=group_prefix)
    return engine.seen


def test_every_decision_carries_a_seed_of_its_group_member_and_turn():
    """Seed 7: 2 groups x 3 members x 3 turns, each request with its own id and seed, the same on
    a rerun with other timing (1 slot instead of 3); another run seed moves them; None: unseeded."""
    seen = _seeds(7)
    ids = {f"4:{g}:t{g}/{m}/{t}" for g in range(2) for m in range(3) for t in range(3)}
    assert set(seen) == ids and len(set(seen.values())) == len(ids)
    episode = derive_seed(7, "4:1:t1", 2)  # group 1 (task t1) of iteration 4, member 2
    assert seen["4:1:t1/2/1"] == sub_seed(episode, 1)
    assert _seeds(7, slots=1) == seen
    assert set(_seeds(8).values()).isdisjoint(seen.values())
    assert set(_seeds(None).values()) == {None}


def test_a_group_prefix_gives_two_iterations_the_same_seeds():
    """The sampled evaluation's common random numbers: with group_prefix "eval" the collections
    of iterations 0 and 9 send the same request ids and seeds (member 2 of group 1, turn 1:
    sub_seed(derive_seed(7, "eval:1:t1", 2), 1)); without it, iteration 0's and 9's are disjoint."""
    before, after = _seeds(7, iteration=0, group_prefix="eval"), _seeds(7, iteration=9, group_prefix="eval")
    assert before == after and len(before) == 18
    assert before["eval:1:t1/2/1"] == sub_seed(derive_seed(7, "eval:1:t1", 2), 1)
    assert set(_seeds(7, iteration=0).values()).isdisjoint(_seeds(7, iteration=9).values())


class RaisingEnv(CountEnv):
    """Its reset raises what a Ray task error carries as `.cause` (issue 54: a refused start URL)."""

    def __init__(self, error):
        super().__init__()
        self.error = error

    async def reset(self, slot, seed, options):
        self.resets += 1
        raise self.error


class WrappedError(RuntimeError):
    """Stands in for ray.exceptions.RayTaskError: its `cause` is the env's own exception."""

    def __init__(self, cause):
        super().__init__(f"ray::EnvWorker.reset() (pid=1)\n  File x\n{cause!r}")
        self.cause = cause


def test_an_error_retrying_cannot_fix_drops_at_once_with_its_whole_message_and_task():
    message = ("start URL http://127.0.0.1:9/ refused: 127.0.0.1 is an internal address\n"
               "second line: set env.network.local_sites")
    env = RaisingEnv(WrappedError(ValueError(message)))
    coord, _ = _coordinator(env, max_retries=2)
    trajs, stats = coord.collect(_tasks(1))
    # 4 group members, one reset each (no retry): 4 resets, not 4 x 3
    assert env.resets == 4 and stats.retries == 0 and stats.dropped == 4
    for t in trajs:
        assert t.info.attempts == 1
        assert t.drop_reason == (f"env error in task 't0' (not retried: retrying cannot fix it): ValueError: {message}")


def test_an_infrastructure_exception_is_still_retried_and_reported_whole():
    env = RaisingEnv(WrappedError(ConnectionError("socket closed\nby the peer")))
    coord, _ = _coordinator(env, max_retries=1)
    trajs, stats = coord.collect(_tasks(1))
    assert env.resets == 8 and stats.retries == 4  # 4 members x 2 attempts; one retry each
    assert all(t.drop_reason == "infrastructure error after 2 attempts: ConnectionError: socket closed\nby the peer"
               for t in trajs)
