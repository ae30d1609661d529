"""Tools as higher-level actions: `tool(name, args)` is ONE env step (webrl.envs.tools).
Declarations and bad calls are checked without a browser; the browser tests call the sandbox
sites' tools with real Chromium (one env per module on the run's shared browser), and a rollout
test checks that a tool turn's record reaches `Turn.tool_call` and survives a trajectory file.
"""
import json

import pytest

from webrl.actions import Action
from webrl.envs import WebEnv, WebEnvConfig
from webrl.envs.sites import server
from webrl.envs.sites.source import make_task
from webrl.envs.tool_run import NO_TOOLS, HttpResult, run_tool
from webrl.envs.tools import Tool, ToolFileError, ToolParam, load_tools_file, task_tools, tool_step_count, tools_text
from webrl.envs.worker import EnvStepResult
from webrl.envs.skills import SkillStep, Target
from webrl.types import Turn, load_trajectories, save_trajectories

SEARCH = Tool("search_catalog", "Search", params=(ToolParam("query"),), kind="http", url="/shop/api/search?q={query}")
OFF_SITE = Tool("leak", "Off-site API", params=(ToolParam("q"),), kind="http", url="http://example.com/api?q={q}")
COUNT = Tool("page_of", "A results page", params=(ToolParam("n", "integer"),), kind="navigate",
             url="/shop/search?q=mug&page={n}")


class Runner:
    """A `ToolRunner` without a browser: records what it was asked; allows 127.0.0.1 only."""

    def __init__(self):
        self.asked = []

    def origin(self):
        return "http://127.0.0.1:5000"

    def refusal(self, url):
        return None if url.startswith("http://127.0.0.1:5000/") else "outside the allowed domains"

    def show(self, text):
        return text.replace("http://127.0.0.1:5000", "http://sandbox.test")

    def http(self, method, url, form):
        self.asked.append((method, url))
        return HttpResult(200, json.dumps({"n": 1, "u": "http://127.0.0.1:5000/x"}, indent=2), "application/json")

    def navigate(self, url):
        self.asked.append(("goto", url))
        return "Opened", ""


def test_http_call_fills_the_template_encoded_and_compacts_json():
    runner = Runner()
    run = run_tool(Action.tool("search_catalog", {"query": "blue mug&x"}), {"search_catalog": SEARCH}, runner)
    assert runner.asked == [("GET", "http://127.0.0.1:5000/shop/api/search?q=blue%20mug%26x")]
    result = '{"n":1,"u":"http://sandbox.test/x"}'  # 35 chars, re-dumped compactly, origin shown
    assert run.ok and run.feedback == f'Tool search_catalog(query="blue mug&x") -> HTTP 200, 35 chars:\n{result}'
    assert run.to_dict()["url"] == "http://sandbox.test/shop/api/search?q=blue%20mug%26x"
    cut = Tool("s", "d", (ToolParam("query"),), "http", "/a?q={query}", max_result_chars=10)
    run = run_tool(Action.tool("s", {"query": "q"}), {"s": cut}, Runner())
    assert run.result == '{"n":1,"u" ... [cut at 10 of 35 chars]' and run.truncated and run.result_chars == 35


def test_bad_calls_name_the_problem_and_reach_nothing():
    runner, tools = Runner(), {"search_catalog": SEARCH, "leak": OFF_SITE, "page_of": COUNT}
    cases = {
        Action.tool("nope"): "tool nope: no tool named 'nope'; this site has ['leak', 'page_of', 'search_catalog']",
        Action.tool("search_catalog"): "tool search_catalog: takes search_catalog(query: text); missing ['query']",
        Action.tool("search_catalog", {"query": "a", "k": "b"}): "unknown ['k']",
        Action.tool("page_of", {"n": "two"}): "tool page_of: argument 'n' must be an integer, got 'two'",
        Action.tool("leak", {"q": "x"}): "tool leak: refused http://example.com/api?q=x: outside the allowed domains",
    }
    for action, message in cases.items():
        run = run_tool(action, tools, runner)
        assert message in run.error and not run.ok
    assert runner.asked == []
    assert run_tool(Action.tool("search_catalog", {"query": "a"}), {}, runner).error == f"tool search_catalog: {NO_TOOLS}"
    run = run_tool(Action.tool("page_of", {"n": "2"}), tools, runner)
    assert runner.asked == [("goto", "http://127.0.0.1:5000/shop/search?q=mug&page=2")] and run.ok


