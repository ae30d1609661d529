"""Judges through `webrl serve` over real HTTP on 127.0.0.1: the tiny model (prompt assembly,
JPEG image transport, parsing of whatever it says, caching), a scripted engine behind the real
server (deterministic verdict flow), and a server too slow for the timeout (a drop, never 0)."""
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from webrl.actions import Action
from webrl.reward import (ActionHistoryJudge, DeepShopJudge, JudgeConfig, JudgeReward, OpenAIBackendConfig,
                          OpenAIChatBackend, RecipeReward, TransformersBackend, WebJudge, reward_metrics,
                          score_trajectories)
from webrl.reward.verdict import parse_verdict
from webrl.chat import ChatMessage
from webrl.serve import ServeConfig, ServerThread, create_app
from webrl.types import Trajectory

from .fixtures import STUB_LIMITS
from .helpers import StubEngine, done_trajectory, screenshot, system_text, turn


def client(server, **kw):
    return OpenAIChatBackend(OpenAIBackendConfig(base_url=server.url + "/v1", model=kw.pop("model", "tiny-qwen25vl"),
                                                 **{"timeout_s": 60, "max_retries": 0, **kw}))


def check_consistent(result):
    """Whatever the random model said, the reward is exactly what strict parsing makes of it."""
    verdict = parse_verdict(result.details["reply"])
    if verdict is None:
        assert result.drop_category == "judge_unparseable" and result.reward is None
    else:
        assert result.reward == float(verdict)


@pytest.mark.parametrize("evaluator, n_requests, images_per_request", [
    (WebJudge(), 5, None),                 # key points + 3 screenshots + outcome
    (ActionHistoryJudge(), 1, [3]),        # last 3 screenshots
    (DeepShopJudge(), 2, [3, 3]),          # attribute + filter dimensions
])
def test_each_judge_runs_against_the_tiny_model_over_http(tiny_server, evaluator, n_requests, images_per_request):
    server, recorder = tiny_server
    before = len(recorder.seen)
    traj = done_trajectory(info={"task_params": {"attribute": "blue", "filter": "under 10 euros", "sort": "None"}})
    result = JudgeReward(evaluator, client(server), JudgeConfig(max_tokens=6))(traj)
    seen = recorder.seen[before:]
    assert len(seen) == n_requests
    for messages in seen:  # system prompt + task text arrived; every image arrived as JPEG at full size
        assert messages[0].role == "system" and "Find a blue mug under 10 euros" in "".join(
            p for p in messages[1].content if isinstance(p, str))
        for img in messages[1].images:
            assert img.format == "jpeg" and img.size == (64, 48)
    if images_per_request:
        assert sorted(len(m[1].images) for m in seen) == images_per_request
    else:  # WebJudge: text-only key points, one image per scoring call, kept images in the outcome
        assert [len(m[1].images) for m in seen[:4]] == [0, 1, 1, 1]
    if evaluator.name == "deepshop":  # product of the strictly parsed per-dimension replies
        verdicts = [parse_verdict(r) for r in result.details["replies"].values()]
        expected = None if None in verdicts else float(all(verdicts))
        assert result.reward == expected and (expected is not None or result.drop_category == "judge_unparseable")
    else:
        check_consistent(result)


def test_verdicts_are_cached_across_http_calls(tiny_server, tmp_path):
    server, recorder = tiny_server
    config = JudgeConfig(max_tokens=4, cache_dir=str(tmp_path), on_unparseable="fail")
    judge = JudgeReward(ActionHistoryJudge(), client(server), config)
    first = judge(done_trajectory())
    n = len(recorder.seen)
    second = judge(done_trajectory())
    assert len(recorder.seen) == n  # no request: the verdict came from disk
    assert second.reward == first.reward and second.details["cache"] == "hit"


def test_in_process_backend_matches_the_server_on_text(tiny_server, tiny_engine):
    server, _ = tiny_server
    messages = [ChatMessage("system", ("You judge.",)), ChatMessage("user", ("Is the mug blue?",))]
    local = TransformersBackend(tiny_engine).chat(messages, max_tokens=6, temperature=0.0)
    remote = client(server).chat(messages, max_tokens=6, temperature=0.0)
    assert local.text == remote.text and local.completion_tokens == remote.completion_tokens
    result = JudgeReward(ActionHistoryJudge(), TransformersBackend(tiny_engine), JudgeConfig(max_tokens=6))(done_trajectory())
    check_consistent(result)


def sized_trajectory():
    """3 steps whose screenshots differ in size (sizes survive JPEG re-encoding; bytes do not)."""
    sizes = [(64, 48), (80, 60), (96, 72)]
    actions = [Action.click(1), Action.click(2), Action.answer("8 euros")]
    turns = [turn(a, images=[screenshot(10, size)], feedback="Succeed") for a, size in zip(actions, sizes)]
    return Trajectory(task_id="t", goal="Find a blue mug under 10 euros", turns=turns)


