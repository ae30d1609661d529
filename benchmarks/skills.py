"""Skills on the sandbox (issue 26 item 7): extraction, replay on unseen tasks, and episodes with
no skills / grounded skills / guided skills for a scripted policy and the tiny model.

    .venv/bin/python benchmarks/skills.py [--sites shop wiki] [--levels 1 2] [--train-demos 24]
        [--test-demos 12] [--episodes 10] [--max-steps 12] [--replays-per-skill 3]
        [--max-replays 2] [--viewport 640x480] [--generator webrl:tiny-webagent-pointer | none]
        [--seed 0] [--work DIR] [--json FILE]

Pipeline (CPU, real Chromium, the sandbox sites; nothing downloaded):
1. Library: oracle demos (`record_demos`) of `--train-demos` train-split tasks of `--sites` at
   `--levels`; `extract_skills` with validation (`WebEnvReplay` on the same tasks as fresh
   episodes, `--max-replays` each, min replay rate 1.0). Reported: mined / abstracted / validated.
   Demos and the library are kept in `--work` and reused by a rerun with the same `--work`.
2. Replay on unseen tasks: oracle demos of test-split tasks (fresh seeds `--seed + 1`). For each
   validated skill, up to `--replays-per-skill` of those trajectories that contain a window fitting
   the skill (`find_occurrence`); the skill is bound with the arguments that window held (what the
   task needed there, read from its oracle demo) and replayed by `WebEnvReplay`: the oracle acts
   until the skill applies, the skill's steps run, the page must match `leads_to`, the oracle
   finishes, the checker must give 1.
3. Episodes on the first `--episodes` of those test tasks (the same tasks for every condition),
   at most `--max-steps` agent steps each:
   - scripted/none: `GoalWordPolicy` alone: type a quoted goal string into a search box (then
     Enter) or a text box, else click the link/button whose name holds the most goal words not
     yet used, else stop;
   - scripted/grounded: env `skills_dir` = the library; at each step `SkillGraph.retrieve` ranks
     the skills applying to the page, the first whose parameters `fill_args` can fill from the
     goal and the page (and not yet called with those arguments) is called as one `skill(...)`
     action; otherwise the goal-word heuristic;
   - scripted/guided: no skills in the env; the same choice, but the policy runs the skill's bound
     steps one per env step itself (`resolve_target` on the page; a step that does not resolve is
     a skill step failure and the policy falls back to the heuristic);
   - tiny/none, tiny/grounded (env `skills_dir`: the prompt shows the callable Skills block),
     tiny/guided (`SkillGuidedPolicy` around the generator): `--generator` greedy, its trained
     prompt (`webrl_prompt.json`), 24 new tokens per step.
   The scripted policy reads only the goal, the page (url, elements) and the library: never the
   task's hidden params or its oracle.

Reported per condition: success k/N, mean agent steps, mean browser actions (a grounded skill call
is one agent step and several actions), skill calls, skill step failures (grounded: calls whose
record is not ok; guided scripted: steps that did not resolve or erred), guided steps (steps taken
from a skill's guidance by the scripted policy, or with a non-empty guidance block for the model),
parse errors (model). Per-episode records are in the JSON.

Interpretation and limits: `fill_args` is this benchmark's own guess at binding a skill from a
goal (quoted strings, then capitalised phrases; element names on the page that occur in the
goal; select options named in the goal); WebXSkill leaves argument filling to the agent. The
goal-word heuristic cannot answer questions, so wiki tasks (which end with `answer(...)`) are
never solved by the scripted policy in any condition; for them only steps and skill behaviour
say anything.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

CONDITIONS = ("none", "grounded", "guided")
TEXT_ROLES = ("searchbox", "textbox")
CLICK_ROLES = ("link", "button")
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'&.-]*")


# -- reading the goal -------------------------------------------------------------------------
def quoted(goal: str) -> list[str]:
    """Strings in double quotes, in order: `Search for "blue mug"` -> ["blue mug"]."""
    return re.findall(r'"([^"]+)"', goal)


def capitalised_phrases(goal: str) -> list[str]:
    """Runs of capitalised words, in order, the first word of each sentence or clause (after
    ". ? ! :") left out: "Which is higher, Mount Roszelor or Mount Irostor?" ->
    ["Mount Roszelor", "Mount Irostor"]. A comma, "(" or a lower-case word ends a run."""
    phrases, run = [], []
    start = True
    for token in re.finditer(r'[A-Za-z0-9][A-Za-z0-9\'&-]*|[.?!:,;()"]', re.sub(r'"[^"]*"', ' , ', goal)):
        word = token.group()
        if word[0].isupper() and not start:
            run.append(word)
        else:
            phrases.append(" ".join(run))
            run = []
        start = word in ".?!:"
    phrases.append(" ".join(run))
    return [p for p in phrases if p]


def _norm(text: Any) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", str(text or "").casefold()))


def _occurs(needle: str, haystack: str) -> bool:
    needle, haystack = _norm(needle), _norm(haystack)
    return bool(needle) and f" {needle} " in f" {haystack} "


def fill_args(skill, goal: str, elements: Sequence[dict]) -> Optional[dict[str, str]]:
    """Arguments for `skill` read from the goal and the current page, or None if one cannot be filled.

    number fields (a text param typed into a spinbutton or a field named quantity / price): a
    price takes "$N" from the goal, a quantity "N of". Other text params take the quoted strings
    in order, then the capitalised phrases not made only of the skill's own literal words
    ("Search Wikiverse"). An element param takes the name of an element of its role on this page
    that occurs in the goal, else the first such phrase. An option param: an option of this page's
    matching select that the goal names (longest first). A url param is never filled.
    """
    from webrl.skills import resolve_target
    from webrl.policy.skills.graph import tokens

    literal = tokens(" ".join((s.target.name if s.target and "{" not in s.target.name else "") + " "
                              + (s.text if s.text and "{" not in s.text else "") for s in skill.steps))
    phrases = [p for p in capitalised_phrases(goal) if not tokens(p) <= literal]
    texts = iter(quoted(goal) + phrases)
    args: dict[str, str] = {}
    for param in skill.params:
        placeholder = "{" + param.name + "}"
        steps = [s for s in skill.steps if placeholder in (s.text or "") + (s.target.name if s.target else "")]
        if param.type == "text" and any(_numeric(s.target) for s in steps if s.target is not None):
            value = _number_for(next(s.target for s in steps if s.target is not None), goal)
        elif param.type == "text":
            value = next(texts, None)
        elif param.type == "element":
            role = next((s.target.role for s in steps if s.target is not None), "")
            on_page = [e["name"] for e in elements if (not role or e.get("role") == role)
                       and _occurs(e.get("name"), goal) and len(_norm(e.get("name"))) > 2]
            value = max(on_page, key=len) if on_page else (phrases[0] if phrases else None)
        elif param.type == "option":
            value = None
            for s in steps:
                element = resolve_target(s.target, elements) if s.target is not None else None
                record = next((e for e in elements if e.get("id") == element), None)
                named = [o for o in (record or {}).get("options") or () if _occurs(o, goal)]
                if named:
                    value = max(named, key=len)
        else:
            value = None
        if value is None:
            return None
        args[param.name] = value
    return args


def _numeric(target) -> bool:
    return target.role == "spinbutton" or any(w in _norm(target.name) for w in ("quantity", "price"))


def _number_for(target, goal: str) -> Optional[str]:
    """A number field's value from the goal: a price field takes "$N", a quantity "N of"; else None."""
    pattern = r"\$(\d+)" if "price" in _norm(target.name) else r"\b(\d+) of\b"
    found = re.search(pattern, goal)
    return found.group(1) if found else None


