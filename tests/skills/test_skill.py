"""Skills as data: JSON round trip, malformed files name file and field, bind errors, and
resolve_target's ranking worked out by hand."""
import json

import pytest

from webrl.skills import (REPORT_FILE, Skill, SkillArgsError, SkillFileError, SkillLibrary, SkillParam, SkillStep,
                          Target, resolve_target, url_matches)


def search_skill(name="search_products") -> Skill:
    return Skill(name=name, description="Search the shop for a product", params=(SkillParam("query", "text"),),
                 steps=(SkillStep("type", Target(role="searchbox"), text="{query}", guidance="Type the query"),
                        SkillStep("press", text="Enter", guidance="Submit"),
                        SkillStep("click", Target("link", "{query}"), extra={"clicks": 2})),
                 url_patterns=("/shop/",), leads_to="/shop/search*", provenance=("shop/l1/train/search_open/1",),
                 replays=3, replay_successes=2)


def test_json_round_trip_through_a_library_folder(tmp_path):
    skill = search_skill()
    assert Skill.from_dict(json.loads(json.dumps(skill.to_dict()))) == skill
    SkillLibrary([skill, search_skill("other")]).save(tmp_path)
    (tmp_path / REPORT_FILE).write_text('{"mined": 3}')  # the extraction report is not a skill
    loaded = SkillLibrary.load(tmp_path)
    assert loaded.names() == ["other", "search_products"] and loaded.get("search_products") == skill
    assert loaded.get("search_products").replay_rate == pytest.approx(2 / 3)


@pytest.mark.parametrize("edit, says", [
    (lambda d: d.pop("steps"), "missing field 'steps'"),
    (lambda d: d.update(colour="red"), r"unknown field\(s\) \['colour'\]"),
    (lambda d: d["steps"][1].update(kind="teleport"), r"steps\[1\]: step kind must be one of"),
    (lambda d: d["steps"][0].update(target={"role": "x", "label": "y"}), r"steps\[0\]: target is \{role, name\}"),
    (lambda d: d["params"][0].update(type="number"), r"params\[0\]: param 'query': type must be one of"),
    (lambda d: d["steps"][1].update(text="{missing}"), r"undeclared params \['missing'\]"),
    (lambda d: d.update(replay_successes=9), "replay_successes <= replays"),
    (lambda d: d["steps"][2].update(extra={"direction": "up"}), r"steps\[2\]: step 'click': extra takes"),
])
def test_a_malformed_file_names_the_file_and_the_field(tmp_path, edit, says):
    d = search_skill().to_dict()
    edit(d)
    path = tmp_path / "search_products.json"
    path.write_text(json.dumps(d))
    with pytest.raises(SkillFileError, match=says) as e:
        SkillLibrary.load(tmp_path)
    assert str(e.value).startswith(str(path))


def test_a_file_named_differently_from_its_skill_and_a_broken_json_are_refused(tmp_path):
    (tmp_path / "wrong.json").write_text(json.dumps(search_skill().to_dict()))
    with pytest.raises(SkillFileError, match="'name' is 'search_products' but the file is named 'wrong'"):
        SkillLibrary.load(tmp_path)
    (tmp_path / "wrong.json").write_text("{not json")
    with pytest.raises(SkillFileError, match="wrong.json: not a JSON file"):
        SkillLibrary.load(tmp_path)
    with pytest.raises(SkillFileError, match="does not exist"):
        SkillLibrary.load(tmp_path / "nothing")


def test_bind_substitutes_and_names_missing_or_unknown_arguments():
    skill = search_skill()
    bound = skill.bind({"query": "blue mug"})
    assert [b.step.text for b in bound] == ["blue mug", "Enter", None]
    assert bound[2].step.target == Target("link", "blue mug")
    assert bound[2].step.action(element=4).to_compact() == "click(4, clicks=2)"
    with pytest.raises(SkillArgsError, match=r"missing \['query'\]"):
        skill.bind({})
    with pytest.raises(SkillArgsError, match=r"missing \['query'\]; unknown \['colour'\]"):
        skill.bind({"colour": "red"})
    with pytest.raises(SkillArgsError, match="argument 'query' must be a string"):
        skill.bind({"query": ["a"]})


