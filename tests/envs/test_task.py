"""The Task protocol's typed pieces: `TaskReward`, and how `as_task` / `as_task_reward` let task
objects written against the older protocol (fewer hooks, a bare float from `reward`) run."""
import math

import pytest

from webrl.envs import WebEnv
from webrl.envs.task import (BaseTask, DefaultedTask, Task, TaskReward, TaskSpec, as_task,
                             as_task_reward)
from tests.envs.helpers import small_config, spec

SPEC = TaskSpec(id="old/1", goal="g", start_url="http://127.0.0.1:1/start")


class OldStyleTask:
    """A task object of the older protocol: no prepare / entry_url / url_alias / done, and a
    bare float from `reward`. Records which of its hooks ran."""

    def __init__(self, task_spec: TaskSpec, value=1.0):
        self.spec, self.value, self.calls = task_spec, value, []

    def setup(self, page):
        self.calls.append("setup")

    def reward(self, page, answer):
        self.calls.append(f"reward:{answer}")
        return self.value

    def oracle_action(self, observation):
        return None

    def teardown(self, page):
        self.calls.append("teardown")


# -- TaskReward -------------------------------------------------------------------------------
def test_task_reward_keeps_value_and_a_copy_of_the_details():
    details = {"cart": {"mug": 1}}
    reward = TaskReward(1, details)
    details["cart"] = {}  # the caller's dict changing afterwards does not change the reward
    assert reward.value == 1.0 and isinstance(reward.value, float)
    assert reward.details == {"cart": {"mug": 1}}
    assert TaskReward(None).details == {} and TaskReward(0.25).value == 0.25


@pytest.mark.parametrize("value, error, words", [
    (True, TypeError, "got bool True"),
    ("1.0", TypeError, "got str '1.0'"),
    (1.5, ValueError, "in \\[0, 1\\] or None, got 1.5"),
    (-0.1, ValueError, "got -0.1"),
    (math.nan, ValueError, "got nan"),
])
def test_task_reward_refuses_values_outside_0_1(value, error, words):
    with pytest.raises(error, match=f"TaskReward.value .*{words}"):
        TaskReward(value)


def test_task_reward_refuses_details_that_are_not_a_mapping():
    with pytest.raises(TypeError, match="TaskReward.details must be a mapping, got list"):
        TaskReward(1.0, ["cart"])


def test_as_task_reward_wraps_a_bare_value_and_passes_a_task_reward_through():
    typed = TaskReward(0.0, {"links": []})
    assert as_task_reward(typed) is typed
    assert as_task_reward(0.5) == TaskReward(0.5, {})
    assert as_task_reward(1) == TaskReward(1.0, {})
    assert as_task_reward(None) == TaskReward(None, {})


@pytest.mark.parametrize("returned, shown", [("1.0", "str '1.0'"), ((1.0, {}), "tuple"), (False, "bool False")])
def test_as_task_reward_refuses_anything_else_naming_the_task(returned, shown):
    with pytest.raises(TypeError, match=f"task 'shop/1': reward\\(\\) must return a TaskReward.*got {shown}"):
        as_task_reward(returned, "shop/1")


# -- as_task ----------------------------------------------------------------------------------
def test_a_task_with_every_hook_is_used_as_is():
    task = BaseTask(SPEC)
    assert isinstance(task, Task) and as_task(task) is task


def test_an_old_style_task_gets_the_default_hooks_and_keeps_its_own():
    old = OldStyleTask(SPEC)
    assert not isinstance(old, Task)  # the protocol now declares prepare, entry_url, url_alias, done
    task = as_task(old)
    assert isinstance(task, DefaultedTask) and isinstance(task, Task) and task.wrapped is old
    assert task.prepare() is None and task.url_alias() is None and task.done(page=None) is False
    assert task.entry_url() == "http://127.0.0.1:1/start"
    task.setup(None)
    assert task.reward(None, "42") == 1.0 and old.calls == ["setup", "reward:42"]
    old.spec = TaskSpec(id="old/2", goal="g2", start_url="http://127.0.0.1:2/")  # e.g. its prepare re-pointed it
    assert task.spec is old.spec and task.entry_url() == "http://127.0.0.1:2/"


def test_an_optional_hook_the_object_has_is_the_one_called():
    old = OldStyleTask(SPEC)
    old.done = lambda page: page == "finished"
    task = as_task(old)
    assert task.done("finished") is True and task.done("other") is False


def test_as_task_names_the_required_hooks_an_object_lacks():
    class NoReward:
        spec = SPEC

        def setup(self, page): ...

    with pytest.raises(TypeError, match="NoReward lacks reward, oracle_action, teardown"):
        as_task(NoReward())
    with pytest.raises(TypeError, match="str lacks spec, setup, reward"):
        as_task("shop/l0/train/1")


# -- in the env -------------------------------------------------------------------------------
@pytest.mark.browser
def test_an_old_style_task_runs_in_webenv(browser_session, fixture_server):
    old = OldStyleTask(spec(fixture_server), value=1)
    env = WebEnv(small_config(), session=browser_session)
    try:
        obs, info = env.reset(options={"task": old})
        assert obs["url"] == old.spec.start_url  # entry_url defaulted to spec.start_url
        obs, reward, terminated, truncated, info = env.step('answer("done")')
        assert (reward, terminated, truncated) == (1.0, True, False)
        assert info["reward_details"] == {} and info["needs_judge"] is False
        assert old.calls == ["setup", "reward:done", "teardown"]
    finally:
        env.close()


@pytest.mark.browser
def test_a_reward_of_the_wrong_type_is_a_type_error_from_step(browser_session, fixture_server):
    old = OldStyleTask(spec(fixture_server), value="yes")
    env = WebEnv(small_config(), session=browser_session)
    try:
        env.reset(options={"task": old})
        with pytest.raises(TypeError, match="task 'test/basic.html': reward\\(\\) must return a TaskReward"):
            env.step("stop()")
    finally:
        env.close()
