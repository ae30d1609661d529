"""Live-web task loaders: Online-Mind2Web JSON, WebVoyager JSONL and DeepShop JSONL.

Each row becomes a `LiveWebTask` (`webrl.envs.task`): a `TaskSpec` (goal, start URL,
allowed domains, provenance) whose `reward` is always `TaskReward(None)`, because only a judge
(WebJudge, DeepShop's judge) can score a live website. Rows are validated before any task is
built; every bad row is reported with its line number (JSONL: the physical line; JSON array:
the line where the item starts, and its index) in one `TaskLoadError`, so a data-set typo is
fixed in one pass instead of one per run.

Formats (fields as the public releases spell them):

    online_mind2web  JSON array of {task_id, confirmed_task | task_description, website,
                     reference_length?, level?}           level: "easy" | "medium" | "hard"
    webvoyager       JSONL of {web_name, id, ques, web}
    deepshop         JSONL of {web_name, id, ques, web, attribute?, filter?, sort?, category?,
                     difficulty?}                         the string "None" means absent

Departures from the releases: `level`/`difficulty` words map to `TaskSpec.level` 0/1/2 (easy /
medium / hard; other words keep level 0 and the word stays in `params`). The allowed domains
are the start URL's host plus its registrable domain ("www.amazon.com" also allows
"amazon.com" and so every *.amazon.com; "smile.amazon.co.uk" allows "amazon.co.uk",
`webrl.envs.network.site_domains`), since live sites hop between sibling hosts. These bound
top-level navigation only: live-web envs run with `SafetyConfig(subresource_policy=
LIVE_WEB_SUBRESOURCE_POLICY)` ("public", `webrl.envs.live_web`), under which CDNs' stylesheets,
scripts and images load from any public host and nothing reaches an internal address.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence
from urllib.parse import urlparse

from webrl.envs.network import site_domains
from webrl.envs.task import LiveWebTask, TaskSpec  # LiveWebTask: reward value None, a judge scores live sites

FORMATS = ("online_mind2web", "webvoyager", "deepshop")
LEVEL_WORDS = {"easy": 0, "medium": 1, "hard": 2}
DEFAULT_MAX_STEPS = 30


class TaskLoadError(ValueError):
    """Raised with every bad row of a file; `.problems` holds (line, message) pairs."""

    def __init__(self, path: str, problems: Sequence[tuple[int, str]]):
        self.path = path
        self.problems = list(problems)
        lines = [f"{path}:{line}: {message}" for line, message in self.problems]
        super().__init__(f"{len(self.problems)} bad row(s) in {path}:\n" + "\n".join(lines))


@dataclass
class LiveWebTaskSource:
    """A `TaskSource` over a fixed list of tasks: `sample(rng)` draws one uniformly."""

    tasks: list
    """The tasks to draw from (e.g. what `load_tasks` returned); at least one."""

    def __post_init__(self) -> None:
        if not self.tasks:
            raise ValueError("LiveWebTaskSource.tasks must hold at least one task, got none")

    def sample(self, rng: Any) -> LiveWebTask:
        return self.tasks[int(rng.integers(len(self.tasks)))]


# -- row readers ------------------------------------------------------------------------------


def _jsonl_rows(text: str) -> tuple[list[tuple[int, Any]], list[tuple[int, str]]]:
    """(line, parsed object) for every non-blank line, and (line, error) for unparsable ones."""
    rows, problems = [], []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append((number, json.loads(line)))
        except json.JSONDecodeError as err:
            problems.append((number, f"not valid JSON ({err.msg} at column {err.colno})"))
    return rows, problems


def _json_array_rows(text: str) -> tuple[list[tuple[int, Any]], list[tuple[int, str]]]:
    """(line where the item starts, item) for each item of a top-level JSON array."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        return [], [(err.lineno, f"not valid JSON ({err.msg} at column {err.colno})")]
    if not isinstance(data, list):
        return [], [(1, f"expected a JSON array of tasks, got {type(data).__name__}")]
    # Walk the array again with raw_decode to learn where each item starts.
    decoder, pos, rows = json.JSONDecoder(), text.index("[") + 1, []
    for item in data:
        while text[pos] in " \t\r\n,":
            pos += 1
        _, end = decoder.raw_decode(text, pos)
        rows.append((text.count("\n", 0, pos) + 1, item))
        pos = end
    return rows, []


# -- per-format row -> TaskSpec ---------------------------------------------------------------


def _text_field(row: dict, *names: str) -> str:
    """The first present, non-empty string field among `names`; ValueError naming them."""
    for name in names:
        value = row.get(name)
        if isinstance(value, str) and value.strip():
            return value.strip()
        if value is not None and not isinstance(value, str):
            raise ValueError(f"field {name!r} must be a string, got {type(value).__name__}")
    raise ValueError(f"missing field {' or '.join(repr(n) for n in names)}")


def _id_field(row: dict, name: str) -> str:
    value = row.get(name)
    if isinstance(value, bool) or not isinstance(value, (str, int)) or str(value).strip() == "":
        raise ValueError(f"missing field {name!r} (a string or integer id)")
    return str(value).strip()


