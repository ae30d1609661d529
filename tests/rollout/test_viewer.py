"""The run viewer: one page per run, the right turns, the action drawn where it happened."""
import numpy as np
import pytest

from webrl.actions import Action
from webrl.cli import main as cli_main
from webrl.rollout import TrajectoryLog, view_run
from webrl.types import Image, Trajectory, Turn


def _turn(i, action, **obs):
    img = Image.from_array(np.full((40, 60, 3), 30 * i, dtype=np.uint8))
    return Turn(prompt_ids=[1], response_ids=[2], logprobs=[-0.5], images=[img], response_text=f"text {i} <b>",
                action=action, feedback=f"feedback {i}", policy_version=1,
                observation={"screenshot_size": [60, 40], **obs})


def _run(tmp_path):
    log = TrajectoryLog(tmp_path)
    log(Trajectory("shop/1", "g", goal="buy a mug", reward=1.0, turns=[
        _turn(0, Action.click(3), action_bbox=[6, 4, 12, 8]), _turn(1, Action.stop())]))
    log(Trajectory("shop/2", "g", goal="buy a cup", reward=0.0, turns=[
        _turn(2, Action.click_at(30, 20), action_point=[30, 20]), _turn(3, None), _turn(4, Action.stop())]))
    dropped = Trajectory("shop/3", "g", goal="buy a pot")
    dropped.drop("browser crashed twice")
    log(dropped)
    return tmp_path


def test_viewer_html_has_every_turn_and_escapes_text(tmp_path):
    page = view_run(_run(tmp_path)).read_text()
    assert page.count('class="turn"') == 5
    assert page.count('class="mark"') == 1 and page.count('class="point"') == 1
    # the box [6, 4, 12, 8] on a 60x40 screenshot: left 10%, top 10%, width 20%, height 20%
    assert "left:10.00%;top:10.00%;width:20.00%;height:20.00%" in page
    assert "text 0 &lt;b&gt;" in page and "<b>text" not in page
    assert "browser crashed twice" in page


def test_cli_view_writes_the_page(tmp_path, capsys):
    _run(tmp_path)
    assert cli_main(["view", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip().endswith("viewer/index.html")


@pytest.mark.browser
def test_viewer_renders_in_chromium_with_working_filters(tmp_path, browser_session):
    path = view_run(_run(tmp_path))
    context = browser_session.browser.new_context()
    try:
        page = context.new_page()
        page.goto(path.as_uri())
        assert page.locator(".turn").count() == 5
        assert page.locator(".turn img").count() == 5
        # every screenshot loads from the relative image folder
        assert page.evaluate("Array.from(document.images).every(i => i.complete && i.naturalWidth === 60)")
        page.get_by_role("button", name="success (1)").click()
        assert page.locator(".traj:not(.hidden)").count() == 1
        assert page.locator(".traj:not(.hidden) .turn").count() == 2
        page.get_by_role("button", name="dropped (1)").click()
        assert page.locator(".traj:not(.hidden) h2").inner_text().startswith("dropped")
    finally:
        context.close()


def test_outcome_of_a_log_written_before_scoring_is_the_checker_outcome(tmp_path):
    """The rollout log is written before any reward function runs: reward None, checker in info."""
    log = TrajectoryLog(tmp_path)
    log(Trajectory("shop/4", "g", goal="buy a bowl", info={"task_reward": 1.0}, turns=[_turn(0, Action.stop())]))
    log(Trajectory("live/1", "g", goal="book a table", info={"needs_judge": True}, turns=[_turn(1, Action.stop())]))
    page = view_run(tmp_path).read_text()
    assert '<section class="traj success">' in page and '<section class="traj unscored">' in page
    assert "success (1)" in page and "failure (0)" in page and "unscored (1)" in page
    assert "shop/4 · reward None · checker 1.0" in page


def test_the_viewer_shows_each_judge_verdict_and_its_reason(tmp_path):
    log = TrajectoryLog(tmp_path)
    judged = Trajectory("om2w/1", "g", goal="find the opening hours", reward=1.0,
                        reward_details={"judge": "action_history", "reply": "The hours are shown. Status: success"})
    failed = Trajectory("om2w/2", "g", goal="book a table", reward=0.0,
                        reward_details={"judge": "action_history", "reply": "No booking. Status: failure"})
    checked = Trajectory("shop/1", "g", goal="buy a mug", reward=1.0, reward_details={"rule": "cart holds mug"})
    for t in (judged, failed, checked):
        log(t)
    page = view_run(tmp_path).read_text()
    assert page.count('class="traj success"') == 2 and page.count('class="traj failure"') == 1
    assert "<b>verdict</b> judge action_history: SUCCESS" in page
    assert "<b>verdict</b> judge action_history: NOT SUCCESS" in page
    assert "The hours are shown. Status: success" in page and "No booking. Status: failure" in page
    assert "<b>verdict</b> reward 1</div>" in page and "cart holds mug" in page
