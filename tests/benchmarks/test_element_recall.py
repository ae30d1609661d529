"""benchmarks/element_recall.py: the box matching rule, the maximum one-to-one matching, recall and
precision counts, the fixture truth files (schema, pairing with their pages, ids present in the
page source), and in a browser: every truth path resolves to one visible element, and webrl
lists exactly the truth on two fixtures it handles today."""
import json
import re

import pytest

from tests.benchmarks.helpers import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("element_recall")


# -- boxes and matching -------------------------------------------------------------------------

def test_box_iou_by_hand(bench):
    assert bench.box_iou([0, 0, 10, 10], [0, 0, 10, 10]) == 1.0
    # overlap 5x10 = 50, union 100 + 100 - 50 = 150
    assert bench.box_iou([0, 0, 10, 10], [5, 0, 10, 10]) == pytest.approx(1 / 3)
    assert bench.box_iou([0, 0, 10, 10], [10, 0, 10, 10]) == 0.0  # touching edges
    assert bench.box_iou([0, 0, 0, 0], [0, 0, 0, 0]) == 0.0       # empty boxes


def test_match_needs_centre_inside_and_iou_at_least_half(bench):
    truth = [10, 10, 20, 20]
    assert bench.matches([10, 10, 20, 22], truth)         # IoU 400/440 = 0.91, centre (20, 21) inside
    assert not bench.matches([0, 0, 40, 40], truth)       # a wrapper: centre inside, IoU 400/1600 = 0.25
    assert not bench.matches([15, 15, 5, 5], truth)       # a child: centre inside, IoU 25/400
    assert not bench.matches([30, 10, 20, 20], truth)     # a neighbour: no overlap
    assert bench.centre_inside([0, 0, 10, 10], [5, 5, 10, 10])  # centre (5, 5) on the corner
    assert not bench.centre_inside([0, 0, 8, 8], [5, 5, 10, 10])


def test_matching_is_one_to_one_and_maximal(bench):
    # truth A [0,0,10,10], B [0,0,10,12]; listed x [0,0,10,11] matches both (IoU 0.91 / 0.92),
    # y [0,0,10,5.5] only A (IoU 0.55; with B 55/120 = 0.46). Greedy in truth order gives
    # A-x and leaves B; the maximum matching is A-y, B-x.
    truth, listed = [[0, 0, 10, 10], [0, 0, 10, 12]], [[0, 0, 10, 11], [0, 0, 10, 5.5]]
    assert bench.maximum_matching(truth, listed) == {0: 1, 1: 0}
    # one listed element cannot count for two identical truth elements
    assert len(bench.maximum_matching([[0, 0, 10, 10]] * 2, [[0, 0, 10, 10]])) == 1
    assert bench.maximum_matching([], [[0, 0, 1, 1]]) == {}


def test_page_score_counts_and_pooled_totals(bench):
    truth = [[0, 0, 10, 10], [50, 0, 10, 10], [100, 0, 10, 10]]
    listed = [[0, 0, 10, 10], [0, 0, 100, 100], [100, 0, 10, 10], [300, 300, 5, 5]]
    score = bench.score_page(["a", "b", "c"], truth, listed)
    # a and c matched; b missed; the wrapper (1) and the stray box (3) are extra
    assert (score.truth, score.listed, score.matched) == (3, 4, 2)
    assert score.missed == ("b",) and score.extra == (1, 3)
    assert score.recall == pytest.approx(2 / 3) and score.precision == 0.5
    empty = bench.score_page([], [], [])
    assert empty.recall == 1.0 and empty.precision == 1.0
    # pooled over pages: 2 + 1 matched of 3 + 1 truth, listed 4 + 2
    other = bench.score_page(["d"], [[0, 0, 5, 5]], [[0, 0, 5, 5], [9, 9, 1, 1]])
    assert bench.pooled([score, other]) == {"truth": 4, "listed": 6, "matched": 3,
                                             "recall": 0.75, "precision": 0.5}


# -- fixture truth files ------------------------------------------------------------------------

# one page per pattern the benchmark covers (the list plus ARIA widgets and wrappers)
PAGES = {"react_root", "vue_listeners", "document_delegation", "shadow_components", "iframes", "modal",
         "cookie_banner", "virtual_list", "hover_menu", "drag_handles", "canvas_widgets",
         "fake_clickables", "roving_widgets", "wrappers"}
SCRIPTED_IDS = {"react_root", "virtual_list"}  # pages whose ids a script builds from parts


def test_fixtures_pair_pages_with_truth_and_cover_every_pattern(bench):
    fixtures = bench.load_fixtures()
    assert {f.name for f in fixtures} == PAGES
    assert {p.stem for p in bench.FIXTURES.glob("*.html")} == PAGES
    assert all(f.usable for f in fixtures)


