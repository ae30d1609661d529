"""Skill extraction: hand-built trajectories with the expected skill worked out by hand, support and
closure, parameter typing, validation counting; and real oracle demos of the sandbox (Chromium)."""
import pytest

from webrl.actions import Action
from webrl.skills import ExtractionConfig, Skill, SkillParam, SkillStep, Target, extract_skills
from webrl.skills.steps import page_kind, robust_steps
from webrl.types import Trajectory, TrajectoryInfo, Turn, TurnObservation

BOX = [0, 0, 10, 10]
SEARCHBOX = {"id": 1, "bbox": BOX, "role": "searchbox", "tag": "input", "name": "Search products"}
BUTTON = {"id": 2, "bbox": BOX, "role": "button", "tag": "button", "name": "Search"}


def turn(url, action, elements=()):
    return Turn(action=action, response_text=action.to_compact(), decided_by="oracle",
                observation=TurnObservation(url=url, elements=list(elements)))


def search_then_open(task_id, query, product, pid, scroll_first=False, reward=1.0):
    """[scroll,] type query, click Search, click the product link, stop (on its page)."""
    link = {"id": 20, "bbox": BOX, "role": "link", "tag": "a", "name": product}
    home = "http://127.0.0.1:8000/shop/"
    turns = [turn(home, Action.scroll("down"))] if scroll_first else []
    turns += [turn(home, Action.type_text(query, element=1), [SEARCHBOX, BUTTON]),
              turn(home, Action.click(2), [SEARCHBOX, BUTTON]),
              turn(f"http://127.0.0.1:8000/shop/search?q={query}", Action.click(20), [SEARCHBOX, BUTTON, link]),
              turn(f"http://127.0.0.1:8000/shop/p/{pid}", Action.stop())]
    return Trajectory(task_id=task_id, goal=f'Search the store for "{query}" and open the page of the {product}.',
                      turns=turns, info=TrajectoryInfo(task_reward=reward))


THREE = [search_then_open("shop/a", "blue mug", "Blue Mug Deluxe", 101, scroll_first=True),
         search_then_open("shop/b", "red kettle", "Red Kettle Pro", 202),
         search_then_open("shop/c", "green lamp", "Green Lamp", 303)]


def test_three_tasks_sharing_search_then_open_give_one_skill_worked_by_hand():
    result = extract_skills(THREE, ExtractionConfig(min_support=2, max_len=4))
    # frequent windows (3 tasks each): (type, click), (click, click), (type, click, click); the two
    # 2-step ones sit inside the 3-step one with the same tasks, so only it is kept. The scroll only
    # occurs in task a, so no window holding it is frequent.
    assert (result.report["mined"], result.report["abstracted"], result.report["validated"]) == (3, 1, None)
    expected = Skill(
        name="type_search_click_search_click_link",
        description='Type <search_products> into the searchbox "Search products"; Click the button "Search"; '
                    'Click the link "<link>"',
        params=(SkillParam("search_products", "text", "text for step 1 (type)"),
                SkillParam("link", "element", "name of the link named in the task")),
        steps=(SkillStep("type", Target("searchbox", "Search products"), "{search_products}", {},
                         'Type <search_products> into the searchbox "Search products"'),
               SkillStep("click", Target("button", "Search"), None, {}, 'Click the button "Search"'),
               SkillStep("click", Target("link", "{link}"), None, {}, 'Click the link "<link>"')),
        url_patterns=("/shop/",), leads_to="/shop/p/*", provenance=("shop/a", "shop/b", "shop/c"))
    assert result.skills == [expected]
    assert [b.step.text for b in expected.bind({"search_products": "tea pot", "link": "Tea Pot"})] == [
        "tea pot", None, None]


def test_below_min_support_or_the_same_task_twice_gives_no_skill():
    assert extract_skills(THREE[:2], ExtractionConfig(min_support=3)).skills == []
    twice = [THREE[1], search_then_open("shop/b", "red kettel", "Red Kettle Pro", 202)]
    result = extract_skills(twice, ExtractionConfig(min_support=2))
    assert result.skills == [] and result.report["mined"] == 0  # one distinct task


def test_failed_trajectories_are_not_mined():
    failed = search_then_open("shop/d", "tea pot", "Tea Pot", 404, reward=0.0)
    result = extract_skills([THREE[1], failed], ExtractionConfig(min_support=2))
    assert result.skills == [] and result.report["successful"] == 1


