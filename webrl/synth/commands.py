"""`webrl synth`: SynthAgent-style task and trajectory synthesis for a user's own site.

    webrl synth --start-url http://127.0.0.1:8765/shop/ out=data/synth n_tasks=40
    webrl synth start_url=https://my.site/ endpoint=http://127.0.0.1:8000/v1 model=qwen
    webrl sft sft.demos_dir=data/synth                       # then fine-tune on the demos

Pipeline (`synthesize`): explore (`webrl.synth.explore`) -> propose by templates and, with an
endpoint, by an LLM (`webrl.synth.propose`) -> collect with task refinement
(`webrl.synth.collect`) -> refine each trajectory (`webrl.synth.refine`) -> write into `out/`:
  tasks.jsonl     one row per surviving task (`webrl.synth.tasks`; `load_synth_tasks` reads it)
  demos.jsonl     + images/: the kept trajectories, as oracle demonstrations are stored
  exploration.json  the categorised map;  report.json  the `SynthReport`
Kept: a trajectory that ran to its end and, where the task has a checker, scored 1. Tasks
without a checker are kept unscored (`info.needs_judge`): the run's judges score them later;
SynthAgent likewise trains on synthesized data no checker confirmed.
"""
from __future__ import annotations

import dataclasses

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from webrl.config import ConfigError
from webrl.synth.explore import ExplorationMap
from webrl.synth.tasks import is_origin
from webrl.envs.sites.common import normalize


@dataclass
class SynthCommandConfig:
    start_url: str = ""
    """The site's first page (http or https); exploration stays on its origin, under its folder."""
    out: str = "synth"
    """Output folder: tasks.jsonl, demos.jsonl (+ images/), exploration.json, report.json."""
    n_tasks: int = 40
    """Template tasks to propose at most (LLM proposals come on top)."""
    per_category: int = 8
    """Template tasks per category at most (navigation, item, search, filter, action, form)."""
    max_pages: int = 12
    """Pages to explore at most."""
    max_depth: int = 2
    """Link depth from the start page to explore."""
    endpoint: str = ""
    """OpenAI-compatible server root (with /v1) for LLM task proposals; empty = templates only."""
    model: str = "default"
    """Model name sent to `endpoint`."""
    llm_requests: int = 4
    """LLM proposal requests (one per explored page, in exploration order)."""
    llm_tasks_per_request: int = 5
    """Proposals read from each reply at most."""
    llm_timeout_s: float = 60.0
    """Per-request timeout of the proposal endpoint; a timeout is counted, never fatal."""
    act_with_endpoint: bool = True
    """Collect LLM-proposed tasks (they have no plan) with `EndpointPolicy` on `endpoint`; false:
    write them to tasks.jsonl uncollected."""
    max_steps: int = 10
    """Step limit of a policy-collected episode."""
    viewport: str = "cpu"
    """Browser viewport preset or WxH (the one the policy will be trained at)."""
    subresource_policy: str = "auto"
    """Where pages may load images/scripts from: "auto" = "allowlist" (the site's own host) for a
    loopback start URL, else "public" (public hosts, as live-web tasks); or one of the env's
    `safety.subresource_policy` values ("allowlist", "any", "public")."""
    record_images: bool = True
    """Store each turn's Set-of-Mark screenshot in the demos (SFT needs them)."""
    shown_origin: str = ""
    """Show the site's origin as this in observations and demos, and record it as the tasks'
    origin (e.g. http://sandbox.test for the sandbox, whose server binds a new port per run);
    empty = the real origin. `load_synth_tasks(path, base_url)` re-bases the tasks either way."""

    def __post_init__(self) -> None:
        for name in ("n_tasks", "per_category", "max_pages", "max_steps", "llm_requests", "llm_tasks_per_request"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < (0 if name.startswith("llm") else 1):
                raise ConfigError(f"synth.{name} must be an integer >= {0 if name.startswith('llm') else 1}, "
                                  f"got {value!r}")
        if self.max_depth < 0:
            raise ConfigError(f"synth.max_depth must be >= 0, got {self.max_depth!r}")
        if self.llm_timeout_s <= 0:
            raise ConfigError(f"synth.llm_timeout_s must be > 0, got {self.llm_timeout_s!r}")
        if self.subresource_policy not in ("auto", "allowlist", "any", "public"):
            raise ConfigError(f"synth.subresource_policy must be one of auto, allowlist, any, public, "
                              f"got {self.subresource_policy!r}")
        for name in ("start_url", "endpoint", "shown_origin"):
            value = getattr(self, name)
            if value and urlparse(value).scheme not in ("http", "https"):
                raise ConfigError(f"synth.{name} must be an http:// or https:// URL, got {value!r}")
        if self.shown_origin and not is_origin(self.shown_origin):
            raise ConfigError(f"synth.shown_origin must be an http(s) origin (scheme://host[:port], no path), "
                              f"got {self.shown_origin!r}")
        if not self.endpoint:
            defaults = {f.name: f.default for f in dataclasses.fields(self)}
            inert = [k for k in _ENDPOINT_KEYS if getattr(self, k) != defaults[k]]
            if inert:
                raise ConfigError(f"synth: {inert} only act with synth.endpoint set (LLM proposals); set endpoint "
                                  f"or leave them at their defaults")


_ENDPOINT_KEYS = ("model", "llm_requests", "llm_tasks_per_request", "llm_timeout_s", "act_with_endpoint")


@dataclass
class SynthReport:
    out_dir: str
    explored_pages: int = 0
    elements_per_category: dict[str, int] = field(default_factory=dict)
    proposed: dict[str, int] = field(default_factory=dict)
    """Tasks proposed per source ("template", "llm")."""
    llm: dict[str, Any] = field(default_factory=dict)
    """LLM requests, accepted proposals and rejections by reason."""
    refined: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)
    collected: int = 0
    """Tasks whose collection episode ran (a task can still be dropped during it)."""
    kept: int = 0
    """Trajectories written to demos.jsonl."""
    uncollected: int = 0
    """Plan-less (LLM) tasks written to tasks.jsonl without a trajectory: no acting policy."""
    steps_removed: dict[str, int] = field(default_factory=dict)
    """Turns removed by trajectory refinement (confirmed by replay), by reason."""
    trajectories: list[dict[str, Any]] = field(default_factory=list)
    """Per kept trajectory: task id, turns before, removed turns with reasons, replay outcome."""

    def line(self) -> str:
        return (f"synth: {self.explored_pages} pages, {sum(self.proposed.values())} tasks proposed "
                f"({self.proposed}), {sum(self.refined.values())} refined, {sum(self.dropped.values())} dropped, "
                f"{self.collected} collected, {self.kept} kept, {sum(self.steps_removed.values())} steps removed")


