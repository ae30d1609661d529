"""Helpers for the sandbox-site tests: a light oracle runner for the large success sweeps.

`light_episode` drives a task's oracle on a raw Playwright page: the same element collection
as `WebEnv` (som.js through `collect_elements`, so the oracle sees contract dicts) but no
screenshot, no Set-of-Mark drawing and no readiness heuristics, which makes a step several
times cheaper. The `WebEnv` path is covered by smaller samples (test_oracles.py).
"""
from __future__ import annotations

from typing import Any, Optional

from playwright.sync_api import Error as PlaywrightError

from webrl.envs.observation import ObservationConfig, collect_elements

_OBS_CONFIG = ObservationConfig()


def _observe(page: Any, task: Any, step: int) -> dict:
    for _ in range(5):
        try:
            page.wait_for_load_state("load")
            collected = collect_elements(page, _OBS_CONFIG, 5.0)
            return {"url": page.url, "title": collected.get("title", ""), "goal": task.spec.goal,
                    "elements": collected["elements"], "step": step, "feedback": "", "last_action_error": ""}
        except PlaywrightError:  # a navigation replaced the document mid-collection
            page.wait_for_timeout(50)
    raise RuntimeError(f"could not observe {page.url}")


def _navigations(page: Any) -> list:
    """Main-frame navigation requests seen on `page` (a list the handler appends to)."""
    if not hasattr(page, "_webrl_navs"):
        page._webrl_navs = []
        page.on("request", lambda r: page._webrl_navs.append(r.url)
                if r.is_navigation_request() and r.frame == page.main_frame else None)
    return page._webrl_navs


def _execute(page: Any, action: Any, elements: list) -> None:
    """Run the action; if it started a navigation, wait until the new document has loaded
    (an action's return does not mean its form submission has reached the next page)."""
    if action.kind == "type":  # typing never submits on these sites
        return _act(page, action, elements)
    navs = _navigations(page)
    navs.clear()
    page.evaluate("() => { window.__lightToken = 1; }")
    _act(page, action, elements)
    page.wait_for_timeout(30)
    for _ in range(3 if navs else 0):
        try:  # the old document's context dies mid-wait when the new one commits: wait again
            page.wait_for_function("() => !window.__lightToken && document.readyState !== 'loading'",
                                   timeout=10000)
            break
        except PlaywrightError:
            page.wait_for_timeout(20)


def _act(page: Any, action: Any, elements: list) -> None:
    loc = (lambda i: page.locator(f'[data-webrl-id="{elements[i]["id"]}"]').first)
    if action.kind == "click":
        loc(action.element).click(timeout=5000)
    elif action.kind == "type":
        target = loc(action.element)
        target.fill("", timeout=5000)
        target.press_sequentially(action.text, timeout=5000)
    elif action.kind == "select":
        loc(action.element).select_option(label=action.text, timeout=5000)
    elif action.kind == "press":
        page.keyboard.press(action.text)
    elif action.kind == "scroll":
        page.mouse.wheel(0, 400 if action.direction == "down" else -400)
    else:
        raise ValueError(f"the light runner does not execute {action.kind}")


def light_episode(page: Any, task: Any, max_steps: Optional[int] = None) -> tuple[float, list[str], dict]:
    """(reward, compact actions, the checker's details) of one oracle episode on `page`; an
    episode the oracle did not end in `max_steps` scores 0 with no details. Pages are reused
    across episodes (a new page costs more than a whole level-0 episode): `setup` points the
    page's cookie at the new episode's state."""
    actions: list[str] = []
    try:
        task.setup(page)
        for step in range(max_steps or task.spec.max_steps):
            obs = _observe(page, task, step)
            action = task.oracle_action(obs)
            actions.append(action.to_compact())
            if action.kind in ("stop", "answer"):
                scored = task.reward(page, action.text if action.kind == "answer" else None)
                return scored.value, actions, scored.details
            _execute(page, action, obs["elements"])
        return 0.0, actions, {}
    finally:
        task.teardown(page)
