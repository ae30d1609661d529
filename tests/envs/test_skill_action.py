"""Grounded skills: `skill(name, args)` runs a library skill step by step as ONE env step.

The executor's logic is pinned with a scripted page (`ScriptedSteps`, no browser); the browser
tests run hand-written skills on the sandbox shop with real Chromium (one env per module on the
run's shared browser), and the rollout tests check that a skill turn's steps reach `Turn` and
survive a trajectory file.
"""
import json

import pytest

from webrl.actions import Action
from webrl.envs import WebEnv, WebEnvConfig
from webrl.envs.sites import server
from webrl.envs.sites.source import make_task
from webrl.envs.skill_run import NO_LIBRARY, run_skill, skill_step_count, skills_text
from webrl.envs.worker import EnvStepResult
from webrl.envs.skills import Skill, SkillFileError, SkillLibrary, SkillParam, SkillStep, Target
from webrl.types import Turn, load_trajectories, save_trajectories

SEARCH_AND_OPEN = Skill(
    name="search_and_open", description="Search the shop and open a product",
    params=(SkillParam("query", "text"), SkillParam("item", "element")),
    steps=(SkillStep("type", Target(role="searchbox"), text="{query}", guidance="Type the query"),
           SkillStep("press", text="Enter", guidance="Submit the search"),
           SkillStep("click", Target(role="link", name="{item}"), guidance="Open the product")),
    url_patterns=("/shop/*",), leads_to="/shop/p/*")
OPEN_FROM_CATEGORY = Skill(
    name="open_from_category", description="Open a product from a shop category",
    params=(SkillParam("category", "element"), SkillParam("item", "element")),
    steps=(SkillStep("click", Target(role="link", name="{category}")),
           SkillStep("click", Target(role="link", name="{item}"))),
    url_patterns=("/shop/*",))
WIKI_SEARCH = Skill(name="wiki_search", description="Search the wiki", params=(SkillParam("query"),),
                    steps=(SkillStep("type", Target(role="searchbox"), text="{query}"),), url_patterns=("/wiki/*",))
LIBRARY = SkillLibrary([SEARCH_AND_OPEN, OPEN_FROM_CATEGORY, WIKI_SEARCH])
SHOP_SKILLS_TEXT = ("open_from_category(category: element, item: element): Open a product from a shop category\n"
                    "search_and_open(query: text, item: element): Search the shop and open a product")


class ScriptedSteps:
    """A `SkillSteps` over scripted pages: `pages[url]` is its element list; a click on an element
    with "href" goes there; `fail` maps a compact action to the error the env would report."""

    def __init__(self, pages, url, fail=None):
        self.pages, self.current, self.fail = pages, url, fail or {}
        self.started, self.ran = [], []

    def start(self, index):
        self.started.append(index)

    def elements(self):
        return self.pages[self.current]

    def url(self):
        return self.current

    def act(self, action):
        self.ran.append(action.to_compact())
        if action.to_compact() in self.fail:
            return "", self.fail[action.to_compact()]
        if action.kind == "click":
            self.current = self.pages[self.current][action.element].get("href", self.current)
            return f"Clicked {action.element}", ""
        return f"Did {action.kind}", ""


def _link(i, name, href=None, in_viewport=True):
    return {"id": i, "role": "link", "tag": "a", "name": name, "in_viewport": in_viewport,
            **({"href": href} if href else {})}


HOME = "http://sandbox.test/shop/"
PAGES = {
    HOME: [{"id": 0, "role": "searchbox", "tag": "input", "name": "Search products"},
           _link(1, "Coffee Mugs", "http://sandbox.test/shop/c/mugs"),
           _link(2, "Hoodies", "http://sandbox.test/shop/c/hoodies")],
    "http://sandbox.test/shop/c/mugs": [_link(0, "Coffee Mugs"), _link(1, "Blue mug", "http://sandbox.test/shop/p/7")],
    "http://sandbox.test/shop/c/hoodies": [_link(0, "Hoodies"),
                                           _link(1, "Grey hoodie", "http://sandbox.test/shop/p/9")],
    "http://sandbox.test/shop/p/7": [], "http://sandbox.test/shop/p/9": [],
}


# -- the executor, on scripted pages ---------------------------------------------------------
def test_every_step_runs_and_is_recorded():
    steps = ScriptedSteps(PAGES, HOME)
    run = run_skill(Action.skill("open_from_category", {"category": "Coffee Mugs", "item": "Blue mug"}), LIBRARY, steps)
    assert run.ok and steps.current == "http://sandbox.test/shop/p/7"
    assert steps.started == [0, 1] and steps.ran == ["click(1)", "click(1)"]  # "Blue mug" is id 1 on the mugs page
    assert run.feedback == ('Skill open_from_category(category="Coffee Mugs", item="Blue mug"): ran 2/2 steps\n'
                            "step 1/2 click(1): Clicked 1\nstep 2/2 click(1): Clicked 1")
    assert run.to_dict() == {"name": "open_from_category", "args": {"category": "Coffee Mugs", "item": "Blue mug"},
                             "ok": True, "url_matched": True, "steps": [
                                 {"index": 0, "step": "click link 'Coffee Mugs'", "action": "click(1)", "ok": True,
                                  "feedback": "Clicked 1", "error": ""},
                                 {"index": 1, "step": "click link 'Blue mug'", "action": "click(1)", "ok": True,
                                  "feedback": "Clicked 1", "error": ""}]}


