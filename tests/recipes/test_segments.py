"""Credit-assignment SFT data (webrl.recipes.segments): hand-built trajectories over named pages.

A page "A" is the state url http://127.0.0.1:8000/A with one element line; turn t of a
trajectory built from pages [p_0, p_1, ...] acted on page p_t, so turn t led to p_{t+1}.
"""
import random

import pytest
from PIL import Image as PILImage

from webrl.actions import Action
from webrl.recipes.segments import (SegmentConfig, productive_segments, segment_demos, trajectory_outcome,
                                    unproductive_reasons, success_states, write_segment_demos)
from webrl.rollout.progress import TrajectoryLog
from webrl.types import Image, Trajectory, TrajectoryInfo, Turn, TurnObservation, load_trajectories

TASK = "shop/l1/train/add_to_cart/17"
SHOT = Image.from_pil(PILImage.new("RGB", (112, 112), (200, 200, 200)))


def trajectory(pages, task_id=TASK, task_reward=0.0, reward=None, errors=(), parse_errors=(), status="ok"):
    """errors: turns whose action the env reported failed (shown on the next turn's observation);
    parse_errors: turns whose response did not parse."""
    turns = []
    for t, page in enumerate(pages):
        obs = TurnObservation(url=f"http://127.0.0.1:8000/{page}", elements_text=f'[0] link "{page} next"',
                              last_action_error="element not found" if t - 1 in errors else "", step=t,
                              screenshot_size=[112, 112])
        bad = t in parse_errors
        turns.append(Turn(images=[SHOT], response_text=f"{task_id}:{page}:{t}", observation=obs,
                          action=None if bad else Action.click(0), parse_error="no tool call" if bad else None))
    traj = Trajectory(task_id=task_id, group_id=task_id, goal="Add the mug to the cart", turns=turns, reward=reward,
                      info=TrajectoryInfo(site="shop", level=1, task_reward=task_reward))
    if status == "dropped":
        traj.drop("browser crashed")
    return traj


SUCCESS = trajectory("ABCDE", task_reward=1.0)  # S_F = {A, B, C, D, E}


def test_failure_that_follows_a_success_then_loops():
    # states A B C D C D: turns 0 (A->B) and 1 (B->C) reach success states; C recurs at 2 and 4 and
    # D at 3 and 5, so turns 2..4 lie inside cycles; turn 5 is the last -> one segment [0, 2)
    failure = trajectory("ABCDCD")
    cfg = SegmentConfig()
    assert unproductive_reasons(failure, success_states([SUCCESS]), cfg) == ["", "", "loop", "loop", "loop",
                                                                             "last_turn"]
    assert productive_segments(failure, [SUCCESS], cfg) == [(0, 2)]


def test_action_errors_cut_segments():
    # A B C D E Z, turn 2's action errored: turns 0, 1 productive, 2 cut, 3 (D->E) productive, 4 last
    failure = trajectory("ABCDEZ", errors=[2])
    assert productive_segments(failure, [SUCCESS], SegmentConfig()) == [(0, 2)]  # [3, 4) is 1 turn < 2
    assert productive_segments(failure, [SUCCESS], SegmentConfig(min_segment_turns=1)) == [(0, 2), (3, 4)]
    assert productive_segments(failure, [SUCCESS], SegmentConfig(min_segment_turns=1, prefix_only=True)) == [(0, 2)]
    # not cutting on action errors: turns 0..3 all reach success states, Z is off the path
    no_errors = SegmentConfig(cut_on=("parse_error", "no_change", "loop"))
    assert productive_segments(failure, [SUCCESS], no_errors) == [(0, 4)]


def test_parse_errors_cut_segments_and_each_cut_kind_counts():
    # A B B C D E Z, turn 1 did not parse (page unchanged); turn 5 (E->Z) leaves the success path
    failure = trajectory("ABBCDEZ", parse_errors=[1])
    on_path = success_states([SUCCESS])
    reasons = unproductive_reasons(failure, on_path, SegmentConfig())
    assert reasons == ["", "parse_error", "", "", "", "off_success_path", "last_turn"]
    # [0, 1) is one turn; [2, 5) starts mid-episode on B, a success state -> kept
    assert productive_segments(failure, [SUCCESS], SegmentConfig()) == [(2, 5)]
    # the same turn under narrower cut lists: a no-op turn, then a loop of one, then productive
    assert unproductive_reasons(failure, on_path, SegmentConfig(cut_on=("no_change", "loop")))[1] == "no_change"
    assert unproductive_reasons(failure, on_path, SegmentConfig(cut_on=("loop",)))[1] == "loop"
    assert productive_segments(failure, [SUCCESS], SegmentConfig(cut_on=())) == [(0, 5)]


