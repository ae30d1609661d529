"""The judge endpoint of a chaos run, and the two faults on it (`benchmarks/chaos.py`).

The main job scores the sandbox with its programmatic checker by default, and a hosted judge
(an API model) cannot be reached from this machine, so with judge_down / judge_slow among the
faults the run is scored by a judge served here instead: `JudgeProcess` starts this file as a
process of its own, a stdlib HTTP server on 127.0.0.1 that speaks the chat-completions protocol
webrl's judge client speaks (`POST /v1/chat/completions`, `webrl.chat.client.ChatClient`), and
the run is pointed at it with `judge_overrides` (real `RewardConfig` keys, so a typo is refused):

    reward.kind=judge reward.judge=action_history reward.base_url=http://127.0.0.1:PORT/v1
    reward.model=sandbox-checker reward.timeout_s=10 tasks.kinds=[click_button,click_link]
    tasks.train_levels=[0] tasks.eval_levels=[0]

Its verdict is honest for the sandbox: it reads the task and the action history the
action-history judge's prompt carries and applies the widgets checker's rule for the two task
kinds kept (`check_click` / `check_link`: the set of buttons, resp. links, clicked is exactly the
one the task names), from the env's feedback lines ("click(3) -> Clicked <button> 'Send'").
Departures: the checker reads the page's own click reports, the stand-in the feedback, so a
click on a tab (also a <button>) counts here and not there; `tasks.kinds` keeps the run to the
kinds whose outcome the feedback shows (a task it cannot read gets a reply without a verdict,
which webrl drops as judge_unparseable, so the report would show it).

Faults (`JudgeFault`): judge_down SIGKILLs the server (connections are refused) until chaos.py
releases it, then starts it again on the same port; judge_slow makes its next N chat requests
answer `delay_s` (> reward.timeout_s) late (`PUT /chaos/delay`). webrl drops a trajectory whose judge call fails after its
retries with the reason "judge_connection_error: ..." / "judge_timeout: ..." (never a 0 reward);
`trajectory_effects` counts drops by that category.

    python benchmarks/chaos_judge.py --port 0     # serve; prints "serving PORT" once it listens
"""
from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Optional

JUDGE_KINDS = ("judge_down", "judge_slow")
JUDGE_MODEL = "sandbox-checker"
JUDGE_TIMEOUT_S = 10.0
"""reward.timeout_s of a chaos run with a judge fault: judge_slow answers later than this."""
GOALS = (  # webrl/envs/sites/widgets/tasks.py gen_level0's goal templates for the two kinds kept
    (re.compile(r'^Click the "(.+)" button\.$'), "button"), (re.compile(r'^Press "(.+)"\.$'), "button"),
    (re.compile(r'^Follow the "(.+)" link\.$'), "a"), (re.compile(r'^Open the "(.+)" page\.$'), "a"))
CLICKED = re.compile(r"""-> Clicked (?:at \([^)]*\) on )?<(button|a)> (?:'([^']*)'|"([^"]*)")""")
"""execute.py's click feedback: `Clicked <tag> 'name'` (click_at: `Clicked at (x, y) on <tag> 'name'`;
the name is repr'd, so double quotes when it holds a single quote)."""
TOAST = "Dismiss"
"""The page's toast button, which the page does not report as a click."""


def judge_overrides(url: str, timeout_s: float = JUDGE_TIMEOUT_S) -> list[str]:
    """The main job's overrides that score it with the judge at `url` (…/v1)."""
    return ["reward.kind=judge", "reward.judge=action_history", f"reward.base_url={url}",
            f"reward.model={JUDGE_MODEL}", f"reward.timeout_s={timeout_s:g}", "tasks.kinds=[click_button,click_link]",
            "tasks.train_levels=[0]", "tasks.eval_levels=[0]"]


def checker_verdict(task: str, actions: str) -> Optional[bool]:
    """The widgets checker's outcome for a click_button / click_link task, from the names the
    feedback says were clicked; None when the task is not one of those."""
    for pattern, tag in GOALS:
        found = pattern.match(task.strip())
        if found:
            clicked = {single or double for t, single, double in CLICKED.findall(actions)
                       if t == tag and (single or double) != TOAST}
            return clicked == {found.group(1)}
    return None


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(part.get("text", "") for part in content if part.get("type") == "text")


