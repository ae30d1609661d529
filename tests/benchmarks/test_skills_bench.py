"""benchmarks/skills.py plumbing: reading the goal, filling a skill's arguments, the goal-word
heuristic, and one real episode per skill mode on a sandbox task."""
import pytest

from tests.benchmarks.helpers import load_benchmark
from webrl.actions import Action
from webrl.skills import Skill, SkillGraph, SkillParam, SkillStep, Target

bench = load_benchmark("skills")

SEARCH_OPEN = Skill(
    name="search_open", description="Search the shop and open a product",
    params=(SkillParam("query", "text"), SkillParam("item", "element")),
    steps=(SkillStep("type", Target("searchbox", "Search products"), text="{query}"),
           SkillStep("click", Target("button", "Search")),
           SkillStep("click", Target("link", "{item}"))),
    url_patterns=("/shop/",), leads_to="/shop/p/*")
PICK_COLOUR = Skill(
    name="pick_colour", description="Choose a colour and add to cart", params=(SkillParam("colour", "option"),),
    steps=(SkillStep("select", Target("combobox", "Colour"), text="{colour}"),
           SkillStep("click", Target("button", "Add to cart"))),
    url_patterns=("/shop/p/*",), leads_to="/shop/cart")


def el(i, role, name, **kw):
    return {"id": i, "role": role, "tag": "", "name": name, "in_viewport": True, **kw}


def test_goal_reading_quotes_and_capitalised_phrases():
    goal = 'Search the store for "pulse tee" and open the page of the Solene Pulse T-Shirt.'
    assert bench.quoted(goal) == ["pulse tee"]
    # "Search" opens the sentence: left out; the quoted string is no phrase
    assert bench.capitalised_phrases(goal) == ["Solene Pulse T-Shirt"]
    # a comma and a lower-case word end runs; ":" starts a clause ("Who" left out)
    assert bench.capitalised_phrases("Which is higher, Mount Roszelor or Mount Irostor?") == [
        "Mount Roszelor", "Mount Irostor"]
    assert bench.capitalised_phrases("Search Wikiverse to answer: Who is the mayor of Ostgalheim?") == [
        "Wikiverse", "Ostgalheim"]


def test_fill_args_from_the_goal_and_the_page():
    goal = 'Search the store for "pulse tee" and open the page of the Solene Pulse T-Shirt.'
    page = [el(0, "searchbox", "Search products"), el(1, "button", "Search"), el(2, "link", "Help")]
    # query: the quoted string; item: no link on this page is named in the goal -> the first phrase
    assert bench.fill_args(SEARCH_OPEN, goal, page) == {"query": "pulse tee", "item": "Solene Pulse T-Shirt"}
    # a link on the page whose name occurs in the goal wins over the phrase
    page.append(el(3, "link", "Pulse T-Shirt"))
    assert bench.fill_args(SEARCH_OPEN, goal, page)["item"] == "Pulse T-Shirt"
    # option: the option of the matching select that the goal names; none named -> None
    product = [el(0, "combobox", "Colour Choose a colour Grey Red", options=["Choose a colour", "Grey", "Red"]),
               el(1, "button", "Add to cart")]
    assert bench.fill_args(PICK_COLOUR, "Add the Orbit Headphones (in Red) to my cart.", product) == {"colour": "Red"}
    assert bench.fill_args(PICK_COLOUR, "Add the Orbit Headphones to my cart.", product) is None
    # a number field: a quantity takes "N of" from the goal, a price "$N"; neither named -> None
    add = Skill(name="add", description="Set the quantity and add",
                params=(SkillParam("quantity", "text"), SkillParam("max_price", "text")),
                steps=(SkillStep("type", Target("spinbutton", "Quantity"), text="{quantity}"),
                       SkillStep("type", Target("textbox", "Maximum price"), text="{max_price}")))
    assert bench.fill_args(add, "Add 2 of the Orbit Mug under $30 to my cart.", []) == {"quantity": "2",
                                                                                      "max_price": "30"}
    assert bench.fill_args(add, "Add the Orbit Mug under $30 to my cart.", []) is None
    # no quote and no phrase: a text param cannot be filled
    assert bench.fill_args(SEARCH_OPEN, "search for something", page) is None


