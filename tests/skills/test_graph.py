"""Skill graph: nodes and edges from url_patterns / leads_to, retrieval ranking worked out by hand
(token overlap, replay rate tie-break, one edge followed), JSON save / load."""
import json

import pytest

from webrl.skills import Skill, SkillFileError, SkillGraph, SkillLibrary, SkillParam, SkillStep, Target


def skill(name, description, url_patterns, leads_to, steps, params=(), replays=(0, 0)):
    return Skill(name=name, description=description, params=params, steps=steps, url_patterns=url_patterns,
                 leads_to=leads_to, replays=replays[0], replay_successes=replays[1])


SEARCH = skill("search_products", "Search the shop for a product", ("/shop/",), "/shop/search*",
               (SkillStep("type", Target("searchbox", "Search products"), "{query}"), SkillStep("press", text="Enter")),
               (SkillParam("query"),), replays=(2, 2))
CATEGORY = skill("open_category", "Open a category of the shop", ("/shop/",), "/shop/c/*",
                 (SkillStep("click", Target("link", "{category}")), SkillStep("wait")),
                 (SkillParam("category", "element"),), replays=(2, 1))
SORT = skill("sort_listing", "Sort the listing by price", ("/shop/c/*",), "/shop/c/*",
             (SkillStep("select", Target("combobox", "Sort by"), "Price: low to high"), SkillStep("wait")))
RESULT = skill("open_result", "Open a search result", ("/shop/search*",), "/shop/p/*",
               (SkillStep("click", Target("link", "{item}")), SkillStep("wait")), (SkillParam("item", "element"),))
BACK = skill("anywhere", "Go back to the previous page", (), "", (SkillStep("back"), SkillStep("wait")))
GRAPH = SkillGraph([SEARCH, CATEGORY, SORT, RESULT, BACK])
GOAL = "Search the shop for a blue mug"  # tokens: search, shop, blue, mug ("the", "for" stop words; "a" too short)


def names(skills):
    return [s.name for s in skills]


def test_nodes_and_edges_come_from_the_patterns():
    assert GRAPH.nodes == ["/shop/", "/shop/c/*", "/shop/p/*", "/shop/search*"]
    assert GRAPH.edges == [("*", "anywhere", ""), ("/shop/", "open_category", "/shop/c/*"),
                           ("/shop/", "search_products", "/shop/search*"), ("/shop/c/*", "sort_listing", "/shop/c/*"),
                           ("/shop/search*", "open_result", "/shop/p/*")]


def test_retrieval_ranks_by_goal_overlap_then_replay_rate():
    # at /shop/ search_products, open_category and anywhere apply (anywhere has no pattern).
    # overlap with GOAL: search_products {search, shop} = 2; open_category {shop} = 1; anywhere 0
    assert [GRAPH.score(s, GOAL) for s in (SEARCH, CATEGORY, BACK)] == [2, 1, 0]
    assert names(GRAPH.retrieve("http://127.0.0.1:9/shop/", GOAL, k=3)) == [
        "search_products", "open_category", "anywhere"]
    assert names(GRAPH.retrieve("http://127.0.0.1:9/shop/", GOAL, k=1)) == ["search_products"]
    # "Open the shop": open_category {open, shop} = 2 beats search_products {shop} = 1
    assert names(GRAPH.retrieve("http://h/shop/", "Open the shop", k=2)) == ["open_category", "search_products"]
    # "shop": both 1, replay rate 2/2 beats 1/2
    assert names(GRAPH.retrieve("http://h/shop/", "shop", k=2)) == ["search_products", "open_category"]
    # a listing page: only sort_listing and anywhere apply
    assert names(GRAPH.retrieve("http://h/shop/c/mugs?sort=x", "Sort mugs by price", k=5)) == [
        "sort_listing", "anywhere"]


def test_following_one_edge_appends_the_skills_reachable_next():
    # here: search_products, open_category, anywhere; onward: open_result (search_products leads to
    # /shop/search*; overlap {search} = 1) then sort_listing (open_category leads to /shop/c/*; 0)
    assert names(GRAPH.retrieve("http://h/shop/", GOAL, k=5, follow=True)) == [
        "search_products", "open_category", "anywhere", "open_result", "sort_listing"]
    assert names(GRAPH.retrieve("http://h/shop/", GOAL, k=4, follow=True))[-1] == "open_result"
    assert names(GRAPH.next_skills(SEARCH)) == ["open_result", "anywhere"]
    with pytest.raises(ValueError, match="k must be >= 1"):
        GRAPH.retrieve("http://h/shop/", GOAL, k=0)


def test_save_and_load_round_trip_and_a_tampered_file_is_refused(tmp_path):
    path = GRAPH.save(tmp_path / "graph.json")
    loaded = SkillGraph.load(path)
    assert loaded.edges == GRAPH.edges and {s.name: s for s in loaded.library} == {s.name: s for s in GRAPH.library}
    SkillLibrary(GRAPH.library).save(tmp_path / "lib")
    assert SkillGraph.load(tmp_path / "lib").nodes == GRAPH.nodes  # a library folder loads too
    data = json.loads(path.read_text())
    data["edges"][0][2] = "/elsewhere"
    path.write_text(json.dumps(data))
    with pytest.raises(SkillFileError, match="field 'edges' does not match"):
        SkillGraph.load(path)
    data["skills"][0]["steps"] = []
    path.write_text(json.dumps(data))
    with pytest.raises(SkillFileError, match=r"graph.json: skills\[0\].*steps must not be empty"):
        SkillGraph.load(path)
