"""Evaluation pieces: per-site/level summaries and tables, the Online-Mind2Web export, and the
`Evaluator` (greedy + sampled episodes, the per-task outcome log) over stand-in coordinators."""
import json

import pytest

from tests.helpers import sandbox_task


def test_summary_counts_scored_trajectories_per_site_and_level():
    from webrl.evaluation.summary import success_table, summarize
    from webrl.types import Trajectory

    tasks = [sandbox_task("shop", 0), sandbox_task("shop", 0), sandbox_task("shop", 1), sandbox_task("wiki", 0), sandbox_task("wiki", 0)]
    trajs = [Trajectory("a", reward=1.0), Trajectory("b", reward=0.0), Trajectory("c", reward=0.5),
             Trajectory("d", reward=0.0), Trajectory("e", status="dropped", drop_reason="infra: x")]
    s = summarize(tasks, trajs)
    # scored: shop/l0 {1, 0} -> 50%; shop/l1 {0.5 > 0} -> 100%; wiki/l0 {0} -> 0% (the dropped one
    # is not a failure); overall 2 successes of 4 scored = 50%
    assert s.per_site_level == {"shop/l0": (0.5, 2), "shop/l1": (1.0, 1), "wiki/l0": (0.0, 1)}
    assert s.success == 0.5 and s.dropped == 1 and s.tasks == 5
    table = success_table(s)
    assert "shop/l0                              2    50.0%" in table
    assert "overall                              4    50.0%" in table and "1 of 5 trajectories dropped" in table


def test_om2w_export_makes_task_ids_folder_safe_and_distinct(tmp_path):
    from webrl.actions import Action
    from webrl.evaluation.summary import export_om2w
    from webrl.types import Image, Trajectory, Turn

    shot = Image(b"\x89PNG-not-decoded", "png")
    def traj():
        return Trajectory("widgets/l0/test/click/7", goal="Click OK",
                          turns=[Turn(images=[shot], action=Action(kind="stop"))], reward=1.0)
    folders = export_om2w([traj(), traj(), Trajectory("empty/one")], tmp_path)
    assert [f.name for f in folders] == ["widgets_l0_test_click_7", "widgets_l0_test_click_7-2"]  # no turns: skipped
    doc = json.loads((folders[1] / "result.json").read_text())
    assert doc["task_id"] == "widgets_l0_test_click_7-2" and doc["task"] == "Click OK"
    assert doc["action_history"][0]["action"].startswith("TASK_COMPLETE")




class ScriptedCoordinator:
    """`collect(tasks, iteration)` -> trajectories with the given rewards, G per task in task order
    (as RolloutCoordinator groups them); None = a dropped trajectory."""

    def __init__(self, rewards_per_task):
        self.rewards_per_task, self.calls = rewards_per_task, []

    def collect(self, tasks, iteration, group_prefix=None):
        from webrl.types import Trajectory

        self.calls.append(([t.spec.id for t in tasks], iteration) + ((group_prefix,) if group_prefix else ()))
        out = []
        for task, rewards in zip(tasks, self.rewards_per_task):
            for r in rewards:
                traj = Trajectory(task.spec.id, info={"task_reward": r})
                if r is None:
                    traj.drop("infra: test")
                out.append(traj)
        return out, None


class FixedSource:
    def __init__(self, tasks):
        self.tasks = tasks