# -- the scripted policy ----------------------------------------------------------------------
@dataclass
class GoalWordPolicy:
    """The goal-word heuristic: one action from the goal and the page's elements.

    used: goal words already acted on (names clicked, a skill's literal targets and arguments);
    typed: quoted strings typed so far. Order: type the next untyped quoted string into the first
    search box (Enter follows) or text box; else click the link/button whose name holds the most
    unused goal words (ties: fewer words in the name, then page order); else stop.
    """

    goal: str
    used: set = field(default_factory=set)
    typed: list = field(default_factory=list)
    pending_enter: bool = False

    def next_action(self, elements: Sequence[dict]):
        from webrl.actions import Action
        from webrl.policy.skills.graph import tokens

        if self.pending_enter:
            self.pending_enter = False
            return Action("press", text="Enter")
        left = [q for q in quoted(self.goal) if q not in self.typed]
        boxes = [e for e in elements if e.get("role") in TEXT_ROLES]
        if left and boxes:
            box = next((e for e in boxes if e.get("role") == "searchbox"), boxes[0])
            self.typed.append(left[0])
            self.used |= tokens(str(box.get("name", "")))
            self.pending_enter = box.get("role") == "searchbox"
            return Action.type_text(left[0], int(box["id"]))
        want = tokens(self.goal) - self.used
        best, best_key = None, None
        for order, e in enumerate(elements):
            if e.get("role") not in CLICK_ROLES:
                continue
            have = tokens(str(e.get("name", "")))
            gain = len(have & want)
            key = (-gain, len(have), order)
            if gain and (best_key is None or key < best_key):
                best, best_key = e, key
        if best is None:
            return Action.stop()
        self.used |= tokens(str(best.get("name", "")))
        return Action.click(int(best["id"]))


