"""The recipe's format rules, the checker reward and the reward interface, on hand-built trajectories."""
import pytest

from webrl.actions import Action
from webrl.reward import (FallbackReward, ProgrammaticReward, ProgrammaticRewardConfig, RecipeReward,
                          RecipeRewardConfig, RewardResult, ScriptedBackend, apply_reward, reward_metrics,
                          score_trajectories)
from webrl.reward.base import action_history, max_consecutive_parse_failures
from webrl.reward.history_judges import ActionHistoryJudge, DeepShopJudgeConfig
from webrl.reward.judge import JudgeReward

from .helpers import done_trajectory, trajectory

C, T, A, S = Action.click(1), Action.type_text("mug", 2), Action.answer("8 euros"), Action.stop()


class CountingScorer:
    """Always 1.0; counts calls, to prove when the judge is (not) consulted."""

    name = "counting"

    def __init__(self, result=None):
        self.calls = 0
        self.result = result or RewardResult(1.0, details={"judge": "counting"})

    def __call__(self, traj):
        self.calls += 1
        return self.result


# (actions, expected reward, rule, judge called?) -- None is an unparseable turn.
CASES = [
    # C, None, None, None: a run of 3 parse failures -> -1 even though the judge would say 1.
    ([C, None, None, None], -1.0, "parse_failures", False),
    # None, None, C, None, None, A: longest run is 2 < 3; the last turn (A) parsed -> judged.
    ([None, None, C, None, None, A], 1.0, "judged", True),
    # C, T, None: ended on an unparseable turn (run of 1) -> format failure 0.
    ([C, T, None], 0.0, "format_failure", False),
    # C, T: parsed but never called done (step limit) -> 0, no judge.
    ([C, T], 0.0, "not_done", False),
    # C, S: stop() is a done action -> judged.
    ([C, S], 1.0, "judged", True),
    # A only: an immediate answer is judged.
    ([A], 1.0, "judged", True),
    # no turns at all -> not done.
    ([], 0.0, "not_done", False),
]


@pytest.mark.parametrize("actions, expected, rule, judged", CASES)
def test_recipe_rules_hand_worked(actions, expected, rule, judged):
    scorer = CountingScorer()
    result = RecipeReward(scorer)(trajectory(actions))
    assert result.reward == expected
    assert result.details["rule"] == rule
    assert scorer.calls == (1 if judged else 0)


def test_any_turn_scope_makes_any_parse_failure_a_format_failure():
    # None, C, A: run 1, last turn fine -> judged under final_turn, 0 under any_turn.
    traj = trajectory([None, C, A])
    assert RecipeReward(CountingScorer())(traj).reward == 1.0
    strict = RecipeReward(CountingScorer(), RecipeRewardConfig(format_failure_scope="any_turn"))
    assert strict(traj).reward == 0.0 and strict(traj).details["rule"] == "format_failure"


def test_limit_and_rewards_are_configurable():
    config = RecipeRewardConfig(parse_failure_limit=2, parse_failure_reward=-0.5, not_done_reward=-0.1)
    assert RecipeReward(CountingScorer(), config)(trajectory([None, None, C])).reward == -0.5
    assert RecipeReward(CountingScorer(), config)(trajectory([C])).reward == -0.1


def test_judge_drop_stays_a_drop_through_the_recipe():
    scorer = CountingScorer(RewardResult.drop("judge_timeout", "no reply in 1 s"))
    result = RecipeReward(scorer)(done_trajectory())
    assert result.dropped and result.reward is None and result.drop_category == "judge_timeout"


def test_max_consecutive_parse_failures():
    assert max_consecutive_parse_failures(trajectory([None, C, None, None, T, None])) == 2
    assert max_consecutive_parse_failures(trajectory([C, T, A])) == 0


