"""Every action kind executed in real Chromium against tests/envs/fixtures/basic.html, effect checked."""
from __future__ import annotations

import pytest

from webrl.actions import Action
from tests.envs.helpers import VIEWPORT_H, ClickTask, center, element_id, make_env, spec

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def env(browser_session):
    env = make_env(browser_session)
    yield env
    env.close()


@pytest.fixture
def started(env, fixture_server):
    obs, info = env.reset(options={"task": spec(fixture_server)})
    return env, obs, info


def out_text(env) -> str:
    return env.page.inner_text("#out")


def test_click_by_id(started):
    env, _, info = started
    obs, reward, terminated, truncated, _ = env.step(f"click({element_id(info, 'btn')})")
    assert out_text(env) == "clicked 1"
    assert obs["feedback"] == "Clicked <button> 'Press me'"
    assert obs["last_action_error"] == "" and obs["step"] == 1
    assert (reward, terminated, truncated) == (0.0, False, False)


def test_double_and_right_click(started):
    env, _, info = started
    env.step(Action.click(element_id(info, "dbl"), clicks=2))
    assert out_text(env) == "double"
    env.step(f'click({element_id(info, "ctx")}, button="right")')
    assert out_text(env) == "right"


def test_click_at_point(started):
    env, _, info = started
    x, y = center(info, "btn")
    obs, *_ = env.step(f"click_at({x}, {y})")
    assert out_text(env) == "clicked 1"
    assert "<button> 'Press me'" in obs["feedback"]


def test_hover_and_hover_at(started):
    env, _, info = started
    env.step(f"hover({element_id(info, 'hoverme')})")
    assert out_text(env) == "hovered"
    env.page.evaluate("document.getElementById('out').textContent = 'reset'")
    x, y = center(info, "btn")
    env.step(f"hover_at({x}, {y})")  # leave the span, then come back by point
    x, y = center(info, "hoverme")
    env.step(f"hover_at({x}, {y})")
    assert out_text(env) == "hovered"


def test_type_clears_first_unless_told(started):
    env, _, info = started
    name = element_id(info, "name")  # starts with value "old"
    obs, *_ = env.step(f'type({name}, "blue mug")')
    assert env.page.input_value("#name") == "blue mug"
    assert obs["feedback"] == "Typed 'blue mug' into <input> 'Name' (cleared first)"
    env.step(f'type({name}, " XL", clear=false)')
    assert env.page.input_value("#name") == "blue mug XL"
    obs, *_ = env.step("wait(0)")  # the element list shows the new value
    assert 'textbox "Name" value="blue mug XL"' in obs["elements_text"]


def test_type_into_focused_field_and_errors(started):
    env, _, info = started
    obs, *_ = env.step('type("lost text")')  # nothing focused yet
    assert obs["last_action_error"].startswith("no text field has focus")
    obs, *_ = env.step(f'type({element_id(info, "btn")}, "x")')
    assert "is not an editable text field" in obs["last_action_error"]
    env.step(f"click({element_id(info, 'notes')})")
    obs, *_ = env.step('type("into the textarea")')
    assert obs["last_action_error"] == ""
    assert env.page.input_value("#notes") == "into the textarea"


def test_select_option(started):
    env, _, info = started
    size = element_id(info, "size")
    obs, *_ = env.step(f'select({size}, "Large")')
    assert env.page.input_value("#size") == "Large"
    assert 'selected="Large"' in obs["elements_text"]
    obs, *_ = env.step(f'select({size}, "Huge")')
    assert obs["last_action_error"] == "<select> 'Size' has no option 'Huge'; options: ['Small', 'Medium', 'Large']"
    obs, *_ = env.step(f'select({element_id(info, "btn")}, "Large")')
    assert "not a <select>" in obs["last_action_error"]


def test_scroll_page_and_element(started):
    env, _, info = started
    obs, *_ = env.step('scroll("down")')  # default 0.5 viewport = 300 px at 800x600
    assert env.page.evaluate("window.scrollY") == VIEWPORT_H // 2
    assert obs["feedback"].startswith("Scrolled down 300 px")
    env.step('scroll("up", 1.0)')
    assert env.page.evaluate("window.scrollY") == 0
    obs, *_ = env.step('scroll("up")')
    assert "nothing moved" in obs["feedback"]
    # 0.1 x 600 = 60 px inside the scrollable box, the page stays put
    box_x, box_y = env.page.evaluate(
        "(() => { const r = document.getElementById('box').getBoundingClientRect();"
        " return [r.x + r.width / 2, r.y + r.height / 2]; })()")
    env.step(f'scroll_at("down", 0.1, {int(box_x)}, {int(box_y)})')
    assert env.page.evaluate("document.getElementById('box').scrollTop") == 60
    assert env.page.evaluate("window.scrollY") == 0


