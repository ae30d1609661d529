"""AsyncCollector with in-process stand-ins (the counter env and scripted engine of
test_coordinator_logic): the staleness rule by hand, and max_staleness=0 behaving as sync."""
import time

import pytest

from webrl.rollout import InferenceConfig, InferenceWorker, RolloutConfig, RolloutCoordinator
from webrl.rollout.async_collector import AsyncCollector, is_fresh, oldest_version
from webrl.types import Trajectory, Turn

from tests.rollout.test_coordinator_logic import AsyncInference, CountEnv, ScriptedEngine, _tasks


def _group(*versions_per_traj):
    return [Trajectory(task_id="t", turns=[Turn(policy_version=v) for v in versions])
            for versions in versions_per_traj]


def test_staleness_rule_by_hand():
    group = _group([3, 4], [4, 5])  # oldest turn: version 3
    assert oldest_version(group) == 3
    # learner at 5, S=2: 5 - 3 = 2 <= 2 -> fresh; S=1: 2 > 1 -> stale; learner at 4, S=1: 1 -> fresh
    assert is_fresh(group, 5, 2) and not is_fresh(group, 5, 1) and is_fresh(group, 4, 1)
    assert not is_fresh(group, 5, 0) and is_fresh(_group([5], [5]), 5, 0)
    # a group whose members were all dropped (no turns) carries nothing stale
    assert oldest_version(_group([], [])) is None and is_fresh(_group([], []), 100, 0)


def test_config_names_mode_and_staleness():
    with pytest.raises(ValueError, match="rollout.mode must be sync | async"):
        RolloutConfig(mode="lockstep")
    with pytest.raises(ValueError, match="rollout.max_staleness"):
        RolloutConfig(max_staleness=-1)


def _collector(max_staleness, delay=0.02, slots=4):
    worker = InferenceWorker(ScriptedEngine(), InferenceConfig(batch_window_s=0.005, max_batch_size=8), version=0)
    config = RolloutConfig(group_size=2, max_turns=5, retry_backoff_s=0.01, mode="async", max_staleness=max_staleness)
    coord = RolloutCoordinator([(CountEnv(delay=delay), i) for i in range(slots)], [AsyncInference(worker)], config)
    tasks = iter(_tasks(100))
    return AsyncCollector(coord, lambda: next(tasks)), worker


def test_max_staleness_zero_behaves_like_sync():
    collector, worker = _collector(max_staleness=0)
    busy = []
    with collector:
        for version in range(3):
            trajs, stats = collector.next_batch(version, num_groups=2, iteration=version)
            # exactly 2 complete groups of G=2, every turn decided by the current weights
            assert len(trajs) == 4 and stats.stale == 0 and stats.trajectories == 4
            assert len({t.group_id for t in trajs}) == 2
            assert all(turn.policy_version == version for t in trajs for turn in t.turns)
            # CountEnv + scripted engine: click, click, stop -> checker 1, as sync collect gives
            assert all(t.info.task_reward == 1.0 and len(t.turns) == 3 for t in trajs)
            if busy:  # nothing of this batch ran while the "learner" was training
                assert min(t.info.started_at for t in trajs) >= busy[-1][1]
            start = time.time()
            time.sleep(0.3)  # the learner's update
            worker.set_weights({}, version + 1)
            busy.append((start, time.time()))
        assert collector.groups_started == 6  # nothing collected ahead, nothing thrown away


def test_groups_collected_ahead_are_used_or_counted_stale():
    collector, worker = _collector(max_staleness=1)
    with collector:
        trajs, _ = collector.next_batch(0, num_groups=2)
        # the learner makes two updates (0 -> 1 -> 2) while the collector prefetches at version 0
        _wait_ready(collector, 2)
        worker.set_weights({}, 1)
        worker.set_weights({}, 2)
        trajs, stats = collector.next_batch(2, num_groups=2)
        # the 2 prefetched groups (4 trajectories at version 0) are 2 versions old: discarded
        assert stats.stale == 4 and stats.trajectories == 8
        assert all(turn.policy_version >= 1 for t in trajs for turn in t.turns)
        # one update (2 -> 3): the groups prefetched at version 2 are 1 version old, so kept
        _wait_ready(collector, 2)
        worker.set_weights({}, 3)
        trajs, stats = collector.next_batch(3, num_groups=2)
        assert stats.stale == 0 and all(turn.policy_version == 2 for t in trajs for turn in t.turns)


def _wait_ready(collector, n, timeout=30.0):
    deadline = time.monotonic() + timeout
    while collector.ready_groups < n and time.monotonic() < deadline:
        time.sleep(0.02)
    assert collector.ready_groups >= n


def test_pause_lets_running_groups_finish_and_starts_no_more():
    collector, _ = _collector(max_staleness=1, delay=0.05)
    with collector:
        collector.next_batch(0, num_groups=2)
        time.sleep(0.05)  # the next batch's 2 groups are being collected ahead
        collector.pause()
        started = collector.groups_started
        # every group started so far is complete: 2 went out with the first batch, the rest wait
        assert collector.ready_groups == started - 2
        time.sleep(0.3)
        assert collector.groups_started == started  # paused: nothing new (the slots are free)
        trajs, stats = collector.next_batch(0, num_groups=2)
        assert len(trajs) == 4 and stats.stale == 0