def test_a_missing_target_stops_at_that_step_and_keeps_the_earlier_ones():
    steps = ScriptedSteps(PAGES, HOME)
    run = run_skill(Action.skill("open_from_category", {"category": "Hoodies", "item": "Blue mug"}), LIBRARY, steps)
    assert run.error == "skill open_from_category: step 2/2 (click link 'Blue mug'): no element matches on this page"
    assert steps.ran == ["click(2)"] and steps.current == "http://sandbox.test/shop/c/hoodies"  # step 1 happened
    assert run.feedback.splitlines() == [
        'Skill open_from_category(category="Hoodies", item="Blue mug"): ran 1/2 steps, then stopped',
        "step 1/2 click(2): Clicked 2",
        "step 2/2 (click link 'Blue mug'): failed: no element matches on this page"]
    assert [s["ok"] for s in run.to_dict()["steps"]] == [True, False] and not run.to_dict()["ok"]


def test_a_failing_action_stops_the_skill_with_the_env_error():
    steps = ScriptedSteps(PAGES, HOME, fail={'type(0, "mug")': "type failed: the field is disabled"})
    run = run_skill(Action.skill("search_and_open", {"query": "mug", "item": "Blue mug"}), LIBRARY, steps)
    assert run.error == ("skill search_and_open: step 1/3 (type searchbox \"mug\"): "
                         "type failed: the field is disabled")
    assert steps.ran == ['type(0, "mug")'] and len(run.steps) == 1  # press and click never ran


def test_bad_calls_run_nothing_and_name_the_problem():
    steps = ScriptedSteps(PAGES, HOME)
    missing = run_skill(Action.skill("search_and_open", {"query": "mug"}), LIBRARY, steps)
    assert missing.error == ("skill 'search_and_open' takes search_and_open(query: text, item: element); "
                             "missing ['item']")
    unknown = run_skill(Action.skill("search_and_open", {"query": "a", "item": "b", "colour": "red"}), LIBRARY, steps)
    assert unknown.error.endswith("unknown ['colour']")
    name = run_skill(Action.skill("checkout"), LIBRARY, steps)
    assert name.error == ("no skill named 'checkout'; the library has "
                          "['open_from_category', 'search_and_open', 'wiki_search']")
    none = run_skill(Action.skill("checkout"), None, steps)
    assert none.error == NO_LIBRARY and "no skill library" in NO_LIBRARY
    blank = run_skill(Action.skill("open_from_category", {"category": "", "item": "Blue mug"}), LIBRARY, steps)
    assert blank.error.endswith("['category'] name the element to act on and must not be empty")
    assert steps.ran == [] and steps.started == []
    assert all(r.feedback == "" and r.to_dict()["steps"] == [] for r in (missing, unknown, name, none, blank))


def test_a_skill_called_off_its_pages_still_runs_and_says_so():
    pages = {"http://sandbox.test/wiki/": [{"id": 0, "role": "searchbox", "tag": "input", "name": "Search Wikiverse"}]}
    run = run_skill(Action.skill("search_and_open", {"query": "x", "item": "X"}), LIBRARY,
                    ScriptedSteps(pages, "http://sandbox.test/wiki/"))
    assert not run.url_matched and "(called on a page outside the skill's URL patterns)" in run.feedback
    assert run.steps[0].ok and "step 3/3 (click link 'X'): no element matches" in run.error


def test_skills_text_lists_what_applies_to_the_page():
    assert skills_text(LIBRARY, HOME) == SHOP_SKILLS_TEXT
    assert skills_text(LIBRARY, "http://sandbox.test/wiki/Paris") == "wiki_search(query: text): Search the wiki"
    assert skills_text(LIBRARY, "http://sandbox.test/travel/") == ""
    assert skills_text(None, HOME) == ""


def test_step_budget_of_a_skill():
    assert skill_step_count(Action.skill("search_and_open", {"query": "a", "item": "b"}), LIBRARY) == 3
    assert skill_step_count(Action.skill("nope"), LIBRARY) == 1
    assert skill_step_count(Action.click(1), LIBRARY) == 1 and skill_step_count(Action.skill("x"), None) == 1