def _url_field(row: dict, name: str) -> str:
    """An http(s) URL; a bare host ("amazon.com") is accepted and given https://."""
    url = _text_field(row, name)
    if "://" not in url:
        url = "https://" + url
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname or " " in parsed.netloc:
        raise ValueError(f"field {name!r} is not an http(s) URL: {url!r}")
    return url


def _allowed_domains(url: str) -> tuple[str, ...]:
    """The start host and its registrable domain; a host:port stays exact."""
    return site_domains((urlparse(url).netloc.lower(),))


def _level(word: Any) -> int:
    return LEVEL_WORDS.get(str(word).strip().lower(), 0) if word is not None else 0


def _optional(row: dict, name: str) -> Any:
    value = row.get(name)
    return None if value is None or value == "None" or value == "" else value


def _online_mind2web_spec(row: dict, split: str, max_steps: int) -> TaskSpec:
    task_id = _id_field(row, "task_id")
    goal = _text_field(row, "confirmed_task", "task_description")
    url = _url_field(row, "website")
    ref_len = row.get("reference_length")
    if ref_len is not None and (isinstance(ref_len, bool) or not isinstance(ref_len, int) or ref_len < 0):
        raise ValueError(f"field 'reference_length' must be a non-negative integer, got {ref_len!r}")
    params = {"reference_length": ref_len, "level": row.get("level")}
    return TaskSpec(id=f"online_mind2web/{task_id}", goal=goal, start_url=url,
                    allowed_domains=_allowed_domains(url), max_steps=max_steps,
                    site=urlparse(url).hostname or "", level=_level(row.get("level")),
                    split=split, params=params)


def _webvoyager_spec(row: dict, split: str, max_steps: int) -> TaskSpec:
    task_id = _id_field(row, "id")
    goal = _text_field(row, "ques")
    url = _url_field(row, "web")
    site = _text_field(row, "web_name")
    return TaskSpec(id=f"webvoyager/{task_id}", goal=goal, start_url=url,
                    allowed_domains=_allowed_domains(url), max_steps=max_steps, site=site,
                    split=split, params={"web_name": site})


def _deepshop_spec(row: dict, split: str, max_steps: int) -> TaskSpec:
    spec = _webvoyager_spec(row, split, max_steps)
    spec.id = "deepshop/" + spec.id.split("/", 1)[1]
    for name in ("attribute", "filter", "sort", "category", "difficulty"):
        spec.params[name] = _optional(row, name)
    spec.level = _level(spec.params["difficulty"])
    return spec


_SPEC_BUILDERS: dict[str, Callable[[dict, str, int], TaskSpec]] = {
    "online_mind2web": _online_mind2web_spec,
    "webvoyager": _webvoyager_spec,
    "deepshop": _deepshop_spec,
}


def guess_format(path: str | Path, first_row: Optional[dict] = None) -> str:
    """`.json` -> online_mind2web; `.jsonl` -> deepshop if the rows carry DeepShop's
    `attribute`/`difficulty` fields, else webvoyager."""
    if str(path).endswith(".json"):
        return "online_mind2web"
    if first_row and ("difficulty" in first_row or "attribute" in first_row):
        return "deepshop"
    return "webvoyager"


def load_task_specs(path: str | Path, format: Optional[str] = None, *, split: str = "test",
                    max_steps: int = DEFAULT_MAX_STEPS) -> list[TaskSpec]:
    """Read and validate every row of `path`; raise `TaskLoadError` listing all bad rows.

    `format`: one of FORMATS, or None to guess from the file name and first row.
    Duplicate ids are errors too (the second occurrence is reported).
    """
    if format is not None and format not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS} or None, got {format!r}")
    if max_steps < 1:
        raise ValueError(f"max_steps must be >= 1, got {max_steps}")
    text = Path(path).read_text(encoding="utf-8")
    is_array = format == "online_mind2web" or (format is None and str(path).endswith(".json"))
    rows, problems = _json_array_rows(text) if is_array else _jsonl_rows(text)
    if format is None:
        first = next((row for _, row in rows if isinstance(row, dict)), None)
        format = guess_format(path, first)
    build, specs, seen = _SPEC_BUILDERS[format], [], {}
    for line, row in rows:
        if not isinstance(row, dict):
            problems.append((line, f"expected a JSON object, got {type(row).__name__}"))
            continue
        try:
            spec = build(row, split, max_steps)
        except ValueError as err:
            problems.append((line, str(err)))
            continue
        if spec.id in seen:
            problems.append((line, f"duplicate id {spec.id!r} (first on line {seen[spec.id]})"))
            continue
        seen[spec.id] = line
        specs.append(spec)
    if problems:
        raise TaskLoadError(str(path), sorted(problems))
    return specs


def load_tasks(path: str | Path, format: Optional[str] = None, *, split: str = "test",
               max_steps: int = DEFAULT_MAX_STEPS) -> list[LiveWebTask]:
    """Load a live-web task file as `LiveWebTask`s (reward value None). See `load_task_specs`."""
    return [LiveWebTask(spec) for spec in load_task_specs(path, format, split=split,
                                                           max_steps=max_steps)]
