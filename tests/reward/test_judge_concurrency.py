"""reward.max_concurrency: `score_trajectories(reward_fn, trajs)` judges that many trajectories at once
(the bound travels on the reward fn), never more, and returns results in the trajectories' order."""
from __future__ import annotations

import re
import threading

import pytest

from webrl.reward import RewardConfig, ScriptedBackend, build_reward, score_trajectories

from .helpers import done_trajectory, user_text

WAIT_S = 30.0  # only a failure detector: a judge that never overlaps breaks the barrier after this


class GatedJudge:
    """Judge replies that count calls in flight. Each call waits at a barrier of `bound` parties, so
    the calls of a round of `bound` trajectories pass only if all are in flight together (a serial
    scorer breaks it); inside a round call k waits for call k+1 to finish, so calls finish in
    reverse order. Trajectory k (goal "task number k") is judged a success when k is even."""

    def __init__(self, bound: int, n: int, wait_s: float = WAIT_S):
        self.bound, self.wait_s, self.lock = bound, wait_s, threading.Lock()
        self.in_flight = self.max_in_flight = 0
        self.barrier = threading.Barrier(bound)
        self.finished = [threading.Event() for _ in range(n)]
        self.finish_order: list[int] = []

    def __call__(self, messages) -> str:
        k = int(re.search(r"task number (\d+)", user_text(messages)).group(1))
        with self.lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            self.barrier.wait(self.wait_s)
            if (k + 1) % self.bound:  # not the last of its round: wait for the next one
                assert self.finished[k + 1].wait(self.wait_s)
        finally:
            with self.lock:
                self.in_flight -= 1
                self.finish_order.append(k)
            self.finished[k].set()
        return "Verdict: SUCCESS" if k % 2 == 0 else "Verdict: FAILURE"


def test_judge_calls_overlap_up_to_the_bound_and_keep_order():
    n, bound = 6, 3
    gate = GatedJudge(bound, n)
    reward_fn = build_reward(RewardConfig(kind="judge", max_concurrency=bound), ScriptedBackend(gate))
    assert reward_fn.max_concurrency == bound
    trajectories = [done_trajectory(goal=f"task number {k}") for k in range(n)]
    results = score_trajectories(reward_fn, trajectories)  # no max_workers: the reward fn's bound
    assert gate.max_in_flight == bound  # reached, never passed
    assert gate.finish_order == [2, 1, 0, 5, 4, 3]  # finished out of order ...
    assert [r.reward for r in results] == [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]  # ... results in order
    assert [t.reward for t in trajectories] == [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]


def test_one_at_a_time_breaks_the_gate():
    """The control: scored serially (explicit max_workers=1), the first call waits alone at the
    barrier and is dropped as a judge failure, so the gate does detect missing overlap."""
    gate = GatedJudge(2, 2, wait_s=0.2)
    reward_fn = build_reward(RewardConfig(kind="judge", max_concurrency=2), ScriptedBackend(gate))
    trajectories = [done_trajectory(goal=f"task number {k}") for k in range(2)]
    results = score_trajectories(reward_fn, trajectories, max_workers=1)
    assert gate.max_in_flight == 1 and results[0].dropped


class OneAtATime(ScriptedBackend):
    max_concurrency = 1  # as TransformersBackend declares


def test_bounds_and_refusals():
    served = {"base_url": "http://127.0.0.1:1/v1", "model": "judge"}
    assert RewardConfig(**served).openai_config().max_concurrency == 16  # one key bounds the client ...
    judge = build_reward(RewardConfig(kind="judge", max_concurrency=4, **served))
    assert judge.max_concurrency == 4 and judge.backend.config.max_concurrency == 4  # ... and the scoring
    assert build_reward(RewardConfig(kind="recipe", max_concurrency=8), ScriptedBackend(str)).max_concurrency == 8
    assert build_reward(RewardConfig(kind="programmatic", max_concurrency=8)).max_concurrency == 1
    # a backend that serves one call at a time (a local judge model) is scored serially
    assert build_reward(RewardConfig(kind="judge", max_concurrency=8), OneAtATime(str)).max_concurrency == 1
    from webrl.reward.backends import TransformersBackend

    assert TransformersBackend.max_concurrency == 1
    with pytest.raises(ValueError, match=r"reward.max_concurrency\) must be an integer >= 1, got 0"):
        RewardConfig(max_concurrency=0)