def test_loops_are_excluded_and_later_segments_resume_on_the_path():
    # A B X B C D Q: the cycle B X B covers turns 1, 2; turns 3 (B->C), 4 (C->D) productive; D->Q off path
    failure = trajectory("ABXBCDQ")
    assert productive_segments(failure, [SUCCESS], SegmentConfig()) == [(3, 5)]
    assert productive_segments(failure, [SUCCESS], SegmentConfig(prefix_only=True)) == []
    # A B A C: going to B and straight back is a cycle; neither turn of it is credited
    assert unproductive_reasons(trajectory("ABAC"), success_states([SUCCESS]), SegmentConfig())[:2] == ["loop", "loop"]


def test_no_shared_state_yields_nothing_and_midway_starts_need_a_success_state():
    assert productive_segments(trajectory("PQRS"), [SUCCESS], SegmentConfig()) == []
    assert productive_segments(trajectory("ABC"), [], SegmentConfig()) == []  # no success to compare with
    # without the success-state requirement the failed-action signals alone decide: turns 0..2
    assert productive_segments(trajectory("PQRS"), [SUCCESS], SegmentConfig(require_success_state=False)) == [(0, 3)]
    # A X Y C D Q: turns 2 (Y->C) and 3 (C->D) reach success states, but the run starts on Y,
    # a page no success visited -> dropped
    assert productive_segments(trajectory("AXYCDQ"), [SUCCESS], SegmentConfig()) == []


def test_segment_demos_groups_by_family_and_counts():
    other_seed = "shop/l1/train/add_to_cart/18"
    other_family = "shop/l1/train/checkout/18"
    trajectories = [
        SUCCESS,
        trajectory("ABCDCD", task_id=other_seed),      # same family: segment [0, 2)
        trajectory("ABCDCD", task_id=other_family),    # no success in its family: nothing
        trajectory("ABXBCDQ", task_id=TASK),           # segment [3, 5)
        trajectory("ABCD", task_reward=1.0, reward=0.0),  # scored reward 0 overrides the checker's 1
        trajectory("ABCD", task_reward=None),          # unscored
        trajectory("ABCD", task_reward=1.0, status="dropped"),
    ]
    demos, stats = segment_demos(trajectories, SegmentConfig())
    # the failure scored 0 despite task_reward 1 (A B C D): turns 0..2 productive, turn 3 last -> [0, 3)
    assert trajectory_outcome(trajectories[4]) == 0.0
    assert stats.to_dict() == {
        "trajectories": 7, "dropped": 1, "unscored": 1, "successes": 1, "failures": 4,
        "failures_with_segments": 3, "segments": 3, "failure_turns": 6 + 6 + 7 + 4, "kept_turns": 2 + 2 + 3,
        "success_turns": 5,
        # ABCDCD x2: loop 3 each, last 1 each; ABXBCDQ: loop 2, off path 1, last 1; ABCD: last 1;
        # the checkout family has no successes, so its A->B, B->C count as off the path
        "unproductive": {"last_turn": 4, "loop": 8, "off_success_path": 3}}
    got = [(d.task_id, d.reward_details.get("turn_range")) for d in demos]
    assert sorted(got, key=str) == sorted([(TASK, None), (other_seed, [0, 2]), (TASK, [3, 5]), (TASK, [0, 3])], key=str)
    segment = next(d for d in demos if d.task_id == other_seed)
    assert [t.response_text for t in segment.turns] == [f"{other_seed}:A:0", f"{other_seed}:B:1"]
    assert segment.reward is None and segment.reward_details["kind"] == "productive_segment"
    assert segment.reward_details["source_turns"] == 6 and segment.reward_details["source_outcome"] == 0.0
    # per task: the other seed has no success of its own, the checkout failure still nothing
    demos, stats = segment_demos(trajectories, SegmentConfig(match_scope="task", include_successes=False))
    assert sorted(d.reward_details["turn_range"] for d in demos) == [[0, 3], [3, 5]]
    assert stats.success_turns == 0 and stats.segments == 2


