"""WebArena's evaluators as webrl checkers: string_match, url_match, program_html.

Each follows `evaluation_harness/evaluators.py` of the WebArena repository (web-arena-x/webarena,
the same code in VisualWebArena for these three types). A task's score is the product of its
evaluators' scores, and each evaluator's score is the product of its checks:

    clean_answer(s)     strip; one pair of surrounding '...' or "..." removed; lowercase
    exact_match         clean(pred) == clean(ref)
    must_include        clean(ref) in clean(pred), every reference (any order); with a single
                        one-character reference, it must be a whole token of the answer
    fuzzy_match         a judge per reference with WebArena's grading prompt: "correct" -> 1,
                        "incorrect" / "partially correct" -> 0; the reference "N/A" is an exact
                        match, and if that fails the judge compares the reported reason with
                        `string_note` (WebArena's ua_match: "same" -> 1, "different" -> 0)
    url_match           "GOLD in PRED": some reference's host+path is a substring of the final
                        URL's host+path (trailing "/" removed), and for every query key of the
                        references one of their values is among the final URL's values for it;
                        references are joined by " |OR| "
    program_html        per target: open `url` ("last" = the final page), read the locator (empty:
                        the page's HTML; "document..." JS: its value as a string, "" on error),
                        html-unescape it, then exact_match or must_include its required contents
                        (each must_include entry may list alternatives joined by " |OR| ")

Departures, and why:
- The answer is the text of the agent's `answer(...)` action; `stop()` or no done action is the
  empty answer (WebArena's stop action with an empty answer).
- must_include's single-character rule tokenizes on word characters (regex `\\w+|[^\\w\\s]`)
  instead of NLTK's `word_tokenize`, which would be a new dependency; the two agree on the
  numbers and letters such references hold.
- fuzzy_match without a judge: nothing can grade the answer, so the checker returns None (the
  trajectory goes to the run's judge under reward.kind=recipe, or is dropped as no_checker under
  programmatic), unless another check of the task already scored 0, which decides the product.
  A judge reply that contains neither verdict word is None too (WebArena asserts).
- program_html waits for the page's load event after opening `url` instead of sleeping 3 s, and
  runs `prep_actions` before the locator as WebArena does. Of the `func:` helpers only those that
  need nothing but the page are implemented (`reddit_get_post_url`,
  `gitlab_get_project_memeber_role`); the others read the sites' private APIs with admin tokens,
  so a target naming one makes the checker return None with the helper's name in the details.
  The helpers are matched by name and arguments, never `eval`ed.
- url_match reads the URL the episode ended on even when a program_html listed before it has
  navigated away (WebArena would read the page program_html left).
"""
from __future__ import annotations

import html
import re
import urllib.parse
from collections import defaultdict
from typing import Any, Optional, Sequence

OR = " |OR| "
FUZZY_PROMPT = (
    "Help a teacher to grade the answer of a student given a question. Keep in mind that the student may use "
    "different phrasing or wording to answer the question. The goal is to evaluate whether the answer is "
    "semantically equivalent to the reference answer.\n"
    "question: {question}\nreference answer: {reference}\n"
    "all the string 'N/A' that you see is a special sequence that means 'not achievable'\n"
    "student answer: {pred}\nConclude the judgement by correct/incorrect/partially correct.")
UA_PROMPT = (
    "task: {question}\nactual unachievable reason: {reference}\nreported unachievable reason: {pred}\n"
    "The task described above is inherently unachievable due to the reason specified under 'actual unachievable "
    "reason'. An individual previously attempted this task and was able to identify its unachievable nature and "
    "the reason behind it. Your task is to determine whether the individual's reasoning matches the 'actual "
    "unachievable reason' stated above? Answer 'same' or 'different'.")
JUDGE_MAX_TOKENS = 768  # WebArena's values for both judge prompts
PAGE_HELPERS = ("reddit_get_post_url", "gitlab_get_project_memeber_role")


class NeedsJudge(Exception):
    """A check that only a judge (or an unsupported helper) can decide; the checker returns None."""


def clean_answer(answer: str) -> str:
    answer = answer.strip()
    if len(answer) >= 2 and answer[0] == answer[-1] and answer[0] in "'\"":
        answer = answer[1:-1]
    return answer.lower()


def exact_match(ref: str, pred: str) -> float:
    return float(clean_answer(pred) == clean_answer(ref))


