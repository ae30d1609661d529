"""Oracle demonstrations store the Set-of-Mark element list the decision heads train on."""
import json

import pytest

from webrl.envs.observation import compact_elements
from webrl.envs.sites.demos import run_oracle_episode
from webrl.envs.sites.source import make_task
from webrl.types import load_trajectories, save_trajectories

CONTRACT_SELECT = {"id": 3, "tag": "select", "role": "combobox", "name": "Size", "type": "", "value": "M",
                   "placeholder": "", "href": "", "dom_id": "size", "checked": None,
                   "options": ["S", "M", "L"], "selected": "M", "bbox": [10.4, 20, 30, 40.6],
                   "in_viewport": True}
CONTRACT_LINK = {"id": 4, "tag": "a", "role": "link", "name": "Home", "type": "", "value": "",
                 "placeholder": "", "href": "http://127.0.0.1/x" * 20, "dom_id": "", "checked": None,
                 "options": [], "selected": "", "bbox": [0, 500, 50, 20], "in_viewport": False}


def test_compact_elements_keeps_what_the_heads_read():
    from webrl.policy.types import SoMElement

    select, link = compact_elements([CONTRACT_SELECT, CONTRACT_LINK])
    # bbox rounded to whole pixels; options kept for the select only; no href / value / dom_id
    assert select == {"id": 3, "bbox": [10, 20, 30, 41], "role": "combobox", "tag": "select", "name": "Size",
                      "in_viewport": True, "options": ["S", "M", "L"], "selected": "M"}
    assert link == {"id": 4, "bbox": [0, 500, 50, 20], "role": "link", "tag": "a", "name": "Home",
                    "in_viewport": False}
    assert SoMElement.from_dict(select) == SoMElement(3, (10.0, 20.0, 30.0, 41.0), ("S", "M", "L"), "combobox", "Size")


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