def test_output_does_not_depend_on_input_order():
    trajectories = [SUCCESS, trajectory("ABCDCD"), trajectory("ABXBCDQ"), trajectory("ABBCDEZ", parse_errors=[1]),
                    trajectory("ABCDE", task_id="shop/l1/train/add_to_cart/3", task_reward=1.0),
                    trajectory("ABCZ", task_id="shop/l1/train/add_to_cart/3")]

    def signature(demos):
        return [(d.task_id, d.reward_details, [t.response_text for t in d.turns]) for d in demos]

    expected_demos, expected_stats = segment_demos(trajectories, SegmentConfig())
    assert len(expected_demos) == 2 + 4  # two successes, segments [0,2), [3,5), [2,5), and [0,2) of ABCZ
    for seed in range(5):
        shuffled = random.Random(seed).sample(trajectories, len(trajectories))
        demos, stats = segment_demos(shuffled, SegmentConfig())
        assert signature(demos) == signature(expected_demos)
        assert stats == expected_stats


def test_written_demos_load_and_render_as_sft_samples(tmp_path):
    from webrl.policy import sft_samples_from_trajectory
    from webrl.recipes.sft import _render_policy
    from webrl.run.config import WebRLConfig

    log = TrajectoryLog(tmp_path / "run")
    for traj in (SUCCESS, trajectory("ABCDCD"), trajectory("PQRS")):
        log(traj)
    stats = write_segment_demos(tmp_path / "run", tmp_path / "demos", SegmentConfig())
    assert (stats.successes, stats.failures, stats.segments, stats.kept_turns) == (1, 2, 1, 2)
    demos = load_trajectories(tmp_path / "demos" / "demos.jsonl")
    assert sorted(str(d.reward_details.get("turn_range")) for d in demos) == ["None", "[0, 2]"]
    policy = _render_policy("webrl:tiny-webagent-pointer", WebRLConfig())  # as `webrl sft` builds it
    samples = [s for d in demos for s in sft_samples_from_trajectory(d, policy)]
    assert len(samples) == 5 + 2
    segment = next(d for d in demos if d.reward_details)
    last = sft_samples_from_trajectory(segment, policy)[-1]  # target: turn 1's text, then <|im_end|>
    assert last.response_ids[:-1] == policy.tokenizer(f"{TASK}:B:1", add_special_tokens=False)["input_ids"]
    # a .jsonl path works too, and the same file cannot be both source and output
    assert write_segment_demos(log.path, tmp_path / "again", SegmentConfig()) == stats
    with pytest.raises(ValueError, match="would overwrite"):
        write_segment_demos(tmp_path / "again" / "demos.jsonl", tmp_path / "again", SegmentConfig())
    with pytest.raises(FileNotFoundError, match="no trajectory log"):
        write_segment_demos(tmp_path / "nothing", tmp_path / "out", SegmentConfig())


@pytest.mark.parametrize("field, value, allowed", [
    ("min_segment_turns", 0, ">= 1"),
    ("min_segment_turns", 2.0, ">= 1"),
    ("require_success_state", "yes", "true | false"),
    ("prefix_only", 1, "true | false"),
    ("include_successes", None, "true | false"),
    ("match_scope", "site", "'family', 'task'"),
    ("cut_on", ("loop", "timeout"), "'parse_error', 'action_error', 'no_change', 'loop'"),
    ("cut_on", ("loop", "loop"), "distinct"),
    ("cut_on", "loop", "a list"),
    ("cut_on", 3, "a list"),
    ("success_threshold", float("nan"), "finite number"),
    ("success_threshold", True, "finite number"),
])
def test_config_errors_name_the_field_and_allowed_values(field, value, allowed):
    with pytest.raises(ValueError, match=rf"SegmentConfig\.{field} must") as info:
        SegmentConfig(**{field: value})
    assert allowed in str(info.value)


def test_config_accepts_a_list_for_cut_on():
    assert SegmentConfig(cut_on=["loop", "no_change"]).cut_on == ("loop", "no_change")


def test_the_segments_command_writes_demos_from_a_run_folder(tmp_path, capsys):
    from webrl.cli import main
    from webrl.types import save_trajectories

    log = tmp_path / "run" / "trajectories" / "trajectories.jsonl"
    log.parent.mkdir(parents=True)
    save_trajectories(log, [SUCCESS, trajectory("ABCB")])  # the failure: A -> B productive, then B -> C -> B loops
    assert main(["segments", str(tmp_path / "run"), f"out={tmp_path / 'seg'}", "segments.min_segment_turns=1"]) == 0
    out = capsys.readouterr().out
    assert '"segments": 1' in out and "webrl sft sft.demos_dir=" in out
    demos = load_trajectories(tmp_path / "seg" / "demos.jsonl")
    assert sorted(len(d.turns) for d in demos) == [1, 5]  # the A -> B turn, and the success
    assert main(["segments"]) == 2  # no source: a config error naming what is missing
    assert "segments needs a run folder" in capsys.readouterr().err
