"""benchmarks/tools.py plumbing: reading the goal, the tool planner on hand-written results, the
page heuristic, and one real tools-on episode in Chromium."""
import json

import pytest

from tests.benchmarks.helpers import load_benchmark
from webrl.actions import Action

bench = load_benchmark("tools")


def el(i, role, name, **kw):
    return {"id": i, "role": role, "tag": "", "name": name, "in_viewport": True, **kw}


def test_goal_reading():
    goal = "Search Wikiverse to answer: Who is the mayor of Quinlinholm?"
    assert bench.phrases(goal) == ["Quinlinholm"]  # "Search" starts the sentence, the site name is dropped
    assert bench.fact_label(goal) == "Mayor"
    # innermost hop first: Holsunford -> its River -> that river's Source
    assert bench.hop_labels("Who first climbed the mountain where the river that flows through Holsunford rises?") == [
        "River", "Source"]
    assert bench.fact_label("Who first climbed the mountain where the river rises?") == "First climbed by"
    assert bench.field_values('Enter "ocean" in the "Promo code" field, then press "Continue".') == [
        ("Promo code", "ocean")]
    assert bench.lead_passenger("Book ... Lead passenger: Noah Costa, ncosta@mail.example.") == {
        "first": "Noah", "last": "Costa", "email": "ncosta@mail.example"}


def test_wiki_planner_follows_a_hop_and_answers_from_the_result():
    planner = bench.ToolPlanner("wiki", "How long is the river that flows through Holsunford?")
    call = planner.next_call()
    assert call == Action.tool("search_articles", {"query": "Holsunford"})
    city = {"results": [{"title": "Holsunford", "facts": {"River": "Marhola River"}, "url": "u1"}]}
    planner.take(call, "Tool ... -> HTTP 200, 9 chars:\n" + json.dumps(city))
    second = planner.next_call()  # the hop is followed by a second search, no page opened
    assert second == Action.tool("search_articles", {"query": "Marhola River"})
    river = {"results": [{"title": "Marhola River", "facts": {"Length": "1,278 km"}, "url": "u2"}]}
    planner.take(second, "x\n" + json.dumps(river))
    assert planner.then == ("answer", "1,278 km") and planner.wrong_entity == 0
    # a first result that names another article counts as a wrong-entity result
    other = bench.ToolPlanner("wiki", "What is the capital of Selgalland?")
    other.take(other.next_call(), "x\n" + json.dumps({"results": [{"title": "Selgarde", "facts": {}, "url": "u"}]}))
    assert other.wrong_entity == 1


def test_comparison_and_shop_planner():
    planner = bench.ToolPlanner("wiki", "Which city has more inhabitants, Linulgrad or Torpelheim?")
    for title, pop in (("Linulgrad", "901,200"), ("Torpelheim", "88,004")):
        planner.take(planner.next_call(), "x\n" + json.dumps(
            {"results": [{"title": title, "facts": {"Population": pop}, "url": "u"}]}))
    assert planner.then == ("answer", "Linulgrad")  # 901,200 > 88,004
    shop = bench.ToolPlanner("shop", "Show me the details of the Basecamp Orbit Backpack.")
    call = shop.next_call()
    assert call == Action.tool("search_catalog", {"query": "Basecamp Orbit Backpack"})
    result = {"products": [{"name": "Basecamp Orbit Duffel", "url": "a"}, {"name": "Basecamp Orbit Backpack", "url": "b"}]}
    shop.take(call, "x\n" + json.dumps(result))
    assert shop.then == ("goto", "b") and shop.wrong_entity == 0  # the exact name wins over page order


def test_page_heuristic_searches_answers_and_clicks():
    goal = "Search Wikiverse to answer: Who is the mayor of Quinlinholm?"
    pages = bench.PageHeuristic(goal)
    home = [el(0, "link", "Main page"), el(1, "searchbox", "Search Wikiverse"), el(2, "button", "Search")]
    assert pages.next_action("http://h/wiki/", home, "") == Action.type_text("Quinlinholm", 1)
    assert pages.next_action("http://h/wiki/", home, "") == Action("press", text="Enter")
    results = [el(0, "link", "Quinlan"), el(1, "link", "Quinlinholm")]
    assert pages.next_action("http://h/wiki/search?q=x", results, "") == Action.click(1)
    article = "Article\tTalk\nQuinlinholm\nFrom Wikiverse, the free fictional encyclopedia\nMayor\tDaniel Novak\n"
    assert pages.next_action("http://h/wiki/page/quinlinholm", results, article) == Action.answer("Daniel Novak")
    # an article the question is not about is not answered from
    other = "x\nQuinlan\nFrom Wikiverse, the free\nMayor\tSomeone Else\n"
    assert bench.PageHeuristic(goal).next_action("http://h/wiki/page/quinlan", [], other) != Action.answer("Someone Else")


def test_bad_flags_are_refused_by_name(capsys):
    with pytest.raises(SystemExit):
        bench._args(["--seeds", "0"])
    assert "--seeds must be >= 1, got 0" in capsys.readouterr().err


@pytest.mark.browser
@pytest.mark.slow
def test_tools_on_episode_answers_from_the_tool_without_opening_the_article():
    from webrl.envs import WebEnv, WebEnvConfig
    from webrl.envs.sites.source import make_task

    task = make_task("wiki", 1, "test", 1000)  # "Search Wikiverse to answer: Who is the mayor of Quinlinholm?"
    assert task.spec.params["kind"] == "answer" and "Quinlinholm" in task.spec.goal
    env = WebEnv(WebEnvConfig.from_dict({"browser": {"viewport": "small"}, "tools": "task"}))
    try:
        on = bench.run_scripted(env, task, tools_on=True, max_steps=6)
    finally:
        env.close()
    # one tool call, then the answer from its JSON: two steps, no page visited, and right
    assert on["trace"] == ['tool("search_articles", query="Quinlinholm")', 'answer("Daniel Novak")']
    assert on["success"] and on["answer_from_tool"] and (on["tool_calls"], on["tool_errors"]) == (1, 0)
