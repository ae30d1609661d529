"""WebArena task configs (envs/webarena.py) and their evaluators (envs/webarena_eval.py), on
stand-in sites served on 127.0.0.1. Expected scores are worked out by hand from WebArena's rules
(evaluation_harness/evaluators.py) in the comments."""
import json

import pytest

from webrl.envs.loaders import LiveWebTaskSource, TaskLoadError
from webrl.envs.webarena import load_webarena_tasks, read_split, site_hosts
from webrl.envs.webarena_eval import (clean_answer, evaluate, exact_match, must_include, string_match,
                                      url_match)
from webrl.reward.backends import ScriptedBackend
from webrl.run.tasks import ChatJudge

PAGES = {
    "index.html": "<title>One Stop Market</title><h1>One Stop Market</h1>",
    "order.html": "<title>Order</title><div id='status'>Complete</div><p id='total'>Total: $36.99 &amp; tax</p>",
    "search.html": "<title>Search</title><p>results</p>",
    "whoami.html": "<title>Who</title><div id='user'></div>"
                   "<script>document.getElementById('user').textContent = document.cookie</script>",
}


def _config(task_id, eval_, start="__SHOPPING__/index.html", **extra):
    return {"task_id": task_id, "sites": ["shopping"], "start_url": start, "storage_state": None,
            "require_login": False, "require_reset": False, "intent": f"task {task_id}", "eval": eval_, **extra}


def _string(**reference_answers):
    return {"eval_types": ["string_match"], "reference_answers": reference_answers, "reference_url": "",
            "program_html": [], "string_note": ""}


# -- pure rules ------------------------------------------------------------------------------

def test_answers_are_cleaned_and_matched_as_webarena_does():
    assert clean_answer('  "Hello World" ') == "hello world" and clean_answer("'x'") == "x"
    assert exact_match("Complete", "'complete'") == 1.0 and exact_match("Complete", "completed") == 0.0
    # must_include: substring after cleaning; a lone one-character reference must be a whole token
    assert must_include("36.99", "The total is $36.99") == 1.0
    assert must_include("0", "10 orders", tokenize=True) == 0.0  # "0" is not a token of "10 orders"
    assert must_include("0", "0 orders", tokenize=True) == 1.0
    assert must_include("0", "10 orders", tokenize=False) == 1.0  # several references: plain substring


def test_string_match_exact_and_must_include_in_any_order():
    exact = _string(exact_match="Complete")
    assert string_match(exact, "q", "complete") == 1.0 and string_match(exact, "q", "Completed") == 0.0
    both = _string(must_include=["Alice", "Bob"])
    assert string_match(both, "q", "bob and ALICE") == 1.0  # any order, case folded
    assert string_match(both, "q", "alice only") == 0.0  # 1 * 0


def test_fuzzy_match_asks_the_judge_with_webarenas_prompt_and_reads_its_verdict():
    evaluation = _string(fuzzy_match=["two cats", "one dog"])
    replies = iter(["Correct.", "The answer is partially correct"])
    backend = ScriptedBackend(lambda messages: next(replies))
    # first reference "correct" -> 1, second "partially correct" -> 0: product 0
    assert string_match(evaluation, "What pets?", "2 cats", ChatJudge(backend)) == 0.0
    system, user = backend.calls[0]
    assert system.content == ("You are a helpful assistant",)
    assert "question: What pets?\nreference answer: two cats\n" in user.content[0]
    assert "student answer: 2 cats\nConclude the judgement by correct/incorrect/partially correct." in user.content[0]
    assert string_match(evaluation, "q", "x", ChatJudge(ScriptedBackend(lambda m: "correct"))) == 1.0  # 1 * 1


def test_fuzzy_na_is_an_exact_match_then_the_judge_compares_the_reason():
    evaluation = {**_string(fuzzy_match="N/A"), "string_note": "the product does not exist"}
    never = ChatJudge(ScriptedBackend(lambda m: AssertionError("judge asked")))
    assert string_match(evaluation, "q", "n/a", never) == 1.0  # exact "N/A": no judge call
    same = ScriptedBackend(lambda m: "same")
    assert string_match(evaluation, "q", "It is not sold here", ChatJudge(same)) == 1.0
    assert "actual unachievable reason: the product does not exist" in same.calls[0][1].content[0]
    assert string_match(evaluation, "q", "I could not log in", ChatJudge(ScriptedBackend(lambda m: "different"))) == 0.0


