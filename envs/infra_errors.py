"""How an infrastructure failure ends a `WebEnv` step: its reason string and the step it returns.

A browser crash, a page stuck in a script, a replaced browser, a crashed tab or a step over its
time limit ends the episode as truncated with `info["infra_error"]` = the reason, never as a
scored 0 (OpenWebRL likewise removes such samples). A reason starts with its kind:
browser_crashed, page_unresponsive, browser_relaunched, page_crashed, step_time_limit or
browser_error, then what the browser said.
"""
from __future__ import annotations

from typing import Any

from webrl.actions import Action
from webrl.envs.browser import BrowserSession
from webrl.envs.episode import Episode
from webrl.envs.execute import PageUnresponsive
from webrl.envs.observation import blank_observation
from webrl.envs.safety import StepTimeLimit
from webrl.envs.watchdog import BrowserWatchdog


def infra_error_reason(error: Exception, episode: Episode, session: BrowserSession, watchdog: BrowserWatchdog,
                       step_timeout_s: float) -> str:
    """The reason string for `error`; relaunches the browser if it died."""
    message = " ".join(str(error).split())[:300]
    alive = session.is_alive()
    if not alive:  # crashed, or killed by the watchdog: the next episode gets a new browser
        session.relaunch()
    if watchdog.fired:
        ended = "killed the browser (it was relaunched)" if watchdog.killed else "closed the episode's tabs"
        return (f"page_unresponsive: a browser call of the step did not return within {watchdog.limit_s:g} s "
                f"(step limit {step_timeout_s:g} s + watchdog grace); the page may be "
                f"stuck in a script, and the step watchdog {ended}")
    if not alive:
        return f"browser_crashed: {message}"
    if session.generation != episode.generation:
        return f"browser_relaunched: this episode's browser was replaced ({message})"
    if episode.events.crashed or "crash" in message.lower():
        return f"page_crashed: {message}"
    if isinstance(error, StepTimeLimit):
        return f"step_time_limit: {message}"
    if isinstance(error, PageUnresponsive):
        return f"page_unresponsive: {message}"
    return f"browser_error: {type(error).__name__}: {message}"


def infra_error_step(episode: Episode, action: Any, reason: str,
                     viewport: tuple[int, int]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(obs, info) of the step `reason` ended: a blank screenshot of the `viewport` (width,
    height) with the reason as `last_action_error`; `action` is what the step parsed."""
    width, height = viewport
    obs = blank_observation(height, width, episode.task.spec.goal, episode.steps,
                            feedback="The episode ended because of an infrastructure error",
                            error=reason)
    info = {"elements": [], "raw_screenshot_png": b"", "task_id": episode.task.spec.id,
            "reward_details": {}, "action": action if isinstance(action, Action) else None,
            "infra_error": reason, "truncation_reason": "infra_error"}
    if episode.recording is not None:
        info.update(episode.recording.info())
    return obs, info