def test_resolve_target_ranking_worked_by_hand():
    elements = [
        {"id": 10, "role": "link", "tag": "a", "name": "Blue mug deluxe", "in_viewport": True},   # prefix
        {"id": 11, "role": "link", "tag": "a", "name": "The blue mug", "in_viewport": True},      # substring
        {"id": 12, "role": "link", "tag": "a", "name": "blue  MUG", "in_viewport": False},        # exact, off screen
        {"id": 13, "role": "button", "tag": "button", "name": "Blue mug", "in_viewport": True},   # exact, wrong role
        {"id": 14, "role": "link", "tag": "a", "name": "Blue mug", "in_viewport": True},          # exact, on screen
    ]
    # exact beats prefix and substring; among exact links, in-viewport 14 beats off-screen 12
    assert resolve_target(Target("link", "Blue mug"), elements) == 14
    assert resolve_target(Target("link", "Blue mug"), elements[:3]) == 12  # exact though off screen
    assert resolve_target(Target("link", "Blue mug"), elements[:2]) == 10  # prefix beats substring
    assert resolve_target(Target("link", "mug"), elements[:2]) == 10       # both contain it: document order
    assert resolve_target(Target("", "Blue mug"), elements) == 13          # any role: first exact in viewport
    assert resolve_target(Target("a"), elements) == 10                     # the tag counts as a role
    assert resolve_target(Target("checkbox"), elements) is None


def test_url_patterns_match_the_path_so_the_port_does_not_matter():
    assert url_matches("/shop/p/*", "http://127.0.0.1:8123/shop/p/1014")
    assert not url_matches("/shop/p/*", "http://127.0.0.1:8123/shop/c/jackets")
    assert url_matches("/shop/search?q=*", "http://h/shop/search?q=mug")
    assert url_matches("http://h/*", "http://h/x") and not url_matches("http://h/*", "http://g/x")


def test_names_the_grammar_cannot_write_and_blank_element_arguments_are_refused(tmp_path):
    with pytest.raises(SkillFileError, match="no Python keyword"):
        SkillParam("from")
    with pytest.raises(SkillFileError, match="identifier"):
        SkillParam("q\n")
    skill = Skill("open_item", "Open an item", params=(SkillParam("item", "element"),),
                  steps=(SkillStep("click", Target("", "{item}")),))
    for blank in ("", "  "):  # would unmake the target or click whatever comes first
        with pytest.raises(SkillArgsError, match=r"\['item'\] name the element"):
            skill.bind({"item": blank})
    # the steps and the skill hash (frozen records), and a saved graph beside the skills is no skill
    assert hash(skill) == hash(Skill.from_dict(skill.to_dict()))
    SkillLibrary([skill]).save(tmp_path)
    (tmp_path / "graph.json").write_text('{"nodes": [], "edges": [], "skills": []}')
    assert SkillLibrary.load(tmp_path).names() == ["open_item"]


def test_the_query_part_of_a_pattern_is_its_own_glob():
    assert url_matches("/shop/search?q=*", "http://127.0.0.1:9/shop/search?q=mug")
    assert not url_matches("/shop/search?q=*", "http://127.0.0.1:9/shop/searchXq=1")
    assert not url_matches("/shop/search?q=*", "http://127.0.0.1:9/shop/search?page=2")


def test_a_type_step_without_a_role_prefers_the_field_over_its_label():
    label = {"id": 3, "bbox": [0, 0, 5, 5], "role": "label", "tag": "label", "name": "Email"}
    field = {"id": 4, "bbox": [0, 9, 5, 5], "role": "textbox", "tag": "input", "name": "Email"}
    assert resolve_target(Target(name="Email"), [label, field]) == 3             # a click would take the label
    assert resolve_target(Target(name="Email"), [label, field], kind="type") == 4
    assert resolve_target(Target(name="Email"), [label], kind="type") == 3         # no field: as before
