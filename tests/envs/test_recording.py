"""Record a live-style episode to a HAR, stop the site, replay it (webrl.envs.recording).

The site is a folder served on 127.0.0.1: a home page with a stylesheet, a 200x100 image, a link
to a second page and an image on 127.0.0.2 that the allowlist blocks (so the blocking guard is
exercised in both runs).
"""
from __future__ import annotations

import io
import json
import os

import numpy as np
import pytest
from PIL import Image

from webrl.actions import Action
from webrl.envs import TaskSpec, WebEnv, WebEnvConfig
from webrl.envs.browser import InfraError
from webrl.envs.task import BaseTask
from webrl.envs.worker import EnvStepResult
from webrl.policy.types import Decision
from webrl.types.records import TrajectoryInfo
from webrl.rollout import InferenceConfig, InferenceWorker, RolloutConfig, RolloutCoordinator
from webrl.envs.recording import RecordingConfig, RecordingError, find_recording, recording_file_name
from tests.envs.helpers import element_id
from tests.plugins.browser import start_http_server

HOME = """<html><head><title>Home</title><link rel="stylesheet" href="style.css"></head>
<body><h1>Home</h1><img src="banner.png" width="200" height="100">
<p><a id="next" href="page2.html">Next page</a></p>
<img src="http://127.0.0.2:9/tracker.png" width="1" height="1"></body></html>"""
PAGE2 = """<html><head><title>Second</title><link rel="stylesheet" href="style.css"></head>
<body><h1>Second</h1><p id="text">second page</p><a id="back" href="index.html">Home</a></body></html>"""
ACTIONS = ("click(NEXT)", 'answer("done")')


def _png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), rgb).save(out, format="PNG")
    return out.getvalue()


def _config(mode: str = "off", folder: str = "") -> WebEnvConfig:
    return WebEnvConfig.from_dict({"browser": {"viewport": "cpu"},
                                   "recording": {"mode": mode, "dir": folder}})


def _run(env: WebEnv, spec: TaskSpec) -> list[tuple[dict, dict]]:
    """reset, click the "Next page" link, answer: (obs, info) of each of the three."""
    obs, info = env.reset(options={"task": spec})
    steps = [(obs, info)]
    for action in ACTIONS:
        action = action.replace("NEXT", str(element_id(info, "next"))) if "NEXT" in action else action
        obs, _, terminated, truncated, info = env.step(action)
        steps.append((obs, info))
    assert terminated and not truncated
    return steps


def _elements(info: dict) -> list[tuple]:
    return [(e["id"], e["role"], e["name"], tuple(e["bbox"])) for e in info["elements"]]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, browser_session):
    """Record one episode of the site, then stop the site: (recordings folder, spec, steps)."""
    site = tmp_path_factory.mktemp("site")
    (site / "index.html").write_text(HOME)
    (site / "page2.html").write_text(PAGE2)
    (site / "style.css").write_text("body { background: #ccddee; } h1 { color: #aa0000; }")
    (site / "banner.png").write_bytes(_png(200, 100, (255, 0, 0)))
    folder = str(tmp_path_factory.mktemp("recordings"))
    server = start_http_server(site)
    spec = TaskSpec(id="live/home page?", goal="open the second page", start_url=server.url("index.html"))
    env = WebEnv(_config("record", folder), session=browser_session)
    try:
        steps = _run(env, spec)
    finally:
        env.close()
        server.stop()
    return folder, spec, steps


@pytest.mark.browser
def test_an_episode_records_one_har_file_named_after_its_task(recorded):
    folder, spec, steps = recorded
    path = steps[-1][1]["recording"]
    # "live/home page?" is not a safe file name: its safe characters plus a hash of the id
    assert os.path.dirname(path) == folder and os.listdir(folder) == [os.path.basename(path)]
    assert os.path.basename(path).startswith(recording_file_name(spec.id) + ".")
    assert recording_file_name(spec.id).startswith("live_home_page-")
    urls = [e["request"]["url"] for e in json.load(open(path))["log"]["entries"]]
    for page in ("index.html", "style.css", "banner.png", "page2.html"):
        assert spec.start_url.replace("index.html", page) in urls
    assert all(step[1]["recording_missing"] == 0 for step in steps)