@dataclass
class ScriptedSkillPolicy:
    """Picks a skill with `SkillGraph.retrieve` and `fill_args`, then the goal-word heuristic.

    mode: "none" (heuristic only), "grounded" (a skill is one `skill(...)` action) or "guided"
    (the skill's bound steps are followed one per step, resolved here with `resolve_target`).
    A skill is called at most once per argument set in an episode.
    """

    goal: str
    graph: Any = None
    mode: str = "none"
    heuristic: GoalWordPolicy = None
    called: set = field(default_factory=set)
    plan: list = field(default_factory=list)
    followed: int = 0
    guided_steps: int = 0
    guided_failures: int = 0
    last_guided: bool = False

    def __post_init__(self) -> None:
        if self.mode not in CONDITIONS:
            raise ValueError(f"mode must be one of {CONDITIONS}, got {self.mode!r}")
        self.heuristic = GoalWordPolicy(self.goal)

    def _choose(self, url: str, elements: Sequence[dict]):
        from webrl.policy.skills.graph import tokens

        for skill in self.graph.retrieve(url, self.goal, k=len(self.graph.library)):
            args = fill_args(skill, self.goal, elements)
            if args is None or (skill.name, tuple(sorted(args.items()))) in self.called:
                continue
            self.called.add((skill.name, tuple(sorted(args.items()))))
            self.heuristic.typed += [v for v in args.values() if v in quoted(self.goal)]
            self.heuristic.used |= tokens(" ".join(list(args.values()) + [
                s.target.name for s in skill.steps if s.target is not None and "{" not in s.target.name]))
            return skill, args
        return None

    def next_action(self, url: str, elements: Sequence[dict]):
        from webrl.actions import Action

        self.last_guided = False
        if self.mode != "none" and not self.plan:
            chosen = self._choose(url, elements)
            if chosen is not None and self.mode == "grounded":
                return Action.skill(chosen[0].name, chosen[1])
            if chosen is not None:
                self.plan = list(chosen[0].bind(chosen[1]))
                self.followed += 1
        if self.plan:
            action = self._guided_step(elements)
            if action is not None:
                self.last_guided = True
                return action
        return self.heuristic.next_action(elements)

    def _guided_step(self, elements: Sequence[dict]):
        from webrl.skills import resolve_target

        bound = self.plan.pop(0)
        element = resolve_target(bound.step.target, elements) if bound.step.target is not None else None
        if bound.step.target is not None and element is None:
            self.step_failed()
            return None
        self.guided_steps += 1
        return bound.step.action(element)

    def step_failed(self) -> None:
        """A guided step did not resolve or its action erred: abandon the rest of the skill."""
        self.guided_failures += 1
        self.plan = []


