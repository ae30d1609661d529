"""In-process agents for the episode runner (`run_episode`'s `Agent`): `PolicyAgent` (a `Policy`),
`OracleAgent` (the task's scripted oracle), and `action_decision`, the `Decision` of an action
that no model sampled (an oracle's, a plan's, a script's)."""
from __future__ import annotations

import dataclasses
from typing import Any, Union

from webrl.actions import Action, ParseError
from webrl.policy.types import Decision, Observation, PolicyRequest
from webrl.rollout.episode import Decided


class PolicyAgent:
    """A `Policy` as a sync agent: one `act` call per decision, stamped `version`."""

    def __init__(self, policy: Any, version: int = -1):
        self.policy, self.version = policy, version

    def __call__(self, request: PolicyRequest, result: Any) -> Decided:
        return Decided(self.policy.act([request])[0], self.version)


def action_decision(action: Union[Action, ParseError], observation: Observation, text: str = "") -> Decision:
    """A decision without model tokens (an oracle's, a plan's, a script's): the action, its text
    (the compact grammar unless `text` is given) and the screenshot it was decided on."""
    if isinstance(action, ParseError):
        return Decision(parsed=action, response_text=text or action.text)
    images = [observation.screenshot] if observation.screenshot is not None else []
    return Decision(parsed=action, response_text=text if text else action.to_compact(), images=images)


class OracleAgent:
    """The task's scripted oracle as a sync agent (it sees `oracle_view`: the env's observation
    and element list, never hidden state); `stop()` when it has no action. `record_images=False`
    keeps the screenshot out of the turn (text-only demonstrations)."""

    def __init__(self, task: Any, record_images: bool = True):
        self.task, self.record_images = task, record_images

    def __call__(self, request: PolicyRequest, result: Any) -> Decided:
        from webrl.envs.observation import oracle_view

        action = self.task.oracle_action(oracle_view(result.observation, result.info)) or Action.stop()
        observation = request.observation if self.record_images else dataclasses.replace(
            request.observation, screenshot=None)
        return Decided(action_decision(action, observation), -1, "oracle")