# -- config and construction (no browser is started) -------------------------------------------
def test_malformed_skill_file_fails_at_construction_naming_file_and_field(tmp_path):
    LIBRARY.save(tmp_path)
    bad = tmp_path / "search_and_open.json"
    data = json.loads(bad.read_text())
    data["steps"][2]["kind"] = "tap"
    bad.write_text(json.dumps(data))
    with pytest.raises(SkillFileError) as e:
        WebEnv({"skills_dir": str(tmp_path)})
    assert str(bad) in str(e.value) and "steps[2]" in str(e.value) and "'tap'" in str(e.value)
    with pytest.raises(SkillFileError, match="does not exist"):
        WebEnv({"skills_dir": str(tmp_path / "missing")})
    with pytest.raises(ValueError, match="skills_dir must be a folder path string"):
        WebEnvConfig(skills_dir=None)


# -- rollout records ---------------------------------------------------------------------------
class SkillOnceEnv:
    """Async stand-in for an EnvWorker: a skill step reports the executor's record, stop ends."""

    def __init__(self):
        self.record = run_skill(Action.skill("open_from_category", {"category": "Coffee Mugs", "item": "Blue mug"}),
                                LIBRARY, ScriptedSteps(PAGES, HOME)).to_dict()

    async def reset(self, slot, seed, options):
        return EnvStepResult(slot, {"goal": "open the blue mug", "url": HOME, "skills": SHOP_SKILLS_TEXT}, 0.0,
                             False, False, {"elements": []})

    async def step(self, slot, action):
        info = {"elements": [], **({"skill": self.record} if action.kind == "skill" else {})}
        done = action.kind == "stop"
        return EnvStepResult(slot, {"goal": "open the blue mug", "url": HOME, "feedback": "ok"}, float(done), done,
                             False, info)


class SkillThenStop:
    def act(self, requests):
        from webrl.policy.types import Decision

        out = []
        for r in requests:
            action = (Action.skill("open_from_category", {"category": "Coffee Mugs", "item": "Blue mug"})
                      if r.observation.skills else Action.stop())
            out.append(Decision(parsed=action, response_text=action.to_compact()))
        return out

    def load_weights(self, weights):
        pass


def test_coordinator_records_the_skill_steps_and_a_file_keeps_them(tmp_path):
    from webrl.rollout import InferenceConfig, InferenceWorker, RolloutConfig, RolloutCoordinator

    worker = InferenceWorker(SkillThenStop(), InferenceConfig(batch_window_s=0.01, max_batch_size=2), version=1)

    class Inference:
        async def act_one(self, request):
            return await worker.act_one(request)

    env = SkillOnceEnv()
    coord = RolloutCoordinator([(env, 0)], [Inference()], RolloutConfig(group_size=1, max_turns=3))
    task = make_task("shop", 1, "train", seed=3, start_server=False)
    (traj,), _ = coord.collect([task])
    skill_turn, stop_turn = traj.turns
    assert skill_turn.action.kind == "skill" and skill_turn.skill_steps == env.record["steps"]
    assert [s["action"] for s in skill_turn.skill_steps] == ["click(1)", "click(1)"]
    assert skill_turn.observation.skills == SHOP_SKILLS_TEXT and stop_turn.skill_steps == []
    # the learner's sample is the agent's own tokens: the one skill(...) call, not its expansion
    assert skill_turn.response_text == 'skill("open_from_category", category="Coffee Mugs", item="Blue mug")'

    path = tmp_path / "trajs.jsonl"
    save_trajectories(path, [traj])
    (back,) = load_trajectories(path)
    assert back.turns[0].skill_steps == skill_turn.skill_steps and back.turns[0].action == skill_turn.action
    # a file written before the field existed still loads
    line = json.loads(path.read_text())
    for turn in line["turns"]:
        del turn["skill_steps"]
    old = tmp_path / "old.jsonl"
    old.write_text(json.dumps(line) + "\n")
    assert [t.skill_steps for t in load_trajectories(old)[0].turns] == [[], []]


def test_turn_checks_skill_steps():
    with pytest.raises(ValueError, match="Turn.skill_steps must be a list of step dicts"):
        Turn(skill_steps=["click(1)"])


# -- real Chromium on the sandbox shop -----------------------------------------------------------
@pytest.fixture(scope="module")
def skill_env(browser_session, tmp_path_factory):
    folder = LIBRARY.save(tmp_path_factory.mktemp("skills"))
    env = WebEnv({"browser": {"viewport": "small"}, "skills_dir": str(folder)}, session=browser_session)
    yield env
    env.close()


def _shop_task():
    task = make_task("shop", 1, "train", seed=3)  # "Search the store for "<query>" and open the page of the
    assert task.spec.params["kind"] == "search_open"  # Solene Ridge Travel Mug", starting at /shop/
    return task


