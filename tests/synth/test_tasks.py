"""Synthesized task rows: round trip through tasks.jsonl, malformed rows, checkers, categories, config."""
import json

import pytest

from webrl.config import ConfigError
from webrl.envs.task import TaskReward
from webrl.synth.commands import SynthCommandConfig
from webrl.synth.explore import CategorisedElement, categorise, short_name
from webrl.synth.tasks import (SynthTask, SynthWebTask, Target, evaluate_checker, load_synth_tasks, resolve_target,
                               write_tasks)

SITE = "http://127.0.0.1:9000"


def _tasks():
    return [SynthTask("synth/item/000", 'Open the page of "Blue Mug".', f"{SITE}/shop/", "item",
                      {"kind": "url_contains", "value": "/shop/p/12"}, provenance={"source": "template"}),
            SynthTask("synth/action/000", 'Add "Blue Mug" to the cart.', f"{SITE}/shop/p/12", "action", None,
                      provenance={"source": "template", "refined": ["option_missing"]}, max_steps=4)]


def test_tasks_round_trip(tmp_path):
    write_tasks(tmp_path / "tasks.jsonl", _tasks())
    loaded = load_synth_tasks(tmp_path / "tasks.jsonl")
    assert [t.spec.id for t in loaded] == ["synth/item/000", "synth/action/000"]
    assert all(isinstance(t, SynthWebTask) for t in loaded)
    first, second = loaded
    assert (first.spec.goal, first.spec.start_url, first.spec.allowed_domains) == \
        ('Open the page of "Blue Mug".', f"{SITE}/shop/", ("127.0.0.1:9000",))
    assert first.spec.params["checker"] == {"kind": "url_contains", "value": "/shop/p/12"}
    assert second.spec.max_steps == 4
    assert second.reward(page=None, answer=None) == TaskReward(None)  # no checker: the judges score it
    assert first.url_alias() is None  # loaded on the origin it was synthesized on: nothing to alias


def test_rows_store_the_path_and_re_base_onto_a_new_server(tmp_path):
    write_tasks(tmp_path / "tasks.jsonl", _tasks())
    row = json.loads((tmp_path / "tasks.jsonl").read_text().splitlines()[1])
    assert (row["start_url"], row["origin"]) == ("/shop/p/12", SITE)
    moved = "http://127.0.0.1:9555"  # the sandbox server bound another port in this run
    first, second = load_synth_tasks(tmp_path / "tasks.jsonl", base_url=moved)
    assert (second.spec.start_url, second.spec.allowed_domains) == (f"{moved}/shop/p/12", ("127.0.0.1:9555",))
    alias = second.url_alias()  # observations read as the demos recorded them
    assert alias.show(f"{moved}/shop/cart") == f"{SITE}/shop/cart"
    assert alias.resolve(f"{SITE}/shop/cart") == f"{moved}/shop/cart"


