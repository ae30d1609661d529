"""EnvWorker: several slots on one browser stay isolated; screenshots travel as PNG; Ray shell."""
from __future__ import annotations

import tempfile

import numpy as np
import pytest

from webrl.envs import EnvWorker, EnvWorkerConfig
from webrl.envs.observation import decode_png
from tests.envs.helpers import element_id, spec

SMALL = {"viewport": "cpu"}


@pytest.mark.browser
def test_slots_share_a_browser_but_not_state(fixture_server):
    worker = EnvWorker(EnvWorkerConfig(num_slots=3, threads=1, **SMALL))  # one browser, inline
    try:
        results = [worker.reset(slot, options={"task": spec(fixture_server)}) for slot in range(3)]
        assert [r.slot for r in results] == [0, 1, 2]
        assert all(env.session is worker.session for env in worker.envs)  # one Chromium
        page0, page1 = worker.envs[0].page, worker.envs[1].page
        page0.evaluate("localStorage.setItem('k', 'slot0'); document.cookie = 'c=slot0'")
        assert page1.evaluate("localStorage.getItem('k')") is None  # separate contexts
        assert page1.evaluate("document.cookie") == ""
        # an action in slot 0 changes slot 0 only
        step = worker.step(0, f"click({element_id(results[0].info, 'btn')})")
        assert step.observation["feedback"] == "Clicked <button> 'Press me'"
        assert page0.inner_text("#out") == "clicked 1" and page1.inner_text("#out") == "nothing yet"
        # ending slot 1's episode leaves slot 2 running
        assert worker.step(1, "stop()").terminated
        assert worker.step(2, "wait(0)").observation["step"] == 1
        # a new episode in slot 0 starts from a clean context
        worker.reset(0, options={"task": spec(fixture_server)})
        assert worker.envs[0].page.evaluate("localStorage.getItem('k')") is None
    finally:
        worker.close()
    assert not worker.session.is_alive()


@pytest.mark.browser
def test_observation_screenshot_is_png_of_the_obs_array(fixture_server):
    worker = EnvWorker({"num_slots": 1, **SMALL}, include_raw_screenshot=True)
    try:
        result = worker.reset(0, options={"task": spec(fixture_server)})
        shot = result.observation["screenshot"]
        assert isinstance(shot, bytes) and shot[:8] == b"\x89PNG\r\n\x1a\n"
        image = decode_png(shot)
        assert image.shape == (600, 800, 3)
        raw = decode_png(result.info["raw_screenshot_png"])
        # same page, boxes drawn on one of them only: pixels differ on the box outlines
        differing = np.any(image != raw, axis=2)
        x, y, w, h = result.info["elements"][0]["bbox"]
        assert differing[y:y + h + 1, x:x + w + 1].any() and 0 < differing.mean() < 0.2
        env = worker.envs[0]
        assert np.array_equal(image, env._last_obs["screenshot"])  # lossless
        assert set(result.observation) == set(env.observation_space.spaces)
    finally:
        worker.close()


def test_worker_config_validation():
    with pytest.raises(ValueError, match=r"num_slots \(env.num_slots\) must be in 1..256"):
        EnvWorkerConfig(num_slots=0)
    with pytest.raises(ValueError, match="BrowserConfig.viewport must be one of"):
        EnvWorkerConfig(viewport="huge")


@pytest.mark.ray
@pytest.mark.browser
@pytest.mark.slow
def test_ray_actor_shell(run_dir, fixture_server):
    import ray

    from webrl.envs import make_env_worker_actor
    from webrl.run.ray_local import start_local_ray

    start_local_ray(2, tempfile.mkdtemp(prefix="ray", dir=run_dir))  # on loopback, retried on a loaded box
    try:
        actor = make_env_worker_actor({"num_slots": 2, "threads": 1, **SMALL}, num_cpus=1, max_restarts=1)
        assert ray.get(actor.ping.remote(), timeout=120)
        first = ray.get(actor.reset.remote(0, options={"task": spec(fixture_server)}), timeout=120)
        ray.get(actor.reset.remote(1, options={"task": spec(fixture_server, "page2.html")}), timeout=120)
        step = ray.get(actor.step.remote(0, f"click({element_id(first.info, 'btn')})"), timeout=120)
        assert step.observation["feedback"] == "Clicked <button> 'Press me'" and step.slot == 0
        assert decode_png(step.observation["screenshot"]).shape == (600, 800, 3)
        other = ray.get(actor.step.remote(1, "answer(\"done\")"), timeout=120)
        assert other.terminated and other.info["needs_judge"] is True
        ray.get(actor.close.remote(), timeout=120)
    finally:
        ray.shutdown()