@pytest.mark.browser
def test_a_replay_without_the_site_sees_what_the_recording_saw(recorded, browser_session):
    folder, spec, recorded_steps = recorded
    env = WebEnv(_config("replay", folder), session=browser_session)
    try:
        replayed_steps = _run(env, spec)
    finally:
        env.close()
    assert len(replayed_steps) == len(recorded_steps) == 3
    for (obs_a, info_a), (obs_b, info_b) in zip(recorded_steps, replayed_steps):
        assert _elements(info_b) == _elements(info_a) and info_a["elements"]
        assert (obs_b["url"], obs_b["title"], obs_b["feedback"]) == (obs_a["url"], obs_a["title"], obs_a["feedback"])
        # The same Chromium renders the same bytes, so the pixels should match exactly; 1/255 of
        # slack covers raster/anti-aliasing jitter. A lost stylesheet moves the mean by ~34 (the
        # background turns white) and the lost banner by ~7 (20000 of 480000 pixels turn red).
        diff = np.abs(obs_a["screenshot"].astype(np.int16) - obs_b["screenshot"].astype(np.int16))
        assert diff.mean() <= 1.0
        assert info_b["recording_missing"] == 0 and info_b["recording"] == recorded_steps[-1][1]["recording"]
    # the blocked tracker was blocked by the safety guard in both runs, with its note
    assert "Blocked image request to 127.0.0.2:9" in replayed_steps[0][0]["feedback"]
    assert replayed_steps[1][0]["title"] == "Second"


@pytest.mark.browser
def test_a_request_the_recording_lacks_is_aborted_and_reported(recorded, browser_session):
    folder, spec, _ = recorded
    missing = spec.start_url.replace("index.html", "never-visited.html")
    env = WebEnv(_config("replay", folder), session=browser_session)
    try:
        env.reset(options={"task": spec})
        obs, reward, terminated, truncated, info = env.step(f'goto("{missing}")')
        assert not terminated and not truncated and "infra_error" not in info
        assert f"Not in the recording, aborted: GET {missing}" in obs["feedback"]
        assert obs["last_action_error"]  # the navigation failed
        assert info["recording_missing"] == 1
        obs, *_ = env.step(f'goto("{spec.start_url}")')  # the recorded page still replays
        assert obs["title"] == "Home"
    finally:
        env.close()