def test_shown_origin_is_recorded_and_old_absolute_rows_still_load(tmp_path):
    task = SynthTask("synth/nav/000", 'Open the "Cart" page.', f"{SITE}/shop/?x=1", "navigation",
                     shown_origin="http://sandbox.test")
    assert task.web_task().url_alias().show(f"{SITE}/shop/") == "http://sandbox.test/shop/"
    row = task.to_row()
    assert (row["start_url"], row["origin"]) == ("/shop/?x=1", "http://sandbox.test")
    old = {k: v for k, v in row.items() if k != "origin"} | {"start_url": f"{SITE}/shop/c/mugs"}  # before origins
    (tmp_path / "tasks.jsonl").write_text(json.dumps(row) + "\n" + json.dumps(old) + "\n")
    new, legacy = load_synth_tasks(tmp_path / "tasks.jsonl", base_url="http://127.0.0.1:7000")
    assert new.spec.start_url == "http://127.0.0.1:7000/shop/?x=1"
    assert new.url_alias().shown == "http://sandbox.test"
    assert (legacy.spec.start_url, legacy.url_alias().shown) == ("http://127.0.0.1:7000/shop/c/mugs", SITE)
    with pytest.raises(ValueError, match="base_url must be an http"):
        load_synth_tasks(tmp_path / "tasks.jsonl", base_url="127.0.0.1:7000")
    (tmp_path / "bad.jsonl").write_text(json.dumps({**row, "origin": None}) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:1: field 'start_url' is a path .* needs field 'origin'"):
        load_synth_tasks(tmp_path / "bad.jsonl")


@pytest.mark.parametrize("change, field", [
    ({"goal": ""}, "'goal'"),
    ({"start_url": "ftp://x/"}, "'start_url'"),
    ({"category": "shopping"}, "'category'"),
    ({"checker": {"kind": "url_is", "value": "/a"}}, "'checker' kind must be one of"),
    ({"checker": {"kind": "selected", "value": "M"}}, "'checker' a 'selected' checker needs target"),
    ({"max_steps": 0}, "'max_steps'"),
    ({"plan": []}, "unknown field"),
    ({"origin": "http://127.0.0.1:9000/shop/"}, "'origin' must be an http"),
])
def test_malformed_row_names_file_line_and_field(tmp_path, change, field):
    path = tmp_path / "tasks.jsonl"
    write_tasks(path, _tasks())
    rows = path.read_text().splitlines()
    rows[1] = json.dumps({**json.loads(rows[1]), **change})
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(ValueError, match=rf"tasks.jsonl:2: .*{field}"):
        load_synth_tasks(path)


def test_not_json_row(tmp_path):
    (tmp_path / "tasks.jsonl").write_text("{not json\n")
    with pytest.raises(ValueError, match=r"tasks.jsonl:1: not JSON"):
        load_synth_tasks(tmp_path / "tasks.jsonl")


def test_checkers_on_final_states():
    url = f"{SITE}/shop/search?q=blue%20mug"
    assert evaluate_checker({"kind": "url_contains", "value": "q=blue mug"}, url, "", None)  # percent-decoded
    assert not evaluate_checker({"kind": "url_contains", "value": "/shop/p/"}, url, "", None)
    assert evaluate_checker({"kind": "url_matches", "value": r"/shop/search\?q="}, url, "", None)
    text = "Added Blue Mug to cart"
    assert evaluate_checker({"kind": "page_text_contains", "value": "Added blue MUG"}, url, text, None)
    assert not evaluate_checker({"kind": "answer_contains", "value": "42"}, url, "", None)
    assert evaluate_checker({"kind": "answer_contains", "value": "42"}, url, "", "It costs 42 euros")
    selected = {"kind": "selected", "value": "Altura", "target": {"role": "combobox", "name": "Brand"}}
    assert evaluate_checker(selected, url, "", None, [("Sort by", "Altura"), ("Brand All brands Altura", "Altura")])
    assert not evaluate_checker(selected, url, "", None, [("Brand", "All brands"), ("Sort by", "Altura")])


def test_categorise_rules_and_target_resolution():
    link = lambda name, href: {"role": "link", "tag": "a", "name": name, "href": SITE + href}  # noqa: E731
    assert categorise(link("Blue Mug", "/shop/p/12"), SITE) == "item"
    assert categorise(link("Mugs", "/shop/c/mugs"), SITE) == "navigation"
    assert categorise(link("2", "/shop/c/mugs?page=2"), SITE) == "navigation"  # a pager, not an item
    assert categorise({"role": "link", "tag": "a", "name": "Docs", "href": "https://x.org/1"}, SITE) == "external"
    assert categorise({"role": "searchbox", "tag": "input", "name": "Find"}, SITE) == "search"
    unnamed = {"role": "textbox", "tag": "input", "name": "", "placeholder": "Search products"}
    assert categorise(unnamed, SITE) == "search"
    assert categorise({"role": "textbox", "tag": "input", "name": "Email"}, SITE) == "form_field"
    assert categorise({"role": "combobox", "tag": "select", "name": "Size", "options": ["S", "M"]}, SITE) == "filter"
    assert categorise({"role": "button", "tag": "button", "name": "Search"}, SITE) == "search_submit"
    assert categorise({"role": "button", "tag": "button", "name": "Add to cart"}, SITE) == "action"
    assert categorise({"role": "button", "tag": "button", "name": "Apply"}, SITE) == "submit"
    select = CategorisedElement("filter", "combobox", "select", "Brand All brands Altura",
                                options=["All brands", "Altura"])
    assert short_name(select) == "Brand"
    elements = [{"id": 0, "role": "combobox", "tag": "select", "name": "Sort by Featured"},
                {"id": 1, "role": "combobox", "tag": "select", "name": "Brand All brands Altura"},
                {"id": 2, "role": "link", "tag": "a", "name": "Brand"}]
    assert resolve_target(Target("combobox", "Brand"), elements)["id"] == 1  # label prefix of the select's name
    assert resolve_target(Target("link", "brand"), elements)["id"] == 2  # exact (normalised) name first
    assert resolve_target(Target("button", "Brand"), elements) is None


@pytest.mark.parametrize("overrides, key", [
    ({"n_tasks": 0}, "synth.n_tasks"), ({"max_pages": -1}, "synth.max_pages"),
    ({"start_url": "file:///etc"}, "synth.start_url"), ({"endpoint": "localhost:8000"}, "synth.endpoint"),
    ({"llm_timeout_s": 0}, "synth.llm_timeout_s"), ({"subresource_policy": "none"}, "synth.subresource_policy"),
    ({"shown_origin": "http://sandbox.test/shop/"}, "synth.shown_origin"), ({"shown_origin": "sandbox"}, "synth.shown_origin"),
])
def test_config_errors_name_the_key(overrides, key):
    with pytest.raises(ConfigError, match=key):
        SynthCommandConfig(**overrides)


def test_synthesize_needs_a_start_url():
    from webrl.synth import synthesize

    with pytest.raises(ConfigError, match="--start-url"):
        synthesize(SynthCommandConfig())


def test_command_line_settings_load_into_the_config():
    from webrl.config import load_config

    config = load_config(SynthCommandConfig, None, ["start_url=http://127.0.0.1:8765/shop/", "n_tasks=3", "out=x"])
    assert (config.start_url, config.n_tasks, config.out) == ("http://127.0.0.1:8765/shop/", 3, "x")
    with pytest.raises(ConfigError, match="synth.per_category"):
        load_config(SynthCommandConfig, None, ["per_category=0"])