# -- episodes ---------------------------------------------------------------------------------
class ScriptedAgent:
    """A `ScriptedSkillPolicy` as the episode runner's agent (it reads the page's url and
    elements); `after(result)` abandons a followed skill whose guided step erred."""

    def __init__(self, policy: ScriptedSkillPolicy):
        self.policy = policy

    def __call__(self, request, result):
        from webrl.rollout.agents import action_decision

        if request.history:
            self.after(result)
        action = self.policy.next_action(str(result.observation.get("url", "")), result.info.get("elements") or [])
        return action_decision(action, request.observation)

    def after(self, result) -> None:
        """What the env said of the last action."""
        if self.policy.last_guided and result.observation.get("last_action_error"):
            self.policy.step_failed()


def episode_of(env, task, agent, max_turns: int):
    """One episode of the episode runner in `env` (every past turn's images kept in the history)."""
    from webrl.rollout.episode import EpisodeSpec, run_episode
    from webrl.rollout.slots import GymSlot

    return run_episode(EpisodeSpec(task, max_turns=max_turns, keep_history_images=max_turns), GymSlot(env), agent)


def run_scripted(env, task, graph, mode: str, max_steps: int) -> dict:
    """One episode of `ScriptedSkillPolicy(mode)` on `task`."""
    policy = ScriptedSkillPolicy(task.spec.goal, graph, mode)
    agent = ScriptedAgent(policy)
    episode = episode_of(env, task, agent, max_steps)
    agent.after(episode.final)  # the runner ended the episode after its last action
    record = _recorded(episode, _new_record(task, f"scripted/{mode}"))
    if mode == "guided":  # skills followed step by step count as calls
        record.update(skill_calls=policy.followed, skill_step_failures=policy.guided_failures,
                      guided_steps=policy.guided_steps)
    return record


def run_model(env, task, policy, max_steps: int) -> dict:
    """One episode of a `Policy` (the generator, or SkillGuidedPolicy around it) on `task`."""
    from webrl.rollout.agents import PolicyAgent

    episode = episode_of(env, task, PolicyAgent(policy), max_steps)
    record = _recorded(episode, _new_record(task, "model"))
    for turn in episode.trajectory.turns:
        record["guided_steps"] += int(bool(turn.observation.skill_guidance))
        record["parse_errors"] += int(turn.action is None)
    return record


def _recorded(episode, record: dict) -> dict:
    """`record` with every turn counted (`_count`) and the episode's success."""
    for turn, result in zip(episode.trajectory.turns, episode.results):
        _count(record, turn.action, result.info, result.observation)
    final = episode.final
    record["success"] = bool(final.terminated and float(final.reward) >= 1.0)
    return record


def _new_record(task, policy: str) -> dict:
    return {"task": task.spec.id, "policy": policy, "success": False, "steps": 0, "actions": 0,
            "skill_calls": 0, "skill_step_failures": 0, "guided_steps": 0, "parse_errors": 0, "calls": [], "trace": []}


def _count(record: dict, action, info: dict, obs: dict) -> None:
    from webrl.actions import format_compact

    record["steps"] += 1
    record["trace"].append(format_compact(action) if action is not None else "(parse error)")
    run = info.get("skill")
    if run is not None:
        record["skill_calls"] += 1
        record["skill_step_failures"] += int(not run["ok"])
        record["actions"] += sum(1 for s in run["steps"] if s["action"])
        record["calls"].append({"call": format_compact(action), "ok": run["ok"],
                                "error": obs.get("last_action_error", "")})
    else:
        record["actions"] += 1


def summarise(records: Sequence[dict]) -> dict:
    n = len(records)
    wins = sum(r["success"] for r in records)
    return {"episodes": n, "successes": wins, "success_rate": wins / n if n else 0.0,
            "mean_steps": sum(r["steps"] for r in records) / max(1, n),
            "mean_actions": sum(r["actions"] for r in records) / max(1, n),
            **{k: sum(r[k] for r in records) for k in ("skill_calls", "skill_step_failures", "guided_steps",
                                                       "parse_errors")}}