def test_declarations_are_checked_and_files_round_trip(tmp_path):
    with pytest.raises(ToolFileError, match="kind must be one of"):
        Tool("t", "d", kind="sql", url="/x")
    with pytest.raises(ToolFileError, match="url uses undeclared params"):
        Tool("t", "d", kind="http", url="/x?q={query}")
    with pytest.raises(ToolFileError, match="a macro tool needs steps"):
        Tool("t", "d", kind="macro")
    with pytest.raises(ToolFileError, match="type must be one of"):
        ToolParam("n", "float")
    macro = Tool("fill", "Fill", (ToolParam("field"), ToolParam("text")), "macro",
                 steps=(SkillStep("type", Target(name="{field}"), text="{text}"), SkillStep("press", text="Tab")))
    path = tmp_path / "tools.json"
    path.write_text(json.dumps({"tools": [SEARCH.to_dict(), macro.to_dict(), COUNT.to_dict()]}))
    assert load_tools_file(path) == (SEARCH, macro, COUNT)
    assert tool_step_count(Action.tool("fill"), {"fill": macro}) == 2 and tool_step_count(Action.tool("x"), {}) == 1
    assert tools_text([SEARCH, COUNT]) == "page_of(n: integer): A results page\nsearch_catalog(query: text): Search"
    path.write_text(json.dumps({"tools": [dict(SEARCH.to_dict(), url="/x?q={nope}")]}))
    with pytest.raises(ToolFileError, match=r"tools\[0\].*undeclared params \['nope'\]"):
        WebEnv({"tools": str(path)})
    with pytest.raises(ValueError, match="WebEnvConfig.tools must be ''"):
        WebEnvConfig(tools=None)


def test_each_sandbox_site_declares_one_tool():
    names = {site: [t.name for t in task_tools(make_task(site, 1, "train", 3, start_server=False))]
             for site in ("shop", "wiki", "travel", "widgets")}
    assert names == {"shop": ["search_catalog"], "wiki": ["search_articles"], "travel": ["find_flights"],
                     "widgets": ["fill_field"]}


# -- rollout records ---------------------------------------------------------------------------
RECORD = {"name": "search_catalog", "kind": "http", "args": {"query": "mug"}, "ok": True, "error": "",
          "url": "http://sandbox.test/shop/api/search?q=mug", "status": 200, "result_chars": 12,
          "truncated": False, "steps": []}


class ToolOnceEnv:
    async def reset(self, slot, seed, options):
        return EnvStepResult(slot, {"goal": "g", "url": "u", "tools": "search_catalog(query: text): S"}, 0.0,
                             False, False, {"elements": []})

    async def step(self, slot, action):
        info = {"elements": [], **({"tool": RECORD} if action.kind == "tool" else {})}
        done = action.kind == "stop"
        return EnvStepResult(slot, {"goal": "g", "url": "u", "feedback": "ok"}, float(done), done, False, info)


class ToolThenStop:
    def act(self, requests):
        from webrl.policy.types import Decision

        out = []
        for r in requests:
            action = Action.tool("search_catalog", {"query": "mug"}) if r.observation.tools else Action.stop()
            out.append(Decision(parsed=action, response_text=action.to_compact()))
        return out

    def load_weights(self, weights):
        pass


def test_coordinator_records_the_tool_call_and_a_file_keeps_it(tmp_path):
    from webrl.rollout import InferenceConfig, InferenceWorker, RolloutConfig, RolloutCoordinator

    worker = InferenceWorker(ToolThenStop(), InferenceConfig(batch_window_s=0.01, max_batch_size=2), version=1)

    class Inference:
        async def act_one(self, request):
            return await worker.act_one(request)

    coord = RolloutCoordinator([(ToolOnceEnv(), 0)], [Inference()], RolloutConfig(group_size=1, max_turns=3))
    (traj,), _ = coord.collect([make_task("shop", 1, "train", seed=3, start_server=False)])
    tool_turn, stop_turn = traj.turns
    assert tool_turn.tool_call == RECORD and stop_turn.tool_call == {}
    assert tool_turn.observation.tools == "search_catalog(query: text): S"
    path = tmp_path / "trajs.jsonl"
    save_trajectories(path, [traj])
    (back,) = load_trajectories(path)
    assert back.turns[0].tool_call == RECORD and back.turns[0].action == Action.tool("search_catalog", {"query": "mug"})
    line = json.loads(path.read_text())
    for turn in line["turns"]:
        del turn["tool_call"]
        del turn["observation"]["tools"]
    old = tmp_path / "old.jsonl"
    old.write_text(json.dumps(line) + "\n")
    assert [t.tool_call for t in load_trajectories(old)[0].turns] == [{}, {}]
    with pytest.raises(ValueError, match="Turn.tool_call must be a dict"):
        Turn(tool_call=["x"])


# -- real Chromium on the sandbox ----------------------------------------------------------------
@pytest.fixture(scope="module")
def tool_env(browser_session, tmp_path_factory):
    env = WebEnv({"browser": {"viewport": "small"}, "tools": "task"}, session=browser_session)
    yield env
    env.close()


def _shop_task():
    task = make_task("shop", 1, "train", seed=3)  # search_open: "Solene Ridge Travel Mug"
    assert task.spec.params["kind"] == "search_open"
    return task