def must_include(ref: str, pred: str, tokenize: bool = False) -> float:
    clean_ref, clean_pred = clean_answer(ref), clean_answer(pred)
    if tokenize and len(clean_ref) == 1:
        return float(clean_ref in re.findall(r"\w+|[^\w\s]", clean_pred))
    return float(clean_ref in clean_pred)


def ask_judge(judge: Any, prompt: str) -> str:
    """One reply of `judge` to WebArena's two messages, lowercased. `judge` is a callable
    (system, user, max_tokens) -> reply text: the run wraps its judge endpoint in one
    (`webrl.run.tasks.ChatJudge`), so this layer needs no chat client."""
    return str(judge("You are a helpful assistant", prompt, JUDGE_MAX_TOKENS)).lower()


def fuzzy_match(ref: str, pred: str, intent: str, judge: Any) -> float:
    if judge is None:
        raise NeedsJudge("fuzzy_match needs a judge")
    reply = ask_judge(judge, FUZZY_PROMPT.format(question=intent, reference=ref, pred=pred))
    if "partially correct" in reply or "incorrect" in reply:
        return 0.0
    if "correct" in reply:
        return 1.0
    raise NeedsJudge(f"the fuzzy_match judge gave no verdict: {reply[:200]!r}")


def ua_match(ref: str, pred: str, intent: str, judge: Any) -> float:
    if judge is None:
        raise NeedsJudge("fuzzy_match 'N/A' with another answer needs a judge (ua_match)")
    reply = ask_judge(judge, UA_PROMPT.format(question=intent, reference=ref, pred=pred))
    if "different" in reply:
        return 0.0
    if "same" in reply:
        return 1.0
    raise NeedsJudge(f"the ua_match judge gave no verdict: {reply[:200]!r}")


def string_match(evaluation: dict, intent: str, answer: str, judge: Any = None) -> float:
    """WebArena's StringEvaluator on the agent's answer. The judge is asked last, and only when
    the other checks have not already made the product 0."""
    pred = clean_answer(answer)
    score, fuzzy = 1.0, None
    for approach, value in (evaluation.get("reference_answers") or {}).items():
        if approach == "exact_match":
            score *= exact_match(value, pred)
        elif approach == "must_include":
            for ref in value:
                score *= must_include(ref, pred, tokenize=len(value) == 1)
        elif approach == "fuzzy_match":
            fuzzy = value
    if fuzzy is None or score == 0.0:
        return score
    if fuzzy == "N/A":
        if exact_match("N/A", pred) == 1.0:
            return score
        return ua_match(evaluation.get("string_note", ""), pred, intent, judge)  # WebArena: score = ua
    for ref in fuzzy:
        score *= fuzzy_match(ref, pred, intent, judge)
        if score == 0.0:
            break
    return score


def _split_url(url: str) -> tuple[str, dict[str, list[str]]]:
    parsed = urllib.parse.urlparse(url)
    return parsed.netloc + parsed.path, urllib.parse.parse_qs(parsed.query)


def url_match(evaluation: dict, final_url: str) -> float:
    """WebArena's URLEvaluator, rule "GOLD in PRED" (the only rule WebArena defines)."""
    rule = evaluation.get("url_note") or "GOLD in PRED"
    if rule != "GOLD in PRED":
        raise ValueError(f"unknown url_note {rule!r} (WebArena defines 'GOLD in PRED')")
    refs = [u.rstrip("/") for u in evaluation["reference_url"].split(OR)]
    pred_path, pred_query = _split_url(final_url.rstrip("/"))
    ref_paths, ref_queries = [], defaultdict(set)
    for ref in refs:
        path, query = _split_url(ref)
        ref_paths.append(path)
        for key, values in query.items():
            ref_queries[key].update(values)
    score = float(any(path in pred_path for path in ref_paths))
    for key, values in ref_queries.items():
        score *= float(any(value in pred_query.get(key, []) for value in values))
    return score


def required_contents(required: dict, selected: str) -> float:
    if "exact_match" in required:
        return exact_match(required["exact_match"], selected)
    if "must_include" in required:
        score = 1.0
        for content in required["must_include"]:
            score *= float(any(must_include(ref, selected) for ref in content.split(OR)))
        return score
    raise ValueError(f"unknown required_contents {sorted(required)} (exact_match or must_include)")


