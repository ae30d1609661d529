"""A built-in corpus of web-agent text for training the tiny models' tokenizer.

The tokenizer of a tiny model only has to cover what webrl's prompts and responses contain:
goals, Set-of-Mark element lists, URLs, environment feedback, `<think>` reasoning and actions
in the three action formats (Set-of-Mark tool-call JSON, Qwen computer-use JSON, the compact
grammar of `webrl.actions`) and webrl's system prompts (webrl/prompts/*.txt, so a prompt costs
few tokens). `default_corpus(seed)` generates such lines deterministically, so a
tokenizer trained on it merges the frequent words while every other string still encodes
(byte-level fallback).

`sandbox_corpus(seed)` adds the goals of sandbox training tasks (every site and level, train
split only: the test split's entities get no merges of their own) and the compact system
prompts, so a model trained on the sandbox reads a page in about 15% fewer tokens.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

_PRODUCTS = ["blue ceramic mug", "red wool scarf", "running shoes", "laptop stand", "green tea",
             "desk lamp", "water bottle", "yoga mat", "coffee beans", "phone case", "backpack",
             "wireless mouse", "notebook", "winter jacket", "sunglasses", "headphones"]
_SITES = ["shop", "news", "travel", "forum", "bank", "mail", "recipes", "weather", "jobs", "maps"]
_ROLES = ["button", "link", "textbox", "checkbox", "combobox", "radio", "tab", "option",
          "menuitem", "searchbox", "heading", "img"]
_LABELS = ["Search", "Add to cart", "Checkout", "Sign in", "Log out", "Next", "Previous",
           "Submit", "Cancel", "Home", "Filter", "Sort by price", "Size", "Quantity", "Email",
           "Password", "Continue", "Book now", "Departure", "Arrival", "Reply", "Compose", "Send",
           "Subject", "Price: low to high", "Apply", "Close", "Menu", "Settings", "Help"]
_GOALS = ["Find the price of the {p} and add it to the cart.",
          "Search for {p} on the {s} site and open the first result.",
          "What is the cheapest {p}? Answer with the price.",
          "Sort the results by price and select the {p}.",
          "Log in with the email user{n}@example.com and open the settings page.",
          "Book a trip from city {n} to city {m} on day {d}.",
          "Reply to the latest message with \"Thanks, see you at {d}:00\"."]
_THOUGHTS = ["The search box is element [{e}]. I will type the query there.",
             "I need to click the \"{l}\" button to continue.",
             "The page shows the results. The {p} costs {n}.{d} euros, so I can answer now.",
             "The previous click did not change the page; I should scroll down to see more.",
             "The goal is done, so I stop here."]
_FEEDBACK = ["Succeed: click on <button> '{l}'. Page navigated to http://127.0.0.1:{port}/{s}/{n}",
             "Succeed: typed \"{p}\" into <input> '{l}'.",
             "Failed: element [{e}] is not visible.", "Succeed: scrolled down by 0.5 of the viewport.",
             "New tab opened: http://127.0.0.1:{port}/{s}", "Error: no element with id {e}."]

PROMPT_DIR = Path(__file__).resolve().parent.parent / "prompts"


def _element_lines(rng: random.Random, n: int) -> list[str]:
    return [f"[{i}] {rng.choice(_ROLES)} \"{rng.choice(_LABELS + _PRODUCTS)}\"" for i in range(n)]


def _action_texts(rng: random.Random, e: int, x: int, y: int, text: str) -> list[str]:
    som = {"name": "browser", "arguments": rng.choice([
        {"action": "click", "element": e}, {"action": "type", "element": e, "text": text},
        {"action": "scroll", "direction": rng.choice(["up", "down"]), "amount": 0.5},
        {"action": "answer", "text": text}, {"action": "select", "element": e, "text": text}])}
    cu = {"name": "computer_use", "arguments": rng.choice([
        {"action": "left_click", "coordinate": [x, y]}, {"action": "type", "text": text},
        {"action": "scroll", "direction": "down", "amount": 0.5}, {"action": "key", "keys": ["Enter"]},
        {"action": "answer", "text": text}, {"action": "goto_url", "url": "http://127.0.0.1:8000/"}])}
    compact = rng.choice([f"click({e})", f"type({e}, {json.dumps(text)})", f"click_at({x}, {y})",
                          "scroll(\"down\", 0.5)", f"answer({json.dumps(text)})", "back()", "stop()"])
    return [json.dumps(som), json.dumps(cu), compact]


CORPUS_PROMPTS = ("compact_v1.txt", "computer_use_v1.txt", "som_v1.txt")


def default_corpus(seed: int = 0, n_episodes: int = 400, extra_files: tuple[Path, ...] = ()) -> list[str]:
    """Deterministic web-agent text lines (about 6 lines per episode) plus any extra text files."""
    rng = random.Random(seed)
    lines: list[str] = []
    for _ in range(n_episodes):
        fill = dict(p=rng.choice(_PRODUCTS), s=rng.choice(_SITES), l=rng.choice(_LABELS),
                    n=rng.randint(0, 999), m=rng.randint(0, 999), d=rng.randint(1, 28),
                    e=rng.randint(0, 80), port=rng.choice([8000, 8080, 5000]))
        lines.append(rng.choice(_GOALS).format(**fill))
        lines.append(f"URL: http://127.0.0.1:{fill['port']}/{fill['s']}/{fill['n']}  Title: {fill['l']}")
        lines.extend(_element_lines(rng, rng.randint(3, 8)))
        lines.append("<think>" + rng.choice(_THOUGHTS).format(**fill) + "</think>")
        x, y = rng.randint(0, 1280), rng.randint(0, 1000)
        for action in _action_texts(rng, fill["e"], x, y, fill["p"]):
            lines.append(f"<tool_call>{action}</tool_call>")
        lines.append(rng.choice(_FEEDBACK).format(**fill))
    # The action-format system prompts, often enough for BPE to merge their words. A fixed list:
    # a new prompt file elsewhere (e.g. LOCI roles) must not change the tiny vocabulary.
    for path in (PROMPT_DIR / name for name in CORPUS_PROMPTS):
        lines.extend(Path(path).read_text().splitlines() * 3)
    for path in extra_files:
        lines.extend(Path(path).read_text().splitlines())
    return lines


CORPORA = ("default", "sandbox")


def sandbox_corpus(seed: int = 0, tasks_per_site_level: int = 300) -> list[str]:
    """`default_corpus(seed)` plus train-split sandbox goals and the compact prompts (x20 each).

    Goals quote the entities a page shows (labels, products, cities, articles), so their words
    get merged tokens; the test split's entities are never read (held-out names stay unseen
    by the vocabulary too).
    """
    from webrl.envs.sites.source import SITE_NAMES, make_task

    lines = default_corpus(seed)
    for site in SITE_NAMES:
        for level in (0, 1, 2):
            for i in range(tasks_per_site_level):
                lines.append(make_task(site, level, "train", seed * 100_000 + i, start_server=False).spec.goal)
    for name in ("compact_v1.txt", "compact_brief.txt"):
        lines.extend((PROMPT_DIR / name).read_text().splitlines() * 20)
    return lines


def corpus_lines(name: str, seed: int = 0) -> list[str]:
    """The tokenizer corpus called `name` (one of CORPORA)."""
    if name not in CORPORA:
        raise ValueError(f"corpus must be one of {CORPORA}, got {name!r}")
    return default_corpus(seed) if name == "default" else sandbox_corpus(seed)
