"""WebArena / VisualWebArena task configs as webrl tasks, scored by WebArena's own evaluators.

    tasks = load_webarena_tasks("test.raw.json", sites={"shopping": "http://127.0.0.1:7770",
                                                        "gitlab": "http://127.0.0.1:8023"},
                                split="webarena_lite.json")

Input: a JSON array of task configs (`config_files/test.raw.json`), one task config per file (the
generated `config_files/<id>.json`), or a folder of such files. Fields read: task_id, sites,
start_url, intent, storage_state, require_login, require_reset, eval{eval_types,
reference_answers, reference_url, url_note, program_html, string_note}. Site placeholders
(__SHOPPING__, __SHOPPING_ADMIN__, __REDDIT__, __GITLAB__, __WIKIPEDIA__, __MAP__, __HOMEPAGE__,
VisualWebArena's __CLASSIFIEDS__) are replaced with the user's base URLs (`sites`, keyed by the
lowercase name) in every string of the config, as WebArena's generate_test_data.py does.

Each task is a `WebArenaTask`: it starts at the mapped start URL, may navigate among every mapped
site (WebArena's sites link to each other), logs in by loading the cookies of its Playwright
storage state, and its `reward` runs `webrl.envs.webarena_eval` (no judge needed except for
fuzzy_match answers).

The split: a file of task ids (a JSON list, or one id per line), or WebArena-Lite's task file
(VisualAgentBench `test_webarena_lite.raw.json`), whose rows name the WebArena task in
`old_task_id`: only those tasks are loaded.

Departures: a start URL of several tabs ("A |AND| B") opens its first only. The sites are not
reset before a `require_reset` task (webrl cannot reset the user's servers); `skip_reset=True`
leaves those tasks out. A storage state's localStorage is not
restored (WebArena's logins are cookies). Eval types other than string_match, url_match and
program_html (VisualWebArena's image checks) are refused at load.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence, Union
from urllib.parse import urlsplit

from webrl.envs.loaders import TaskLoadError
from webrl.envs.task import BaseTask, TaskReward, TaskSpec
from webrl.envs.webarena_eval import EVAL_TYPES, evaluate

SITE_NAMES = ("shopping", "shopping_admin", "reddit", "gitlab", "wikipedia", "map", "homepage", "classifieds")
PLACEHOLDER = re.compile(r"__([A-Z_]+?)__")
DEFAULT_MAX_STEPS = 30


def site_placeholder(name: str) -> str:
    return f"__{name.upper()}__"


def normalise_sites(sites: dict) -> dict[str, str]:
    """{"shopping": "http://h:7770/"} -> {"shopping": "http://h:7770"}; keys may be written as
    "SHOPPING" or "__SHOPPING__" too. ValueError naming a bad entry."""
    out = {}
    for key, url in dict(sites).items():
        name = str(key).strip("_").lower()
        if name not in SITE_NAMES:
            raise ValueError(f"unknown WebArena site {key!r}; known: {', '.join(SITE_NAMES)}")
        url = str(url).rstrip("/")
        if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).netloc:
            raise ValueError(f"site {name}: {url!r} is not an http(s) base URL such as http://127.0.0.1:7770")
        out[name] = url
    return out


def site_hosts(sites: dict) -> list[str]:
    """The host:port of each mapped site, in order, no repeats (what `env.network.local_sites` lists)."""
    return list(dict.fromkeys(urlsplit(url).netloc.lower() for url in normalise_sites(sites).values()))


def fill_placeholders(value: Any, sites: dict[str, str]) -> Any:
    """`value` (a config, recursively) with every mapped placeholder replaced by its base URL."""
    if isinstance(value, str):
        return PLACEHOLDER.sub(lambda m: sites.get(m.group(1).lower(), m.group(0)), value)
    if isinstance(value, list):
        return [fill_placeholders(v, sites) for v in value]
    if isinstance(value, dict):
        return {k: fill_placeholders(v, sites) for k, v in value.items()}
    return value


def read_split(split: Union[str, Path, Iterable[int], None]) -> Optional[set[int]]:
    """Task ids of a split: ids, a file of ids (JSON list or one per line), or a WebArena-Lite
    task file (rows with `old_task_id`). None = every task."""
    if split is None or split == "":
        return None
    if not isinstance(split, (str, Path)):
        return {int(i) for i in split}
    text = Path(split).read_text(encoding="utf-8").strip()
    if text.startswith("["):
        rows = json.loads(text)
        if any(isinstance(r, dict) and "old_task_id" not in r for r in rows):
            raise ValueError(f"split {split}: a row without old_task_id (expected task ids or WebArena-Lite's file)")
        return {int(r["old_task_id"]) if isinstance(r, dict) else int(r) for r in rows}
    return {int(line) for line in text.split() if line.strip()}


def _config_rows(path: Path) -> list[tuple[str, Any]]:
    """(where, config) for each task config of a JSON array file, a one-task file or a folder."""
    files = sorted(path.glob("*.json"), key=lambda p: (len(p.stem), p.stem)) if path.is_dir() else [path]
    rows = []
    for file in files:
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise TaskLoadError(str(file), [(err.lineno, f"not valid JSON ({err.msg})")]) from None
        items = data if isinstance(data, list) else [data]
        rows.extend((f"{file.name}[{i}]" if isinstance(data, list) else file.name, item)
                    for i, item in enumerate(items))
    return rows


@dataclass
class WebArenaTask(BaseTask):
    """One WebArena task: start URL, login cookies, and WebArena's evaluators as the checker.

    spec.params holds the config fields the checker reads (`eval`, `intent`, `task_id`, `sites`,
    `require_reset`). `cookies`: the storage state's cookies, added before the first observation.
    `judge`: a callable (system, user, max_tokens) -> reply text for fuzzy_match (the run's
    `webrl.run.tasks.ChatJudge` over its judge endpoint); None = fuzzy_match answers are left to
    the run (reward None).
    """

    spec: TaskSpec
    cookies: list = field(default_factory=list)
    judge: Any = None

    def setup(self, page: Any) -> None:
        """Log in: add the storage state's cookies and open the start page again with them."""
        if self.cookies:
            page.context.add_cookies(self.cookies)
            page.goto(self.spec.start_url, wait_until="load")

    def reward(self, page: Any, answer: Optional[str]) -> TaskReward:
        """WebArena's evaluators on the final page and the agent's answer (webarena_eval)."""
        value, details = evaluate(self.spec.params["eval"], self.spec.params["intent"], page, answer, self.judge)
        return TaskReward(value, details)


