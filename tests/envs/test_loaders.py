"""Live-web loaders: fields land in the right TaskSpec slots; bad rows are named by line."""
from pathlib import Path

import numpy as np
import pytest

from webrl.envs.loaders import (LiveWebTask, LiveWebTaskSource, TaskLoadError, guess_format,
                                load_task_specs, load_tasks)
from webrl.envs.task import Task, TaskReward

DATA = Path(__file__).parent / "data"


def test_online_mind2web_fields():
    tasks = load_tasks(DATA / "online_mind2web_sample.json")
    assert [t.spec.id for t in tasks] == [
        "online_mind2web/b7258ee05d75e6c50673a59914db412e",
        "online_mind2web/c4a5f3e0d2a14f7c8b3e9d1a0f6b2c7e",
        "online_mind2web/e1",
    ]
    first, second, third = (t.spec for t in tasks)
    assert first.goal.startswith("Find the cheapest one-way flight")
    assert first.start_url == "https://www.united.com/"
    # www. host plus its bare parent, so a redirect www.united.com -> united.com stays allowed.
    assert first.allowed_domains == ("www.united.com", "united.com")
    assert (first.level, first.params["reference_length"]) == (1, 9)  # "medium" -> 1
    assert second.goal == "Show the opening hours of the closest public library."  # task_description
    assert second.level == 0  # "easy"
    # A bare host gets https:// and the "hard" level 2.
    assert (third.start_url, third.level, third.allowed_domains) == ("https://bestbuy.com", 2, ("bestbuy.com",))
    assert third.split == "test" and third.max_steps == 30


def test_webvoyager_and_deepshop_fields():
    wv = load_task_specs(DATA / "webvoyager_sample.jsonl")
    assert [s.id for s in wv] == ["webvoyager/Allrecipes--0", "webvoyager/Amazon--3", "webvoyager/GitHub--7"]
    assert wv[2].site == "GitHub" and wv[2].allowed_domains == ("github.com",)
    ds = load_task_specs(DATA / "deepshop_sample.jsonl", max_steps=20, split="train")
    assert [s.id for s in ds] == ["deepshop/0", "deepshop/1"]  # integer ids become strings
    assert ds[0].params["filter"] == "price < 25" and ds[0].level == 2
    # "None" strings are absent values.
    assert ds[1].params["filter"] is None and ds[1].params["sort"] is None
    assert ds[1].level == 0 and ds[1].max_steps == 20 and ds[1].split == "train"


def test_format_guess_and_explicit_format():
    assert guess_format("x.json") == "online_mind2web"
    assert guess_format("x.jsonl", {"difficulty": "easy"}) == "deepshop"
    assert guess_format("x.jsonl", {"ques": "q"}) == "webvoyager"
    # Forcing webvoyager on DeepShop rows reads the shared fields and ignores the rest.
    specs = load_task_specs(DATA / "deepshop_sample.jsonl", format="webvoyager")
    assert specs[0].id == "webvoyager/0" and "filter" not in specs[0].params
    with pytest.raises(ValueError, match="format must be one of"):
        load_task_specs(DATA / "deepshop_sample.jsonl", format="mind2web")


def test_jsonl_errors_name_every_bad_line():
    with pytest.raises(TaskLoadError) as caught:
        load_tasks(DATA / "webvoyager_bad.jsonl")
    err = caught.value
    # Line 1 is fine; 2 lacks 'web'; 3 is cut-off JSON; 4 has a number as question.
    assert [line for line, _ in err.problems] == [2, 3, 4]
    message = str(err)
    assert "webvoyager_bad.jsonl:2: missing field 'web'" in message
    assert "webvoyager_bad.jsonl:3: not valid JSON" in message
    assert "webvoyager_bad.jsonl:4: field 'ques' must be a string" in message


def test_json_array_errors_name_the_line_where_the_item_starts():
    with pytest.raises(TaskLoadError) as caught:
        load_task_specs(DATA / "online_mind2web_bad.json")
    problems = dict(caught.value.problems)
    # Line 1 is "[", the good row is line 2; the item on line 7 spans two lines.
    assert sorted(problems) == [3, 4, 5, 6, 7]
    assert "'confirmed_task' or 'task_description'" in problems[3]
    assert "not an http(s) URL" in problems[4]
    assert "expected a JSON object" in problems[5]
    assert "duplicate id 'online_mind2web/ok1' (first on line 2)" in problems[6]
    assert "reference_length" in problems[7]


def test_whole_file_not_json(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('[\n  {"task_id": 1,\n')
    with pytest.raises(TaskLoadError, match=r"broken.json:3: not valid JSON"):
        load_tasks(path)
    path.write_text('{"task_id": 1}')
    with pytest.raises(TaskLoadError, match="expected a JSON array"):
        load_tasks(path)


def test_live_tasks_need_a_judge_and_sample_from_a_source():
    tasks = load_tasks(DATA / "webvoyager_sample.jsonl")
    assert all(isinstance(t, Task) and isinstance(t, LiveWebTask) for t in tasks)
    assert tasks[0].reward(page=None, answer="lasagna") == TaskReward(None, {})
    assert tasks[0].oracle_action({}) is None
    source = LiveWebTaskSource(tasks)
    drawn = {source.sample(np.random.default_rng(seed)).spec.id for seed in range(40)}
    assert drawn == {t.spec.id for t in tasks}  # 40 uniform draws over 3 tasks hit all of them
    with pytest.raises(ValueError, match="tasks"):
        LiveWebTaskSource([])


@pytest.mark.browser
def test_loaded_task_runs_in_web_env_and_needs_a_judge(tmp_path):
    from webrl.envs import WebEnv
    from webrl.envs.miniwob import miniwob_base_url

    # A WebVoyager row whose "website" is a local page (tests never reach the live web).
    url = miniwob_base_url() + "miniwob/click-test.html"
    path = tmp_path / "local.jsonl"
    path.write_text(f'{{"web_name": "Local", "id": "L-1", "ques": "Say hello.", "web": "{url}"}}\n')
    (task,) = load_tasks(path)
    env = WebEnv(config={"browser": {"viewport": "small"}}, tasks=LiveWebTaskSource([task]))
    try:
        obs, info = env.reset(seed=0)
        assert obs["goal"] == "Say hello." and obs["url"] == url and info["task_id"] == "webvoyager/L-1"
        obs, reward, terminated, truncated, info = env.step('answer("hello")')
        assert terminated and reward == 0.0 and info["needs_judge"] is True and info["answer"] == "hello"
    finally:
        env.close()