@pytest.mark.parametrize("name", sorted(PAGES - SCRIPTED_IDS))
def test_truth_ids_occur_in_the_page_source(bench, name):
    source = (bench.FIXTURES / f"{name}.html").read_text()
    fixture = bench.load_fixture(bench.FIXTURES / f"{name}.json")
    for element in fixture.usable:
        for step in element.path:
            for ident in re.findall(r"#([\w-]+)", step):
                assert f'id="{ident}"' in source, (name, element.name, ident)


@pytest.mark.parametrize("change,message", [
    ({"pattern": None}, r"bad\.json: key 'pattern' must be a str"),
    ({"usable": {}}, r"key 'usable' must be a list"),
    ({"usable": [{"name": "a", "path": "#a"}]}, r"usable\[0\]\.path must be a non-empty list of CSS selectors"),
    ({"usable": [{"name": "a", "path": []}]}, r"usable\[0\]\.path"),
    ({"usable": [{"path": ["#a"]}]}, r"usable\[0\]\.name must be a non-empty string"),
    ({"usable": [{"name": "a", "path": ["#a"]}, {"name": "a", "path": ["#b"]}]}, r"usable names repeat: \['a'\]"),
])
def test_a_malformed_truth_file_is_refused_by_key(bench, tmp_path, change, message):
    (tmp_path / "bad.html").write_text("<button id=a>a</button>")
    data = {"pattern": "p", "usable": [{"name": "a", "path": ["#a"]}], **change}
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=message):
        bench.load_fixture(tmp_path / "bad.json")


def test_a_truth_file_without_its_page_and_an_unknown_page_name_are_refused(bench, tmp_path):
    (tmp_path / "lonely.json").write_text(json.dumps({"pattern": "p", "usable": []}))
    with pytest.raises(ValueError, match=r"lonely\.json: no page lonely\.html"):
        bench.load_fixture(tmp_path / "lonely.json")
    with pytest.raises(ValueError, match=r"--pages: unknown fixtures \['modals'\]"):
        bench.load_fixtures(bench.FIXTURES, ["modal", "modals"])


# -- in a browser -------------------------------------------------------------------------------

@pytest.mark.browser
def test_every_truth_path_resolves_to_one_visible_element(bench, chromium):
    httpd = bench.serve(bench.FIXTURES)
    context = chromium.new_context(viewport={"width": 800, "height": 600})
    try:
        page = context.new_page()
        for fixture in bench.load_fixtures():
            page.goto(bench.page_url(httpd, fixture))
            resolved = [page.evaluate(bench.RESOLVE_TRUTH_JS, list(u.path)) for u in fixture.usable]
            for (x, y, w, h) in bench.truth_boxes(fixture, resolved):  # raises on a path that fails
                assert w > 0 and h > 0 and 0 <= x and x + w <= 800 and 0 <= y and y + h <= 600, fixture.name
    finally:
        context.close()
        httpd.shutdown()


@pytest.mark.browser
def test_webrl_lists_exactly_the_truth_on_two_fixtures(bench):
    fixtures = bench.load_fixtures(bench.FIXTURES, ["react_root", "drag_handles"])
    httpd = bench.serve(bench.FIXTURES)
    try:
        pages = bench.observe_webrl(fixtures, httpd, repeats=1)
    finally:
        httpd.shutdown()
    rows = bench.score_all(fixtures, pages)["pages"]
    # react_root: 8 handler-prop elements, no container; drag_handles: 3 grips, track, thumb, gutter
    assert {name: (r["webrl"]["matched"], r["webrl"]["listed"]) for name, r in rows.items()} == \
        {"react_root": (8, 8), "drag_handles": (6, 6)}


# -- MiniWoB++: oracle states, replay fidelity, coverage per tool --------------------------------

def _state(bench, box, action="click", goal="Click OK.", path="html > body:nth-child(2)"):
    kinds = {"click": {"kind": "click", "element": 0}, "wait": {"kind": "wait"}, None: None}
    return bench.OracleState(goal, kinds[action], box, path if box else None, None)


def _replayed(box, marks, clickable=(), goal="Click OK."):
    return {"goal": goal, "box": box, "box_error": None if box else "matches 0 elements",
            "set_of_marks": list(marks), "clickable": list(clickable), "action_error": ""}


def test_scroll_pixels_follow_webrls_rule(bench):
    from webrl.actions import Action

    # amount is a viewport fraction: 10 x 480 px down; the default 0.5 x 640 px to the left
    assert bench.scroll_pixels(Action.scroll("down", 10.0, element=0), (640, 480)) == [0, 4800]
    assert bench.scroll_pixels(Action.scroll("left"), (640, 480)) == [-320, 0]


