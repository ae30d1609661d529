"""Synthesis on the sandbox shop in real Chromium: exploration, plans against their own checkers,
refinement of contradicted tasks, trajectory refinement with a replay, and the whole pipeline
(templates + a scripted LLM endpoint + a scripted acting policy) writing what `webrl sft` reads."""
import copy
import json
import re

import pytest

from tests.chat_stub import chat_reply, chat_server
from webrl.actions import Action
from webrl.policy.types import Decision
from webrl.synth.collect import run_plan
from webrl.synth.commands import SynthCommandConfig, synthesize
from webrl.synth.explore import explore
from webrl.synth.propose import template_tasks
from webrl.synth.refine import refine_trajectory
from webrl.synth.tasks import PlanStep, Target, load_synth_tasks
from webrl.types import load_trajectories

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def shop_url():
    from webrl.envs.sites.server import ensure_server

    return ensure_server() + "/shop/"


@pytest.fixture(scope="module")
def env(browser_session):
    from webrl.envs import WebEnv, WebEnvConfig

    web_env = WebEnv(WebEnvConfig.from_dict({"browser": {"viewport": "cpu"}}), session=browser_session)
    yield web_env
    web_env.close()


@pytest.fixture(scope="module")
def shop_map(env, shop_url):
    return explore(env, shop_url, max_pages=4)


@pytest.fixture(scope="module")
def tasks(shop_map):
    return {t.category: t for t in template_tasks(shop_map, n_tasks=12, per_category=2)}


def test_exploration_finds_the_search_box_products_and_a_select_filter(shop_map, shop_url):
    home = shop_map.pages[0]
    assert home.url == shop_url
    # base.html: <input id="search-input" type="search" aria-label="Search products">
    assert [(e.role, e.name) for e in home.of("search")] == [("searchbox", "Search products")]
    # _card.html: product links /shop/p/<id>; the category bar links /shop/c/<slug> are navigation
    assert home.of("item") and all(re.search(r"/shop/p/\d+$", e.href) for e in home.of("item"))
    assert any(e.href.endswith("/shop/c/mugs") for e in home.of("navigation"))
    # listing.html: the Brand select starts with "All brands"; sort offers "Featured" first
    filters = [e for p in shop_map.pages for e in p.of("filter")]
    assert any(e.name.startswith("Brand") and e.options[0] == "All brands" for e in filters)
    assert any(e.name.startswith("Sort by") and e.options[0] == "Featured" for e in filters)
    assert {p.reached_via for p in shop_map.pages} == {"start", "navigation", "item"}  # both kinds were visited
    assert shop_map.counts()["item"] >= len(home.of("item"))


def test_contradicted_tasks_are_refined_or_dropped(env, tasks):
    item = copy.deepcopy(tasks["item"])
    item.plan[0].target = Target("link", "Imaginary Widget", "a")  # a product the shop does not list
    item.goal = 'Open the page of "Imaginary Widget".'
    result = run_plan(env, item, record_images=False)
    assert (result.refinements, result.drop_reason, result.reward) == (["target_missing"], "", 1.0)
    new_name = item.plan[0].target.name
    assert new_name != "Imaginary Widget" and item.goal == f'Open the page of "{new_name}".'
    assert re.fullmatch(r"/shop/p/\d+", item.checker["value"])  # rewritten to the substitute's page

    flt = copy.deepcopy(tasks["filter"])
    old = flt.plan[0].text
    flt.plan[0].text = flt.checker["value"] = "No Such Option"
    flt.goal = flt.goal.replace(f'"{old}"', '"No Such Option"')
    result = run_plan(env, flt, record_images=False)
    assert (result.refinements, result.drop_reason, result.reward) == (["option_missing"], "", 1.0)
    assert flt.checker["value"] == flt.plan[0].text != "No Such Option" and f'"{flt.plan[0].text}"' in flt.goal

    action = copy.deepcopy(tasks["action"])
    action.plan[-2].target = Target("button", "Frobnicate", "button")
    result = run_plan(env, action, record_images=False)
    assert result.drop_reason == "target_missing: button 'Frobnicate'"

    search = copy.deepcopy(tasks["search"])
    search.plan[0].text = "zzqxv"  # a term nothing matches
    search.plan[2].target = Target("link", "zzqxv", "a")
    result = run_plan(env, search, record_images=False)
    assert result.drop_reason == "no_results"  # listing.html: "No products match."