def test_config_validation_names_the_field():
    with pytest.raises(ValueError, match="format_failure_scope"):
        RecipeRewardConfig(format_failure_scope="sometimes")
    with pytest.raises(ValueError, match="parse_failure_limit"):
        RecipeRewardConfig(parse_failure_limit=0)
    with pytest.raises(ValueError, match="success_threshold"):
        ProgrammaticRewardConfig(success_threshold=2.0)
    # keys naming a Trajectory.info field: a typo fails here, not as "no checker" on every trajectory
    with pytest.raises(ValueError, match=r"ProgrammaticRewardConfig.info_key must name a Trajectory.info field, "
                                         r"got 'reward'; allowed: \['site', .*'task_reward'"):
        ProgrammaticRewardConfig(info_key="reward")
    with pytest.raises(ValueError, match=r"DeepShopJudgeConfig.params_key must name a Trajectory.info field, "
                                         r"got 'params'"):
        DeepShopJudgeConfig(params_key="params")


def test_programmatic_reward_and_fallback_to_judge():
    checker = ProgrammaticReward()
    assert checker(done_trajectory(info={"task_reward": 0.5})).reward == 0.5
    binary = ProgrammaticReward(ProgrammaticRewardConfig(success_threshold=0.5))
    assert binary(done_trajectory(info={"task_reward": 0.5})).reward == 1.0
    assert binary(done_trajectory(info={"task_reward": 0.2})).reward == 0.0
    assert checker(done_trajectory()).drop_category == "no_checker"
    judge = CountingScorer()
    both = FallbackReward(checker, judge)
    assert both(done_trajectory(info={"task_reward": 0.0})).reward == 0.0 and judge.calls == 0
    assert both(done_trajectory()).reward == 1.0 and judge.calls == 1


def test_result_needs_exactly_one_of_reward_and_reason():
    with pytest.raises(ValueError):
        RewardResult(None)
    with pytest.raises(ValueError):
        RewardResult(1.0, "judge_timeout")


def test_apply_and_score_write_rewards_and_drops():
    ok, lost, broken = done_trajectory(task_id="a"), done_trajectory(task_id="b"), done_trajectory(task_id="c")
    broken.drop("browser_crash: chromium exited")

    def fn(traj):
        return RewardResult.drop("judge_timeout", "slow") if traj.task_id == "b" else RewardResult(1.0)
    fn.name = "fn"
    results = score_trajectories(fn, [ok, lost, broken], max_workers=2)
    assert (ok.reward, ok.status) == (1.0, "ok")
    assert (lost.reward, lost.status, lost.drop_reason) == (None, "dropped", "judge_timeout: slow")
    assert broken.drop_reason == "browser_crash: chromium exited" and results[2].details["rule"] == "already_dropped"
    metrics = reward_metrics(results)
    assert metrics["reward/n"] == 3 and metrics["reward/n_scored"] == 1 and metrics["reward/n_dropped"] == 2
    assert metrics["reward/dropped/judge_timeout"] == 1 and metrics["reward/dropped/browser_crash"] == 1
    assert metrics["reward/mean"] == 1.0
    # apply_reward on an already-dropped trajectory keeps the first reason
    apply_reward(broken, RewardResult(1.0))
    assert broken.status == "dropped" and broken.reward is None


def test_reward_errors_become_drops_not_crashes():
    def bad(traj):
        raise KeyError("boom")
    bad.name = "bad"
    traj = done_trajectory()
    [result] = score_trajectories(bad, [traj])
    assert result.drop_category == "reward_error" and traj.status == "dropped"


def test_action_history_lines():
    traj = trajectory([C, None, A])
    assert action_history(traj) == ["click(1) -> Succeed: click on <button> 'Search'",
                                    "(unparseable output: expected one call)", 'answer("8 euros")']
    assert action_history(traj, include_final=False)[-1] == "(unparseable output: expected one call)"


def test_recipe_with_a_real_judge_object_calls_it_only_when_done():
    backend = ScriptedBackend(lambda messages: "Verdict: SUCCESS")
    recipe = RecipeReward(JudgeReward(ActionHistoryJudge(), backend))
    assert recipe(trajectory([C, T])).reward == 0.0 and backend.calls == []
    assert recipe(done_trajectory()).reward == 1.0 and len(backend.calls) == 1