def test_a_replayed_state_is_faithful_only_with_the_same_goal_and_a_matching_target_box(bench):
    state = _state(bench, [10, 20, 30, 40])
    # a classic scrollbar 15 px narrower: centre (17.5, 40) inside, IoU 15x40 / 30x40 = 0.5
    assert bench.faithful(state, _replayed([10, 20, 15, 40], [])) == ""
    # moved down 25 px by an animation: overlap 30x15 = 450, union 2400 - 450 = 1950, IoU 0.23
    assert "does not match webrl's" in bench.faithful(state, _replayed([10, 45, 30, 40], []))
    assert "goal 'Click Cancel.'" in bench.faithful(state, _replayed([10, 20, 30, 40], [], goal="Click Cancel."))
    assert "not found: matches 0 elements" in bench.faithful(state, _replayed(None, []))
    judged = bench.judge_replayed(state, _replayed([10, 20, 15, 40], [[10, 20, 15, 40]], [[0, 0, 99, 99]]))
    assert judged == {"browsergym_box": [10, 20, 15, 40], "unfaithful": "", "deviation_px": 15,
                      "set_of_marks": True, "clickable": False}


def test_miniwob_recall_counts_states_per_tool_by_hand(bench):
    ok, wrapper = [10, 10, 20, 20], [0, 0, 100, 100]
    episodes = [
        # task a: click (som mark matches, not flagged clickable), wait (not counted), click (only a wrapper)
        bench.OracleEpisode("a", 11, "u", True, (_state(bench, ok), _state(bench, None, "wait"),
                                                 _state(bench, [40, 40, 10, 10]))),
        # task b: a click whose replay shows another goal (left out of BrowserGym's counts), then the
        # oracle finds nothing (webrl: not covered; BrowserGym: nothing to look for)
        bench.OracleEpisode("b", 11, "u", False, (_state(bench, ok), _state(bench, None, None))),
    ]
    browsergym = {"miniwob": [
        {"states": [_replayed(ok, [ok]), _replayed(None, []), _replayed([40, 40, 10, 10], [wrapper], [[40, 40, 10, 10]])],
         "raw_reward": 1},
        {"states": [_replayed(ok, [ok], goal="Click Cancel.")], "raw_reward": -1},
    ]}
    recall = bench.miniwob_recall(episodes, browsergym)
    assert recall["tasks"]["a"] == {"webrl": {"states": 2, "covered": 2}, "browsergym_som": {"states": 2, "covered": 1},
                                    "browsergym_clickable": {"states": 2, "covered": 1}}
    assert recall["tasks"]["b"]["webrl"] == {"states": 2, "covered": 1}
    assert recall["tasks"]["b"]["browsergym_som"] == {"states": 0, "covered": 0}
    # webrl 3 of 4 states, task a fully; BrowserGym 1 of 2 in a, task b has no counted state
    assert recall["overall"]["webrl"] == {"states": 4, "covered": 3, "coverage": 0.75, "tasks_covered": 1, "tasks": 2}
    assert recall["overall"]["browsergym_som"] == {"states": 2, "covered": 1, "coverage": 0.5,
                                                   "tasks_covered": 0, "tasks": 1}
    assert [(u["task"], u["step"]) for u in recall["unfaithful"]] == [("b", 0)]
    third = recall["episodes"][0]["states"][2]  # the wrapper is no match; the clickable box is
    assert (third["set_of_marks"], third["clickable"], third["unfaithful"]) == (False, True, "")
    assert recall["episodes"][1]["browsergym_raw_reward"] == -1 and "goal" in recall["episodes"][1]["states"][0]["unfaithful"]
    assert bench.oracle_coverage(episodes) == {"a": {"seeds": 1, "listed": 1, "solved": 1},
                                               "b": {"seeds": 1, "listed": 0, "solved": 0}}
    assert set(bench.miniwob_recall(episodes)["overall"]) == {"webrl"}  # no replay: webrl's row only


def test_an_unknown_miniwob_task_is_refused_by_name(bench):
    with pytest.raises(ValueError, match=r"--miniwob-tasks: no scripted oracle for \['click-nothing'\]"):
        bench.oracle_episodes([11], ["click-button", "click-nothing"])


@pytest.mark.browser
def test_a_target_path_finds_the_same_element_again(bench, chromium):
    context = chromium.new_context(viewport={"width": 640, "height": 480})
    try:
        page = context.new_page()
        page.set_content("<div><p>x</p><ul><li>a</li><li><button data-webrl-id='3' style='margin:7px'>b</button>"
                         "</li></ul></div><span>y</span>")
        path = page.evaluate(bench.TARGET_PATH_JS, 3)
        assert path == "html > body:nth-child(2) > div:nth-child(1) > ul:nth-child(2) > li:nth-child(2) > button:nth-child(1)"
        box = page.evaluate("() => { const r = document.querySelector('button').getBoundingClientRect();"
                            " return [r.left, r.top, r.width, r.height]; }")
        assert page.evaluate(bench.RESOLVE_TRUTH_JS, [path]) == {"bbox": box}
        assert page.evaluate(bench.TARGET_PATH_JS, 4) is None
    finally:
        context.close()
