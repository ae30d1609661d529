"""Registration and `check_env`: webrl/LiveWeb-v0 in Gymnasium, user envs via Ray Tune's registry."""
from __future__ import annotations

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

import webrl.envs
from webrl.envs import LIVE_WEB_ID, WebEnv, make_env, register_envs
from tests.envs.helpers import small_config, spec


def test_import_registers_live_web_and_is_idempotent():
    assert LIVE_WEB_ID in gymnasium.registry
    assert register_envs() == [LIVE_WEB_ID] and register_envs() == [LIVE_WEB_ID]
    assert webrl.envs.make_env is make_env


def test_unknown_name_names_both_registries():
    with pytest.raises(KeyError, match="Ray Tune's registry .* or Gymnasium's"):
        make_env("nobody/Nothing-v0")


@pytest.mark.browser
def test_check_env_live_web(fixture_server):
    env = make_env(LIVE_WEB_ID, {"goal": "Press the button", "start_url": fixture_server.url("basic.html"),
                                 "config": small_config()})
    try:
        assert isinstance(env.unwrapped, WebEnv)
        check_env(env.unwrapped)  # spaces, seeded reset/step determinism, close twice
    finally:
        env.close()


@pytest.mark.browser
def test_check_env_openwebrl_viewport(fixture_server):
    """The default 1280x1000 viewport: the space and the screenshot agree. The live-web network
    policy counts loopback as internal: the fixture server's 127.0.0.1 stands in for a public host."""
    stand_in = {"safety": {"subresource_policy": "public", "network": {"public_stand_ins": ["127.0.0.1/32"]}}}
    env = make_env(LIVE_WEB_ID, {"goal": "g", "start_url": fixture_server.url("page2.html"), "config": stand_in})
    try:
        obs, info = env.reset(seed=1)
        assert obs["screenshot"].shape == (1000, 1280, 3) == env.observation_space["screenshot"].shape
        assert obs in env.observation_space
        assert info["task_id"] == "liveweb" and obs["goal"] == "g"
    finally:
        env.close()


def test_live_web_env_refuses_an_internal_start_page_before_opening_it(fixture_server):
    env = make_env(LIVE_WEB_ID, {"goal": "g", "start_url": fixture_server.url("page2.html")})
    try:
        with pytest.raises(ValueError, match=r"start_url http://127.0.0.1:\d+/page2.html is not allowed: 127.0.0.1 "
                                             r"is an internal address \(safety.network.internal_networks\)"):
            env.reset(seed=1)
    finally:
        env.close()


def _site_creator(env_config):
    """A user's env creator as Ray Tune stores it (pickled: module-level, no captured browser)."""
    env = WebEnv(small_config())
    env.created_with = dict(env_config)
    return env


@pytest.mark.ray
def test_make_env_finds_ray_tune_registrations(fixture_server):
    from ray.tune.registry import register_env

    register_env("webrl-test/site-v0", _site_creator)
    env = make_env("webrl-test/site-v0", {"anything": 1})
    try:
        assert isinstance(env, WebEnv) and env.created_with == {"anything": 1}
        obs, _ = env.reset(options={"task": spec(fixture_server)})
        assert obs["title"] == "Basic fixture"
    finally:
        env.close()
