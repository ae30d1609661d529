"""Wiki tasks: information seeking with a checked answer, and navigation.

Kinds and the oracle's path (steps):
  level 0  fact (1: answer from the infobox of the open article), table_fact (1: answer from
           the article's table, a superlative), follow_link (1: open a linked article)
  level 1  search_fact (4: type, search, open the result, answer), hop_fact (2: follow the
           infobox link, answer)
  level 2  search_hop (5-6: search, open, follow one or two links, answer),
           compare (7: look up two articles, answer with the larger one's name)

Every article a task touches belongs to the task's split. Answers are compared after
normalisation (case, accents, thousands separators; numbers must be equal, units ignored);
"navigation" kinds check the last visited article on the server.
"""
from __future__ import annotations

import random
from functools import lru_cache

from webrl.actions import Action
from webrl.envs.tools import Tool, ToolParam
from webrl.envs.sites.common import CheckResult, answer_matches, click, find, scroll_down, url_path, url_query
from webrl.envs.sites.wiki.world import Article, build_world

QUESTIONS = {
    ("city", "Population"): ("What is the population of {t}?", "How many people live in {t}?"),
    ("city", "Area"): ("What is the area of {t}?",),
    ("city", "Elevation"): ("At what elevation does {t} lie?", "What is the elevation of {t}?"),
    ("city", "Founded"): ("In what year was {t} founded?",),
    ("city", "Mayor"): ("Who is the mayor of {t}?",),
    ("country", "Capital"): ("What is the capital of {t}?",),
    ("country", "Population"): ("What is the population of {t}?",),
    ("country", "Currency"): ("What currency is used in {t}?",),
    ("country", "Official language"): ("What is the official language of {t}?",),
    ("country", "Independence"): ("In which year did {t} declare independence?",),
    ("mountain", "Elevation"): ("How high is {t}?", "What is the elevation of {t}?"),
    ("mountain", "Range"): ("Which mountain range is {t} part of?",),
    ("mountain", "First ascent"): ("In which year was {t} first climbed?",),
    ("mountain", "First climbed by"): ("Who first climbed {t}?",),
    ("river", "Length"): ("How long is the {t}?",),
    ("river", "Mouth"): ("Where does the {t} flow into?",),
    ("river", "Discharge"): ("What is the discharge of the {t}?",),
}
HOPS = {  # (kind, link label) -> how the goal names the linked article
    ("city", "Country"): "the country where {t} lies", ("city", "River"): "the river that flows through {t}",
    ("mountain", "Country"): "the country where {t} stands", ("river", "Source"): "the mountain where the {t} rises",
    ("country", "Capital"): "the capital of {t}",
}
COMPARE = {"city": ("Population", "Which city has more inhabitants, {a} or {b}?"),
           "mountain": ("Elevation", "Which is higher, {a} or {b}?"),
           "river": ("Length", "Which river is longer, the {a} or the {b}?")}


def _number(value: str) -> float:
    return float(value.split()[0].replace(",", ""))


@lru_cache(maxsize=32)
def _articles(split: str, kinds=None) -> list[Article]:
    return [a for a in build_world().values() if a.split == split and (kinds is None or a.kind in kinds)]


def _ask(rng, a: Article, about: str = "") -> tuple[str, str]:
    """(question, answer) about article `a`; `about` replaces its title in the question."""
    options = [label for (kind, label) in QUESTIONS if kind == a.kind and label in a.facts]
    label = rng.choice(options)
    templates = [q for q in QUESTIONS[(a.kind, label)] if not (about and "{t} lie" in q)] or ["What is the {l} of {t}?"]
    question = rng.choice(templates).format(t=about or a.title, l=label.lower())
    question = question.replace("the the ", "the ")
    return question, a.facts[label]


def gen_fact(rng, split, seed):
    a = rng.choice(_articles(split))
    q, ans = _ask(rng, a)
    return q, f"/wiki/page/{a.slug}", {"kind": "answer", "answer": ans, "path": [a.slug]}


def gen_table_fact(rng, split, seed):
    a = rng.choice(_articles(split, ("city", "river")))
    if a.kind == "city":
        col, word = rng.choice((("Population", "largest population"), ("Population", "smallest population"),
                                ("Area (km²)", "largest area"), ("Area (km²)", "smallest area")))
        best = (max if word.startswith("largest") else min)(a.table, key=lambda r: _number(r[col]))
        q, ans = f"Which district of {a.title} has the {word}?", best["District"]
    else:
        best = max(a.table, key=lambda r: _number(r["Distance from source"]))
        q, ans = f"Of the cities listed on the {a.title}, which is farthest from its source?", best["City"]
    return q, f"/wiki/page/{a.slug}", {"kind": "answer", "answer": ans, "path": [a.slug]}


def _linked(a: Article) -> list[str]:
    world = build_world()
    return sorted({s for s in a.links.values()} | {s for s in world if world[s].title in {r.get("City") for r in a.table}})


def gen_follow_link(rng, split, seed):
    world = build_world()
    for _ in range(100):
        a = rng.choice(_articles(split))
        targets = [s for s in _linked(a) if world[s].split == split]
        if targets:
            t = world[rng.choice(targets)]
            goal = rng.choice(("Go to the article about {t}.", "Open the page on {t}.")).format(t=t.title)
            return goal, f"/wiki/page/{a.slug}", {"kind": "visit", "target": t.slug}
    raise RuntimeError("no link")


