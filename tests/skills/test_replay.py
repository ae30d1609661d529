"""`WebEnvReplay` on a scripted four-page shop (no browser): the oracle until the skill applies, the
skill's steps, the oracle to the end, and each way a replay fails, with the env's actions by hand."""
from types import SimpleNamespace

import numpy as np

from webrl.actions import Action
from webrl.envs.task import BaseTask, TaskSpec
from webrl.skills import Skill, SkillParam, SkillStep, Target
from webrl.skills.commands import WebEnvReplay

# url -> elements (role, name); a click follows LINKS, "Buy" ends the episode with reward 1
PAGES = {"http://t/start/": [("link", "Shop")],
         "http://t/shop/": [("searchbox", "Search products"), ("button", "Search")],
         "http://t/shop/search": [("link", "Blue Mug")],
         "http://t/shop/p/1": [("button", "Buy")]}
LINKS = {("http://t/start/", 0): "http://t/shop/", ("http://t/shop/", 1): "http://t/shop/search",
         ("http://t/shop/search", 0): "http://t/shop/p/1"}
SEARCH_OPEN = Skill(name="search_open", description="Search the shop and open a product",
                    params=(SkillParam("query", "text"), SkillParam("item", "element")),
                    steps=(SkillStep("type", Target("searchbox", "Search products"), text="{query}"),
                           SkillStep("click", Target("button", "Search")),
                           SkillStep("click", Target("link", "{item}"))),
                    url_patterns=("/shop/",), leads_to="/shop/p/*")


class ShopEnv:
    """A gym web env over PAGES (WebEnv's observation keys); truncates after `max_steps` steps."""

    def __init__(self, max_steps: int = 0):
        self.config = SimpleNamespace(max_steps=max_steps)
        self.actions = []

    def _obs(self, error=""):
        elements = [{"id": i, "bbox": [0, 10 * i, 50, 10], "role": role, "name": name, "tag": "a"}
                    for i, (role, name) in enumerate(PAGES[self.url])]
        text = "\n".join(f'[{e["id"]}] {e["role"]} "{e["name"]}"' for e in elements)
        obs = {"goal": "buy the mug", "url": self.url, "title": "", "elements_text": text, "feedback": "",
               "last_action_error": error, "step": len(self.actions), "screenshot": np.zeros((4, 6, 3), np.uint8)}
        return obs, {"elements": elements}

    def reset(self, options):
        self.url, self.actions = "http://t/start/", []
        return self._obs()

    def step(self, action):
        self.actions.append(action.to_compact())
        done = action.kind == "click" and PAGES[self.url][action.element] == ("button", "Buy")
        if action.kind == "click" and not done:
            self.url = LINKS[(self.url, action.element)]
        obs, info = self._obs()
        truncated = not done and len(self.actions) == self.config.max_steps
        return obs, float(done), done, truncated, info


class ShopTask(BaseTask):
    """The oracle clicks the first element on every page (start -> shop; product -> buy)."""

    def oracle_action(self, view):
        return Action.click(0)


def task():
    return ShopTask(TaskSpec(id="shop/l1/test/search_open/0", goal="buy the mug", start_url="http://t/start/"))


def test_the_oracle_leads_to_the_skill_its_steps_run_then_the_oracle_finishes():
    env = ShopEnv()
    replay = WebEnvReplay(env)
    assert replay(SEARCH_OPEN, {"query": "mug", "item": "Blue Mug"}, task()) and replay.last_failure == ""
    # oracle on start; the skill's type, Search, the product link; the oracle's Buy (reward 1)
    assert env.actions == ["click(0)", 'type(0, "mug")', "click(1)", "click(0)", "click(0)"]


def test_each_failure_says_where():
    env = ShopEnv()
    replay = WebEnvReplay(env)
    assert not replay(SEARCH_OPEN, {"query": "mug", "item": "Red Teapot"}, task())
    assert replay.last_failure == "step 3: no link 'Red Teapot' on http://t/shop/search" and len(env.actions) == 3
    to_cart = Skill(**{**SEARCH_OPEN.__dict__, "leads_to": "/shop/cart"})
    assert not replay(to_cart, {"query": "mug", "item": "Blue Mug"}, task())
    assert replay.last_failure == "ended on http://t/shop/p/1, not on /shop/cart"
    # the env truncates after 2 steps: the oracle's click and the skill's first step
    short = WebEnvReplay(ShopEnv(max_steps=2))
    assert not short(SEARCH_OPEN, {"query": "mug", "item": "Blue Mug"}, task())
    assert short.last_failure == "step 1: the episode ended inside the skill"
    # an oracle that stops at once: the skill never applied
    quitter = ShopTask(task().spec)
    quitter.oracle_action = lambda view: None
    assert not replay(SEARCH_OPEN, {"query": "mug", "item": "Blue Mug"}, quitter)
    assert replay.last_failure == "the oracle finished before search_open applied"
