"""The one episode runner (webrl/rollout/episode.py) with scripted envs and agents.

Each test works out by hand what the episode must record; the sync and async drivers must give
the same trajectory for the same env and agent (one generator, two drivers).
"""
import asyncio

import pytest

from webrl.actions import Action, ParseError
from webrl.envs.task import BaseTask, TaskSpec
from webrl.envs.worker import EnvStepResult
from webrl.policy.seeds import sub_seed
from webrl.policy.types import Decision, DecisionStats, MarkedObservation
from webrl.rollout.coordinator import run_coroutine
from webrl.rollout.agents import PolicyAgent
from webrl.rollout.episode import Decided, EndEpisode, EpisodeInfraError, EpisodeSpec, run_episode, run_episode_async
from webrl.types import Turn

def _png() -> bytes:
    import numpy as np

    from webrl.envs.observation import encode_png

    return encode_png(np.zeros((6, 8, 3), dtype=np.uint8))


PNG = _png()
ELEMENTS = [{"id": 0, "bbox": [1.4, 2.0, 3.0, 4.0], "role": "button", "name": "Go", "tag": "button"},
            {"id": 1, "bbox": [10, 20, 30, 40], "role": "combobox", "name": "Size", "options": ["S", "M"],
             "selected": "S"}]


class PageEnv:
    """Pages p0, p1, ...: a click moves to the next page, stop ends with reward 1 on page 2; a
    `skill(...)` / `tool(...)` step reports its record in info; `crash_at` step reports an infra error."""

    def __init__(self, crash_at=-1):
        self.page, self.steps, self.crash_at, self.actions = 0, 0, crash_at, []

    def _result(self, reward=0.0, terminated=False, info=None, error=""):
        obs = {"goal": "reach page 2 and stop", "url": f"http://127.0.0.1/p{self.page}", "title": f"P{self.page}",
               "elements_text": f"[0] button Go (page {self.page})", "feedback": f"on p{self.page}",
               "last_action_error": error, "step": self.steps, "screenshot": PNG}
        return EnvStepResult(0, obs, reward, terminated, False, {"elements": ELEMENTS, **(info or {})})

    def reset(self, task):
        self.page, self.steps = 0, 0
        return self._result()

    def step(self, action):
        self.steps += 1
        self.actions.append(action)
        if self.steps == self.crash_at:
            return self._result(info={"infra_error": "renderer crashed"})
        if isinstance(action, ParseError):
            return self._result(error=f"unparseable: {action.message}")
        if action.kind == "click":
            self.page += 1
            return self._result()
        if action.kind == "skill":
            return self._result(info={"skill": {"name": "go", "steps": [{"index": 0, "ok": True}]}})
        if action.kind == "tool":
            return self._result(info={"tool": {"name": "lookup", "ok": True}})
        return self._result(reward=float(self.page == 2), terminated=True,
                            info={"reward_details": {"page": self.page}})


class AsyncPageEnv:
    """The same env behind the async driver's calls."""

    def __init__(self, env):
        self.env = env

    async def __call__(self, call):
        from webrl.rollout.episode import Reset

        await asyncio.sleep(0)
        return self.env.reset(call.task) if isinstance(call, Reset) else self.env.step(call.action)


class Script:
    """Answers actions from a list (a str is unparseable text), version 7, 5 prompt tokens each."""

    def __init__(self, actions):
        self.actions, self.requests = list(actions), []

    def __call__(self, request, result):
        self.requests.append(request)
        a = self.actions.pop(0)
        if isinstance(a, EndEpisode):
            return a
        parsed = a if isinstance(a, Action) else ParseError("no call", a)
        return Decided(Decision(parsed=parsed, response_text=str(a), prompt_ids=[1, 2], response_ids=[3],
                                logprobs=[-0.5], stats=DecisionStats(prompt_tokens=5, cached_tokens=2)), 7)


def task():
    return BaseTask(TaskSpec(id="widgets/l0/train/click/3", goal="reach page 2 and stop", site="widgets",
                             start_url="http://127.0.0.1/p0"))