def gen_search_fact(rng, split, seed):
    a = rng.choice(_articles(split))
    q, ans = _ask(rng, a)
    return f"Search Wikiverse to answer: {q}", "/wiki/", {"kind": "answer", "answer": ans, "path": [a.slug],
                                                          "search": [a.title]}


@lru_cache(maxsize=8)
def _chains(split: str, hops: int) -> list[tuple[tuple[str, ...], str]]:
    """Every chain of `hops` infobox links inside the split, with the phrase naming its end."""
    world = build_world()
    chains = [((a.slug,), a.title) for a in _articles(split)]
    for _h in range(hops):
        longer = []
        for slugs, phrase in chains:
            last = world[slugs[-1]]
            for label, slug in sorted(last.links.items()):
                if (last.kind, label) in HOPS and world[slug].split == split and slug not in slugs:
                    longer.append((slugs + (slug,), HOPS[(last.kind, label)].format(t=phrase)))
        chains = longer
    return chains


def _hop(rng, split, hops: int):
    chains = _chains(split, hops)
    if not chains:
        raise RuntimeError(f"no {hops}-hop chain in the {split} split")
    slugs, phrase = rng.choice(chains)
    return [build_world()[s] for s in slugs], phrase


def gen_hop_fact(rng, split, seed):
    chain, phrase = _hop(rng, split, 1)
    q, ans = _ask(rng, chain[-1], about=phrase)
    return q, f"/wiki/page/{chain[0].slug}", {"kind": "answer", "answer": ans, "path": [x.slug for x in chain]}


def gen_search_hop(rng, split, seed):
    try:
        chain, phrase = _hop(rng, split, rng.choice((1, 2)))
    except RuntimeError:  # few two-hop chains stay inside the test split
        chain, phrase = _hop(rng, split, 1)
    q, ans = _ask(rng, chain[-1], about=phrase)
    return q, "/wiki/", {"kind": "answer", "answer": ans, "path": [x.slug for x in chain], "search": [chain[0].title]}


def gen_compare(rng, split, seed):
    kind = rng.choice(list(COMPARE))
    label, template = COMPARE[kind]
    for _ in range(100):
        a, b = rng.sample(_articles(split, (kind,)), 2)
        if _number(a.facts[label]) != _number(b.facts[label]):
            break
    winner = a if _number(a.facts[label]) > _number(b.facts[label]) else b
    goal = template.format(a=a.title, b=b.title).replace("the the", "the")
    return goal, "/wiki/", {"kind": "answer", "answer": winner.title, "search": [a.title, b.title],
                            "path": [a.slug, b.slug], "compare": True}


GENERATORS = {0: (gen_fact, gen_table_fact, gen_follow_link), 1: (gen_search_fact, gen_hop_fact),
              2: (gen_search_hop, gen_compare)}


# -- checkers --------------------------------------------------------------------------------
def check_answer(params, state, answer):
    return CheckResult(answer_matches(params["answer"], answer), {"expected": params["answer"], "answer": answer})


def check_visit(params, state, answer):
    visited = state.wiki.visited
    return CheckResult(bool(visited) and visited[-1] == params["target"], {"last_visited": visited[-1:] or None})


CHECKERS = {"answer": check_answer, "visit": check_visit}


# -- oracles ---------------------------------------------------------------------------------
def _link_to(obs, slug):
    for el in obs.get("elements", []):
        if el.get("tag") == "a" and str(el.get("href", "")).rstrip("/").endswith(f"/wiki/page/{slug}"):
            return el
    return None


def _search_and_open(obs, title, slug):
    if url_path(obs) == "/wiki/search" and url_query(obs).get("q") == title:
        el = find(obs, dom_id=f"result-{slug}")
        return click(el) if el is not None else scroll_down()
    box = find(obs, dom_id="search-input")
    if box is not None and box.get("value", "") != title:
        return Action.type_text(title, element=int(box["id"]))
    el = find(obs, dom_id="search-button")
    return click(el) if el is not None else scroll_down()


def oracle_answer(params, obs):
    path, chain = url_path(obs), params["path"]
    if params.get("compare"):
        here = path.rsplit("/", 1)[-1] if path.startswith("/wiki/page/") else ""
        if here == chain[1]:
            return Action.answer(params["answer"])
        title, slug = (params["search"][1], chain[1]) if here == chain[0] or (
            url_query(obs).get("q") == params["search"][1]) else (params["search"][0], chain[0])
        return _search_and_open(obs, title, slug)
    if path == f"/wiki/page/{chain[-1]}":
        return Action.answer(params["answer"])
    for i, slug in enumerate(chain[:-1]):  # on an article of the chain: follow the next link
        if path == f"/wiki/page/{slug}":
            el = _link_to(obs, chain[i + 1])
            return click(el) if el is not None else scroll_down()
    if params.get("search"):
        return _search_and_open(obs, params["search"][0], chain[0])
    return Action.answer(params["answer"])


def oracle_visit(params, obs):
    if url_path(obs) == f"/wiki/page/{params['target']}":
        return Action.stop()
    el = _link_to(obs, params["target"])
    return click(el) if el is not None else scroll_down()


ORACLES = {"answer": oracle_answer, "visit": oracle_visit}


# -- tools (webrl.envs.tools; shown only with WebEnvConfig.tools="task") -------------------------
TOOLS = (Tool("search_articles", "Search the wiki; returns JSON of up to 5 matching articles with their "
              "infobox facts and URLs", params=(ToolParam("query", description="words of the title"),),
              kind="http", url="/wiki/api/search?q={query}"),)