def test_a_detour_is_removed_and_the_replay_confirms_the_checker(env, tasks):
    nav = copy.deepcopy(tasks["navigation"])  # start -> click a category link -> stop
    detour = [PlanStep("click", Target("link", "Coffee Mugs", "a")), PlanStep("back")]
    nav.plan = detour + nav.plan
    nav.max_steps = len(nav.plan) + 1
    result = run_plan(env, nav, record_images=False)
    assert result.reward == 1.0 and len(result.trajectory.turns) == 4
    refined, report = refine_trajectory(env, result.trajectory, nav, record_images=False)
    assert report.removed == {0: "loop", 1: "loop"} and report.replay == "confirmed"
    assert [t.action.kind for t in refined.turns] == ["click", "stop"] and refined.info.task_reward == 1.0


class CartPolicy:
    """Scripted acting policy: click the link whose name starts with "Cart", then stop."""

    def act(self, requests):
        out = []
        for request in requests:
            obs = request.observation
            match = re.search(r'\[(\d+)\] link "Cart', obs.elements_text)
            action = Action.stop() if "/shop/cart" in obs.url or match is None else Action.click(int(match.group(1)))
            out.append(Decision(action, action.to_compact()))
        return out


class MisclickPolicy:
    """Clicks an element id the page does not have, every step."""

    def act(self, requests):
        return [Decision(Action.click(999), "click(999)") for _ in requests]


def test_a_policy_task_that_stalls_is_dropped(env, shop_url):
    from webrl.synth.collect import run_policy
    from webrl.synth.tasks import SynthTask

    task = SynthTask("synth/llm/000", "Open the cart", shop_url, "navigation", max_steps=6)
    result = run_policy(env, task, MisclickPolicy(), record_images=False)
    assert result.drop_reason == "stalled"  # the same error twice (after 2 of the 6 allowed steps)


def test_synthesize_writes_tasks_and_demos_that_sft_reads(browser_session, shop_url, tmp_path):
    from webrl.chat.client import ChatClient
    from webrl.policy import sft_samples_from_trajectory
    from webrl.recipes.sft import _render_policy
    from webrl.run.config import WebRLConfig

    replies = iter([json.dumps([{"goal": "Open your shopping cart", "category": "navigation",
                                 "checker": {"kind": "url_contains", "value": "/shop/cart"}}]),
                    "no JSON here", json.dumps([{"goal": "Go elsewhere", "start_url": "http://example.com/"}])])
    with chat_server(lambda path, body: chat_reply(next(replies))) as url:
        # llm_requests acts only with an endpoint (the config says so); the client on it is passed in
        config = SynthCommandConfig(start_url=shop_url, out=str(tmp_path / "synth"), n_tasks=4, per_category=1,
                                    max_pages=4, endpoint=url, llm_requests=3)
        report = synthesize(config, session=browser_session, policy=CartPolicy(),
                            chat_client=ChatClient(url, max_retries=0))
    assert report.proposed == {"template": 4, "llm": 1}
    assert (report.llm["accepted"], report.llm["rejected"]) == (1, {"not_json": 1, "off_site": 1})
    assert (report.collected, report.kept, report.dropped) == (5, 5, {})
    written = json.loads((tmp_path / "synth" / "report.json").read_text())
    assert written["kept"] == 5 and written["elements_per_category"]["search"] >= 1

    loaded = load_synth_tasks(tmp_path / "synth" / "tasks.jsonl")
    assert [t.spec.id for t in loaded][-1] == "synth/llm/000" and len(loaded) == 5
    demos = load_trajectories(tmp_path / "synth" / "demos.jsonl")
    assert len(demos) == 5 and all(t.decided_by == "synth" and t.images for d in demos for t in d.turns)
    # each template's plan, executed, satisfied its own checker (the env's reward is the checker's)
    assert {d.info.task_params["category"]: d.info.task_reward for d in demos[:4]} == \
        {"navigation": 1.0, "item": 1.0, "search": 1.0, "filter": 1.0}
    assert [len(d.turns) for d in demos[:4]] == [2, 2, 4, 2]  # click+stop; type, Enter, click, stop
    llm_demo = demos[-1]
    assert llm_demo.turns[-1].action.kind == "stop" and llm_demo.info.task_reward == 1.0
    policy = _render_policy("webrl:tiny-webagent-pointer", WebRLConfig())  # as `webrl sft` builds it
    samples = [s for d in demos for s in sft_samples_from_trajectory(d, policy)]
    assert len(samples) == sum(len(d.turns) for d in demos)
    assert all(s.images and s.response_ids for s in samples)
    # the targets are the policy's own format (as for oracle demos), not the env's compact grammar
    first = demos[0].turns[0]
    assert first.response_text == "" and policy.builder.response_text(first, None).startswith("<tool_call>")