# -- stages -------------------------------------------------------------------------------------
def demos(work: Path, name: str, n: int, seed: int, a, session) -> list:
    """Oracle demos (kept in `work/name` and reused when complete)."""
    from webrl.recipes.demos import record_demos
    from webrl.skills.commands import load_source

    folder = work / name
    done = folder / "done.json"
    if not done.is_file():
        summary = record_demos(n, folder, seed=seed, levels=a.levels, sites=a.sites, split=name.split("_")[0],
                               viewport=a.viewport, session=session)
        done.write_text(json.dumps({k: v for k, v in summary.items() if k != "path"}))
    return load_source(folder)


def extract(train: list, env, a, folder: Path) -> tuple[list, dict]:
    """The validated library, written to `folder` (with report.json) and reused when it is there."""
    from webrl.skills import REPORT_FILE, SkillLibrary
    from webrl.skills.commands import WebEnvReplay, sandbox_task
    from webrl.skills.extract import ExtractionConfig, extract_skills

    if (folder / REPORT_FILE).is_file():
        return list(SkillLibrary.load(folder)), json.loads((folder / REPORT_FILE).read_text())
    result = extract_skills(train, ExtractionConfig(max_replays=a.max_replays), replay=WebEnvReplay(env),
                            task_of=sandbox_task)
    if result.skills:
        SkillLibrary(result.skills).save(folder)
        (folder / REPORT_FILE).write_text(json.dumps(result.report, indent=1) + "\n")
    return result.skills, result.report


def replay_unseen(skills: list, test: list, env, per_skill: int) -> dict:
    """Per skill: replays on test-split tasks with the arguments their oracle demo held there."""
    from webrl.skills.commands import WebEnvReplay, sandbox_task
    from webrl.skills.abstract import arguments_from, find_occurrence

    replay = WebEnvReplay(env)
    out = {}
    for skill in skills:
        rows = []
        for traj in test:
            occurrence = find_occurrence(skill, traj)
            if occurrence is None:
                continue
            args = arguments_from(skill, occurrence)
            ok = replay(skill, args, sandbox_task(traj))
            rows.append({"task": traj.task_id, "args": args, "ok": ok, "failure": replay.last_failure})
            if len(rows) == per_skill:
                break
        out[skill.name] = {"replays": len(rows), "successes": sum(r["ok"] for r in rows), "cases": rows}
    return out


def build_generator(path: str, max_new_tokens: int = 24):
    from webrl.models import load_model
    from webrl.policy import GeneratorConfig, GeneratorPolicy, SamplingConfig
    from webrl.policy.cascade.train import generator_prompt

    model, processor = load_model(path)
    return GeneratorPolicy(model, processor, GeneratorConfig(
        prompt=generator_prompt(path), sampling=SamplingConfig(greedy=True, max_new_tokens=max_new_tokens)))


def episodes(tasks: list, envs: dict, graph, a) -> dict:
    """Every condition on the same tasks: {"scripted/none": [records], ...}."""
    results: dict[str, list] = {}
    for mode in CONDITIONS:
        env = envs["grounded"] if mode == "grounded" else envs["plain"]
        results[f"scripted/{mode}"] = [run_scripted(env, t, graph, mode, a.max_steps) for t in tasks]
    if a.generator != "none":
        from webrl.skills import SkillGuidedPolicy

        generator = build_generator(a.generator)
        policies = {"none": generator, "grounded": generator, "guided": SkillGuidedPolicy(generator, graph)}
        for mode in CONDITIONS:
            env = envs["grounded"] if mode == "grounded" else envs["plain"]
            results[f"tiny/{mode}"] = [dict(run_model(env, t, policies[mode], a.max_steps), policy=f"tiny/{mode}")
                                       for t in tasks]
    return results


