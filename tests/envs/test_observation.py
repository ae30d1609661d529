"""Observation pieces: element collection rules in a real page, text list, Set-of-Mark drawing,
spaces; plus the small pure helpers (allowlist, URL normalisation, configs)."""
from __future__ import annotations

import numpy as np
import pytest

from webrl.envs import BrowserConfig, ObservationConfig, SafetyConfig, WebEnvConfig
from webrl.envs.execute import normalize_url
from webrl.envs.observation import (AnyText, draw_set_of_mark, element_line, format_elements_text,
                                    observation_space)
from webrl.envs.safety import Deadline, DomainAllowlist, StepTimeLimit
from tests.envs.helpers import make_env, spec

CONTRACT_KEYS = {"id", "tag", "role", "name", "type", "value", "placeholder", "href", "dom_id",
                 "checked", "options", "selected", "bbox", "in_viewport"}


def element(**overrides):
    base = {"id": 0, "tag": "button", "role": "button", "name": "Add to cart", "type": "", "value": "",
            "placeholder": "", "href": "", "dom_id": "", "checked": None, "options": [], "selected": "",
            "bbox": [2, 10, 5, 4], "in_viewport": True}
    return {**base, **overrides}


@pytest.mark.browser
def test_collection_rules_on_a_page(browser_session, fixture_server):
    env = make_env(browser_session)
    try:
        obs, info = env.reset(options={"task": spec(fixture_server, "elements.html")})
        by_dom = {e["dom_id"]: e for e in info["elements"]}
        assert [e["id"] for e in info["elements"]] == list(range(len(info["elements"])))
        assert all(set(e) == CONTRACT_KEYS for e in info["elements"])
        # hidden, invisible, type=hidden and label without control are not collected; the span
        # with the same box as its link is a duplicate; the smaller nested button is kept
        assert {"hidden", "invisible", "secret", "orphan", "inner"}.isdisjoint(by_dom)
        assert {"plain", "wrap", "card", "nested", "lab", "edit", "below"} <= set(by_dom)
        assert by_dom["plain"]["name"] == "Plain button"  # whitespace collapsed
        assert len(by_dom["long"]["name"]) == 100
        assert by_dom["pw"]["value"] == "*******" and by_dom["pw"]["role"] == "textbox"
        assert by_dom["check"]["checked"] is True and by_dom["aria"]["checked"] is False
        assert (by_dom["sel"]["options"], by_dom["sel"]["selected"]) == (["One", "Two"], "Two")
        assert by_dom["mail"]["placeholder"] == "you@example.com" and by_dom["mail"]["name"] == "Email"
        assert by_dom["wrap"]["href"].endswith("#x") and by_dom["wrap"]["role"] == "link"
        assert by_dom["below"]["in_viewport"] is False and "(offscreen)" in obs["elements_text"]
        # every element N carries data-webrl-id="N" in the page
        marks = env.page.evaluate(
            "Array.from(document.querySelectorAll('[data-webrl-id]'), e => [+e.dataset.webrlId, e.id])")
        assert sorted(marks) == sorted([e["id"], e["dom_id"]] for e in info["elements"])
        assert obs["elements_text"].splitlines()[by_dom["plain"]["id"]] == f'[{by_dom["plain"]["id"]}] button "Plain button"'
    finally:
        env.close()


def test_element_lines():
    assert element_line(element()) == '[0] button "Add to cart"'
    assert element_line(element(id=3, tag="input", role="textbox", type="email", name="Email",
                                value='a"b', placeholder="you@x")) == \
        '[3] textbox "Email" type=email value="a\\"b" placeholder="you@x"'
    assert element_line(element(id=4, tag="input", role="checkbox", type="checkbox", value="on",
                                checked=False, in_viewport=False)) == '[4] checkbox "Add to cart" unchecked (offscreen)'
    assert element_line(element(id=5, tag="select", role="combobox", name="Size", value="M",
                                options=["S", "M"], selected="M")) == \
        '[5] combobox "Size" selected="M" options=["S", "M"]'
    assert element_line(element(id=6, tag="div", role="generic", name="card")) == '[6] div "card"'
    text = format_elements_text([element(), element(id=1, in_viewport=False)], truncated=7, list_offscreen=False)
    assert text == '[0] button "Add to cart"\n... up to 7 more elements not listed (element limit reached)'