def test_an_episode_records_every_turn_and_trajectory_field():
    env, agent = PageEnv(), Script([Action.click(0), Action.click(1), Action.stop()])
    ep = run_episode(EpisodeSpec(task(), group_id="g", max_turns=5), env, agent)
    t = ep.trajectory
    assert [turn.action.kind for turn in t.turns] == ["click", "click", "stop"]
    assert t.info.task_reward == 1.0 and t.info.terminated and not t.info.truncated
    assert t.info.checker_details == {"page": 2} and t.info.site == "widgets" and t.info.start_url.endswith("/p0")
    first = t.turns[0]
    assert (first.prompt_ids, first.response_ids, first.logprobs, first.policy_version) == ([1, 2], [3], [-0.5], 7)
    # the observation record keeps the compact elements (bbox rounded, options only on the select)
    assert first.observation.elements[0] == {"id": 0, "bbox": [1, 2, 3, 4], "role": "button", "tag": "button",
                                             "name": "Go"}
    assert first.observation.elements[1]["options"] == ["S", "M"] and first.observation.action_bbox == [1.4, 2, 3, 4]
    assert t.turns[1].observation.action_bbox == [10, 20, 30, 40] and t.turns[2].observation.action_bbox is None
    # feedback is what the env said after each turn's action
    assert [turn.feedback for turn in t.turns] == ["on p1", "on p2", "on p2"]
    assert (ep.env_steps, ep.prompt_tokens, ep.cached_tokens, len(ep.results)) == (3, 15, 6, 3)
    # the agent saw Set-of-Mark elements, the screenshot, and past turns
    assert isinstance(agent.requests[0].observation, MarkedObservation)
    assert agent.requests[0].observation.screenshot.data == PNG and first.observation.screenshot_size == [8, 6]
    assert [len(r.history) for r in agent.requests] == [0, 1, 2] and agent.requests[2].request_id == "g/0/2"
    assert {r.seed for r in agent.requests} == {None}  # no episode seed: unseeded decisions
    seeded = Script([Action.click(0), Action.click(1), Action.stop()])
    run_episode(EpisodeSpec(task(), group_id="g", member=1, seed=9, max_turns=5), PageEnv(), seeded)
    assert [r.seed for r in seeded.requests] == [sub_seed(9, t) for t in range(3)]
    assert seeded.requests[1].request_id == "g/1/1"


def test_history_keeps_images_only_on_the_last_turns():
    agent = Script([Action.click(0), Action.click(1), Action.stop()])
    run_episode(EpisodeSpec(task(), max_turns=5, keep_history_images=1), PageEnv(), agent)
    # turn images come from the decision (none here): give them some to see the rule
    agent2 = Script([Action.click(0), Action.click(1), Action.stop()])
    real = agent2.__call__

    def with_images(request, result):
        d = real(request, result)
        d.decision.images.append(request.observation.screenshot)
        return d
    run_episode(EpisodeSpec(task(), max_turns=5, keep_history_images=1), PageEnv(), with_images)
    last = agent2.requests[2]
    assert [len(turn.images) for turn in last.history] == [0, 1]


def test_skill_and_tool_records_and_the_turn_limit():
    ep = run_episode(EpisodeSpec(task(), max_turns=2), PageEnv(),
                     Script([Action("skill", text="go"), Action("tool", text="lookup")]))
    skill, tool = ep.trajectory.turns
    assert skill.skill_steps == [{"index": 0, "ok": True}] and skill.tool_call == {}
    assert tool.tool_call == {"name": "lookup", "ok": True}
    # the limit ended it: truncated, the checker never reached (reward 0 as the env did not end)
    assert ep.trajectory.info.truncated and ep.trajectory.info.task_reward == 0.0


def test_parse_failures_in_a_row_stop_the_episode_and_the_env_sees_the_error():
    env = PageEnv()
    ep = run_episode(EpisodeSpec(task(), max_turns=9, stop_after_parse_failures=2), env,
                     Script(["oops", Action.click(0), "bad", "worse", Action.stop()]))
    t = ep.trajectory
    assert len(t.turns) == 4 and t.info.stopped_by == "parse_failures"
    assert isinstance(env.actions[0], ParseError) and t.turns[0].parse_error == "no call"
    assert t.turns[0].feedback == "on p0\nunparseable: no call"


def test_an_agent_can_end_the_episode_with_a_reason():
    ep = run_episode(EpisodeSpec(task(), max_turns=5), PageEnv(), Script([Action.click(0), EndEpisode("stalled")]))
    assert len(ep.trajectory.turns) == 1 and ep.trajectory.info.stopped_by == "stalled"


def test_infra_errors_raise_for_the_caller_to_retry():
    with pytest.raises(EpisodeInfraError, match="renderer crashed"):
        run_episode(EpisodeSpec(task(), max_turns=5), PageEnv(crash_at=2), Script([Action.click(0)] * 3))


