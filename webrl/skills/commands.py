"""`webrl skills extract`: a skill library from successful trajectories, and the real replay.

    webrl skills extract source=RUN_OR_DEMOS out=LIBDIR [min_support=2 max_len=4 validate=true held_out=...]

source / held_out: a run folder (trajectories/trajectories.jsonl), a demos folder (demos.jsonl,
what `webrl demos` writes) or a .jsonl file. out: the library folder (`<name>.json` per skill,
what `policy.skills.library_dir` reads) plus report.json (ExtractionResult.report, which
`SkillLibrary.load` skips). Validation replays each skill in real Chromium on the sandbox tasks the
trajectories came from (`WebEnvReplay`); held_out= names other trajectories to replay on
(e.g. demos of the test split), otherwise the source ones are replayed as fresh episodes.

`WebEnvReplay(env)(skill, args, task)`: one episode of the episode runner on `task` whose agent
(`SkillReplayAgent`) switches phases: the task's oracle acts until the skill
applies (the URL matches a url_pattern and the first step's target resolves on `info["elements"]`);
the skill's bound steps run one by one (`resolve_target` on the current elements; a step that
does not resolve or whose action errs fails the replay); the page reached must match `leads_to`;
then the oracle finishes the task. Success = the checker's reward is 1; an infrastructure failure
fails the replay. This executes steps
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

from webrl.actions import Action
from webrl.config import ConfigError
from webrl.rollout.agents import action_decision
from webrl.rollout.episode import Decided, EndEpisode, EpisodeInfraError, EpisodeSpec, run_episode
from webrl.rollout.slots import GymSlot
from webrl.envs.skill_matching import resolve_target, url_matches
from webrl.envs.skills import Skill

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


class SkillReplayAgent:
    """The replay's agent (module docstring): phase "before" (the oracle until the skill applies),
    "skill" (its bound steps), "after" (the oracle to the end). A failure ends the episode
    ("replay_failed"), `failure` says why; `ended(final)` gives the failure of an episode the env
    ended, from the phase it ended in."""

    def __init__(self, skill: Skill, args: Mapping[str, str], task: Any):
        self.skill, self.task, self.bound = skill, task, list(skill.bind(args))
        self.phase, self.next_step, self.failure = "before", 0, ""

    def __call__(self, request: Any, result: Any) -> Decided | EndEpisode:
        obs, info = result.observation, result.info
        if self.phase == "skill" and self.next_step and obs.get("last_action_error"):
            return self._fail(f"step {self.bound[self.next_step - 1].index + 1}: {obs['last_action_error']}")
        if self.phase == "before" and self._applies(obs, info):
            self.phase = "skill"
        if self.phase == "before":
            action = self._oracle(result)
            return self._fail(f"the oracle finished before {self.skill.name} applied") \
                if action.kind in ("stop", "answer") else self._decided(action, request)
        if self.phase == "skill" and self.next_step < len(self.bound):
            b = self.bound[self.next_step]
            element: Optional[int] = None
            if b.step.target is not None:
                element = resolve_target(b.step.target, info.get("elements") or [], kind=b.step.kind)
                if element is None:
                    return self._fail(f"step {b.index + 1}: no {b.step.target.describe()} on {obs.get('url')}")
            self.next_step += 1
            return self._decided(b.step.action(element), request)
        if self.phase == "skill":
            if self.skill.leads_to and not url_matches(self.skill.leads_to, str(obs.get("url", ""))):
                return self._fail(f"ended on {obs.get('url')}, not on {self.skill.leads_to}")
            self.phase = "after"
        return self._decided(self._oracle(result), request)

    def ended(self, final: Any) -> str:
        """Why the replay failed, for an episode that ended with `final` ("" for a success)."""
        if self.failure:
            return self.failure
        if self.phase == "before":
            return f"the episode ended before {self.skill.name} applied"
        if self.phase == "skill":
            step = self.bound[self.next_step - 1].index + 1
            error = final.observation.get("last_action_error")
            return f"step {step}: {error}" if error else f"step {step}: the episode ended inside the skill"
        return f"checker reward {final.reward} after the skill" if float(final.reward) < 1.0 else ""

    def _applies(self, obs: Mapping, info: Mapping) -> bool:
        if not self.skill.applies_to(str(obs.get("url", ""))):
            return False
        first = self.skill.steps[0]
        return first.target is None or "{" in first.target.name or resolve_target(
            first.target, info.get("elements") or []) is not None

    def _oracle(self, result: Any) -> Action:
        from webrl.envs.observation import oracle_view  # playwright comes with it: only when a replay runs

        return self.task.oracle_action(oracle_view(result.observation, result.info)) or Action.stop()

    def _decided(self, action: Action, request: Any) -> Decided:
        return Decided(action_decision(action, request.observation), -1, "skill" if self.phase == "skill" else "oracle")

    def _fail(self, why: str) -> EndEpisode:
        self.failure = why
        return EndEpisode("replay_failed")


class WebEnvReplay:
    """`replay(skill, args, task) -> bool` in a `WebEnv` (module docstring); `last_failure` says why
    the last replay failed ("" after a success)."""

    def __init__(self, env: Any):
        self.env = env
        self.last_failure = ""

    def __call__(self, skill: Skill, args: Mapping[str, str], task: Any) -> bool:
        agent = SkillReplayAgent(skill, args, task)
        spec = EpisodeSpec(task, max_turns=self.env.config.max_steps or task.spec.max_steps, screenshot="none")
        try:
            self.last_failure = agent.ended(run_episode(spec, GymSlot(self.env), agent).final)
        except EpisodeInfraError as error:
            self.last_failure = f"infrastructure error: {error}"
        return not self.last_failure


def extract_to_folder(config: SkillsCommandConfig, session: Any = None) -> dict[str, Any]:
    """Run the extraction `config` describes and write the library; returns the report."""
    from webrl.skills.extract import extract_skills
    from webrl.envs.skills import REPORT_FILE, SkillLibrary

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
