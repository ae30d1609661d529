"""Task proposals: templates over a hand-built map; the LLM path against a scripted chat server."""
import json
import time

from tests.chat_stub import chat_reply, chat_server
from webrl.chat.client import ChatClient
from webrl.synth.explore import CategorisedElement, ExplorationMap, PageRecord
from webrl.synth.propose import llm_tasks, template_tasks

SITE = "http://127.0.0.1:9000"


def _map() -> ExplorationMap:
    E = CategorisedElement
    home = PageRecord(f"{SITE}/shop/", "Home", 0, elements=[
        E("navigation", "link", "a", "Mugs", f"{SITE}/shop/c/mugs"),
        E("search", "searchbox", "input", "Search products", type="search"),
        E("item", "link", "a", "Blue Mug", f"{SITE}/shop/p/12")])
    listing = PageRecord(f"{SITE}/shop/c/mugs", "Mugs", 1, "navigation", "Mugs", elements=[
        E("filter", "combobox", "select", "Brand All brands Solene", options=["All brands", "Solene"]),
        E("form_field", "textbox", "input", "Minimum price"),
        E("submit", "button", "button", "Apply"),
        E("item", "link", "a", "Red Mug", f"{SITE}/shop/p/13")])
    item = PageRecord(f"{SITE}/shop/p/12", "Blue Mug", 1, "item", "Blue Mug", elements=[
        E("filter", "combobox", "select", "Colour Choose a colour Blue", options=["Choose a colour", "Blue"]),
        E("action", "button", "button", "Add to cart")])
    return ExplorationMap(f"{SITE}/shop/", [home, listing, item])


def test_templates_cover_each_category_with_plans_and_checkers():
    tasks = template_tasks(_map(), n_tasks=20, per_category=1)
    by_category = {t.category: t for t in tasks}
    assert sorted(by_category) == ["action", "filter", "form", "item", "navigation", "search"]
    assert [t.id for t in tasks][:2] == ["synth/navigation/000", "synth/item/000"]
    nav = by_category["navigation"]
    assert (nav.goal, nav.checker) == ('Open the "Mugs" page.', {"kind": "url_contains", "value": "/shop/c/mugs"})
    assert [(s.kind, s.target.name if s.target else None) for s in nav.plan] == [("click", "Mugs"), ("stop", None)]
    search = by_category["search"]
    assert search.goal == 'Search for "Blue Mug" and open its page.'  # the name as seen on the item page
    assert [s.kind for s in search.plan] == ["type", "press", "click", "stop"]
    assert search.checker == {"kind": "url_contains", "value": "/shop/p/12"}
    flt = by_category["filter"]
    assert flt.goal == 'On the "Mugs" page, set "Brand" to "Solene".'
    assert flt.checker["kind"] == "selected" and flt.checker["target"]["name"] == "Brand"
    action = by_category["action"]
    assert action.goal == 'Add "Blue Mug" to the cart, choosing Colour "Blue".' and action.checker is None
    assert [(s.kind, s.text) for s in action.plan] == [("select", "Blue"), ("click", ""), ("stop", "")]
    form = by_category["form"]
    assert form.goal == 'Fill in "Minimum price" with "20" and press "Apply".' and form.checker is None
    # the budget is shared round-robin: 2 tasks = the first two categories
    assert [t.category for t in template_tasks(_map(), n_tasks=2, per_category=5)] == ["navigation", "item"]


def test_llm_proposals_are_counted_by_reason():
    replies = iter([
        json.dumps([{"goal": "Find the cheapest mug", "start_url": f"{SITE}/shop/c/mugs", "category": "information",
                     "checker": {"kind": "answer_contains", "value": "Red Mug"}}]),
        "Sure! Here are some tasks: open the cart.",                        # not JSON
        json.dumps([{"goal": "Read the news", "start_url": "https://elsewhere.example/"}]),  # off the site
    ])
    with chat_server(lambda path, body: chat_reply(next(replies))) as url:
        tasks, counts = llm_tasks(_map(), ChatClient(url, max_retries=0), n_requests=3, per_request=5,
                                  known_goals=set())
    assert (counts.requests, counts.accepted, counts.rejected) == (3, 1, {"not_json": 1, "off_site": 1})
    (task,) = tasks
    assert (task.goal, task.category, task.plan, task.provenance["source"]) == \
        ("Find the cheapest mug", "information", [], "llm")


def test_llm_duplicates_missing_goals_and_a_timeout_are_counted_not_fatal():
    calls = []

    def respond(path, body):
        calls.append(body)
        if len(calls) == 2:
            time.sleep(1.0)  # past the client's 0.3 s timeout
        return chat_reply(json.dumps({"tasks": [{"goal": 'Open the "Mugs" page.'}, {"category": "item"},
                                                {"goal": "Open the cart"}, {"goal": "open the CART"}]}))

    with chat_server(respond) as url:
        tasks, counts = llm_tasks(_map(), ChatClient(url, timeout_s=0.3, max_retries=0), n_requests=2,
                                  per_request=5, known_goals={"open the mugs page"})
    # request 1: a template's goal (duplicate), no goal, accepted, the same goal again (duplicate)
    assert (counts.accepted, counts.rejected) == (1, {"duplicate": 2, "missing_goal": 1, "endpoint_timeout": 1})
    assert [t.start_url for t in tasks] == [f"{SITE}/shop/"]  # no start_url: the page it was asked about