def test_press_keys(started):
    env, _, info = started
    env.step(f"click({element_id(info, 'notes')})")
    obs, *_ = env.step('press("Tab")')
    assert obs["feedback"] == "Pressed Tab"
    assert "Tab" in env.page.inner_text("#keys")
    env.step(f"click({element_id(info, 'notes')})")
    env.step('type("abc")')
    env.step('press("ctrl+a")')  # alias of Control+a
    env.step('press("Backspace")')
    assert env.page.input_value("#notes") == ""
    obs, *_ = env.step('press("NoSuchKey")')
    assert obs["last_action_error"].startswith("unknown key 'NoSuchKey'")


def test_goto_back_forward(started, fixture_server):
    env, _, _ = started
    obs, *_ = env.step(f'goto("{fixture_server.url("page2.html")}")')
    assert obs["title"] == "Page two" and obs["url"].endswith("/page2.html")
    obs, *_ = env.step("back()")
    assert obs["url"].endswith("/basic.html")
    obs, *_ = env.step("forward()")
    assert obs["url"].endswith("/page2.html")
    obs, *_ = env.step("forward()")
    assert obs["last_action_error"] == "no next page in this tab's history"


def test_link_navigation_is_reported(started):
    env, _, info = started
    obs, *_ = env.step(f"click({element_id(info, 'link')})")
    assert obs["url"].endswith("/page2.html")
    assert obs["feedback"].endswith("Page navigated to " + obs["url"])


def test_tabs_new_switch_close(started, fixture_server):
    env, _, info = started
    obs, *_ = env.step(f'new_tab("{fixture_server.url("page2.html")}")')
    assert obs["tabs"].splitlines()[1].endswith("(current)") and obs["title"] == "Page two"
    obs, *_ = env.step("switch_tab(0)")
    assert obs["title"] == "Basic fixture" and obs["tabs"].splitlines()[0].endswith("(current)")
    obs, *_ = env.step("switch_tab(5)")
    assert obs["last_action_error"] == "no tab 5 (tabs are 0..1)"
    obs, *_ = env.step("close_tab(1)")
    assert len(obs["tabs"].splitlines()) == 1
    obs, *_ = env.step("close_tab()")
    assert obs["last_action_error"] == "cannot close the last tab"


def test_target_blank_link_is_followed(started):
    env, _, info = started
    obs, *_ = env.step(f"click({element_id(info, 'newtab')})")
    assert "New tab opened (tab 1)" in obs["feedback"]
    assert obs["url"].endswith("/page2.html") and len(obs["tabs"].splitlines()) == 2


def test_drag_and_drop(started):
    env, _, info = started
    (x0, y0), (x1, y1) = env.page.evaluate(
        "['drag', 'drop'].map(id => { const r = document.getElementById(id).getBoundingClientRect();"
        " return [Math.round(r.x + r.width / 2), Math.round(r.y + r.height / 2)]; })")
    env.step(f"drag({x0}, {y0}, {x1}, {y1})")
    assert out_text(env) == "dropped"


def test_wait_and_bad_targets(started):
    env, _, info = started
    obs, *_ = env.step("wait(0.1)")
    assert obs["feedback"] == "Waited 0.1 s"
    n = len(info["elements"])
    obs, *_ = env.step(f"click({n})")
    assert obs["last_action_error"] == f"no element with id {n} (ids are 0..{n - 1})"
    obs, *_ = env.step("click_at(5000, 10)")
    assert obs["last_action_error"] == "point (5000, 10) is outside the 800x600 screenshot"


def test_answer_ends_episode_needing_a_judge(started):
    env, _, _ = started
    obs, reward, terminated, truncated, info = env.step('answer("42 euros")')
    assert (reward, terminated, truncated) == (0.0, True, False)
    assert info["needs_judge"] is True and info["answer"] == "42 euros"
    with pytest.raises(RuntimeError, match="call reset"):
        env.step("stop()")


def test_task_reward_and_done_hook(env, fixture_server):
    _, info = env.reset(options={"task": ClickTask(spec(fixture_server))})
    obs, reward, terminated, truncated, info = env.step(f"click({element_id(info, 'btn')})")
    # ClickTask.done() is true after one click: terminated with reward 1 without answer()
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["reward_details"] == {"out": "clicked 1"} and info["needs_judge"] is False


def test_max_steps_truncates(env, fixture_server):
    env.reset(options={"task": spec(fixture_server, max_steps=2)})
    assert env.step("wait(0)")[3] is False
    obs, reward, terminated, truncated, info = env.step("wait(0)")
    assert (terminated, truncated, info["truncation_reason"]) == (False, True, "max_steps")
    assert "infra_error" not in info