def test_goal_word_heuristic_types_then_clicks_unused_words_then_stops():
    goal = 'Search the store for "pulse tee" and open the page of the Solene Pulse T-Shirt.'
    policy = bench.GoalWordPolicy(goal)
    home = [el(0, "link", "Help"), el(1, "searchbox", "Search products"), el(2, "button", "Search")]
    assert policy.next_action(home) == Action.type_text("pulse tee", 1)
    assert policy.next_action(home) == Action("press", text="Enter")  # a search box is submitted
    results = [el(0, "button", "Search"), el(1, "link", "Pulse Crew Tee"), el(2, "link", "Solene Pulse T-Shirt"),
               el(3, "link", "Solene Pulse T-Shirt Kids Edition")]
    # unused goal words: store pulse tee open page solene shirt ("search" went with the search box,
    # "t" is too short): link 1 has {pulse, tee} (2), link 2 {solene, pulse, shirt} (3, in 3 words),
    # link 3 the same 3 in 6 words
    assert policy.next_action(results) == Action.click(2)
    assert policy.next_action(results) == Action.click(1)  # "tee" is still unused
    assert policy.next_action(results) == Action.stop()  # nothing left: link 3's words are used


def test_scripted_policy_calls_or_follows_a_fillable_skill_once():
    goal = 'Search the store for "pulse tee" and open the page of the Solene Pulse T-Shirt.'
    page = [el(0, "searchbox", "Search products"), el(1, "button", "Search")]
    graph = SkillGraph([SEARCH_OPEN, PICK_COLOUR])
    grounded = bench.ScriptedSkillPolicy(goal, graph, "grounded")
    call = Action.skill("search_open", {"query": "pulse tee", "item": "Solene Pulse T-Shirt"})
    assert grounded.next_action("http://h/shop/", page) == call
    # the same call is not repeated; the heuristic takes over, and the skill typed the quote and
    # used the words of the box and button: nothing is left
    assert grounded.next_action("http://h/shop/", page) == Action.stop()
    guided = bench.ScriptedSkillPolicy(goal, graph, "guided")
    assert guided.next_action("http://h/shop/", page) == Action.type_text("pulse tee", 0)
    assert guided.next_action("http://h/shop/", page) == Action.click(1)
    assert guided.next_action("http://h/shop/", page) == Action.stop()  # step 3: no such link -> heuristic
    assert (guided.followed, guided.guided_steps, guided.guided_failures) == (1, 2, 1)
    with pytest.raises(ValueError, match="mode must be one of"):
        bench.ScriptedSkillPolicy(goal, graph, "both")


def test_bad_flags_are_refused_by_name(capsys):
    with pytest.raises(SystemExit):
        bench._args(["--episodes", "0"])
    assert "--episodes must be >= 1, got 0" in capsys.readouterr().err


@pytest.mark.browser
@pytest.mark.slow
def test_grounded_and_guided_episodes_on_a_sandbox_task(tmp_path):
    from webrl.envs import BrowserSession, WebEnv, WebEnvConfig
    from webrl.envs.sites.source import make_task
    from webrl.skills import SkillLibrary

    task = make_task("shop", 1, "test", 1003)  # search_open: "cottonfield tundra crew tee"
    assert task.spec.params["kind"] == "search_open"
    library = SkillLibrary([SEARCH_OPEN]).save(tmp_path / "lib")
    graph = SkillGraph([SEARCH_OPEN])
    session = BrowserSession()
    plain = WebEnv(WebEnvConfig.from_dict({"browser": {"viewport": "small"}}), session=session)
    grounded = WebEnv(WebEnvConfig.from_dict({"browser": {"viewport": "small"}, "skills_dir": str(library)}),
                      session=session)
    try:
        g = bench.run_scripted(grounded, task, graph, "grounded", max_steps=4)
        f = bench.run_scripted(plain, task, graph, "guided", max_steps=6)
    finally:
        plain.close()
        grounded.close()
        session.close()
    # grounded: one agent step runs the three skill actions; then the heuristic stops
    assert g["success"] and (g["skill_calls"], g["skill_step_failures"]) == (1, 0)
    assert g["calls"][0]["ok"] and g["actions"] == g["steps"] + 2
    # guided: the same three actions one per step, then the same stop
    assert f["success"] and (f["skill_calls"], f["guided_steps"], f["skill_step_failures"]) == (1, 3, 0)
    assert f["steps"] == g["steps"] + 2 and f["actions"] == g["actions"]
