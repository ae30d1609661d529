"""Task proposals from an `ExplorationMap`: templates per element category (CPU, no LLM), and an
LLM over an OpenAI-compatible endpoint.

Templates (each task carries the plan that realises it, targets as role + accessible name):
  navigation  'Open the "<link>" page.'            click link, stop   checker url_contains <link path>
  item        'Open the page of "<item>".'         click item, stop   checker url_contains <item path>
  search      'Search for "<item name>" and open its page.'  (the name as seen on an item page)
              type into the search box, Enter, click the item, stop   checker url_contains <item path>
  filter      'On the "<title>" page, set "<label>" to "<option>".'  (option: the select's 2nd)
              select, stop                         checker selected <label> = <option>
  action      'Add "<item>" to the cart, choosing Size "M".' (or 'Press "<button>" ...') on an item
              page: every select set to its first real option, press the action button; no checker
  form        'Fill in "<field>" with "<value>" ... and press "<button>".' (sample values by the
              field's name; the button: `_form_button`); no checker
Tasks without a checker are scored by the run's judges (`SynthWebTask`).

LLM proposals: one request per explored page (up to `llm_requests`), asking for a JSON list of
{"goal", "start_url", "category", "checker"?}. A reply that is not JSON, not a list, and each
proposal without a goal, off the site, with a bad checker or a duplicate goal is counted by
reason in `ProposalCounts.rejected` and skipped; an endpoint failure (timeout, HTTP error) is
counted as "endpoint_<category>". Nothing here raises on bad proposals.

Departure from SynthAgent: it proposes tasks by having the LLM act on each categorised element
and describe the before/after change; the templates here are fixed per category (they need no
endpoint and know their own plan and checker), and the LLM sees the whole map's text summary,
not screenshots.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Optional
from urllib.parse import urlparse

from webrl.envs.sites.common import normalize
from webrl.synth.explore import CategorisedElement, ExplorationMap, PageRecord, _in_scope, short_name
from webrl.synth.tasks import TASK_CATEGORIES, PlanStep, SynthTask, Target, check_checker

TEMPLATE_CATEGORIES = ("navigation", "item", "search", "filter", "action", "form")
_PLACEHOLDER_OPTION = re.compile(r"^(choose|select|pick|all|any|--|-)\b", re.I)
_SAMPLE_VALUES = (("email", "alex.morgan@example.com"), ("first", "Alex"), ("last", "Morgan"),
                  ("name", "Alex Morgan"), ("city", "Lisbon"), ("postal", "1000-001"), ("zip", "10001"),
                  ("address", "12 Harbour Street"), ("phone", "+1 555 0100"), ("min", "20"), ("max", "100"),
                  ("quantity", "2"), ("price", "50"))


def path_of(url: str) -> str:
    """Path and query of a URL: what a url_contains checker compares (the origin may move)."""
    parts = urlparse(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


def _target(e: CategorisedElement, name: Optional[str] = None) -> Target:
    return Target(e.role, name if name is not None else e.name, e.tag)


def real_options(options: list[str]) -> list[str]:
    """A select's options without the placeholder ones ("Choose a size", "All brands")."""
    return [o for o in options if o.strip() and not _PLACEHOLDER_OPTION.match(o.strip())]


def sample_value(field_name: str) -> str:
    low = field_name.lower()
    return next((v for key, v in _SAMPLE_VALUES if key in low), "test")


def _navigation(m: ExplorationMap) -> list[SynthTask]:
    start, out, seen = m.pages[0], [], {m.pages[0].url}
    for e in start.of("navigation"):
        if len(e.name) >= 2 and e.href not in seen:
            seen.add(e.href)
            out.append(SynthTask("", f'Open the "{e.name}" page.', start.url, "navigation",
                                 {"kind": "url_contains", "value": path_of(e.href)}, [PlanStep("click", _target(e)),
                                                                                      PlanStep("stop")]))
    return out


def _items(m: ExplorationMap) -> list[SynthTask]:
    out, seen = [], set()
    for page in m.pages:
        for e in page.of("item")[:2]:  # a couple per page: items from several listings
            if e.href not in seen and e.name:
                seen.add(e.href)
                out.append(SynthTask("", f'Open the page of "{e.name}".', page.url, "item",
                                     {"kind": "url_contains", "value": path_of(e.href)},
                                     [PlanStep("click", _target(e)), PlanStep("stop")]))
    return out