def scripted_webjudge(messages):
    system = system_text(messages)
    if "list the requirements" in system:
        return "Key Points:\n1. blue mug"
    if "one screenshot" in system:
        width = messages[1].images[0].size[0]
        return {64: "Score: 2", 80: "Filter visible.\nScore: 5", 96: "Cart.\nScore: 4"}[width]
    return 'All key points met.\nStatus: "success"'


def test_webjudge_verdict_flow_over_http_with_a_scripted_engine():
    engine = StubEngine(scripted_webjudge)
    with ServerThread(create_app(engine, ServeConfig(**STUB_LIMITS))) as server:
        result = JudgeReward(WebJudge(), client(server, model="stub"))(sized_trajectory())
    assert result.reward == 1.0 and result.details["kept_turns"] == [1, 2]
    outcome = engine.seen[-1]
    assert [img.size for img in outcome[1].images] == [(80, 60), (96, 72)]


class SlowEngine(StubEngine):
    def __init__(self, delay_s):
        super().__init__(lambda messages: "Verdict: SUCCESS")
        self.delay_s = delay_s

    def generate(self, prompt, sampling):
        time.sleep(self.delay_s)
        return super().generate(prompt, sampling)


def test_a_server_slower_than_the_timeout_drops_the_sample_never_zero():
    with ServerThread(create_app(SlowEngine(1.5), ServeConfig(**STUB_LIMITS))) as server:
        backend = client(server, model="stub", timeout_s=0.3, max_retries=1, backoff_s=0.01)
        traj = done_trajectory()
        [result] = score_trajectories(RecipeReward(JudgeReward(ActionHistoryJudge(), backend)), [traj])
    assert result.reward is None and traj.reward is None
    assert traj.status == "dropped" and traj.drop_reason.startswith("judge_timeout:")
    assert "after 2 attempts" in traj.drop_reason and backend.stats == {"requests": 2, "retries": 1}
    assert reward_metrics([result])["reward/dropped/judge_timeout"] == 1.0


class FlakyHandler(BaseHTTPRequestHandler):
    """503 on the first request, then a completion; 400 for model "bad"."""

    calls = 0

    def do_POST(self):
        payload = json.loads(self.rfile.read(int(self.headers["content-length"])))
        type(self).calls += 1
        if payload["model"] == "bad":
            code, out = 400, {"error": {"message": "unsupported image"}}
        elif type(self).calls == 1:
            code, out = 503, {"error": {"message": "warming up"}}
        else:
            code, out = 200, {"choices": [{"message": {"content": "Verdict: SUCCESS"}}], "usage": {}}
        data = json.dumps(out).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_retries_on_5xx_with_backoff_and_no_retry_on_4xx():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), FlakyHandler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
        waits = []
        backend = OpenAIChatBackend(OpenAIBackendConfig(base_url=url, model="m", max_retries=2, backoff_s=0.5),
                                    sleep=waits.append)
        assert JudgeReward(ActionHistoryJudge(), backend)(done_trajectory()).reward == 1.0
        assert backend.stats == {"requests": 2, "retries": 1} and 0.25 <= waits[0] <= 0.5  # 0.5 * [0.5, 1]
        bad = OpenAIChatBackend(OpenAIBackendConfig(base_url=url, model="bad", max_retries=2), sleep=waits.append)
        result = JudgeReward(ActionHistoryJudge(), bad)(done_trajectory())
        assert result.drop_category == "judge_http_error" and "unsupported image" in result.drop_reason
        assert bad.stats["requests"] == 1  # a 4xx is not retried
    finally:
        httpd.shutdown()


def test_key_from_the_environment_and_concurrency_limit(monkeypatch):
    monkeypatch.setenv("WEBRL_TEST_KEY", "k1")
    active, peak, lock = [0], [0], threading.Lock()

    class Counting(StubEngine):
        def generate(self, prompt, sampling):
            with lock:
                active[0] += 1
                peak[0] = max(peak[0], active[0])
            time.sleep(0.2)
            with lock:
                active[0] -= 1
            return super().generate(prompt, sampling)

    config = ServeConfig(api_key_env="WEBRL_TEST_KEY", **STUB_LIMITS)
    with ServerThread(create_app(Counting(lambda m: "Verdict: SUCCESS"), config)) as server:
        keyed = client(server, model="stub", api_key_env="WEBRL_TEST_KEY", max_concurrency=2)
        trajs = [done_trajectory(task_id=f"t{i}") for i in range(6)]
        results = score_trajectories(JudgeReward(ActionHistoryJudge(), keyed), trajs, max_workers=6)
        assert [r.reward for r in results] == [1.0] * 6
        assert peak[0] <= 2
        keyless = client(server, model="stub", api_key_env="WEBRL_NO_SUCH_VAR")
        denied = JudgeReward(ActionHistoryJudge(), keyless)(done_trajectory())
        assert denied.drop_category == "judge_http_error" and "401" in denied.drop_reason
