"""Guided mode: the skills block (budget worked by hand), the request otherwise unchanged, the recorded
turn keeping what the prompt showed (token identity with the tiny model), and the policy stack's
"skills" wrapper: order, refusals of settings that do nothing, build_policy."""
import dataclasses
from dataclasses import dataclass

import pytest

from tests.policy.helpers import observation
from webrl.actions import Action
from webrl.config import ConfigError, load_config
from webrl.policy import Decision, Observation, PolicyConfig, PolicyRequest, build_policy
from webrl.skills import (Skill, SkillGraph, SkillGuidedPolicy, SkillLibrary, SkillParam, SkillsConfig, SkillStep,
                          Target)
from webrl.policy.skills.guided import render_guidance, skill_line

SEARCH = Skill(name="search_products", description="Search the shop for a product", params=(SkillParam("query"),),
               steps=(SkillStep("type", Target("searchbox"), "{query}", guidance="Type the product name into the "
                                                                                  "search box"),
                      SkillStep("press", text="Enter", guidance="Press Enter")),
               url_patterns=("/page/*",))
OPEN = Skill(name="open_item", description="Open a listed item", params=(SkillParam("item", "element"),),
             steps=(SkillStep("click", Target("link", "{item}"), guidance="Click the item's link"),),
             url_patterns=("/page/*",))
ELSEWHERE = Skill(name="checkout", description="Pay", steps=(SkillStep("click", Target("button", "Pay")),),
                  url_patterns=("/checkout",))
LINE_SEARCH = "search_products(query: text): 1. Type the product name into the search box 2. Press Enter"
LINE_OPEN = "open_item(item: element): 1. Click the item's link"
LIBRARY = SkillLibrary([SEARCH, OPEN, ELSEWHERE])


def test_skill_lines_and_the_character_budget_worked_by_hand():
    assert skill_line(SEARCH) == LINE_SEARCH and len(LINE_SEARCH) == 89 and len(LINE_OPEN) == 50
    assert render_guidance([SEARCH, OPEN], 89 + 1 + 50) == LINE_SEARCH + "\n" + LINE_OPEN
    assert render_guidance([SEARCH, OPEN], 89 + 1 + 49) == LINE_SEARCH  # the second line does not fit whole
    assert render_guidance([SEARCH, OPEN], 88) == ""                    # nor does the first: no cut lines


@dataclass
class TaggedDecision(Decision):
    tag: str = ""


class Recorder:
    """Inner policy: remembers the requests, answers stop() with a decision subclass."""

    def __init__(self):
        self.seen = []

    def act(self, requests):
        self.seen += list(requests)
        return [TaggedDecision(Action.stop(), "stop()", prompt_ids=[7], tag="inner") for _ in requests]


def test_the_wrapper_fills_only_the_skill_guidance_and_the_turn_records_it():
    inner = Recorder()
    policy = SkillGuidedPolicy(inner, LIBRARY, SkillsConfig(max_skills=2, max_chars=500))
    obs = observation(1, goal="Search for a blue mug")  # url http://127.0.0.1:8000/page/1
    request = PolicyRequest(obs, history=(), request_id="g/0")
    [decision] = policy.act([request])
    [seen] = inner.seen
    # search_products: {search} overlaps the goal, open_item nothing; checkout does not apply here
    assert seen.observation.skill_guidance == LINE_SEARCH + "\n" + LINE_OPEN
    assert dataclasses.replace(seen.observation, skill_guidance="") == obs and seen.request_id == "g/0"
    assert isinstance(decision, TaggedDecision) and decision.tag == "inner" and decision.prompt_ids == [7]
    turn = decision.to_turn(obs, policy_version=3)  # the rollout records the observation it built
    assert turn.observation.skill_guidance == LINE_SEARCH + "\n" + LINE_OPEN and turn.policy_version == 3
    # (the stub's decision holds no images, so the rebuilt observation has no screenshot)
    assert dataclasses.replace(Observation.from_turn(turn, obs.goal), screenshot=obs.screenshot) == seen.observation
    # grounded mode's callable skills stay as they were, beside the guidance
    policy.act([PolicyRequest(dataclasses.replace(obs, skills="pay(): Pay"))])
    assert inner.seen[-1].observation.skills == "pay(): Pay"
    assert inner.seen[-1].observation.skill_guidance == LINE_SEARCH + "\n" + LINE_OPEN
    # no skill applies: the very same request goes through and the turn records no skills
    other = PolicyRequest(dataclasses.replace(obs, url="http://127.0.0.1:8000/elsewhere"))
    [d] = policy.act([other])
    assert inner.seen[-1] is other and d.to_turn(other.observation).observation.skill_guidance == ""
    with pytest.raises(ValueError, match="at least one skill"):
        SkillGuidedPolicy(inner, SkillLibrary())