def _prefix():
    return [Turn(action=Action.click(0), response_text="click(0)", policy_version=2),
            Turn(parse_error="garbled", response_text="??", policy_version=2)]


def test_a_prefix_is_replayed_then_the_first_decision_given_is_taken():
    env = PageEnv()
    refined = Decided(Decision(parsed=Action.click(0), response_text="click(0)", response_ids=[9]), 4, "dyna_refine")
    agent = Script([Action.stop()])
    ep = run_episode(EpisodeSpec(task(), max_turns=5, prefix=_prefix(), first=refined,
                                 expect=("http://127.0.0.1/p1", "P1", "[0] button Go (page 1)")), env, agent)
    t = ep.trajectory
    # replay: click, the parse error; then the refined click; then the agent's stop on page 2
    assert isinstance(env.actions[1], ParseError) and env.actions[1].message == "garbled"
    assert [turn.decided_by for turn in t.turns] == ["generator", "generator", "dyna_refine", "generator"]
    assert t.turns[2].response_ids == [9] and t.turns[2].policy_version == 4 and t.info.task_reward == 1.0
    assert ep.replayed["url"] == "http://127.0.0.1/p1" and ep.diverged == "" and len(agent.requests) == 1
    assert len(agent.requests[0].history) == 3


def test_a_replay_that_reaches_another_page_is_dropped_as_diverged():
    ep = run_episode(EpisodeSpec(task(), max_turns=5, prefix=_prefix(), expect=("http://127.0.0.1/p9", "P9", "x")),
                     PageEnv(), Script([]))
    assert ep.diverged and ep.trajectory.status == "dropped" and ep.trajectory.drop_reason.startswith("diverged")
    ep = run_episode(EpisodeSpec(task(), max_turns=5, expect=("http://127.0.0.1/p9", "P9", "x")), PageEnv(), Script([]))
    assert ep.diverged == "the reset reached another page than the recorded one"  # no prefix: the reset's page
    stop_early = [Turn(action=Action.stop()), Turn(action=Action.click(0))]
    ep = run_episode(EpisodeSpec(task(), max_turns=5, prefix=stop_early), PageEnv(), Script([]))
    assert "ended the episode at its step 0" in ep.diverged


def test_a_replay_of_a_whole_episode_ends_with_its_outcome():
    whole = [Turn(action=Action.click(0)), Turn(action=Action.click(0)), Turn(action=Action.stop())]
    ep = run_episode(EpisodeSpec(task(), max_turns=3, prefix=whole), PageEnv(), Script([]))
    assert ep.diverged == "" and ep.trajectory.info.task_reward == 1.0 and len(ep.trajectory.turns) == 3


def test_the_async_driver_records_the_same_episode():
    actions = [Action.click(0), "oops", Action.click(1), Action.stop()]
    sync = run_episode(EpisodeSpec(task(), group_id="g", max_turns=6), PageEnv(), Script(actions)).trajectory
    script = Script(actions)

    async def decide(call):
        return script(call.request, call.result)
    asynced = run_coroutine(run_episode_async(EpisodeSpec(task(), group_id="g", max_turns=6),  # a fresh loop also
                                              AsyncPageEnv(PageEnv()), decide)).trajectory  # under Playwright's
    strip = (lambda t: [(turn.action, turn.parse_error, turn.feedback, turn.observation.to_dict()) for turn in t.turns])
    assert strip(sync) == strip(asynced) and sync.info.task_reward == asynced.info.task_reward == 1.0


def test_policy_agent_and_bare_decisions():
    class Policy:
        def act(self, requests):
            return [Decision(parsed=Action.stop(), response_text="stop()") for _ in requests]
    ep = run_episode(EpisodeSpec(task(), max_turns=3), PageEnv(), PolicyAgent(Policy(), version=5))
    assert ep.trajectory.turns[0].policy_version == 5
    ep = run_episode(EpisodeSpec(task(), max_turns=3), PageEnv(),
                     lambda request, result: Decision(parsed=Action.stop(), response_text="stop()"))
    assert ep.trajectory.turns[0].policy_version == -1
    with pytest.raises(TypeError, match="must answer"):
        run_episode(EpisodeSpec(task(), max_turns=3), PageEnv(), lambda request, result: "stop()")


def test_bad_specs_are_refused():
    with pytest.raises(ValueError, match="screenshot"):
        EpisodeSpec(task(), screenshot="png")
    with pytest.raises(ValueError, match="no room"):
        EpisodeSpec(task(), max_turns=1, prefix=_prefix())
