"""Train on your own website: serve it, write a Task with a checker, register it, train.

    python examples/custom_site.py                     # a few GRPO iterations, tiny model, CPU
    python examples/custom_site.py --config smoke trainer.iterations=1

Four steps, each a few lines:

1. the site: any web server on 127.0.0.1 (here `http.server`, three buttons; a click loads
   /chosen?color=...). It runs in this process; the env workers (Ray actors) reach it by URL.
2. the task: a `BaseTask` whose `reward(page, answer)` checks the final page (the checker) and
   returns a `TaskReward` (the score and what the checker saw, kept with each trajectory),
   plus a `TaskSource` that draws task instances (`sample(rng)`).
3. registration: `ray.tune.registry.register_env(name, creator)`; the creator returns a
   `WebEnv` whose `tasks` is your source (`webrl.envs.make_env(name)` builds it too).
4. training: `tasks.source=env tasks.env_id=<name>` and `Trainer(config).fit()`. The SFT stage
   records demonstrations from the sandbox sites' oracles, so this example trains RL only.
"""
import argparse
import sys
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from ray.tune.registry import register_env

from webrl.config import ConfigError, load_config
from webrl.envs import WebEnv
from webrl.envs.task import BaseTask, TaskReward, TaskSpec
from webrl.run.config import WebRLConfig
from webrl.run.trainer import Trainer

COLORS = ("red", "green", "blue")
ENV_NAME = "colour-picker"


# -- 1. the site ----------------------------------------------------------------------------------
class ColourSite(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        url = urlparse(self.path)
        if url.path == "/chosen":
            colour = parse_qs(url.query).get("color", [""])[0]
            body = f"<h1>You picked {colour}</h1><a href='/'>back</a>"
        else:
            buttons = "".join(f"<p><a href='/chosen?color={c}'><button>{c}</button></a></p>" for c in COLORS)
            body = f"<h1>Pick a colour</h1>{buttons}"
        data = f"<!doctype html><html><body>{body}</body></html>".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args) -> None:  # keep the training log readable
        pass


def serve_site() -> tuple[ThreadingHTTPServer, str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), ColourSite)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_port}"


# -- 2. the task: goal, start URL and a checker ------------------------------------------------------
class PickColour(BaseTask):
    def reward(self, page, answer) -> TaskReward:
        """1 when the final page is the chosen-colour page of the goal's colour, else 0."""
        url = urlparse(page.url)
        chosen = parse_qs(url.query).get("color", [""])[0]
        success = url.path == "/chosen" and chosen == self.spec.params["color"]
        return TaskReward(1.0 if success else 0.0, {"path": url.path, "chosen": chosen})


@dataclass
class PickColourSource:
    base_url: str

    def sample(self, rng) -> PickColour:
        colour = COLORS[int(rng.integers(len(COLORS)))]
        spec = TaskSpec(id=f"colours/pick-{colour}", goal=f"Click the {colour} button.",
                        start_url=self.base_url + "/", max_steps=3, site="colours", level=0,
                        params={"color": colour})
        return PickColour(spec)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=None, help="preset name (webrl/configs/) or YAML path; none = the embedded default")
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    args = parser.parse_args()
    server, base_url = serve_site()

    # -- 3. register the env: a WebEnv drawing from our task source ------------------------------
    register_env(ENV_NAME, lambda env_config: WebEnv(env_config.get("env"), tasks=PickColourSource(base_url)))

    # -- 4. train on it ------------------------------------------------------------------------
    overrides = ["run.name=colours", "tasks.source=env", f"tasks.env_id={ENV_NAME}", "trainer.stages=[rl]",
                 *args.overrides]
    try:
        config = load_config(WebRLConfig, args.config, overrides)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2
    try:
        Trainer(config).fit()
    finally:
        server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