@pytest.mark.browser
def test_a_site_api_result_lands_in_the_feedback_and_the_page_stays(tool_env):
    obs, _ = tool_env.reset(options={"task": _shop_task()})
    assert obs["tools"].startswith("search_catalog(query: text): Search the shop's catalogue")
    obs, reward, terminated, truncated, info = tool_env.step('tool("search_catalog", query="Solene Ridge Travel Mug")')
    assert obs["last_action_error"] == "" and obs["step"] == 1 and not (terminated or truncated) and reward == 0.0
    head, body = obs["feedback"].split("\n", 1)
    assert head.startswith('Tool search_catalog(query="Solene Ridge Travel Mug") -> HTTP 200, ')
    result = json.loads(body)
    assert result["products"][0]["name"] == "Solene Ridge Travel Mug"
    url = result["products"][0]["url"]
    assert url == f"{server.SHOWN_ORIGIN}/shop/p/{_shop_task().spec.params['pid']}"  # shown origin, not the port
    assert obs["url"] == f"{server.SHOWN_ORIGIN}/shop/" and info["tool"]["ok"] and info["tool"]["status"] == 200
    obs, *_ = tool_env.step(f'goto("{url}")')  # the tool's URL opens the page
    _, reward, terminated, _, _ = tool_env.step("stop()")
    assert terminated and reward == 1.0


@pytest.mark.browser
def test_an_off_site_tool_url_is_refused_and_bad_calls_go_on(browser_session, tmp_path):
    path = tmp_path / "tools.json"
    path.write_text(json.dumps({"tools": [OFF_SITE.to_dict(), SEARCH.to_dict()]}))
    env = WebEnv({"browser": {"viewport": "small"}, "tools": str(path)}, session=browser_session)
    try:
        env.reset(options={"task": _shop_task()})
        obs, _, terminated, _, info = env.step('tool("leak", q="secret")')
        assert obs["last_action_error"].startswith("tool leak: refused http://example.com/api?q=secret: host "
                                                   "example.com is outside the allowed domains")
        assert not terminated and info["tool"]["status"] == 0
        obs, *_ = env.step('tool("search_catalog")')
        assert obs["last_action_error"] == "tool search_catalog: takes search_catalog(query: text); missing ['query']"
        obs, *_ = env.step('tool("nope", q="x")')
        assert obs["last_action_error"] == "tool nope: no tool named 'nope'; this site has ['leak', 'search_catalog']"
        assert obs["step"] == 3 and obs["url"].endswith("/shop/")
    finally:
        env.close()


@pytest.mark.browser
def test_a_macro_tool_fills_a_widget_field(tool_env):
    task = next(t for t in (make_task("widgets", 0, "train", s) for s in range(60))
                if t.spec.params["kind"] == "type_text")
    obs, info = tool_env.reset(options={"task": task})
    assert obs["tools"].startswith("fill_field(field: text, text: text)")
    field = next(e for e in info["elements"] if e["tag"] in ("input", "textarea"))
    obs, _, _, _, info = tool_env.step(Action.tool("fill_field", {"field": field["name"], "text": "hello"}))
    assert obs["last_action_error"] == "" and obs["feedback"].splitlines()[0].endswith("(macro): ran 2/2 steps")
    assert [s["action"].split("(")[0] for s in info["tool"]["steps"]] == ["type", "press"]


@pytest.mark.browser
def test_without_tools_the_observation_and_prompt_are_as_before(browser_session, tool_env):
    from webrl.policy.prompt import PromptBuilder, PromptConfig
    from webrl.policy.types import Observation, PolicyRequest

    env = WebEnv({"browser": {"viewport": "small"}}, session=browser_session)
    try:
        obs, _ = env.reset(options={"task": _shop_task()})
        assert obs["tools"] == "" and env.observation_space.contains(obs)
        builder = PromptBuilder(PromptConfig(action_format="compact", num_screenshots=0))

        def prompt(o):
            return builder.render(PolicyRequest(Observation.from_env(o, {}, screenshot="none"))).text

        before = {k: v for k, v in obs.items() if k != "tools"}  # an observation of the env before tools
        assert prompt(obs) == prompt(before) and "Tools (" not in prompt(obs)
        obs, *_ = env.step('tool("search_catalog", query="mug")')
        assert obs["last_action_error"] == f"tool search_catalog: {NO_TOOLS}"
        with_tools, _ = tool_env.reset(options={"task": _shop_task()})
        assert ('call one as <tool_call>tool("name", param="value")</tool_call>):\nsearch_catalog(query: text)'
                in prompt(with_tools))
    finally:
        env.close()


def test_tool_names_follow_the_action_grammar_rule():
    """One name rule for actions, skills and tools: a parameter the grammar cannot write as a
    keyword argument (Python keywords, true/false/null) is refused when the tool is declared."""
    from webrl.envs.tools import Tool, ToolFileError, ToolParam

    with pytest.raises(ToolFileError):
        ToolParam("from")
    with pytest.raises(ToolFileError):
        Tool("class", "a tool named after a keyword", kind="navigate", url="/x")
