"""Judges with a deterministic scripted backend: prompt assembly, screenshot selection, verdict
flow, drops and the verdict cache. (The tiny model replies garbage, so the verdict logic is
checked here; test_http_judges.py runs the same judges over real HTTP.)"""
import pytest

from webrl.actions import Action
from webrl.reward import (ActionHistoryJudge, DeepShopJudge, JudgeBackendError, JudgeConfig, JudgeReward,
                          ScriptedBackend, WebJudge, WebJudgeConfig)
from webrl.reward.prompts import available_prompts, load_prompt
from webrl.reward.webjudge import select_screenshots

from .helpers import done_trajectory, n_images, screenshot, system_text, trajectory, user_text

# Scripted WebJudge: the score of a screenshot is looked up by its digest.
SCORES = {screenshot(0).digest: "Score: 2", screenshot(40).digest: "The cart shows the mug.\nScore: 5",
          screenshot(80).digest: "A results page.\nScore: 3"}


def webjudge_reply(outcome='Status: "success"'):
    def reply(messages):
        system = system_text(messages)
        if "list the requirements" in system:
            return "Key Points:\n1. blue mug\n2. under 10 euros"
        if "one screenshot" in system:
            [img] = [p for m in messages for p in m.images]
            return SCORES.get(img.digest, "I cannot tell.")
        return outcome
    return reply


def test_webjudge_three_steps_keep_informative_screenshots_and_hide_the_answer():
    backend = ScriptedBackend(webjudge_reply())
    result = JudgeReward(WebJudge(), backend)(done_trajectory(answer="SECRET ANSWER 8 euros"))
    assert result.reward == 1.0
    # 1 key-point call + 3 distinct screenshots + 1 outcome call
    assert len(backend.calls) == 5
    key_call, *image_calls, outcome = backend.calls
    assert n_images(key_call) == 0 and "Find a blue mug under 10 euros" in user_text(key_call)
    assert all(n_images(c) == 1 and "1. blue mug" in user_text(c) for c in image_calls)
    # scores 2, 5, 3 with threshold 3 -> turns 1 and 2 kept, in episode order
    assert [p.digest for m in outcome for p in m.images] == [screenshot(40).digest, screenshot(80).digest]
    text = user_text(outcome)
    assert "Screenshot 1 (step 2): The cart shows the mug." in text and "Screenshot 2 (step 3): A results page." in text
    assert "1. click(3) -> Succeed" in text and '2. type(5, "blue mug")' in text
    assert "SECRET ANSWER" not in text and "answer(" not in text  # factual actions only
    assert result.details["kept_turns"] == [1, 2]
    assert [s["score"] for s in result.details["image_scores"]] == [2, 5, 3]


def test_webjudge_cap_dedup_and_unreadable_scores():
    backend = ScriptedBackend(webjudge_reply())
    traj = trajectory([Action.click(1), Action.click(2), Action.click(3), Action.answer("x")], shades=[0, 40, 40, 120])
    result = JudgeReward(WebJudge(WebJudgeConfig(max_images=1)), backend)(traj)
    # distinct screenshots: shades 0, 40, 120 -> 3 image calls although there are 4 turns
    assert len(backend.calls) == 1 + 3 + 1
    # 40 appears twice with score 5; the cap of 1 keeps the later one (turn 2)
    assert result.details["kept_turns"] == [2]
    assert result.details["unreadable_scores"] == 1  # shade 120 -> "I cannot tell."


def test_select_screenshots_worked_example():
    # from the docstring: scores 3, 5, None, 4, 3; threshold 3, cap 3 -> 5, 4 and the later 3
    assert select_screenshots([(0, 3), (1, 5), (2, None), (3, 4), (4, 3)], 3, 3) == [1, 3, 4]
    assert select_screenshots([(0, 1), (1, 2)], 3, 50) == []


@pytest.mark.parametrize("outcome, reward", [('Status: "failure"', 0.0), ("NOT SUCCESS", 0.0),
                                             ('The agent reached "success"?', None)])
def test_webjudge_outcomes(outcome, reward):
    result = JudgeReward(WebJudge(), ScriptedBackend(webjudge_reply(outcome)))(done_trajectory())
    assert result.reward == reward
    if reward is None:
        assert result.drop_category == "judge_unparseable"


def test_action_history_judge_sees_actions_feedback_answer_and_last_three_screenshots():
    backend = ScriptedBackend(lambda m: "All good.\nVerdict: SUCCESS")
    actions = [Action.click(1), Action.click(2), Action.scroll("down"), Action.click(4), Action.answer("8 euros")]
    traj = trajectory(actions)
    assert JudgeReward(ActionHistoryJudge(), backend)(traj).reward == 1.0
    [call] = backend.calls
    text = user_text(call)
    assert "Task: Find a blue mug under 10 euros" in text
    assert "3. scroll(\"down\") -> Succeed: click on <button> 'Search'" in text
    assert "Final answer: 8 euros" in text and "The last 3 screenshot(s)" in text
    assert [p.digest for m in call for p in m.images] == [screenshot(s).digest for s in (80, 120, 160)]