def _search(m: ExplorationMap) -> list[SynthTask]:
    box = next(((p, e) for p in m.pages for e in p.of("search")), None)
    if box is None:
        return []
    page, search = box
    out = []
    for item_page in (p for p in m.pages if p.reached_via == "item" and p.via_name):
        name = item_page.via_name
        out.append(SynthTask("", f'Search for "{name}" and open its page.', page.url, "search",
                             {"kind": "url_contains", "value": path_of(item_page.url)},
                             [PlanStep("type", _target(search), name), PlanStep("press", text="Enter"),
                              PlanStep("click", Target("link", name, "a")), PlanStep("stop")]))
    return out


def _filters(m: ExplorationMap) -> list[SynthTask]:
    out, seen = [], set()
    for page in (p for p in m.pages if p.reached_via != "item"):
        for e in page.of("filter"):
            label = short_name(e)
            options = e.options[1:] or e.options
            if (label, options[0]) in seen:
                continue
            seen.add((label, options[0]))
            out.append(SynthTask("", f'On the "{page.title}" page, set "{label}" to "{options[0]}".', page.url,
                                 "filter", {"kind": "selected", "value": options[0],
                                            "target": {"role": e.role, "name": label, "tag": e.tag}},
                                 [PlanStep("select", _target(e, label), options[0]), PlanStep("stop")]))
    return out


def _choices(page: PageRecord) -> tuple[list[PlanStep], list[str]]:
    steps, phrases = [], []
    for e in page.of("filter"):
        options = real_options(e.options)
        if options:
            label = short_name(e)
            steps.append(PlanStep("select", _target(e, label), options[0]))
            phrases.append(f'{label} "{options[0]}"')
    return steps, phrases


def _actions(m: ExplorationMap) -> list[SynthTask]:
    out = []
    for page in (p for p in m.pages if p.reached_via == "item"):
        for button in page.of("action")[:1]:
            steps, phrases = _choices(page)
            item = page.via_name or page.title
            goal = (f'Add "{item}" to the cart' if "cart" in button.name.lower()
                    else f'Press "{button.name}" for "{item}"')
            goal += (", choosing " + " and ".join(phrases) if phrases else "") + "."
            out.append(SynthTask("", goal, page.url, "action", None,
                                 steps + [PlanStep("click", _target(button)), PlanStep("stop")]))
    return out


def _form_button(page: PageRecord, last_field: int) -> Optional[CategorisedElement]:
    """The form's submit button: the last button between the last text field and the next link
    (a form ends in its submit; helper buttons such as a calendar toggle come before it)."""
    button = None
    for e in page.elements[last_field + 1:]:
        if e.role == "link":
            break
        if e.role == "button" and e.type != "reset":
            button = e
    return button


def _forms(m: ExplorationMap) -> list[SynthTask]:
    out = []
    for page in (p for p in m.pages if p.reached_via != "item"):
        fields = [e for e in page.of("form_field") if e.type not in ("checkbox", "radio", "hidden")]
        if not fields:
            continue
        button = _form_button(page, page.elements.index(fields[-1]))
        if button is None:
            continue
        values = [(f, sample_value(f.name or f.placeholder)) for f in fields]
        goal = ("Fill in " + ", ".join(f'"{f.name}" with "{v}"' for f, v in values) + f' and press "{button.name}".')
        if any(t.goal == goal for t in out):
            continue
        plan = [PlanStep("type", _target(f), v) for f, v in values]
        out.append(SynthTask("", goal, page.url, "form", None, plan + [PlanStep("click", _target(button)),
                                                                       PlanStep("stop")]))
    return out


_TEMPLATES = {"navigation": _navigation, "item": _items, "search": _search, "filter": _filters,
              "action": _actions, "form": _forms}