def test_without_a_judge_fuzzy_is_undecided_unless_another_check_already_failed():
    class Page:
        url = "http://shop.test/a"

    fuzzy = _string(fuzzy_match=["two cats"])
    assert evaluate(fuzzy, "q", Page(), "2 cats")[0] is None  # nothing can grade it: left to the run
    with_exact = _string(exact_match="3", fuzzy_match=["three"])
    value, details = evaluate(with_exact, "q", Page(), "4")  # exact 0 decides the product
    assert value == 0.0 and details["string_match"] == 0.0


def test_url_match_gold_in_pred():
    ref = {"reference_url": "http://h:1/search?q=shoe&page=2 |OR| http://h:1/find?q=boot", "url_note": "GOLD in PRED"}
    # host+path "h:1/search" is in the final URL's; every reference query key needs one of its values
    assert url_match(ref, "http://h:1/search/?page=2&q=boot&sort=asc") == 1.0  # q: boot (2nd ref), page: 2
    assert url_match(ref, "http://h:1/search?q=shoe") == 0.0  # page missing
    assert url_match(ref, "http://h:1/other?q=shoe&page=2") == 0.0  # neither base path
    assert url_match({"reference_url": "http://h:1/a/"}, "http://h:1/a/b") == 1.0  # "h:1/a" in "h:1/a/b"


# -- reader ----------------------------------------------------------------------------------

def test_placeholders_are_mapped_to_the_users_hosts_everywhere(tmp_path):
    rows = [_config(4, {"eval_types": ["url_match"], "reference_url": "__SHOPPING_ADMIN__/sales |OR| __SHOPPING__/x",
                        "url_note": "GOLD in PRED", "program_html": [], "reference_answers": None},
                    start="__SHOPPING_ADMIN__/admin")]
    path = tmp_path / "test.raw.json"
    path.write_text(json.dumps(rows))
    sites = {"shopping": "http://127.0.0.1:7770/", "__SHOPPING_ADMIN__": "http://127.0.0.1:7780"}
    (task,) = load_webarena_tasks(path, sites)
    assert task.spec.id == "webarena/4" and task.spec.start_url == "http://127.0.0.1:7780/admin"
    assert task.spec.params["eval"]["reference_url"] == "http://127.0.0.1:7780/sales |OR| http://127.0.0.1:7770/x"
    assert task.spec.allowed_domains == ("127.0.0.1:7780", "127.0.0.1:7770")  # start host, then every mapped site
    assert site_hosts(sites) == ["127.0.0.1:7770", "127.0.0.1:7780"]
    with pytest.raises(TaskLoadError, match=r"__SHOPPING_ADMIN__, which tasks.webarena_sites does not map"):
        load_webarena_tasks(path, {"shopping": "http://127.0.0.1:7770"})


def test_a_folder_of_per_task_files_a_split_and_skip_reset(tmp_path):
    folder = tmp_path / "config_files"
    folder.mkdir()
    for i in (0, 1, 2, 10):
        (folder / f"{i}.json").write_text(json.dumps(_config(i, _string(exact_match="x"), require_reset=i == 2)))
    sites = {"shopping": "http://127.0.0.1:7770"}
    assert [t.spec.id for t in load_webarena_tasks(folder, sites)] == ["webarena/0", "webarena/1", "webarena/2",
                                                                       "webarena/10"]
    lite = tmp_path / "test_webarena_lite.raw.json"  # WebArena-Lite names the WebArena task in old_task_id
    lite.write_text(json.dumps([{"task_id": 0, "old_task_id": 2}, {"task_id": 1, "old_task_id": 10}]))
    assert read_split(lite) == {2, 10}
    assert [t.spec.id for t in load_webarena_tasks(folder, sites, split=lite)] == ["webarena/2", "webarena/10"]
    assert [t.spec.id for t in load_webarena_tasks(folder, sites, split=lite, skip_reset=True)] == ["webarena/10"]
    ids = tmp_path / "ids.txt"
    ids.write_text("1\n0\n")
    assert [t.spec.id for t in load_webarena_tasks(folder, sites, split=ids)] == ["webarena/0", "webarena/1"]
    with pytest.raises(TaskLoadError, match=r"the split names task ids the file lacks: \[7\]"):
        load_webarena_tasks(folder, sites, split=[0, 7])