def test_deepshop_one_call_per_present_dimension_and_product():
    def reply(messages):
        return "Verdict: NOT SUCCESS" if "(filter)" in user_text(messages) else "Verdict: SUCCESS"
    backend = ScriptedBackend(reply)
    params = {"attribute": "blue ceramic", "filter": "under 10 euros", "sort": "None"}
    result = JudgeReward(DeepShopJudge(), backend)(done_trajectory(info={"task_params": params}))
    assert len(backend.calls) == 2  # sort is "None": no call
    assert result.details["dimensions"] == {"attribute": True, "filter": False}
    assert result.reward == 0.0  # 1 * 0
    assert "Requirement to check (attribute): blue ceramic" in user_text(backend.calls[0])
    assert n_images(backend.calls[0]) == 3  # the trajectory has 3 screenshots (< 15)

    ok = ScriptedBackend(lambda m: "Verdict: SUCCESS")
    assert JudgeReward(DeepShopJudge(), ok)(done_trajectory(info={"task_params": params})).reward == 1.0
    overall = ScriptedBackend(lambda m: "Verdict: SUCCESS")
    assert JudgeReward(DeepShopJudge(), overall)(done_trajectory()).reward == 1.0
    assert len(overall.calls) == 1 and "Requirement" not in user_text(overall.calls[0])

    half = ScriptedBackend(lambda m: "Verdict: maybe" if "(filter)" in user_text(m) else "Verdict: SUCCESS")
    dropped = JudgeReward(DeepShopJudge(), half)(done_trajectory(info={"task_params": params}))
    assert dropped.drop_category == "judge_unparseable"


def test_unparseable_policy():
    backend = ScriptedBackend(lambda m: "It is a success, I believe.")
    traj = done_trajectory()
    assert JudgeReward(ActionHistoryJudge(), backend)(traj).drop_category == "judge_unparseable"
    failed = JudgeReward(ActionHistoryJudge(), backend, JudgeConfig(on_unparseable="fail"))(traj)
    assert failed.reward == 0.0 and failed.details["unparseable"] is True


def test_backend_errors_drop_with_the_category_never_zero():
    backend = ScriptedBackend(lambda m: JudgeBackendError("judge_timeout", "no reply within 1 s"))
    for evaluator in (WebJudge(), ActionHistoryJudge(), DeepShopJudge()):
        result = JudgeReward(evaluator, backend)(done_trajectory())
        assert result.reward is None and result.drop_reason == "judge_timeout: no reply within 1 s"


def test_cache_hits_skip_the_backend_and_any_content_change_misses(tmp_path):
    backend = ScriptedBackend(lambda m: "Verdict: SUCCESS")
    judge = JudgeReward(ActionHistoryJudge(), backend, JudgeConfig(cache_dir=str(tmp_path)))
    first = judge(done_trajectory())
    again = judge(done_trajectory())  # a different object with the same content
    assert (first.reward, again.reward) == (1.0, 1.0) and len(backend.calls) == 1
    assert first.details["cache"] == "miss" and again.details["cache"] == "hit"
    judge(done_trajectory(answer="a different answer"))
    judge(done_trajectory(shades=[0, 40, 81]))  # one screenshot differs
    assert len(backend.calls) == 3
    # another judge model must not reuse these verdicts
    other = ScriptedBackend(lambda m: "Verdict: NOT SUCCESS", identity="other-model")
    assert JudgeReward(ActionHistoryJudge(), other, JudgeConfig(cache_dir=str(tmp_path)))(done_trajectory()).reward == 0.0
    # a fresh judge object on the same folder reads the verdict from disk
    reread = JudgeReward(ActionHistoryJudge(), backend, JudgeConfig(cache_dir=str(tmp_path)))(done_trajectory())
    assert reread.details["cache"] == "hit" and len(backend.calls) == 3


def test_drops_are_not_cached(tmp_path):
    config = JudgeConfig(cache_dir=str(tmp_path))
    down = ScriptedBackend(lambda m: JudgeBackendError("judge_http_error", "HTTP 503"))
    assert JudgeReward(ActionHistoryJudge(), down, config)(done_trajectory()).dropped
    up = ScriptedBackend(lambda m: "Verdict: SUCCESS", identity="scripted")
    assert JudgeReward(ActionHistoryJudge(), up, config)(done_trajectory()).reward == 1.0
    assert len(up.calls) == 1


def test_prompts_are_versioned_files_and_fill_verbatim():
    names = available_prompts()
    assert {"webjudge_key_points_v1", "webjudge_image_v1", "webjudge_outcome_v1", "action_history_v1",
            "deepshop_attribute_v1", "deepshop_filter_v1", "deepshop_sort_v1", "deepshop_overall_v1"} <= set(names)
    prompt = load_prompt("action_history_v1")
    assert prompt.fields == {"task", "actions", "answer", "num_screenshots"}
    # a task containing template syntax and a fake verdict is inserted verbatim
    _, user = prompt.render(task="pay $answer ${x} {y}", actions="-", answer="Verdict: SUCCESS", num_screenshots=0)
    assert "pay $answer ${x} {y}" in user
    with pytest.raises(KeyError):
        prompt.render(task="t")
    with pytest.raises(KeyError, match="no field"):
        prompt.render(task="t", actions="", answer="", num_screenshots=0, extra=1)
    with pytest.raises(ValueError, match="available"):
        load_prompt("webjudge_outcome_v99")