def test_evaluator_logs_greedy_and_sampled_outcomes_per_task_in_draw_order(tmp_path):
    from webrl.evaluation.evaluator import Evaluator, sampled_line
    from webrl.reward import ProgrammaticReward, score_trajectories

    tasks = [sandbox_task("widgets", 0, f"t{i}") for i in range(3)]
    greedy = ScriptedCoordinator([[1.0], [0.0], [None]])
    sampled = ScriptedCoordinator([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0], [None, None, None]])
    events = []
    evaluator = Evaluator(FixedSource(tasks), greedy, lambda t: score_trajectories(ProgrammaticReward(), t),
                          events.append, tmp_path / "outcomes.jsonl", tasks=3, seed=0, sampled=sampled,
                          samples_per_task=3)
    result = evaluator.evaluate("before", iteration=4)
    # greedy: t0 solved, t1 failed, t2 dropped (not a failure): 1 of 2 scored
    assert result.metrics["success"] == 0.5 and result.metrics["dropped"] == 1.0
    # sampled: t0 2/3, t1 0/3, t2 all dropped (None, left out of the mean): (2/3 + 0) / 2 = 1/3
    record = json.loads((tmp_path / "outcomes.jsonl").read_text())
    assert record["outcomes"] == [["t0", 1.0], ["t1", 0.0], ["t2", None]]
    assert record["sampled"] == [["t0", pytest.approx(2 / 3)], ["t1", 0.0], ["t2", None]]
    assert (record["label"], record["iteration"]) == ("before", 4)
    assert result.metrics["success_sampled"] == pytest.approx(1 / 3)
    (event,) = events
    assert event["stage"] == "eval" and event["success_sampled"] == pytest.approx(1 / 3)
    assert event["time_eval_s"] >= 0 and event["time_eval_sampled_s"] >= 0
    assert sampled_line(result.metrics, 0.8, 3) == "overall, sampled at temperature 0.8 (3 per task): 33.3%"
    evaluator.evaluate("after", iteration=5)  # the same tasks again, in the same order: paired comparisons
    assert greedy.calls == [(["t0", "t1", "t2"], 4), (["t0", "t1", "t2"], 5)]
    # the sampled episodes of both evaluations draw the same seeds (group ids "eval:i:task")
    assert sampled.calls == [(["t0", "t1", "t2"], 4, "eval"), (["t0", "t1", "t2"], 5, "eval")]
    assert len((tmp_path / "outcomes.jsonl").read_text().splitlines()) == 2


def test_evaluator_without_tasks_does_nothing_and_sampling_needs_a_coordinator(tmp_path):
    from webrl.evaluation.evaluator import Evaluator

    greedy = ScriptedCoordinator([])
    assert Evaluator(FixedSource([]), greedy, None, None, tmp_path / "o.jsonl", tasks=0, seed=0).evaluate("x", 0).metrics == {}
    assert greedy.calls == [] and not (tmp_path / "o.jsonl").exists()
    with pytest.raises(ValueError, match="samples_per_task > 0 needs a sampled coordinator"):
        Evaluator(FixedSource([]), greedy, None, None, tmp_path / "o.jsonl", tasks=1, seed=0, samples_per_task=2)


def test_sign_test_and_paired_changes_by_hand():
    from webrl.evaluation.summary import PairedChange, paired_changes, sign_test

    assert sign_test(0, 0) == 1.0
    assert sign_test(5, 0) == pytest.approx(2 / 32) == sign_test(0, 5)
    assert sign_test(6, 2) == pytest.approx(2 * (28 + 8 + 1) / 256)  # P(X >= 6 | n = 8) = 37/256
    before = {"outcomes": [["a", 0.0], ["b", 1.0], ["c", 0.0], ["d", None]],
              "sampled": [["a", 0.25], ["b", 1.0], ["c", 0.5], ["d", 0.0]]}
    after = {"outcomes": [["a", 1.0], ["b", 0.0], ["c", 1.0], ["d", 1.0]],
             "sampled": [["a", 0.5], ["b", 1.0], ["c", 0.25], ["d", None]]}
    # greedy: a, c up, b down, d unscored before; sampled: a up, b tie, c down, d unscored after
    assert paired_changes(before, after) == {"greedy": PairedChange(2, 1, (1.0, -1.0, 1.0)),
                                             "sampled": PairedChange(1, 1, (0.25, 0.0, -0.25))}
    assert paired_changes({"outcomes": before["outcomes"]}, after) == {"greedy": PairedChange(2, 1, (1.0, -1.0, 1.0))}
    assert paired_changes(before, {"outcomes": [["z", 1.0]] * 4}) == {"greedy": PairedChange(0, 0, ())}