def judge_reply(body: dict) -> str:
    """The reply to an action-history judge request (prompts/action_history_v1.txt's user turn)."""
    user = _text(next(m for m in body["messages"] if m["role"] == "user")["content"])
    task = re.search(r"^Task: (.*)$", user, re.M)
    actions = re.search(r"Actions \(with environment feedback\):\n(.*?)\n\nFinal answer:", user, re.S)
    verdict = checker_verdict(task.group(1), actions.group(1)) if task and actions else None
    if verdict is None:
        return "This stand-in judge only reads click_button / click_link tasks of the widgets site."
    return f"Checked the clicks in the feedback against the task.\nVerdict: {'SUCCESS' if verdict else 'NOT SUCCESS'}"


class Handler(BaseHTTPRequestHandler):
    delay_s, slow_left = 0.0, 0  # set on the class: the next `slow_left` chat requests wait `delay_s`
    lock = threading.Lock()

    def _send(self, code: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_PUT(self) -> None:  # /chaos/delay {"seconds": s, "requests": n}: judge_slow
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.lock:
            type(self).delay_s, type(self).slow_left = float(body["seconds"]), int(body["requests"])
        self._send(200, {"delay_s": self.delay_s, "requests": self.slow_left})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.lock:
            slow = self.slow_left > 0
            type(self).slow_left -= slow
        if slow:
            time.sleep(self.delay_s)
        if self.path.rstrip("/") != "/v1/chat/completions":
            return self._send(404, {"error": {"message": f"no route {self.path}"}})
        text = judge_reply(body)
        try:
            self._send(200, {"model": body.get("model", JUDGE_MODEL), "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]})
        except (BrokenPipeError, ConnectionResetError):
            pass  # judge_slow: the client timed out and left before the late reply

    def log_message(self, *args: Any) -> None:
        pass


def serve(port: int) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)  # allow_reuse_address: a restart rebinds
    server.daemon_threads = True
    print(f"serving {server.server_address[1]}", flush=True)
    server.serve_forever()


class JudgeProcess:
    """This file as a server process (started here, stopped here): `url`, `start`, `kill`, `set_delay`."""

    def __init__(self, port: int = 0):
        self.port, self.proc = port, None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, wait_s: float = 30.0) -> None:
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--port", str(self.port)],
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()  # "serving PORT" once bound ("" if it died)
        if not line.startswith("serving "):
            self.proc.wait(timeout=wait_s)
            raise RuntimeError(f"the judge server did not start on port {self.port} (rc {self.proc.returncode})")
        self.port = int(line.split()[1])

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def set_delay(self, seconds: float, requests: int) -> None:
        """The next `requests` chat requests are answered `seconds` late (0, 0: none)."""
        request = urllib.request.Request(self.url.removesuffix("/v1") + "/chaos/delay", method="PUT",
                                         data=json.dumps({"seconds": seconds, "requests": requests}).encode())
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=10) as reply:
            reply.read()


class JudgeFault:
    """judge_down (`slow_s` None: the server killed) or judge_slow (its next `slow_requests`
    chat requests answered `slow_s` late). An `Injector` of `benchmarks/chaos.py`.

    The fault lasts until chaos.py releases it, when the run has logged the iteration it fired in
    (or the run died), or `hold_s` after injection when `hold_s` > 0. Judge calls come only at the
    iteration's scoring, after its collection: a fault timed in seconds from injection would miss
    them on a loaded machine (seen: a 60 s judge_slow ended before the scoring began, nothing
    dropped), so judge_down holds through the scoring, and judge_slow counts requests, not seconds
    (a whole iteration of 15 s replies past a 10 s timeout, each tried 4 times, would stall it)."""

    def __init__(self, judge: JudgeProcess, hold_s: float = 0.0, slow_s: Optional[float] = None,
                 slow_requests: int = 8):
        self.judge, self.hold_s, self.slow_s, self.slow_requests, self.timer = judge, hold_s, slow_s, slow_requests, None
        self.held, self.lock = False, threading.Lock()  # released by the timer or by chaos.py, once

    def inject(self, run_pid: int, rng: Any) -> str:
        until = f"for {self.hold_s:g}s" if self.hold_s > 0 else "until the run logs the iteration"
        if self.slow_s is None:
            self.judge.kill()
            what = f"judge server on port {self.judge.port} killed {until}"
        else:
            self.judge.set_delay(self.slow_s, self.slow_requests)
            what = (f"judge's next {self.slow_requests} replies {self.slow_s:g}s late (reward.timeout_s "
                    f"{JUDGE_TIMEOUT_S:g}) {until}")
        self.held = True
        if self.hold_s > 0:
            self.timer = threading.Timer(self.hold_s, self.release)
            self.timer.start()
        return what

    def release(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        with self.lock:
            if not self.held:
                return
            self.held = False
            if self.slow_s is None:
                self.judge.start()
            else:
                self.judge.set_delay(0.0, 0)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=0)
    serve(parser.parse_args().port)
