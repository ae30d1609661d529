"""Pieces every sandbox site shares: text normalisation and fuzzy matching, train/test
splits by entity, observation look-ups for the oracles, and `SiteTask`, the `Task` all four
sites' tasks are.

Oracles read what the env shows (`WebEnv`'s spec card; `oracle_view`): `obs["elements"]` is a list
of dicts with id/tag/role/name/type/value/dom_id/options/selected/checked/in_viewport. They
find their target by `dom_id` (ids the sites' templates set on purpose) or by name, and return
an `Action` on that element's Set-of-Mark id; when the target is not listed they scroll.
"""
from __future__ import annotations

import hashlib
import re
import unicodedata
import uuid
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Optional
from urllib.parse import parse_qs, urlencode, urlparse

from webrl.actions import Action
from webrl.envs.task import BaseTask, OriginAlias, TaskReward, TaskSpec, origin

SPLITS = ("train", "test")
LEVELS = (0, 1, 2)
MAX_STEPS = {0: 5, 1: 10, 2: 25}


# -- text ------------------------------------------------------------------------------------
def normalize(text: str) -> str:
    """Lower case, accents stripped, thousands separators dropped ("1,234" -> "1234"),
    punctuation -> spaces, whitespace collapsed."""
    text = unicodedata.normalize("NFKD", str(text)).encode("ascii", "ignore").decode()
    text = re.sub(r"(?<=\d)[,\u202f ](?=\d{3}\b)", "", text.lower())
    text = re.sub(r"[^a-z0-9.]+", " ", text)
    text = re.sub(r"(?<!\d)\.|\.(?!\d)", " ", text)
    return " ".join(text.split())


def numbers_in(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"\d+(?:\.\d+)?", normalize(text))]


def answer_matches(expected: str, answer: Optional[str]) -> bool:
    """Normalised answer match. Numeric expected values: the answer must hold exactly one
    number and it must be equal (units and words around it are ignored: "1,204 m" matches
    "1204"); text: equal after normalisation, a leading "the" ignored. Near misses fail."""
    if answer is None:
        return False
    exp, got = normalize(expected), normalize(answer)
    if re.fullmatch(r"[\d.]+( [a-z]+)*", exp) and numbers_in(exp):
        return numbers_in(got) == numbers_in(exp)[:1]
    strip_the = lambda s: s[4:] if s.startswith("the ") else s  # noqa: E731
    return bool(got) and strip_the(got) == strip_the(exp)


def edit_distance(a: str, b: str, limit: int = 3) -> int:
    """Levenshtein distance, cut off at `limit` (enough to tell "a small typo")."""
    if abs(len(a) - len(b)) >= limit:
        return limit
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return min(prev[-1], limit)


@lru_cache(maxsize=65536)
def token_matches(query_token: str, word: str) -> bool:
    """Case-insensitive; prefix of >= 3 letters, plural "s", or one typo (two for long words)."""
    q, w = query_token.rstrip("s"), word.rstrip("s")
    if q == w or (len(q) >= 3 and w.startswith(q)):
        return True
    allowed = 0 if len(q) < 4 else (1 if len(q) < 8 else 2)
    return allowed > 0 and edit_distance(q, w, allowed + 1) <= allowed


@lru_cache(maxsize=8192)
def _words(text: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(normalize(text).split()))


def fuzzy_score(query: str, text: str) -> int:
    """How many query tokens match some token of `text`; 0 unless every token matches."""
    words = _words(text)
    tokens = _words(query)
    if not tokens:
        return 0
    hits = sum(any(token_matches(t, w) for w in words) for t in tokens)
    return hits if hits == len(tokens) else 0


def split_of(name: str, salt: str = "") -> str:
    """Entity split: a stable hash of the entity's name, 70% train / 30% test."""
    h = int(hashlib.sha256(f"{salt}:{name}".encode()).hexdigest()[:8], 16)
    return "train" if h % 10 < 7 else "test"


# -- observations ----------------------------------------------------------------------------
def find(obs: dict, *, dom_id: Optional[str] = None, name: Optional[str] = None,
         tag: Optional[str] = None, role: Optional[str] = None,
         dom_prefix: Optional[str] = None) -> Optional[dict]:
    """The first element matching every given criterion (name: normalised equality)."""
    want = normalize(name) if name is not None else None
    for el in obs.get("elements", []):
        if dom_id is not None and el.get("dom_id") != dom_id:
            continue
        if dom_prefix is not None and not str(el.get("dom_id", "")).startswith(dom_prefix):
            continue
        if tag is not None and el.get("tag") != tag:
            continue
        if role is not None and el.get("role") != role:
            continue
        if want is not None and normalize(el.get("name", "")) != want:
            continue
        return el
    return None


def url_path(obs: dict) -> str:
    return urlparse(obs.get("url", "")).path


def url_query(obs: dict) -> dict[str, str]:
    return {k: v[-1] for k, v in parse_qs(urlparse(obs.get("url", "")).query).items()}