def template_tasks(m: ExplorationMap, n_tasks: int, per_category: int) -> list[SynthTask]:
    """Up to `n_tasks` template tasks, at most `per_category` each, taken round-robin over
    TEMPLATE_CATEGORIES so that a small budget still covers every category."""
    if not m.pages:
        return []
    pools = {c: _TEMPLATES[c](m)[:per_category] for c in TEMPLATE_CATEGORIES}
    out: list[SynthTask] = []
    while len(out) < n_tasks and any(pools.values()):
        for c in TEMPLATE_CATEGORIES:
            if pools[c] and len(out) < n_tasks:
                task = pools[c].pop(0)
                task.id = f"synth/{c}/{sum(t.category == c for t in out):03d}"
                task.provenance = {"source": "template", "template": c}
                out.append(task)
    return out


# -- LLM proposals ---------------------------------------------------------------------------------
@dataclass
class ProposalCounts:
    requests: int = 0
    accepted: int = 0
    rejected: dict[str, int] = field(default_factory=dict)

    def reject(self, reason: str) -> None:
        self.rejected[reason] = self.rejected.get(reason, 0) + 1


PROMPT = """You propose tasks for a web agent on one website. The site, as explored:
{summary}

Propose up to {k} realistic, specific tasks that start on the page {page} and can be completed on this
site. Reply with a JSON list only, each item {{"goal": "...", "start_url": "<one of the page URLs above>",
"category": one of {categories}}}, optionally with "checker": {{"kind": "url_contains" | "page_text_contains" |
"answer_contains", "value": "..."}} when the final state can be checked that way."""


def parse_proposals(text: str) -> list[Any]:
    """The JSON list in a reply (a ```json fence and a {"tasks": [...]} wrapper are accepted);
    ValueError("not_json" | "not_a_list") otherwise."""
    body = text.strip()
    fence = re.search(r"```(?:json)?\s*(.*?)```", body, re.S)
    if fence:
        body = fence.group(1).strip()
    try:
        data = json.loads(body)
    except json.JSONDecodeError:
        raise ValueError("not_json") from None
    if isinstance(data, dict):
        data = data.get("tasks", [data] if "goal" in data else None)
    if not isinstance(data, list):
        raise ValueError("not_a_list")
    return data


def accept_proposal(item: Any, page_url: str, m: ExplorationMap, goals: set[str], counts: ProposalCounts,
                    index: int) -> Optional[SynthTask]:
    """A proposal as a `SynthTask` (no plan), or None with the reason counted."""
    if not isinstance(item, dict):
        return counts.reject("not_an_object")
    goal = item.get("goal")
    if not isinstance(goal, str) or not goal.strip():
        return counts.reject("missing_goal")
    start = item.get("start_url") or page_url
    if not isinstance(start, str) or not _in_scope(start, m.start_url):
        return counts.reject("off_site")
    if normalize(goal) in goals:
        return counts.reject("duplicate")
    checker = item.get("checker")
    if check_checker(checker) is not None:
        return counts.reject("bad_checker")
    category = item.get("category") if item.get("category") in TASK_CATEGORIES else "other"
    goals.add(normalize(goal))
    counts.accepted += 1
    return SynthTask(f"synth/llm/{index:03d}", goal.strip(), start, category, checker,
                     provenance={"source": "llm", "page": page_url})


def llm_tasks(m: ExplorationMap, client: Any, n_requests: int, per_request: int, known_goals: set[str],
              max_tokens: int = 1024) -> tuple[list[SynthTask], ProposalCounts]:
    """Proposals from `client` (a `webrl.chat.ChatClient`), one request per explored page."""
    from webrl.chat.client import ChatClientError
    from webrl.chat.messages import ChatMessage, SamplingParams

    counts, out, goals = ProposalCounts(), [], set(known_goals)
    summary = m.summary()
    for page in m.pages[:n_requests]:
        counts.requests += 1
        prompt = PROMPT.format(summary=summary, k=per_request, page=page.url, categories=list(TASK_CATEGORIES))
        try:
            reply = client.chat([ChatMessage("user", prompt)], SamplingParams(max_tokens=max_tokens))
            items = parse_proposals(reply.text)
        except ChatClientError as e:
            counts.reject(f"endpoint_{e.category}")
            continue
        except ValueError as e:
            counts.reject(str(e))
            continue
        for item in items[:per_request]:
            task = accept_proposal(item, page.url, m, goals, counts, len(out))
            if task is not None:
                out.append(task)
    return out, counts