def _write_unusable(folder, spec: TaskSpec, good_har: str) -> dict[str, tuple[TaskSpec, str]]:
    """Task id -> (task, words the reset error must contain), one task per kind of bad file."""
    text = open(good_har).read()
    other = {"log": {"entries": [{"request": {"method": "GET", "url": "http://127.0.0.3:1/", "headers": []},
                                  "response": {"status": 200, "headers": [], "content": {"text": "x"}}}]}}
    files = {"truncated": text[: len(text) // 2], "not-a-har": json.dumps({"entries": []}),
             "other-site": json.dumps(other)}
    for name, content in files.items():
        (folder / f"{name}.har").write_text(content)
    reasons = {"truncated": "is not valid JSON", "not-a-har": "is not a HAR file",
               "other-site": "has no response for the entry URL", "absent": "no recording of task"}
    return {name: (TaskSpec(id=name, goal=spec.goal, start_url=spec.start_url), reason)
            for name, reason in reasons.items()}


@pytest.mark.browser
def test_unusable_recordings_fail_the_reset_clearly_and_the_next_episode_works(recorded, browser_session,
                                                                                tmp_path):
    folder, spec, steps = recorded
    bad = _write_unusable(tmp_path, spec, steps[-1][1]["recording"])
    good = os.path.join(tmp_path, recording_file_name(spec.id) + ".har")
    with open(steps[-1][1]["recording"], "rb") as source, open(good, "wb") as target:
        target.write(source.read())
    env = WebEnv(_config("replay", str(tmp_path)), session=browser_session)
    try:
        for name, (task, reason) in bad.items():
            with pytest.raises(InfraError, match="RecordingError") as raised:
                env.reset(options={"task": task})
            assert reason in str(raised.value) and name in str(raised.value)
            obs, info = env.reset(options={"task": spec})  # the next episode replays normally
            assert obs["title"] == "Home" and info["recording"] == good
    finally:
        env.close()


@pytest.mark.browser
def test_recording_off_adds_nothing_to_the_episode(recorded, browser_session, tmp_path):
    (tmp_path / "index.html").write_text("<title>Plain</title><p>plain</p>")
    server = start_http_server(tmp_path)
    env = WebEnv(_config(), session=browser_session)
    try:
        obs, info = env.reset(options={"task": TaskSpec(id="plain", goal="g", start_url=server.url("index.html"))})
        assert obs["title"] == "Plain" and "recording" not in info and "recording_missing" not in info
        assert env.task is not None and env._episode.recording is None
    finally:
        env.close()
        server.stop()


@pytest.mark.parametrize("values, message", [
    ({"mode": "play"}, "RecordingConfig.mode must be one of ('off', 'record', 'replay'), got 'play'"),
    ({"mode": "off", "dir": "/tmp/x"}, "RecordingConfig.dir='/tmp/x' does nothing with mode 'off'"),
    ({"mode": "replay"}, "RecordingConfig.dir must name a folder with mode 'replay'"),
    ({"mode": "record", "dir": 3}, "RecordingConfig.dir must be a string, got 3"),
])
def test_recording_config_names_the_bad_key(values, message):
    with pytest.raises(ValueError) as raised:
        RecordingConfig(**values)
    assert message in str(raised.value)


def test_an_unknown_recording_key_is_named():
    with pytest.raises(ValueError, match=r"WebEnvConfig.recording: unknown keys \['folder'\]"):
        WebEnvConfig.from_dict({"recording": {"mode": "record", "folder": "x"}})


def test_file_names_are_safe_and_distinct():
    assert recording_file_name("shop-12.v2") == "shop-12.v2"  # already safe: kept as it is
    slash, underscore = recording_file_name("a/b"), recording_file_name("a_b")
    assert slash.startswith("a_b-") and underscore == "a_b" and slash != underscore
    assert recording_file_name("../../etc") == recording_file_name("../../etc")
    assert "/" not in recording_file_name("../../etc") and not recording_file_name("../../etc").startswith(".")


def test_find_recording_prefers_the_plain_name_and_refuses_a_choice(tmp_path):
    (tmp_path / "t.1a2b3c4d.har").write_text("{}")
    assert find_recording(str(tmp_path), "t") == str(tmp_path / "t.1a2b3c4d.har")  # the only one
    (tmp_path / "t.9f9f9f9f.har").write_text("{}")
    with pytest.raises(RecordingError, match=r"2 recordings of task 't'.*t\.1a2b3c4d\.har, t\.9f9f9f9f\.har"):
        find_recording(str(tmp_path), "t")
    (tmp_path / "t.har").write_text("{}")
    assert find_recording(str(tmp_path), "t") == str(tmp_path / "t.har")


class _RecordedEnv:
    """An env stand-in whose final step reports the episode's recording, as `WebEnv` does."""

    async def reset(self, slot, seed, options):
        return EnvStepResult(slot, {"goal": "g", "step": 0}, 0.0, False, False,
                             {"elements": [], "recording": "/runs/a.1a2b3c4d.har", "recording_missing": 0})

    async def step(self, slot, action):
        return EnvStepResult(slot, {"goal": "g", "step": 1}, 1.0, True, False,
                             {"elements": [], "recording": "/runs/a.1a2b3c4d.har", "recording_missing": 2})


class _StopEngine:
    def act(self, requests):
        return [Decision(parsed=Action.stop(), response_text="stop()") for _ in requests]

    def load_weights(self, weights):
        pass


class _Inference:
    def __init__(self, worker):
        self.worker = worker

    async def act_one(self, request):
        return await self.worker.act_one(request)


def test_the_trajectory_log_names_the_episode_recording():
    worker = InferenceWorker(_StopEngine(), InferenceConfig(batch_window_s=0.01, max_batch_size=2))
    coordinator = RolloutCoordinator([(_RecordedEnv(), 0)], [_Inference(worker)],
                                     RolloutConfig(group_size=1, max_turns=2, retry_backoff_s=0.01))
    task = BaseTask(TaskSpec(id="a", goal="g", start_url="http://127.0.0.1/"))
    (trajectory,), _ = coordinator.collect([task])
    assert trajectory.info.recording == "/runs/a.1a2b3c4d.har"
    assert TrajectoryInfo.from_dict(trajectory.info.to_dict()).recording == "/runs/a.1a2b3c4d.har"
    with pytest.raises(ValueError, match="TrajectoryInfo.recording must be a string, got None"):
        TrajectoryInfo(recording=None)


class _Request:
    def __init__(self, url, navigation):
        self.url, self._navigation = url, navigation

    def is_navigation_request(self):
        return self._navigation


def test_a_replay_never_hands_an_off_site_subresource_to_a_guard_that_would_fetch_it():
    from webrl.envs.recording import ReplayRoute
    from webrl.envs.safety import DomainAllowlist

    allowlist = DomainAllowlist(("shop.test",))
    cdn, page = _Request("https://cdn.other.test/a.css", False), _Request("https://other.test/", True)
    for policy, expected in (("allowlist", (True, True)), ("any", (False, True)), ("public", (False, True))):
        route = ReplayRoute(None, allowlist, policy, None)
        # off-site subresource: only "allowlist" refuses it without fetching; under "any" and
        # "public" the replay serves it from the recording or aborts it as missing
        assert (route._guard_blocks(cdn), route._guard_blocks(page)) == expected, policy
    assert not ReplayRoute(None, allowlist, "public", None)._guard_blocks(_Request("https://shop.test/x", True))
