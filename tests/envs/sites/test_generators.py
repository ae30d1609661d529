"""Task generators: determinism, variety (>= 1000 distinct instances a site), train/test
entity disjointness, and the JSON-ability the env and Ray need. No browser."""
import json
import pickle

import numpy as np
import pytest

from webrl.envs.sites.source import SITE_NAMES, SandboxTaskSource, make_task, task_kinds
from webrl.envs.task import Task, TaskSource


def _task(site, level, split, seed):
    return make_task(site, level, split, seed, start_server=False)


@pytest.mark.parametrize("site", SITE_NAMES)
def test_same_seed_same_task_different_seeds_differ(site):
    for level in (0, 1, 2):
        a, b = _task(site, level, "train", 11), _task(site, level, "train", 11)
        assert (a.spec.id, a.spec.goal, a.spec.start_url, a.spec.params) == \
               (b.spec.id, b.spec.goal, b.spec.start_url, b.spec.params)
        goals = {_task(site, level, "train", s).spec.goal for s in range(20)}
        # 20 seeds: a generator that ignored its seed would give 1 goal; ours give >= 10
        assert len(goals) >= 10, (site, level, goals)


@pytest.mark.parametrize("site", SITE_NAMES)
def test_at_least_1000_distinct_instances(site):
    goals = set()
    for seed in range(700):
        for level in (0, 1, 2):
            for split in ("train", "test"):
                goals.add((level, split, _task(site, level, split, seed).spec.goal))
        if len(goals) >= 1000:
            break
    assert len(goals) >= 1000


def _entities(task) -> set:
    """The entities a task is about (what must never be shared by train and test)."""
    p, site = task.spec.params, task.spec.site
    if site == "shop":
        return {("product", p["pid"])} if "pid" in p else {("category", p["category"])}
    if site == "travel":
        fid = p["flight"]
        return {("city", fid[:3]), ("city", fid[4:7])}
    if site == "wiki":
        return {("article", s) for s in p.get("path", [p.get("target")])}
    from webrl.envs.sites.widgets.layout import SPLIT_BY_LABEL
    controls = {c["id"]: c for c in p["layout"]["controls"]}
    out = set()
    for cid, value in p.get("targets", []):
        c = controls[cid]
        if c["kind"] in SPLIT_BY_LABEL:
            out.add(("label", c["label"]))
        elif c["kind"] == "text":
            out.add(("value", value))
        elif c["kind"] in ("radio", "select"):
            out.add(("option", value))
    return out


@pytest.mark.parametrize("site", SITE_NAMES)
def test_train_and_test_entities_are_disjoint(site):
    train, test = set(), set()
    for seed in range(150):
        for level in (0, 1, 2):
            train |= _entities(_task(site, level, "train", seed))
            test |= _entities(_task(site, level, "test", seed))
    assert train and test
    assert not (train & test), sorted(train & test)[:10]


def test_tasks_follow_the_protocols_and_pickle():
    source = SandboxTaskSource(levels=(0, 2), start_server=False)
    assert isinstance(source, TaskSource)
    rng = np.random.default_rng(3)
    for _ in range(12):
        task = source.sample(rng)
        assert isinstance(task, Task) and task.spec.level in (0, 2)
        json.dumps(task.spec.params)  # the checker's inputs travel as JSON
        clone = pickle.loads(pickle.dumps(task))
        assert clone.spec.goal == task.spec.goal and clone.check().success is False


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="SandboxTaskSource.levels"):
        SandboxTaskSource(levels=(3,))
    with pytest.raises(ValueError, match="SandboxTaskSource.sites"):
        SandboxTaskSource(sites=("forum",))
    with pytest.raises(ValueError, match="SandboxTaskSource.split"):
        SandboxTaskSource(split="dev")
    with pytest.raises(ValueError, match="level"):
        make_task("shop", 5, "train", 0, start_server=False)


def test_kinds_keep_only_those_kinds_and_leave_the_unfiltered_draws_alone():
    assert set(task_kinds(("widgets",), (0,))) == {"click_button", "click_link", "type_text", "set_checkbox",
                                                   "choose_radio", "choose_option", "open_tab"}
    clicks = ("click_button", "click_link")
    source = SandboxTaskSource(sites=("widgets",), levels=(0, 1), start_server=False, kinds=clicks)
    rng = np.random.default_rng(5)
    drawn = [source.sample(rng) for _ in range(40)]
    assert {t.spec.params["kind"] for t in drawn} == set(clicks)  # both kinds, nothing else (no level-1 kind)
    assert all(t.spec.level == 0 for t in drawn)
    # without kinds the draw is what it was: the same rng gives the same tasks as before the option
    plain = SandboxTaskSource(sites=("widgets",), levels=(0,), start_server=False)
    a = np.random.default_rng(9)
    ids = [plain.sample(a).spec.id for _ in range(5)]
    b = np.random.default_rng(9)
    expected = []
    for _ in range(5):
        b.integers(1), b.integers(1)  # the site and level draws (one choice each)
        expected.append(make_task("widgets", 0, "train", int(b.integers(2**31 - 1)), start_server=False).spec.id)
    assert ids == expected


def test_unknown_kinds_name_the_kinds_there_are():
    with pytest.raises(ValueError, match=r"SandboxTaskSource.kinds: \['slider'\].*'click_button'"):
        SandboxTaskSource(sites=("widgets",), levels=(0,), start_server=False, kinds=("click_button", "slider"))
