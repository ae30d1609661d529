"""`webrl skills extract`: a skill library from successful trajectories, and the real replay.

    webrl skills extract source=RUN_OR_DEMOS out=LIBDIR [min_support=2 max_len=4 validate=true held_out=...]

source / held_out: a run folder (trajectories/trajectories.jsonl), a demos folder (demos.jsonl,
what `webrl demos` writes) or a .jsonl file. out: the library folder (`<name>.json` per skill,
what `policy.skills.library_dir` reads) plus report.json (ExtractionResult.report, which
`SkillLibrary.load` skips). Validation replays each skill in real Chromium on the sandbox tasks the
trajectories came from (`WebEnvReplay`); held_out= names other trajectories to replay on
(e.g. demos of the test split), otherwise the source ones are replayed as fresh episodes.

`WebEnvReplay(env)(skill, args, task)`: reset on `task`; the task's oracle acts until the skill
applies (the URL matches a url_pattern and the first step's target resolves on `info["elements"]`);
the skill's bound steps run one by one (`resolve_target` on the current elements; a step that
does not resolve or whose action errs fails the replay); the page reached must match `leads_to`;
then the oracle finishes the task. Success = the checker's reward is 1. This executes steps
itself until the grounded `skill(...)` action (webrl.envs) is the one to use. The oracle could
undo a skill that did the wrong thing, so the leads_to check and the errors are what make a
replay fail; a skill that drifts but leads to the right page kind can still pass (noted in the
report as a limit, not hidden).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

from webrl.config import ConfigError
from webrl.skills.skill import Skill, resolve_target, url_matches

__all__ = ["SkillsCommandConfig", "WebEnvReplay", "extract_to_folder", "load_source", "sandbox_task", "skills_main"]

ACTIONS = ("extract",)


@dataclass
class SkillsCommandConfig:
    """`webrl skills ACTION ...` settings."""

    action: str = "extract"
    """What to do: "extract" (mine, abstract, validate; write the library)."""
    source: str = ""
    """Trajectories to mine: a run folder, a demos folder or a .jsonl file (required)."""
    out: str = "skills"
    """Library folder to write: <name>.json per skill and report.json (it must not hold a library yet)."""
    min_support: int = 2
    """A subsequence must recur in at least this many distinct tasks (>= 2)."""
    max_len: int = 4
    """Longest subsequence mined, in steps (>= 2)."""
    validate: bool = True
    """Replay each skill on sandbox tasks in real Chromium and keep those that succeed."""
    held_out: str = ""
    """Trajectories to replay on ("" = the source's own tasks, as fresh episodes)."""
    min_replay_rate: float = 1.0
    """Keep skills whose replays succeed at least this often (0 < rate <= 1)."""
    max_replays: int = 3
    """Replays per skill at most (>= 1)."""

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ConfigError(f"skills: action must be one of {list(ACTIONS)}, got {self.action!r}")
        if not isinstance(self.validate, bool):
            raise ConfigError(f"skills: validate must be true or false, got {self.validate!r}")
        inert = [k for k, default in (("held_out", ""), ("min_replay_rate", 1.0), ("max_replays", 3))
                 if getattr(self, k) != default]
        if not self.validate and inert:
            raise ConfigError(f"skills: {inert} only act when validate=true; set validate=true or leave them at "
                              f"their defaults")
        try:
            self.extraction()
        except ConfigError as e:
            raise ConfigError(f"skills: {e}") from None

    def extraction(self):
        from webrl.skills.extract import ExtractionConfig

        return ExtractionConfig(self.min_support, self.max_len, self.min_replay_rate, self.max_replays)


def load_source(source: str | Path) -> list:
    """Trajectories of a run folder, a demos folder or a .jsonl file."""
    from webrl.types import load_trajectories

    path = Path(source)
    for candidate in (path, path / "trajectories" / "trajectories.jsonl", path / "demos.jsonl",
                      path / "trajectories.jsonl"):
        if candidate.is_file():
            return load_trajectories(candidate)
    raise FileNotFoundError(f"{source}: no trajectories (expected a .jsonl file, RUN/trajectories/trajectories.jsonl "
                            f"or DIR/demos.jsonl)")


def sandbox_task(traj: Any):
    """The sandbox task a trajectory ran (`task_id` = site/l<level>/<split>/<kind>/<seed>)."""
    from webrl.envs.sites.source import SITE_NAMES, make_task

    parts = traj.task_id.split("/")
    if len(parts) != 5 or parts[0] not in SITE_NAMES or not parts[1].startswith("l") or not parts[4].isdigit():
        raise ValueError(f"{traj.task_id!r} is not a sandbox task id (site/l<level>/<split>/<kind>/<seed>): "
                         f"only sandbox trajectories can be replayed")
    task = make_task(parts[0], int(parts[1][1:]), parts[2], int(parts[4]), start_server=False)  # setup starts it
    if task.spec.id != traj.task_id:
        raise ValueError(f"{traj.task_id!r}: the generator now makes {task.spec.id!r} from that seed")
    return task


class WebEnvReplay:
    """`replay(skill, args, task) -> bool` in a `WebEnv` (module docstring); `last_failure` says why
    the last replay failed ("" after a success)."""

    def __init__(self, env: Any):
        self.env = env
        self.last_failure = ""

    def _applies(self, skill: Skill, obs: Mapping, info: Mapping) -> bool:
        if not skill.applies_to(str(obs.get("url", ""))):
            return False
        first = skill.steps[0]
        return first.target is None or "{" in first.target.name or resolve_target(
            first.target, info.get("elements") or []) is not None

    def __call__(self, skill: Skill, args: Mapping[str, str], task: Any) -> bool:
        from webrl.actions import Action
        from webrl.envs.observation import oracle_view

        bound = skill.bind(args)
        obs, info = self.env.reset(options={"task": task})
        reward, done = 0.0, False
        applies = self._applies(skill, obs, info)
        while not applies:
            action = task.oracle_action(oracle_view(obs, info)) or Action.stop()
            if action.kind in ("stop", "answer"):
                return self._fail(f"the oracle finished before {skill.name} applied")
            obs, reward, terminated, truncated, info = self.env.step(action)
            if terminated or truncated:
                return self._fail(f"the episode ended before {skill.name} applied")
            applies = self._applies(skill, obs, info)
        for b in bound:
            element: Optional[int] = None
            if b.step.target is not None:
                element = resolve_target(b.step.target, info.get("elements") or [], kind=b.step.kind)
                if element is None:
                    return self._fail(f"step {b.index + 1}: no {b.step.target.describe()} on {obs.get('url')}")
            obs, reward, terminated, truncated, info = self.env.step(b.step.action(element))
            if obs.get("last_action_error"):
                return self._fail(f"step {b.index + 1}: {obs['last_action_error']}")
            if terminated or truncated:
                return self._fail(f"step {b.index + 1}: the episode ended inside the skill")
        if skill.leads_to and not url_matches(skill.leads_to, str(obs.get("url", ""))):
            return self._fail(f"ended on {obs.get('url')}, not on {skill.leads_to}")
        while not done:
            action = task.oracle_action(oracle_view(obs, info)) or Action.stop()
            obs, reward, terminated, truncated, info = self.env.step(action)
            done = terminated or truncated
        if float(reward) < 1.0:
            return self._fail(f"checker reward {reward} after the skill")
        self.last_failure = ""
        return True

    def _fail(self, why: str) -> bool:
        self.last_failure = why
        return False


def extract_to_folder(config: SkillsCommandConfig, session: Any = None) -> dict[str, Any]:
    """Run the extraction `config` describes and write the library; returns the report."""
    from webrl.skills.extract import extract_skills
    from webrl.skills.skill import REPORT_FILE, SkillLibrary

    trajectories = load_source(config.source)
    held_out = load_source(config.held_out) if config.held_out else []
    env = None
    replay = None
    if config.validate:
        from webrl.envs import BrowserSession, WebEnv, WebEnvConfig

        own = session is None
        session = session or BrowserSession()
        env = WebEnv(WebEnvConfig.from_dict({"browser": {"viewport": "openwebrl"}}), session=session)
        replay = WebEnvReplay(env)
    try:
        result = extract_skills(trajectories, config.extraction(), replay=replay, held_out=held_out,
                                task_of=sandbox_task if replay else None)
    finally:
        if env is not None:
            env.close()
            if own:
                session.close()
    out = Path(config.out)
    library = SkillLibrary(result.skills)
    library.save(out)
    report = {**result.report, "skills": library.names(), "source": config.source}
    (out / REPORT_FILE).write_text(json.dumps(report, indent=1) + "\n")
    return report


def skills_main(config: SkillsCommandConfig) -> int:
    if not config.source:
        raise ConfigError("skills extract needs source=RUN_OR_DEMOS (a run folder, demos folder or .jsonl file)")
    old = [p.name for p in Path(config.out).glob("*.json")] if Path(config.out).is_dir() else []
    if old:  # skills of an earlier extraction would be loaded with the new ones
        raise ConfigError(f"skills: out={config.out} already holds {sorted(old)[:5]}...; choose an empty folder")
    report = extract_to_folder(config)
    print(json.dumps({k: v for k, v in report.items() if k != "skills"}, indent=1))
    print(f"{len(report['skills'])} skill(s) in {config.out}; use them with "
          f"policy.wrappers=[skills] policy.skills.library_dir={config.out}")
    return 0
