"""Observations of sandbox pages show a stable origin, not the port the site server bound: the
same task gives the same prompt text in every run (before, 2 of 48 greedy decisions changed
with the port digits), and URLs the agent types on the shown origin reach the real server."""

import pytest

from tests.helpers import free_port
from webrl.envs import WebEnv
from webrl.envs.sites import server
from webrl.envs.sites.source import make_task
from webrl.envs.task import OriginAlias

TEXT_FIELDS = ("url", "title", "goal", "elements_text", "feedback", "last_action_error", "tabs")


def test_show_replaces_exactly_the_real_origin():
    alias = OriginAlias(real="http://127.0.0.1:4198", shown="http://sandbox.test")
    text = "Opened http://127.0.0.1:4198/shop/?q=1; other http://127.0.0.1:41989/x; end http://127.0.0.1:4198"
    assert alias.show(text) == ("Opened http://sandbox.test/shop/?q=1; other http://127.0.0.1:41989/x; "
                                "end http://sandbox.test")


def test_resolve_maps_only_urls_on_the_shown_origin():
    alias = OriginAlias(real="http://127.0.0.1:4198", shown="http://sandbox.test")
    assert alias.resolve("http://sandbox.test/shop?q=1") == "http://127.0.0.1:4198/shop?q=1"
    assert alias.resolve("http://sandbox.test") == "http://127.0.0.1:4198"
    assert alias.resolve("http://sandbox.test#top") == "http://127.0.0.1:4198#top"
    for untouched in ("http://sandbox.testing/", "https://sandbox.test/", "http://127.0.0.2/x?u=http://sandbox.test"):
        assert alias.resolve(untouched) == untouched


def test_alias_of_a_url_takes_its_scheme_and_host_port():
    alias = OriginAlias.of("http://127.0.0.1:4198/shop/item?id=3#top", "http://sandbox.test")
    assert alias == OriginAlias(real="http://127.0.0.1:4198", shown="http://sandbox.test")
    assert OriginAlias.of("https://127.0.0.2/x", "http://s.test").real == "https://127.0.0.2"


def _text(obs: dict) -> dict:
    return {k: obs[k] for k in TEXT_FIELDS}


@pytest.mark.browser
def test_sandbox_observation_text_does_not_depend_on_the_server_port(browser_session):
    env = WebEnv({"browser": {"viewport": "640x480"}}, session=browser_session)
    seen = []
    try:
        for _ in range(2):
            server.stop_server()
            real = server.ensure_server(port=free_port())
            task = make_task("widgets", 0, "train", seed=11)
            obs, info = env.reset(options={"task": task})
            assert env.page.url.startswith(real + "/")
            for field in TEXT_FIELDS:
                assert real not in obs[field], field
            assert obs["url"].startswith(server.SHOWN_ORIGIN + "/")
            assert f"Opened {server.SHOWN_ORIGIN}/" in obs["feedback"]
            seen.append((real, _text(obs)))
    finally:
        env.close()
        server.stop_server()
        server.ensure_server()
    (real_a, text_a), (real_b, text_b) = seen
    assert real_a != real_b and text_a == text_b


@pytest.mark.browser
def test_goto_on_the_shown_origin_reaches_the_real_server(browser_session):
    task = make_task("widgets", 0, "train", seed=12)
    env = WebEnv({"browser": {"viewport": "640x480"}}, session=browser_session)
    try:
        env.reset(options={"task": task})
        real = task.url_alias().real
        obs, reward, terminated, truncated, info = env.step(f'goto("{server.SHOWN_ORIGIN}/widgets/?from=agent")')
        assert obs["last_action_error"] == "" and not truncated
        assert env.page.url == real + "/widgets/?from=agent"
        assert obs["url"] == server.SHOWN_ORIGIN + "/widgets/?from=agent"
        assert real not in obs["feedback"] and real not in obs["tabs"]
    finally:
        env.close()