@pytest.mark.browser
def test_a_skill_runs_as_one_step_and_lands_on_the_product(skill_env):
    task = _shop_task()
    obs, _ = skill_env.reset(options={"task": task})
    assert obs["skills"] == SHOP_SKILLS_TEXT
    query = task.spec.params["query"]
    action = f'skill("search_and_open", query="{query}", item="Solene Ridge Travel Mug")'
    obs, reward, terminated, truncated, info = skill_env.step(action)
    assert obs["last_action_error"] == "" and obs["step"] == 1 and not (terminated or truncated) and reward == 0.0
    assert obs["url"] == f"{server.SHOWN_ORIGIN}/shop/p/{task.spec.params['pid']}"
    record = info["skill"]
    assert record["ok"] and [s["ok"] for s in record["steps"]] == [True, True, True]
    assert [s["action"].split("(")[0] for s in record["steps"]] == ["type", "press", "click"]
    assert record["steps"][0]["action"] == f'type(1, "{query}")'  # [1] is the shop's searchbox
    lines = obs["feedback"].splitlines()
    assert lines[0] == (f'Skill search_and_open(item="Solene Ridge Travel Mug", query="{query}"): ran 3/3 steps')
    assert [line.split(" ")[:2] for line in lines[1:]] == [["step", "1/3"], ["step", "2/3"], ["step", "3/3"]]
    assert "/shop/search?q=" in lines[2] and "Solene Ridge Travel Mug" in lines[3]
    assert "127.0.0.1" not in obs["feedback"] + json.dumps(record)  # the stable origin, as in every text field
    _, reward, terminated, _, _ = skill_env.step("stop()")
    assert terminated and reward == 1.0  # the shop's checker: the product page was the last one viewed


@pytest.mark.browser
def test_a_missing_step_target_fails_that_step_and_the_episode_goes_on(skill_env):
    skill_env.reset(options={"task": _shop_task()})
    obs, _, terminated, truncated, info = skill_env.step(
        Action.skill("open_from_category", {"category": "Hoodies", "item": "Solene Ridge Travel Mug"}))
    assert obs["last_action_error"] == ("skill open_from_category: step 2/2 (click link 'Solene Ridge Travel Mug'): "
                                        "no element matches on this page")
    assert obs["url"] == f"{server.SHOWN_ORIGIN}/shop/c/hoodies"  # step 1's effect is kept
    assert obs["feedback"].splitlines()[0].endswith("ran 1/2 steps, then stopped")
    assert "Clicked <a> 'Hoodies'" in obs["feedback"].splitlines()[1]
    assert obs["step"] == 1 and not (terminated or truncated) and not info["skill"]["ok"]
    assert obs["skills"] == SHOP_SKILLS_TEXT
    # bad calls cost a step, change nothing and say what is wrong
    obs, *_ = skill_env.step('skill("search_and_open", query="mug")')
    assert obs["last_action_error"].endswith("missing ['item']") and obs["url"].endswith("/shop/c/hoodies")
    obs, _, _, _, info = skill_env.step('skill("checkout")')
    assert "the library has ['open_from_category', 'search_and_open', 'wiki_search']" in obs["last_action_error"]
    # a normal action afterwards works on the page step 1 left
    hoodie = next(e for e in info["elements"] if e["role"] == "link" and e["name"].endswith("Hoodie"))
    obs, _, terminated, _, info = skill_env.step(Action.click(hoodie["id"]))
    assert obs["last_action_error"] == "" and "/shop/p/" in obs["url"] and obs["step"] == 4 and "skill" not in info


@pytest.mark.browser
def test_without_a_library_the_observation_and_prompt_are_as_before(browser_session, skill_env):
    from webrl.policy.prompt import PromptBuilder, PromptConfig
    from webrl.policy.types import Observation, PolicyRequest

    env = WebEnv({"browser": {"viewport": "small"}}, session=browser_session)
    try:
        obs, _ = env.reset(options={"task": _shop_task()})
        assert obs["skills"] == "" and env.observation_space.contains(obs)
        builder = PromptBuilder(PromptConfig(action_format="compact", num_screenshots=0))

        def prompt(o):
            return builder.render(PolicyRequest(Observation.from_env(o, {}, screenshot="none"))).text

        before_skills = {k: v for k, v in obs.items() if k != "skills"}  # an observation of the env before skills
        assert prompt(obs) == prompt(before_skills) and "Skills (" not in prompt(obs)
        obs, *_ = env.step('skill("search_and_open", query="mug", item="Mug")')
        assert obs["last_action_error"] == NO_LIBRARY and obs["url"].endswith("/shop/")
        with_library, _ = skill_env.reset(options={"task": _shop_task()})
        assert f'call one as <tool_call>skill("name", param="value")</tool_call>):\n{SHOP_SKILLS_TEXT}' in prompt(with_library)
    finally:
        env.close()