def test_bad_configs_are_listed_together(tmp_path):
    rows = [_config(0, {"eval_types": ["page_image_query"]}), _config(1, _string(exact_match="x"), intent=""),
            _config(2, {**_string(), "eval_types": ["url_match"], "reference_url": "x", "url_note": "EXACT"}),
            _config(3, _string(exact_match="x"), storage_state="./.auth/shopping_state.json", require_login=True)]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(rows))
    with pytest.raises(TaskLoadError) as err:
        load_webarena_tasks(path, {"shopping": "http://127.0.0.1:7770"})
    text = str(err.value)
    assert "4 bad row(s)" in text and "page_image_query" in text and "missing intent" in text
    assert "url_note 'EXACT'" in text and "tasks.webarena_auth_dir" in text


# -- on a stand-in site, in Chromium ----------------------------------------------------------

@pytest.fixture(scope="module")
def shop(http_server, tmp_path_factory):
    folder = tmp_path_factory.mktemp("webarena_shop")
    for name, body in PAGES.items():
        (folder / name).write_text(body)
    return http_server(folder, "127.0.0.1")


@pytest.fixture
def page(chromium):
    context = chromium.new_context()
    yield context.new_page()
    context.close()


def _load(tmp_path, shop, rows, **kwargs):
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps(rows))
    return load_webarena_tasks(path, {"shopping": shop.base_url}, **kwargs)


@pytest.mark.browser
def test_each_evaluator_type_on_the_stand_in_site(tmp_path, shop, page):
    program = {"eval_types": ["program_html"], "reference_answers": None, "reference_url": "", "program_html": [
        {"url": "__SHOPPING__/order.html", "locator": "document.querySelector('#status').outerText",
         "required_contents": {"exact_match": "complete"}},
        {"url": "last", "locator": "", "required_contents": {"must_include": ["$36.99 & tax", "refunded |OR| Total"]}}]}
    rows = [_config(0, _string(exact_match="Complete")), _config(1, _string(must_include=["36.99", "tax"])),
            _config(2, _string(fuzzy_match=["thirty-seven dollars"])),
            _config(3, {"eval_types": ["url_match"], "reference_url": "__SHOPPING__/search.html?q=shoe",
                        "url_note": "GOLD in PRED", "program_html": [], "reference_answers": None}),
            _config(4, program), _config(5, {**program, "program_html": [{**program["program_html"][0],
                                                                         "required_contents": {"exact_match": "x"}}]})]
    tasks = _load(tmp_path, shop, rows)
    page.goto(shop.url("index.html"))
    assert tasks[0].reward(page, '"complete"').value == 1.0  # cleaned: quotes and case
    assert tasks[0].reward(page, None).value == 0.0  # stop(): the empty answer
    assert tasks[1].reward(page, "Tax included, $36.99").value == 1.0  # any order
    assert tasks[2].reward(page, "$36.99").value is None  # fuzzy without a judge: left to the run's judge
    tasks[2].judge = ChatJudge(ScriptedBackend(lambda m: "correct"))
    assert tasks[2].reward(page, "$36.99").value == 1.0
    page.goto(shop.url("search.html?sort=1&q=shoe"))
    result = tasks[3].reward(page, None)
    assert result.value == 1.0 and result.details["final_url"].endswith("search.html?sort=1&q=shoe")
    page.goto(shop.url("search.html?q=boot"))
    assert tasks[3].reward(page, None).value == 0.0  # q=shoe required
    # program_html: opens order.html, '#status' reads "Complete" (exact after clean); then on that
    # page ("last") its HTML, unescaped, holds "$36.99 & tax" and "Total" (an |OR| alternative)
    page.goto(shop.url("index.html"))
    result = tasks[4].reward(page, None)
    assert result.value == 1.0 and result.details["program_html_read"][0] == "Complete"
    assert page.url == shop.url("order.html")
    assert tasks[5].reward(page, None).value == 0.0  # "complete" != "x"