def _count(counts: dict[str, int], key: str) -> None:
    counts[key] = counts.get(key, 0) + 1


def _subresource_policy(config: SynthCommandConfig) -> str:
    if config.subresource_policy != "auto":
        return config.subresource_policy
    host = urlparse(config.start_url).hostname or ""
    return "allowlist" if host == "localhost" or host.startswith("127.") or host == "::1" else "public"


def synthesize(config: SynthCommandConfig, session: Any = None, policy: Any = None,
               chat_client: Any = None) -> SynthReport:
    """Run the pipeline on `config.start_url`; `session` (a BrowserSession), `policy` (acting
    policy for plan-less tasks) and `chat_client` (proposal endpoint) default to what the config
    names."""
    from webrl.envs import BrowserSession, WebEnv, WebEnvConfig
    from webrl.synth.explore import explore

    if not config.start_url:
        raise ConfigError("synth needs the site's first page: webrl synth --start-url URL")
    own_session = session is None
    session = session or BrowserSession()
    env = WebEnv(WebEnvConfig.from_dict({"browser": {"viewport": config.viewport},
                                         "safety": {"subresource_policy": _subresource_policy(config)}}),
                 session=session)
    try:
        exploration = explore(env, config.start_url, config.max_pages, config.max_depth)
        return _synthesize_from(env, exploration, config, policy, chat_client)
    finally:
        env.close()
        if own_session:
            session.close()


def _synthesize_from(env: Any, exploration: ExplorationMap, config: SynthCommandConfig, policy: Any,
                     chat_client: Any) -> SynthReport:
    from webrl.synth.collect import run_plan, run_policy
    from webrl.synth.propose import llm_tasks, template_tasks
    from webrl.synth.refine import refine_trajectory
    from webrl.synth.tasks import write_tasks
    from webrl.types import save_trajectories

    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    report = SynthReport(str(out), len(exploration.pages), exploration.counts())
    tasks = template_tasks(exploration, config.n_tasks, config.per_category)
    report.proposed["template"] = len(tasks)
    if chat_client is None and config.endpoint and config.llm_requests:
        from webrl.chat.client import ChatClient

        chat_client = ChatClient(config.endpoint, config.model, timeout_s=config.llm_timeout_s, max_retries=1)
    if chat_client is not None:
        proposed, counts = llm_tasks(exploration, chat_client, config.llm_requests, config.llm_tasks_per_request,
                                     {normalize(t.goal) for t in tasks})
        tasks += proposed
        report.proposed["llm"] = len(proposed)
        report.llm = asdict(counts)
    if policy is None and config.endpoint and config.act_with_endpoint:
        from webrl.policy.endpoint import EndpointConfig, EndpointPolicy

        policy = EndpointPolicy(EndpointConfig(base_url=config.endpoint, model=config.model))
    surviving, demos = [], []
    for task in tasks:
        task.shown_origin = config.shown_origin.rstrip("/")
    demos_path = out / "demos.jsonl"
    demos_path.unlink(missing_ok=True)
    for task in tasks:
        if not task.plan and policy is None:
            surviving.append(task)  # proposed only: a run with a policy and judges can still use it
            report.uncollected += 1
            continue
        task.max_steps = max(task.max_steps, len(task.plan) + 1) if task.plan else config.max_steps
        report.collected += 1
        result = run_plan(env, task, config.record_images) if task.plan else \
            run_policy(env, task, policy, config.record_images)
        for reason in result.refinements:
            _count(report.refined, reason)
        if result.refinements:
            task.provenance = {**task.provenance, "refined": list(result.refinements)}
        if result.drop_reason:
            _count(report.dropped, result.drop_reason.split(":")[0])
            continue
        trajectory, refinement = refine_trajectory(env, result.trajectory, task, config.record_images)
        for reason in refinement.removed.values() if refinement.replay == "confirmed" else ():
            _count(report.steps_removed, reason)
        report.trajectories.append(refinement.to_json())
        surviving.append(task)
        demos.append(trajectory)
    report.kept = len(demos)
    write_tasks(out / "tasks.jsonl", surviving)
    save_trajectories(demos_path, demos, append=False)
    exploration.save(out / "exploration.json")
    (out / "report.json").write_text(json.dumps(asdict(report), indent=1))
    return report


def synth_main(config: SynthCommandConfig) -> int:
    report = synthesize(config)
    print(report.line())
    print(f"wrote {Path(config.out) / 'tasks.jsonl'} and {Path(config.out) / 'demos.jsonl'}; "
          f"train with: webrl sft sft.demos_dir={config.out}")
    return 0