def _storage_cookies(row: dict, auth_dir: Optional[Path], base: Path) -> list:
    state = row.get("storage_state")
    if not state:
        if row.get("require_login"):
            raise ValueError("require_login is true but storage_state is empty")
        return []
    path = Path(state)
    found = next((p for p in ([auth_dir / path.name] if auth_dir else []) + [base / path, path] if p.is_file()), None)
    if found is None:
        where = f"{auth_dir}" if auth_dir else f"{base} (set tasks.webarena_auth_dir to the folder of the files)"
        raise ValueError(f"storage_state {state!r} not found in {where}; WebArena's browser_env/auto_login.py "
                         "writes these files")
    return list(json.loads(found.read_text(encoding="utf-8")).get("cookies", []))


def _task(row: dict, sites: dict[str, str], auth_dir: Optional[Path], base: Path, max_steps: int,
          judge: Any) -> WebArenaTask:
    row = fill_placeholders(row, sites)
    task_id = row.get("task_id")
    if isinstance(task_id, bool) or not isinstance(task_id, int):
        raise ValueError(f"task_id must be an integer, got {task_id!r}")
    left = sorted({m for v in (row.get("start_url", ""), json.dumps(row.get("eval", {})))
                   for m in PLACEHOLDER.findall(v) if m.lower() in SITE_NAMES})
    if left:
        raise ValueError(f"uses {', '.join(site_placeholder(m) for m in left)}, which tasks.webarena_sites does "
                         f"not map (e.g. tasks.webarena_sites={{{left[0].lower()}: 'http://127.0.0.1:PORT'}})")
    start_url = row.get("start_url", "").split(" |AND| ")[0]
    if urlsplit(start_url).scheme not in ("http", "https"):
        raise ValueError(f"start_url is not an http(s) URL: {start_url!r}")
    evaluation = row.get("eval") or {}
    types = evaluation.get("eval_types") or []
    unknown = [t for t in types if t not in EVAL_TYPES]
    if not types or unknown:
        raise ValueError(f"eval.eval_types {types!r}: each must be one of {EVAL_TYPES}")
    if "url_match" in types and (evaluation.get("url_note") or "GOLD in PRED") != "GOLD in PRED":
        raise ValueError(f"eval.url_note {evaluation['url_note']!r}: WebArena defines 'GOLD in PRED'")
    if not isinstance(row.get("intent"), str) or not row["intent"].strip():
        raise ValueError("missing intent")
    hosts = tuple(dict.fromkeys([urlsplit(start_url).netloc] + [urlsplit(u).netloc for u in sites.values()]))
    params = {"task_id": task_id, "intent": row["intent"], "eval": evaluation, "sites": row.get("sites", []),
              "require_reset": bool(row.get("require_reset"))}
    spec = TaskSpec(id=f"webarena/{task_id}", goal=row["intent"], start_url=start_url, allowed_domains=hosts,
                    max_steps=max_steps, site=",".join(row.get("sites", [])), split="test", params=params)
    return WebArenaTask(spec, cookies=_storage_cookies(row, auth_dir, base), judge=judge)


