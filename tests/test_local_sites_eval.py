"""Issue 54's walk-through, as a test: the documented judged evaluation of a tasks file on the
user's own site (a loopback server here), with a stub judge and a stub policy endpoint.

Without `env.network.local_sites` the live-web network policy refuses the start URLs: the command
fails at load, before Ray starts, naming the key and the sites to list. With it every task is
scored by the judge, the trajectory log and viewer carry each verdict and its reason, and the
command exits 0. An evaluation whose every trajectory was dropped exits non-zero.
"""
import contextlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import ray  # noqa: F401  imported here, not under a test's capsys: Ray's log handler keeps the stderr it saw


from tests.chat_stub import chat_reply, chat_server

STOP_REPLY = '<tool_call>{"name": "browser", "arguments": {"action": "stop"}}'  # the policy stops at once


@contextlib.contextmanager
def local_site():
    """Three pages on 127.0.0.1: /page0 .. /page2."""
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            body = f"<html><body><h1>Page {self.path}</h1><button>Go</button></body></html>".encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _judge(path, body):
    """SUCCESS for the task about page 0, NOT SUCCESS otherwise (worked out below)."""
    said = json.dumps(body)
    verdict = "SUCCESS" if "Open page zero" in said else "NOT SUCCESS"
    return chat_reply(f"The agent stopped on the start page.\nVerdict: {verdict}")


def _tasks_file(tmp_path, site):
    names = ["zero", "one", "two"]
    rows = [{"task_id": f"local-{i}", "confirmed_task": f"Open page {names[i]}", "website": f"http://{site}/page{i}"}
            for i in range(3)]
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps(rows))
    return path


def test_without_the_local_sites_key_the_command_fails_before_ray_naming_the_key(tmp_path, capsys, monkeypatch):
    from webrl.cli import main
    from webrl.run.actors import RunActors

    def no_ray(*args, **kwargs):
        raise AssertionError("Ray started")

    monkeypatch.setattr(RunActors, "start_ray", no_ray)
    with local_site() as site:
        tasks = _tasks_file(tmp_path, site)
        code = main(["eval", "webrl:tiny-webagent-pointer", "tasks.source=file", f"tasks.file={tasks}",
                     "reward.kind=recipe", "reward.base_url=http://127.0.0.1:9/v1", "reward.model=stub-judge",
                     f"run.run_dir={tmp_path / 'run'}"])
    err = capsys.readouterr().err
    assert code == 2, err  # a config error
    assert "the live-web network policy refuses the start URL of task 'online_mind2web/local-0'" in err
    assert f"env.network.local_sites=[{site}]" in err and "safety.network" not in err
    # a judge without its model name fails at load too, naming reward.model
    assert main(["eval", "tasks.source=file", f"tasks.file={tasks}", "reward.base_url=http://127.0.0.1:9/v1"]) == 2
    assert "needs reward.model" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.browser
@pytest.mark.timeout(900)
def test_with_the_key_every_task_is_judged_and_the_viewer_shows_the_verdicts(tmp_path, capsys):
    from webrl.cli import main

    with local_site() as site, chat_server(lambda path, body: chat_reply(STOP_REPLY)) as policy, \
            chat_server(_judge) as judge:
        tasks = _tasks_file(tmp_path, site)
        common = ["eval", "--config", "smoke", "tasks.source=file", f"tasks.file={tasks}", "tasks.eval_tasks=3",
                  f"eval.endpoint={policy}", "rollout.max_turns=1", "reward.kind=recipe",
                  f"reward.base_url={judge}", "reward.model=stub-judge"]
        code = main([*common, f"env.network.local_sites=[{site}]", f"run.run_dir={tmp_path / 'run'}"])
        captured = capsys.readouterr()
        assert code == 0, captured.err
        # every task scored (none dropped): task local-0 judged a success, the other two failures
        logged = [json.loads(line) for line in (tmp_path / "run" / "trajectories" / "trajectories.jsonl")
                  .read_text().splitlines()]
        assert sorted((t["task_id"], t["status"], t["reward"]) for t in logged) == [
            ("online_mind2web/local-0", "ok", 1.0), ("online_mind2web/local-1", "ok", 0.0),
            ("online_mind2web/local-2", "ok", 0.0)]
        page = (tmp_path / "run" / "viewer" / "index.html").read_text()
        assert page.count("judge action_history: SUCCESS") == 1
        assert page.count("judge action_history: NOT SUCCESS") == 2
        assert page.count("Verdict: NOT SUCCESS") == 2 and "unscored" not in page.split("</header>")[1]

        # a judge that cannot be reached drops every trajectory: the command exits 1 with the reasons
        code = main([*common[:-2], "reward.base_url=http://127.0.0.1:9/v1", "reward.model=stub-judge",
                     "reward.max_retries=0", f"env.network.local_sites=[{site}]", f"run.run_dir={tmp_path / 'dead'}"])
    captured = capsys.readouterr()
    assert code == 1
    assert "3 of 3 trajectories dropped:" in captured.out
    assert "evaluation failed: eval: every trajectory of the evaluation was dropped (3 of 3)" in captured.err