def test_a_value_equal_across_steps_is_one_parameter_and_constants_stay_literal():
    # query typed == product clicked in every task: one text parameter for both steps
    same = [search_then_open(f"shop/{n}", name, name, i) for i, n, name in
            ((1, "x", "Blue Mug"), (2, "y", "Red Kettle"))]
    [skill] = extract_skills(same, ExtractionConfig()).skills
    assert [p.name for p in skill.params] == ["search_products"]
    assert skill.steps[2].target == Target("link", "{search_products}")
    # the same query everywhere: no parameter at all, the text is literal
    const = [search_then_open(f"shop/{n}", "mug", "Blue Mug", i) for i, n in ((1, "x"), (2, "y"))]
    [skill] = extract_skills(const, ExtractionConfig()).skills
    assert skill.params == () and skill.steps[0].text == "mug" and skill.steps[2].target == Target("link", "Blue Mug")


def test_a_turn_without_its_element_record_cuts_the_run():
    traj = search_then_open("shop/a", "mug", "Mug", 1)
    traj.turns[1].observation.elements = []  # the Search click can no longer be described
    runs = robust_steps(traj)
    assert [[s.kind for s in run] for run in runs] == [["type"], ["click"]]  # stop is never a step
    assert page_kind("http://h:1/shop/p/1014?x=1") == "/shop/p/*"


def test_validation_counts_replays_and_keeps_the_skills_that_pass():
    calls = []

    def replay(skill, args, task):
        calls.append((args, task.task_id))
        return args["search_products"] != "red kettle"

    strict = extract_skills(THREE, ExtractionConfig(min_replay_rate=1.0), replay=replay)
    assert calls == [({"search_products": "blue mug", "link": "Blue Mug Deluxe"}, "shop/a"),
                     ({"search_products": "red kettle", "link": "Red Kettle Pro"}, "shop/b"),
                     ({"search_products": "green lamp", "link": "Green Lamp"}, "shop/c")]
    assert strict.skills == [] and strict.report["validated"] == 0
    assert (strict.report["replays"], strict.report["replay_successes"]) == (3, 2)
    lenient = extract_skills(THREE, ExtractionConfig(min_replay_rate=0.5, max_replays=2), replay=replay)
    [kept] = lenient.skills  # 2 replays (max_replays): a passes, b fails -> rate 0.5 >= 0.5
    assert (kept.replays, kept.replay_successes, lenient.report["validated"]) == (2, 1, 1)
    # held-out trajectories are replayed instead of the source ones
    held = [search_then_open("shop/z", "tea pot", "Tea Pot", 9)]
    calls.clear()
    assert extract_skills(THREE, replay=replay, held_out=held).report["validated"] == 1
    assert calls == [({"search_products": "tea pot", "link": "Tea Pot"}, "shop/z")]


@pytest.mark.parametrize("field, value, says", [
    ("min_support", 1, "min_support must be an integer >= 2"),
    ("max_len", 1, "max_len must be an integer >= 2"),
    ("min_replay_rate", 0.0, r"min_replay_rate must be in \(0, 1\]"),
    ("max_replays", 0, "max_replays must be an integer >= 1"),
])
def test_bad_extraction_settings_name_the_key(field, value, says):
    from webrl.config import ConfigError

    with pytest.raises(ConfigError, match=says):
        ExtractionConfig(**{field: value})


# -- the command -------------------------------------------------------------------------------
def test_the_command_writes_a_library_and_its_report(tmp_path, capsys):
    import json

    from webrl.skills import SkillLibrary
    from webrl.skills.commands import SkillsCommandConfig, skills_main
    from webrl.types import save_trajectories

    save_trajectories(tmp_path / "demos" / "demos.jsonl", THREE)
    config = SkillsCommandConfig(source=str(tmp_path / "demos"), out=str(tmp_path / "lib"), validate=False)
    assert skills_main(config) == 0
    report = json.loads((tmp_path / "lib" / "report.json").read_text())
    assert (report["mined"], report["abstracted"], report["validated"]) == (3, 1, None)
    assert SkillLibrary.load(tmp_path / "lib").names() == report["skills"] == ["type_search_click_search_click_link"]
    assert "policy.skills.library_dir=" in capsys.readouterr().out


@pytest.mark.parametrize("field, value, says", [
    ("action", "mine", r"action must be one of \['extract'\]"),
    ("validate", "yes", "validate must be true or false"),
    ("min_support", 1, "skills: min_support must be an integer >= 2"),
])
def test_bad_command_settings_name_the_key(field, value, says):
    from webrl.config import ConfigError
    from webrl.skills.commands import SkillsCommandConfig, skills_main

    with pytest.raises(ConfigError, match=says):
        SkillsCommandConfig(**{field: value})
    with pytest.raises(ConfigError, match="needs source="):
        skills_main(SkillsCommandConfig())