def click(el: dict) -> Action:
    return Action.click(int(el["id"]))


def scroll_down() -> Action:
    return Action.scroll("down", 0.8)


def ensure_value(el: Optional[dict], value: str) -> Optional[Action]:
    """Type `value` into `el` unless it already holds it; None when nothing is needed."""
    if el is None:
        return scroll_down()
    if str(el.get("value", "")) == value:
        return None
    return Action.type_text(value, element=int(el["id"]))


def ensure_selected(el: Optional[dict], option: str) -> Optional[Action]:
    if el is None:
        return scroll_down()
    if normalize(el.get("selected", "")) == normalize(option):
        return None
    return Action.select(int(el["id"]), option)


def query_url(path: str, **params: Any) -> str:
    params = {k: v for k, v in params.items() if v not in (None, "")}
    return path + ("?" + urlencode(params) if params else "")


# -- the task --------------------------------------------------------------------------------
@dataclass(frozen=True)
class CheckResult:
    success: bool
    details: dict[str, Any]


Checker = Callable[[dict, Any, Optional[str]], CheckResult]
Oracle = Callable[[dict, dict], Optional[Action]]


class SiteTask(BaseTask):
    """A sandbox task: `setup` creates this episode's server state and points the browser's
    cookie at it; `reward` runs the site's checker for `params["kind"]` on that state.

    `checkers` / `oracles` map a task kind to pure functions `(params, state, answer) ->
    CheckResult` and `(params, observation) -> Action | None`; the site module passes its
    dicts in, so the task stays picklable (they are module-level functions).
    """

    def __init__(self, spec: TaskSpec, seed: int, checkers: dict[str, Checker],
                 oracles: dict[str, Oracle]):
        super().__init__(spec)
        self.seed = seed
        self.kind = spec.params["kind"]
        self.sid = ""
        self._entered = False  # entry_url() created this episode's state; setup() has nothing to do
        self._checker = checkers[self.kind]
        self._oracle = oracles[self.kind]

    def prepare(self) -> None:
        """Point the task at this process's site server (it may have been built elsewhere)."""
        from webrl.envs.sites.server import ensure_server

        self._rebase(ensure_server())

    def _rebase(self, base: str) -> str:
        """Point `spec.start_url` at the server origin `base`; returns its path and query."""
        start = urlparse(self.spec.start_url)
        path = start.path + (f"?{start.query}" if start.query else "")
        if origin(self.spec.start_url) != base:  # built in another process
            self.spec.start_url = base + path
            self.spec.allowed_domains = (urlparse(base).netloc,)
        return path

    def entry_url(self) -> str:
        """Create this episode's server state; the URL that sets its cookie and redirects to the
        start page. `WebEnv` opens it instead of `spec.start_url`, so an episode starts with one
        navigation (no page load without a session first)."""
        from webrl.envs.sites.server import ensure_server
        from webrl.envs.sites.state import STORE, SessionState

        base = ensure_server()
        path = self._rebase(base)
        self.sid = uuid.uuid4().hex
        STORE.put(SessionState(sid=self.sid, site=self.spec.site, seed=self.seed,
                               level=self.spec.level, split=self.spec.split,
                               params=dict(self.spec.params)))
        self._entered = True
        return base + query_url("/__session", sid=self.sid, next=path)

    def url_alias(self) -> OriginAlias:
        """Observations show the sandbox at `SHOWN_ORIGIN`, whatever port its server bound."""
        from webrl.envs.sites.server import SHOWN_ORIGIN

        return OriginAlias.of(self.spec.start_url, SHOWN_ORIGIN)

    def setup(self, page: Any) -> None:
        """Nothing when the page was opened at `entry_url()`; otherwise (a caller that opened
        `spec.start_url` itself) create the state and navigate through the cookie URL."""
        if self._entered:
            self._entered = False
            return
        page.goto(self.entry_url())
        self._entered = False

    def check(self, answer: Optional[str] = None) -> CheckResult:
        """Score the current server state (no browser needed)."""
        from webrl.envs.sites.state import STORE

        state = STORE.get(self.sid)
        if state is None:
            return CheckResult(False, {"error": "no session state (setup not run?)"})
        with STORE.lock:
            return self._checker(self.spec.params, state, answer)

    def reward(self, page: Any, answer: Optional[str]) -> TaskReward:
        """1 or 0 as the checker decides on the server state; its details come along."""
        try:  # widget events travel by fetch(): let the last ones land first (bounded wait)
            page.wait_for_function("() => !window.__webrlPending", timeout=3000)
        except Exception:
            pass
        result = self.check(answer)
        return TaskReward(1.0 if result.success else 0.0, result.details)

    def oracle_action(self, observation: dict[str, Any]) -> Optional[Action]:
        return self._oracle(self.spec.params, observation)

    def teardown(self, page: Any) -> None:
        from webrl.envs.sites.state import STORE

        if self.sid:
            STORE.drop(self.sid)

    def __repr__(self) -> str:
        return f"SiteTask({self.spec.id!r}, {self.spec.goal!r})"