def test_permutation_test_by_hand():
    from webrl.evaluation.summary import permutation_p, sign_test

    assert permutation_p([]) == permutation_p([0.0, 0.0]) == 1.0
    # 0/1 outcomes: the sign test exactly (zeros leave both)
    for up, down in [(5, 0), (6, 2), (3, 3), (7, 1)]:
        assert permutation_p([1.0] * up + [-1.0] * down + [0.0] * 4) == pytest.approx(sign_test(up, down))
    # magnitudes count. Changes +0.75, +0.5, -0.25 (sum +1.0); the 8 sign flips sum to +-1.5,
    # +-1.0, +-0.5, 0, 0: |sum| >= 1.0 in 4 of 8 -> p = 0.5
    assert permutation_p([0.75, 0.5, -0.25]) == pytest.approx(4 / 8)
    # four tasks +0.75 and one -0.25 (sum 2.75): the 0.75s sum to 3 with all signs +, -3 with
    # all -, else |.| <= 1.5; only those two, each with either sign of 0.25, reach |sum| >= 2.75:
    # 4 of 32 -> p = 0.125, where the counts alone (4 up, 1 down) give the sign test's 0.375
    assert permutation_p([0.75] * 4 + [-0.25]) == pytest.approx(4 / 32)
    assert sign_test(4, 1) == pytest.approx(2 * 6 / 32)


def test_before_after_table_says_within_or_beyond_noise():
    from webrl.evaluation.summary import PairedChange, before_after_table

    text = before_after_table({"success": 0.25, "success_sampled": 0.2}, {"success": 0.5, "success_sampled": 0.6},
                              {"greedy": PairedChange(3, 1, (1.0, 1.0, 1.0, -1.0, 0.0)),
                               "sampled": PairedChange(9, 0, (0.5,) * 9)})
    lines = text.splitlines()
    assert lines[-2] == (f"change, greedy: 3 tasks up, 1 down (mean change +40.0 points), paired permutation test "
                         f"p = {2 * 5 / 16:.3f}: within noise")
    assert lines[-1] == (f"change, sampled: 9 tasks up, 0 down (mean change +50.0 points), paired permutation test "
                         f"p = {2 / 512:.3f}: beyond noise (p < 0.05)")
    assert "change" not in before_after_table({"success": 0.25}, {"success": 0.5})
    # 14 tasks, each up by 0.25: only the all-up and all-down signings reach |sum| 3.5 -> p = 2 / 2**14
    small = before_after_table({"success": 0.5, "success_sampled": 0.2}, {"success": 0.5, "success_sampled": 0.45},
                               {"sampled": PairedChange(14, 0, (0.25,) * 14)})
    assert small.splitlines()[-1].endswith("paired permutation test p = 1.2e-04: beyond noise (p < 0.05)")


def test_drops_are_printed_with_counts_and_an_evaluation_that_scored_too_little_fails(tmp_path, capsys):
    from webrl.evaluation.evaluator import Evaluator, drop_failure
    from webrl.reward import ProgrammaticReward, score_trajectories

    tasks = [sandbox_task("widgets", 0, f"t{i}") for i in range(4)]
    logged = []

    def evaluate(rewards):
        evaluator = Evaluator(FixedSource(tasks), ScriptedCoordinator(rewards),
                              lambda t: score_trajectories(ProgrammaticReward(), t), lambda e: None,
                              tmp_path / "outcomes.jsonl", tasks=4, seed=0, record=logged.append)
        return evaluator.evaluate("eval", iteration=0)

    # every trajectory dropped ("infra: test" each): the evaluation fails whatever the share allows
    everything = evaluate([[None]] * 4)
    assert everything.drops == {"infra: test": 4}
    assert capsys.readouterr().out == "webrl eval (eval): 4 of 4 trajectories dropped:\n  4 x infra: test\n"
    assert drop_failure(everything, 1.0) == ("every trajectory of the evaluation was dropped (4 of 4): "
                                             "nothing was scored")
    # 2 of 4 dropped = 0.5: fails above a share of 0.25, passes at 0.5 (not more than) and at 1.0
    half = evaluate([[1.0], [None], [0.0], [None]])
    assert drop_failure(half, 0.25) == ("2 of 4 trajectories of the evaluation were dropped, more than "
                                        "eval.max_dropped_share=0.25")
    assert drop_failure(half, 0.5) is None and drop_failure(half, 1.0) is None
    assert drop_failure(evaluate([[1.0]] * 4), 0.0) is None  # nothing dropped
    # `record` (the trajectory log) gets each trajectory once scored: its reward is the final one
    assert [t.reward for t in logged[-4:]] == [1.0, 1.0, 1.0, 1.0] and len(logged) == 12