def _helper_call(text: str) -> tuple[str, list[str]]:
    """"func:name('a', 'b')" -> ("name", ["a", "b"]) (string or bare-word arguments)."""
    found = re.fullmatch(r"func:\s*(\w+)\((.*)\)\s*", text, re.DOTALL)
    if not found:
        raise NeedsJudge(f"unreadable helper {text!r}")
    args = [a.strip().strip("'\"") for a in found.group(2).split(",") if a.strip()]
    return found.group(1), args


def reddit_get_post_url(url: str) -> str:
    """WebArena's helper: ".../f/<forum>/<post id>/<slug>" -> ".../f/<forum>/<post id>"."""
    parts = urllib.parse.urlparse(url)
    segments = parts.path.split("/")
    if len(segments) >= 4 and segments[1] == "f":
        return f"{parts.scheme}://{parts.netloc}{'/'.join(segments[:4])}"
    return url


GITLAB_ROLE_JS = """(name) => {
  const accounts = [...document.querySelectorAll("td[data-label='Account'] span.gl-avatar-labeled-sublabel")];
  const index = accounts.findIndex(e => e.outerText === '@' + name);
  const role = document.querySelectorAll("td.col-max-role span")[index];
  return index < 0 || !role ? "" : role.outerText;
}"""


def _resolve_target_url(url: str, page: Any) -> str:
    if not url.startswith("func"):
        return url
    name, args = _helper_call(url)
    if name != "reddit_get_post_url" or len(args) != 1:
        raise NeedsJudge(f"program_html helper {name} is not supported (it reads the site's private API)")
    return reddit_get_post_url(args[0].replace("__last_url__", page.url))


def select_element(page: Any, target: dict) -> str:
    """What WebArena's locator reads on the current page."""
    locator = target.get("locator", "")
    if not locator.strip():
        return page.content()
    if locator.startswith(("document.", "[...document.")):
        for action in target.get("prep_actions", []):
            try:
                page.evaluate(f"() => {action}")
            except Exception:
                pass
        try:
            return str(page.evaluate(f"() => {locator}") or "")
        except Exception:  # WebArena: the page is wrong, read nothing
            return ""
    if locator.startswith("func:"):
        name, args = _helper_call(locator)
        if name == "gitlab_get_project_memeber_role" and len(args) == 2:
            try:
                return str(page.evaluate(GITLAB_ROLE_JS, args[1]) or "")
            except Exception:
                return ""
        raise NeedsJudge(f"program_html helper {name} is not supported (it reads the site's private API)")
    raise ValueError(f"unknown locator {locator!r}")


def program_html(evaluation: dict, page: Any, timeout_ms: float = 10_000) -> tuple[float, list[str]]:
    """WebArena's HTMLContentEvaluator: (score, what each target read, html-unescaped)."""
    score, read = 1.0, []
    for target in evaluation["program_html"]:
        url = _resolve_target_url(target["url"], page)
        if url != "last":
            page.goto(url, wait_until="load", timeout=timeout_ms)
        selected = html.unescape(select_element(page, target))
        read.append(selected[:500])
        score *= required_contents(target["required_contents"], selected)
    return score, read


EVAL_TYPES = ("string_match", "url_match", "program_html")


def evaluate(evaluation: dict, intent: str, page: Any, answer: Optional[str], judge: Any = None,
             eval_types: Sequence[str] = ()) -> tuple[Optional[float], dict[str, Any]]:
    """The task's score (product of its eval types) and the checker's evidence; None when a
    check needs a judge that is absent (or an unsupported helper) and no other check scored 0."""
    details: dict[str, Any] = {"eval_types": list(eval_types or evaluation["eval_types"])}
    answer, final_url = answer or "", page.url  # program_html may navigate away: url_match reads the final page
    score, undecided = 1.0, []
    for kind in details["eval_types"]:
        try:
            if kind == "string_match":
                part = string_match(evaluation, intent, answer, judge)
                details["answer"] = answer
            elif kind == "url_match":
                details["final_url"] = final_url
                part = url_match(evaluation, final_url)
            else:
                part, details["program_html_read"] = program_html(evaluation, page)
        except NeedsJudge as why:
            undecided.append(f"{kind}: {why}")
            continue
        details[kind] = part
        score *= part
    if undecided:
        details["undecided"] = undecided
        if score != 0.0:
            return None, details
    return score, details
