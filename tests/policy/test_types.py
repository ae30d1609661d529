"""Observation from the env contract, Decision -> Turn -> Observation round trip."""
import numpy as np
import pytest

from tests.policy.helpers import screenshot
from webrl.actions import Action, ParseError
from webrl.policy import Decision, Observation
from webrl.types import Turn, TurnObservation


def env_obs():
    array = np.zeros((20, 30, 3), dtype=np.uint8)
    array[:, :, 0] = 255  # the SoM screenshot: red
    obs = {"screenshot": array, "url": "http://127.0.0.1:8000/", "title": "Home", "goal": "Buy a mug",
           "elements_text": '[0] button "Go"', "feedback": "Succeed: clicked", "last_action_error": "",
           "tabs": "* [0] Home", "step": 3}
    return obs, {"raw_screenshot_png": screenshot(30, 20).data, "elements": []}


def test_from_env_picks_the_screenshot_source():
    obs, info = env_obs()
    raw = Observation.from_env(obs, info, screenshot="raw")
    som = Observation.from_env(obs, info, screenshot="som")
    assert raw.screenshot.data == info["raw_screenshot_png"]
    assert som.screenshot.to_pil().getpixel((0, 0)) == (255, 0, 0) and som.screenshot.size == (30, 20)
    assert Observation.from_env(obs, info, screenshot="none").screenshot is None
    assert (raw.goal, raw.step, raw.tabs) == ("Buy a mug", 3, "* [0] Home")
    with pytest.raises(ValueError, match="screenshot"):
        Observation.from_env(obs, info, screenshot="boxes")


def test_decision_to_turn_and_back():
    obs, info = env_obs()
    o = Observation.from_env(obs, info)
    turn = Decision(Action.click(0), "<tool_call>click(0)</tool_call>", [1, 2], [3, 4], [-0.1, -0.2],
                    images=[o.screenshot]).to_turn(o, policy_version=7)
    assert turn.action == Action.click(0) and turn.parse_error is None and turn.policy_version == 7
    assert Observation.from_turn(turn, "Buy a mug") == o
    # the record: the text fields and the screenshot's (width, height), nothing else set
    assert turn.observation == TurnObservation(url="http://127.0.0.1:8000/", title="Home", step=3,
                                               elements_text='[0] button "Go"', feedback="Succeed: clicked",
                                               tabs="* [0] Home", screenshot_size=[30, 20])
    # a record without a screenshot size rebuilds an observation without a screenshot
    text_only = Observation.from_env(obs, info, screenshot="none")
    assert text_only.to_record().screenshot_size is None
    logged = Turn(images=[o.screenshot], observation=text_only.to_record())
    assert Observation.from_turn(logged, "Buy a mug") == text_only
    bad = Decision(ParseError("no call", "x"), "x").to_turn(o)
    assert bad.action is None and bad.parse_error == "no call"
    assert o.feedback_text == "Succeed: clicked"
    assert Observation(goal="g", feedback="a", last_action_error="b").feedback_text == "a\nError: b"
