"""Oracle demonstrations (webrl/recipes/demos.py) in real Chromium: each turn stores the
Set-of-Mark element list the decision heads train on, and `record_demos` writes trajectories in
the project's format."""
import json
from types import SimpleNamespace

import numpy as np
import pytest

from webrl.envs.sites.source import make_task
from webrl.envs.task import BaseTask, TaskSpec
from webrl.recipes.demos import record_demos, run_oracle_episode
from webrl.types import load_trajectories, save_trajectories


@pytest.fixture(scope="module")
def site_env(browser_session):
    """A WebEnv at the small (640x480) viewport on the shared browser."""
    from webrl.envs import WebEnv, WebEnvConfig

    env = WebEnv(WebEnvConfig.from_dict({"browser": {"viewport": "small"}}), session=browser_session)
    yield env
    env.close()


@pytest.mark.browser
@pytest.mark.parametrize("site,level,split,seed", [("shop", 0, "train", 3), ("travel", 1, "test", 4),
                                                   ("widgets", 1, "train", 5), ("wiki", 1, "test", 6)])
def test_recorded_turns_carry_elements_with_the_oracle_target(site_env, tmp_path, site, level, split, seed):
    from webrl.policy.types import marked_from_turn

    task = make_task(site, level, split, seed)
    result = run_oracle_episode(site_env, task, record_images=True)
    assert result.reward == 1.0 and result.trajectory.turns
    save_trajectories(tmp_path / "demos.jsonl", [result.trajectory])
    (traj,) = load_trajectories(tmp_path / "demos.jsonl")
    for turn in traj.turns:
        elements = turn.observation.elements
        assert elements, (task.spec.goal, turn.response_text)
        ids = [e["id"] for e in elements]
        assert ids == list(range(len(ids)))  # the contract: ids 0..N-1 in DOM order
        assert all(set(e) <= {"id", "bbox", "role", "tag", "name", "in_viewport", "options", "selected"}
                   for e in elements)
        # the element list text was built from the same elements: every listed id is stored
        assert all(f"[{i}]" in turn.observation.elements_text for i in ids)
        if turn.action.element is not None:
            assert turn.action.element in ids, (task.spec.goal, turn.response_text)
            target = elements[turn.action.element]
            if turn.action.kind == "select":
                assert turn.action.text in target["options"]
        obs = marked_from_turn(turn, traj.goal)
        assert [e.id for e in obs.elements] == ids and obs.screenshot is not None
        assert obs.screenshot.size == (640, 480)
    # compact: well under the screenshot-free text of the step (no raw HTML, no hrefs)
    assert all(len(json.dumps(t.observation.elements)) < 400 * len(t.observation.elements)
               for t in traj.turns)


@pytest.mark.browser
def test_record_demos_writes_loadable_trajectories(browser_session, tmp_path):
    summary = record_demos(3, tmp_path, seed=5, levels=(0,), sites=("widgets", "wiki"), viewport="small",
                           session=browser_session)
    assert summary["episodes"] == 3 and summary["saved"] == 3 and not summary["failed"]
    trajectories = load_trajectories(tmp_path / "demos.jsonl")
    assert len(trajectories) == 3
    for traj in trajectories:
        assert traj.info.task_reward == 1.0 and traj.reward is None and traj.goal and traj.turns  # not scored yet
        assert all(t.decided_by == "oracle" and t.action is not None and t.images for t in traj.turns)
        assert traj.turns[0].images[0].size == (640, 480)


class CrashingEnv:
    """A gym web env whose first step reports an infrastructure failure, as `WebEnv` does."""

    config = SimpleNamespace(max_steps=0)

    def _obs(self):
        return {"url": "http://127.0.0.1/", "title": "T", "elements_text": "", "feedback": "", "last_action_error": "",
                "step": 0, "screenshot": np.zeros((4, 6, 3), dtype=np.uint8)}

    def reset(self, options):
        return self._obs(), {"elements": []}

    def step(self, action):
        return self._obs(), 0.0, False, True, {"elements": [], "infra_error": "browser crashed"}


class StopTask(BaseTask):
    def oracle_action(self, view):
        from webrl.actions import Action

        return Action.stop()


def test_an_infrastructure_failure_is_a_dropped_result_not_a_demo():
    task = StopTask(TaskSpec(id="widgets/l0/train/x/0", goal="g", start_url="http://127.0.0.1/"))
    result = run_oracle_episode(CrashingEnv(), task)
    assert result.infra_error == "browser crashed" and result.reward == 0.0
    assert result.trajectory.status == "dropped" and "browser crashed" in result.trajectory.drop_reason