@pytest.mark.slow
def test_the_recorded_turn_re_renders_the_live_prompt_ids():
    from tests.policy.helpers import policy as tiny_policy

    generator = tiny_policy("webrl:tiny-webagent-pointer")
    guided = SkillGuidedPolicy(generator, SkillGraph(LIBRARY), SkillsConfig(max_skills=2))
    request = PolicyRequest(observation(0, goal="Search for a blue mug"))
    [decision] = guided.act([request])
    turn = decision.to_turn(request.observation)
    rebuilt = PolicyRequest(Observation.from_turn(turn, request.observation.goal))
    assert generator.prompt_ids(generator.builder.render(rebuilt)) == decision.prompt_ids
    assert "this one):\n" + LINE_SEARCH in generator.tokenizer.decode(decision.prompt_ids)
    plain = generator.prompt_ids(generator.builder.render(request))  # without the wrapper: no block
    assert plain != decision.prompt_ids and "Skill guidance" not in generator.tokenizer.decode(plain)


# -- the stack ---------------------------------------------------------------------------------
@pytest.fixture
def library_dir(tmp_path):
    return str(LIBRARY.save(tmp_path / "lib"))


def test_skills_wrap_outermost_and_settings_that_do_nothing_are_refused(library_dir, tmp_path):
    cfg = PolicyConfig(["skills", "loci"], skills=SkillsConfig(library_dir=library_dir, max_skills=2))
    assert cfg.wrappers == ["skills", "loci"]
    with pytest.raises(ConfigError, match="outermost first in the order \\['skills', 'loci', 'cascade'\\]"):
        PolicyConfig(["loci", "skills"], skills=SkillsConfig(library_dir=library_dir))
    with pytest.raises(ConfigError, match=r"policy\.skills\.max_skills is set but 'skills' is not in"):
        PolicyConfig([], skills=SkillsConfig(max_skills=2))
    with pytest.raises(ConfigError, match=r"policy\.skills\.library_dir is empty"):
        PolicyConfig(["skills"])
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "report.json").write_text("{}")  # a report alone holds no skill
    with pytest.raises(ConfigError, match=r"policy\.skills\.library_dir=.*empty: no skill files"):
        PolicyConfig(["skills"], skills=SkillsConfig(library_dir=str(tmp_path / "empty")))
    for field, value, says in (("max_skills", 0, "max_skills must be an integer >= 1"),
                               ("max_chars", 10, "max_chars must be an integer >= 80")):
        with pytest.raises(ConfigError, match=rf"policy\.skills\.{says}"):
            SkillsConfig(**{field: value})


def test_dotlist_config_and_build_policy_put_the_guided_wrapper_outside(library_dir):
    cfg = load_config(PolicyConfig, overrides=["wrappers=[skills]", f"skills.library_dir={library_dir}"])
    cfg.skills.max_skills = 2  # a fixed setting (3 in runs) that code may set
    inner = Recorder()
    built = build_policy(inner, cfg)
    assert isinstance(built, SkillGuidedPolicy) and built.inner is inner and built.config.max_skills == 2
    assert sorted(s.name for s in built.graph.library) == ["checkout", "open_item", "search_products"]