def load_webarena_tasks(path: Union[str, Path], sites: Optional[dict] = None, *,
                        split: Union[str, Path, Sequence[int], None] = None, auth_dir: Union[str, Path, None] = None,
                        skip_reset: bool = False, max_steps: int = DEFAULT_MAX_STEPS,
                        judge: Any = None) -> list[WebArenaTask]:
    """Read WebArena task configs at `path`, in task_id order; `TaskLoadError` lists every bad
    task. `sites`: placeholder name -> base URL; `split`: see `read_split`; `auth_dir`: folder of
    the storage-state files (default: paths relative to the task file's folder); `judge`: for
    fuzzy_match (see `WebArenaTask`)."""
    path = Path(path)
    mapped = normalise_sites(sites or {})
    wanted = read_split(split)
    base = path if path.is_dir() else path.parent
    auth = Path(auth_dir) if auth_dir else None
    tasks, problems, seen, in_file = [], [], set(), set()
    for where, row in _config_rows(path):
        if not isinstance(row, dict):
            problems.append((0, f"{where}: expected a JSON object, got {type(row).__name__}"))
            continue
        in_file.add(row.get("task_id"))
        if wanted is not None and row.get("task_id") not in wanted:
            continue
        if skip_reset and row.get("require_reset"):
            continue
        try:
            task = _task(row, mapped, auth, base, max_steps, judge)
        except ValueError as err:
            problems.append((0, f"{where} (task_id {row.get('task_id')!r}): {err}"))
            continue
        if task.spec.id in seen:
            problems.append((0, f"{where}: duplicate task_id {row.get('task_id')!r}"))
            continue
        seen.add(task.spec.id)
        tasks.append(task)
    if problems:
        raise TaskLoadError(str(path), problems)
    missing = sorted(wanted - in_file) if wanted is not None else []
    if missing:
        raise TaskLoadError(str(path), [(0, f"the split names task ids the file lacks: {missing[:20]}")])
    return sorted(tasks, key=lambda t: t.spec.params["task_id"])