def test_set_of_mark_drawing():
    image = np.zeros((40, 30, 3), dtype=np.uint8)
    drawn = draw_set_of_mark(image, [element(bbox=[2, 20, 10, 8]), element(id=1, bbox=[0, 0, 5, 5], in_viewport=False)])
    assert image.sum() == 0  # the input is not modified
    red = np.array([230, 25, 75])  # palette colour of id 0
    # outline corners of the box (x 2..12, y 20..28) carry the colour
    for x, y in ((2, 20), (12, 28), (2, 28), (12, 20)):
        assert (drawn[y, x] == red).all(), (x, y)
    assert (drawn[24, 7] == 0).all()  # inside the box stays untouched (outline only)
    assert (drawn[39, 29] == 0).all() and (drawn[35, 25] == 0).all()  # far away: untouched
    # the label sits above the box (rows < 20) in the same colour; the offscreen element draws nothing
    assert (drawn[:20, 2:12] == red).all(axis=2).any()


def test_spaces():
    space = observation_space(600, 800)
    assert set(space.spaces) == {"screenshot", "url", "title", "goal", "elements_text", "feedback",
                                 "last_action_error", "tabs", "skills", "tools", "step"}
    assert space["screenshot"].shape == (600, 800, 3) and space["screenshot"].dtype == np.uint8
    text = AnyText(min_length=0, max_length=5)
    assert text.contains("") and text.contains("é✓中") and not text.contains("toolong") and not text.contains(3)


def test_domain_allowlist():
    allow = DomainAllowlist(["127.0.0.1:8000", "example.com", "*.shop.test"])
    assert allow.allows_host("127.0.0.1:8000") and not allow.allows_host("127.0.0.1:8001")
    assert allow.allows_host("example.com") and allow.allows_host("www.example.com:443")
    assert not allow.allows_host("badexample.com") and not allow.allows_host("example.com.evil.test")
    assert allow.allows_host("shop.test") and allow.allows_host("a.b.shop.test")
    assert allow.allows_host("user@example.com")  # credentials are not part of the host
    assert DomainAllowlist(["*"]).allows_host("anything.test:1")
    assert allow.check_navigation("about:blank") is None
    assert "only http and https" in allow.check_navigation("file:///etc/passwd")
    assert "only http and https" in allow.check_navigation("chrome://version")
    assert "outside the allowed domains" in allow.check_navigation("http://127.0.0.2:8000/")


def test_normalize_url():
    assert normalize_url("example.com/a") == "http://example.com/a"
    assert normalize_url("127.0.0.1:8000/x") == "http://127.0.0.1:8000/x"
    assert normalize_url("https://a.test") == "https://a.test"
    assert normalize_url("file:///etc/passwd") == "file:///etc/passwd"  # left for the allowlist to refuse
    assert normalize_url("data:text/html,x") == "data:text/html,x"


def test_deadline():
    with pytest.raises(StepTimeLimit, match="past its 0 s limit"):
        Deadline(0).timeout_ms()
    assert 0 < Deadline(10).timeout_ms(cap_s=2.0) <= 2000


def test_configs_validate_and_name_the_field():
    with pytest.raises(ValueError, match="BrowserConfig.viewport must be one of"):
        BrowserConfig(viewport="huge")
    assert BrowserConfig(viewport="1024x768").viewport == "1024x768"
    with pytest.raises(ValueError, match="SafetyConfig.dialog_policy must be one of"):
        SafetyConfig(dialog_policy="ignore")
    with pytest.raises(ValueError, match="SafetyConfig.step_timeout_s must be > 0"):
        SafetyConfig(step_timeout_s=0)
    with pytest.raises(ValueError, match="ObservationConfig.discovery must be one of"):
        ObservationConfig(discovery="css")
    with pytest.raises(ValueError, match=r"WebEnvConfig.safety: unknown keys \['step_timeout'\]"):
        WebEnvConfig.from_dict({"safety": {"step_timeout": 3}})
    config = WebEnvConfig.from_dict({"browser": {"viewport": "cpu"}, "max_steps": 7})
    assert config.browser.viewport == "cpu" and config.max_steps == 7
    assert WebEnvConfig.from_dict(config.to_dict()) == config


def test_repeated_feedback_notes_are_counted():
    from webrl.envs.episode import count_repeats

    notes = ["Blocked image request to a.test", "Dialog alert 'x' accepted", "Blocked image request to a.test"]
    assert count_repeats(notes) == ["Blocked image request to a.test (x2)", "Dialog alert 'x' accepted"]