def test_only_sandbox_trajectories_can_be_replayed():
    from webrl.skills.commands import sandbox_task

    assert sandbox_task(Trajectory(task_id="shop/l1/test/search_open/0")).spec.params["kind"] == "search_open"
    with pytest.raises(ValueError, match="not a sandbox task id"):
        sandbox_task(THREE[0])


# -- real oracle demos of the sandbox (Chromium) -------------------------------------------------
@pytest.fixture(scope="module")
def sandbox(browser_session, tmp_path_factory):
    """4 shop level-1 train demos (seed 7: best_in_category, search_open, best_in_category,
    search_open), a held-out test-split search_open demo, and the env to replay in."""
    from webrl.envs import WebEnv, WebEnvConfig
    from webrl.recipes.demos import record_demos
    from webrl.recipes.demos import run_oracle_episode
    from webrl.envs.sites.source import make_task
    from webrl.skills.commands import load_source

    out = tmp_path_factory.mktemp("skill-demos")
    summary = record_demos(4, out, seed=7, levels=(1,), sites=("shop",), session=browser_session)
    assert summary["saved"] == 4, summary
    env = WebEnv(WebEnvConfig.from_dict({"browser": {"viewport": "openwebrl"}}), session=browser_session)
    held = run_oracle_episode(env, make_task("shop", 1, "test", 0), record_images=False)
    assert held.reward == 1.0 and held.trajectory.task_id == "shop/l1/test/search_open/0"
    yield load_source(out), [held.trajectory], env
    env.close()


@pytest.mark.browser
@pytest.mark.slow
def test_skills_mined_from_sandbox_demos_replay_on_a_held_out_task(sandbox):
    from webrl.skills.commands import WebEnvReplay, sandbox_task

    train, held_out, env = sandbox
    replay = WebEnvReplay(env)
    result = extract_skills(train, ExtractionConfig(), replay=replay, held_out=held_out, task_of=sandbox_task)
    report = result.report
    assert report["successful"] == 4 and report["mined"] >= report["abstracted"] >= report["validated"] >= 1
    search = next(s for s in result.skills if [st.kind for st in s.steps] == ["type", "click", "click"])
    assert [(st.target.role, st.target.name) for st in search.steps] == [
        ("searchbox", "Search products"), ("button", "Search"), ("link", "{link}")]
    assert [p.type for p in search.params] == ["text", "element"]
    assert search.url_patterns == ("/shop/",) and search.leads_to == "/shop/p/*"
    assert (search.replays, search.replay_successes) == (1, 1)  # the held-out search_open task
    # the same skill with a product the results do not list fails at that step, and says so
    task = sandbox_task(held_out[0])
    assert not replay(search, {"search_products": "wool socks", "link": "Nonexistent Teapot"}, task)
    assert replay.last_failure.startswith("step 3: no link 'Nonexistent Teapot'")


def test_literal_element_names_with_braces_stay_literal():
    """A button named "Search {beta}" is a literal name (braces escaped), not a placeholder: the
    skill is built, binds, and its bound target names the button exactly."""
    braced = {**BUTTON, "name": "Search {beta}"}
    trajs = []
    for task_id, query in (("shop/a", "blue mug"), ("shop/b", "red kettle")):
        home = "http://127.0.0.1:8000/shop/"
        trajs.append(Trajectory(task_id=task_id, goal=f'Search for "{query}"', info=TrajectoryInfo(task_reward=1.0),
                                turns=[turn(home, Action.type_text(query, element=1), [SEARCHBOX, braced]),
                                       turn(home, Action.click(2), [SEARCHBOX, braced]),
                                       turn(home + "search", Action.stop())]))
    [skill] = extract_skills(trajs, ExtractionConfig(min_support=2, max_len=4)).skills
    click = [b.step for b in skill.bind({"search_products": "tea"}) if b.step.kind == "click"][0]
    assert click.target.name == "Search {beta}"


def test_names_the_goals_give_stay_a_parameter_even_when_they_share_a_first_word():
    """"Sonora Orbit ..." and "Sonora Canyon ..." are each named by their task: the link is a
    parameter, not the literal prefix "Sonora" (which would click whichever Sonora link is first)."""
    two = [search_then_open("shop/a", "sonora orbit", "Sonora Orbit Wireless Headphones", 1),
           search_then_open("shop/b", "sonora canyon", "Sonora Canyon Studio Headphones", 2)]
    [skill] = extract_skills(two, ExtractionConfig()).skills
    link = skill.steps[-1].target
    assert link.role == "link" and link.name.startswith("{") and "element" in skill.signature()