def _args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sites", nargs="+", default=["shop", "wiki"])
    p.add_argument("--levels", nargs="+", type=int, default=[1, 2])
    p.add_argument("--train-demos", type=int, default=24, help="train-split oracle episodes mined")
    p.add_argument("--test-demos", type=int, default=12, help="test-split oracle episodes (unseen tasks)")
    p.add_argument("--episodes", type=int, default=10, help="held-out tasks per condition (<= solved test demos)")
    p.add_argument("--max-steps", type=int, default=12, help="agent steps per episode at most")
    p.add_argument("--replays-per-skill", type=int, default=3, help="unseen-task replays per skill at most")
    p.add_argument("--max-replays", type=int, default=2, help="validation replays per skill at most")
    p.add_argument("--viewport", default="640x480")
    p.add_argument("--generator", default="webrl:tiny-webagent-pointer", help="model path, or 'none' to skip")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--work", default="/tmp/skillbench/work")
    p.add_argument("--json", default="", help="write the results here")
    a = p.parse_args(argv)
    for name in ("train_demos", "test_demos", "episodes", "max_steps", "replays_per_skill", "max_replays"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(a, name)}")
    return a


def main(argv=None) -> dict:
    from webrl.envs import BrowserSession, WebEnv, WebEnvConfig
    from webrl.skills import SkillGraph
    from webrl.skills.commands import sandbox_task

    a = _args(argv)
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    timings = {}
    session = BrowserSession()
    plain = WebEnv(WebEnvConfig.from_dict({"browser": {"viewport": a.viewport}}), session=session)
    grounded = None
    try:
        train = demos(work, "train", a.train_demos, a.seed, a, session)
        test = demos(work, "test", a.test_demos, a.seed + 1, a, session)
        timings["demos_s"] = time.time() - t0
        library_dir = work / "library"
        skills, report = extract(train, plain, a, library_dir)
        timings["extract_s"] = time.time() - t0 - timings["demos_s"]
        if not skills:
            raise SystemExit(f"no skill survived validation: {report}")
        unseen = replay_unseen(skills, test, plain, a.replays_per_skill)
        timings["replay_s"] = time.time() - t0 - sum(timings.values())
        grounded = WebEnv(WebEnvConfig.from_dict({"browser": {"viewport": a.viewport},
                                                  "skills_dir": str(library_dir)}), session=session)
        tasks = [sandbox_task(t) for t in test[:a.episodes]]
        records = episodes(tasks, {"plain": plain, "grounded": grounded}, SkillGraph(skills), a)
        timings["episodes_s"] = time.time() - t0 - sum(timings.values())
    finally:
        plain.close()
        if grounded is not None:
            grounded.close()
        session.close()
    results = {
        "command": " ".join([".venv/bin/python", "benchmarks/skills.py"] + list(argv if argv is not None
                                                                                else sys.argv[1:])),
        "settings": vars(a), "timings_s": timings, "extraction": report,
        "skills": [s.to_dict() for s in skills], "tasks": [t.spec.id for t in tasks],
        "replay_unseen": unseen, "conditions": {k: summarise(v) for k, v in records.items()},
        "conditions_by_site": {k: {site: summarise([r for r in v if r["task"].startswith(site + "/")])
                                   for site in a.sites} for k, v in records.items()},
        "episodes": records}
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(results, indent=1) + "\n")
    print(table(results))
    return results


def table(results: dict) -> str:
    rows = ["condition         success    mean steps  mean actions  skill calls  skill step failures  "
            "guided steps  parse errors"]
    for name, s in results["conditions"].items():
        rows.append(f"{name:17s} {s['successes']}/{s['episodes']:<7d} {s['mean_steps']:<11.1f} "
                    f"{s['mean_actions']:<13.1f} {s['skill_calls']:<12d} {s['skill_step_failures']:<20d} "
                    f"{s['guided_steps']:<13d} {s['parse_errors']}")
    rows.append("")
    rows.append("skill (unseen test tasks)                                   replays  successes")
    for name, r in results["replay_unseen"].items():
        rows.append(f"{name:60s} {r['replays']:<8d} {r['successes']}")
    return "\n".join(rows)


if __name__ == "__main__":
    main()
