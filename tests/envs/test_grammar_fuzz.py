"""The compact grammar through `WebEnv.step`: strings and Actions execute identically, and no
string, however malformed, raises out of `step`."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webrl.actions import ACTION_KINDS, Action, format_compact, parse_compact
from tests.envs.helpers import element_id, make_env, spec
from webrl.envs import safety

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def env(browser_session, fixture_server):
    # a short step limit and 1 s per element action: a fuzzed wait(59) must not stall the run
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(safety, "ACTION_TIMEOUT_S", 1.0)
        env = make_env(browser_session, step_timeout_s=8.0)
        env.reset(options={"task": spec(fixture_server, max_steps=10_000)})
        yield env
        env.close()


def ensure_running(env, fixture_server) -> None:
    # a fresh episode when the last step ended it (answer / stop / infra) or another test left
    # one with the default 15-step limit
    if env.task is None or env.task.spec.max_steps < 10_000:
        env.reset(options={"task": spec(fixture_server, max_steps=10_000)})


def test_string_and_action_forms_execute_the_same(env, fixture_server):
    _, info = env.reset(options={"task": spec(fixture_server)})
    name = element_id(info, "name")
    for action in (Action.type_text('say "hi"\tthere', element=name), Action.scroll("down", 0.25),
                   Action.click_at(5.5, 7), Action("press", text="Tab"), Action("wait", amount=0)):
        text = format_compact(action)
        assert parse_compact(text) == action  # format -> parse is the identity
        obs_a, *_, info_a = env.step(action)
        obs_s, *_, info_s = env.step(text)
        assert info_a["action"] == info_s["action"] == action
        assert obs_a["last_action_error"] == obs_s["last_action_error"] == ""
    assert env.page.input_value("#name") == 'say "hi"\tthere'


CALLS = st.builds(lambda kind, args: f"{kind}({args})", st.sampled_from(ACTION_KINDS + ("clik", "type_")),
                  st.text(alphabet='0123456789,.-" xyabc=truefalsNn\\()', max_size=16))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.one_of(st.text(max_size=40), CALLS, st.binary(max_size=10).map(lambda b: b.decode("latin-1"))))
def test_random_strings_never_raise_from_step(env, fixture_server, text):
    ensure_running(env, fixture_server)
    obs, reward, terminated, truncated, info = env.step(text)
    assert obs in env.observation_space
    parsed = parse_compact(text)
    if not parsed:  # unparsable: reported, episode goes on
        assert obs["last_action_error"].startswith("could not parse the action")
        assert not terminated
        # only an overloaded machine can truncate here, and then as an infra error, never silently
        assert not truncated or info["infra_error"].startswith(("step_time_limit", "page_unresponsive"))
    assert isinstance(reward, float)


def test_non_string_actions_are_errors_not_exceptions(env, fixture_server):
    ensure_running(env, fixture_server)
    for bad in (None, 12, b"click(1)", ["click", 1], {"kind": "fly"}):
        obs, _, terminated, truncated, _ = env.step(bad)
        assert obs["last_action_error"] and not terminated and not truncated