@pytest.mark.browser
def test_a_webarena_task_runs_in_web_env_logged_in_under_the_live_web_policy(tmp_path, shop):
    from webrl.envs import WebEnv

    auth = tmp_path / ".auth"
    auth.mkdir()
    cookie = {"name": "session", "value": "alice", "domain": "127.0.0.1", "path": "/", "expires": -1,
              "httpOnly": False, "secure": False, "sameSite": "Lax"}
    (auth / "shopping_state.json").write_text(json.dumps({"cookies": [cookie], "origins": []}))
    rows = [{**_config(7, {"eval_types": ["program_html"], "reference_answers": None, "reference_url": "",
                           "program_html": [{"url": "last", "locator": "document.querySelector('#user').textContent",
                                             "required_contents": {"must_include": ["session=alice"]}}]},
                       start="__SHOPPING__/whoami.html"),
             "storage_state": "./.auth/shopping_state.json", "require_login": True}]
    (task,) = _load(tmp_path, shop, rows, auth_dir=auth)
    config = {"browser": {"viewport": "small"},
              "safety": {"subresource_policy": "public", "network": {"local_sites": site_hosts({"shopping": shop.base_url})}}}
    env = WebEnv(config=config, tasks=LiveWebTaskSource([task]))
    try:
        obs, info = env.reset(seed=0)
        assert info["task_id"] == "webarena/7" and obs["url"] == shop.url("whoami.html")
        obs, reward, terminated, truncated, info = env.step("stop()")
        assert terminated and reward == 1.0, info  # logged in: the page shows the storage state's cookie
    finally:
        env.close()


# -- run config ------------------------------------------------------------------------------

def test_the_run_config_maps_sites_reaches_them_and_keeps_the_checker(tmp_path, shop):
    from webrl.config import ConfigError, load_config
    from webrl.run.config import WebRLConfig
    from webrl.run.tasks import check_start_urls, task_sources

    path = tmp_path / "webarena.json"
    path.write_text(json.dumps([_config(0, _string(exact_match="x"))]))
    keys = ["tasks.source=file", f"tasks.file={path}", "tasks.file_format=webarena",
            f"tasks.webarena_sites={{shopping: '{shop.base_url}'}}"]
    config = load_config(WebRLConfig, None, keys)
    assert config.reward.kind == "programmatic" and config.env.subresource_policy == "public"
    assert list(config.env.network.local_sites) == [shop.netloc]  # the mapped host, by default
    check_start_urls(config.tasks, config.env)  # reachable: no error
    (task,) = task_sources(config.tasks)[0].tasks
    assert task.spec.start_url == shop.url("index.html") and task.judge is None
    narrowed = load_config(WebRLConfig, None, [*keys, "env.network.local_sites=[127.0.0.1:9]"])
    with pytest.raises(ConfigError, match=r"env.network.local_sites=\[" + shop.netloc):
        check_start_urls(narrowed.tasks, narrowed.env)
    with pytest.raises(ConfigError, match="tasks.webarena_sites: unknown WebArena site 'shop'"):
        load_config(WebRLConfig, None, [*keys[:3], "tasks.webarena_sites={shop: 'http://127.0.0.1:1'}"])


# -- the documented command ------------------------------------------------------------------

ANSWER_REPLY = '<tool_call>{"name": "browser", "arguments": {"action": "answer", "text": "Complete"}}'


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.browser
@pytest.mark.timeout(900)
def test_webrl_eval_scores_a_webarena_file_with_its_checkers_and_no_judge(tmp_path, shop):
    """docs/custom-sites.md's command, with a stub policy that answers "Complete" at once: task 0
    (exact_match "complete") scores 1, task 1 (exact_match "pending") 0; no judge is configured."""
    from tests.chat_stub import chat_reply, chat_server
    from webrl.cli import main

    path = tmp_path / "webarena.json"
    path.write_text(json.dumps([_config(0, _string(exact_match="complete")), _config(1, _string(exact_match="pending"))]))
    with chat_server(lambda route, body: chat_reply(ANSWER_REPLY)) as policy:
        code = main(["eval", "--config", "smoke", "tasks.source=file", f"tasks.file={path}",
                     "tasks.file_format=webarena", f"tasks.webarena_sites={{shopping: '{shop.base_url}'}}",
                     "tasks.eval_tasks=2", f"eval.endpoint={policy}", "rollout.max_turns=1",
                     f"run.run_dir={tmp_path / 'run'}"])
    assert code == 0
    logged = [json.loads(line) for line in (tmp_path / "run" / "trajectories" / "trajectories.jsonl")
              .read_text().splitlines()]
    assert sorted((t["task_id"], t["status"], t["reward"]) for t in logged) == [
        ("webarena/0", "ok", 1.0), ("webarena/1", "ok", 0.0)]
