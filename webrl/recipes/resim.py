"""ReSim (Dyna-Mind stage 1): search trees from real environment interactions, written out as
simulation-aware reasoning traces that `webrl sft` trains on (`sft.demos_dir=<out_dir>`).

    counts = resim_demos(SandboxTaskSource(sites=["widgets"], levels=[0]), make_env, n=64,
                         out_dir="runs/resim", config=ResimConfig(branching=3, depth=2))

Notation: s_t the real state at step t of the episode; a*_t the base policy's action there
(here the task's scripted oracle); b = `branching` actions considered at s_t (a*_t first, then
b-1 alternatives); d = `depth` real steps per branch; V the value of a branch.

Algorithm (per episode, for t = 0 .. `max_states`-1):
1. For each considered action a at s_t: reset the env, replay the chosen prefix a_0..a_{t-1}
   (the sandbox sites and MiniWoB++ are deterministic under the task's seed, so this reaches
   s_t again; a replay whose page differs from s_t is marked `diverged` and never chosen), take
   a, then let the base policy act for d-1 more steps, recording every real next state (URL,
   title, the first listed elements, feedback, error, reward, done).
2. V(branch) = R - `step_cost` * n: R the reward at the branch's end if the episode ended
   within its d steps, else the reward the base policy reaches within `value_steps` further
   steps (0 if it does not finish): a Monte Carlo rollout of the base policy standing in for the
   paper's value function; n the env steps taken (the paper's reward likewise charges each step).
3. The chosen action is the branch of highest V (ties go to the earlier branch, i.e. to the base
   policy's proposal); its first real next state is s_{t+1}.
4. `resim_trace(tree)` writes the tree as one reasoning text: each option's simulated future
   states and value, then the choice and why. The turn's response is
   `<think>{trace}</think>` + the chosen action rendered in `action_format`, so the SFT target
   is the reasoning and the call together (`decided_by="resim"`: the prompt builder keeps a
   non-oracle turn's text as it is).

Departures from the paper (Yu et al. 2025, arXiv 2510.09577) and why:
- The paper's rollout model is an LLM sampled b times per state and its leaves are scored by a
  learned or prompted value function V_nu; here the base policy is the task oracle, the b-1
  other actions are the listed elements' actions drawn with a seeded rng, and V is the
  oracle's real continuation outcome. A CPU tiny model proposes nothing useful, and the
  sandbox's programmatic checker gives an exact value instead of a learned one.
- The paper has a strong (V)LM aggregate each tree into free-form reasoning; here the trace is
  a fixed template filled from the real observations, so every "simulated" state in the trace
  is exactly what the env showed (the paper's aim: faithful simulations) and the text is
  deterministic. Its wording is therefore plainer and more repetitive than the paper's.
- The paper expands by depth-first search over partial rollouts; one branch per considered
  action (a path of d steps, no further branching below the root) keeps the env cost at
  b * (t + d + value_steps) steps per state, since every branch is a replay from reset.
- Values are in the sandbox's reward scale (success 1, failure 0) less `step_cost` a step;
  the paper's environments pay 10 for success and -0.1 a step. Same ordering, other units.
- As in the paper the trajectory follows the chosen actions and each turn's target is the
  trace for its state; past turns keep their traces in the SFT prompt as the policy's
  `context_mode` says (the shipped tiny model's 512-token prompt budget drops them: a trace of
  b=3, d=2 on a widgets page is 800-1000 tokens of its tokenizer).
- No MiniWoB++ env was run here: any env behind the `ReplayEnv` protocol works, and
  `GymReplayEnv` wraps `WebEnv`; only sandbox tasks were tested.
"""
from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Protocol, Sequence

from webrl.actions import Action
from webrl.policy.formats import make_format
from webrl.types import Image, Trajectory, TrajectoryInfo, Turn, TurnObservation, save_trajectories

TRACE_FORMATS = ("som", "compact", "pointer")  # formats that render an action without screenshot geometry
KEEP_MODES = ("success", "all")
SUCCESS_THRESHOLD = 0.5  # a checker reward >= this is a success (as the sandbox checkers score)


class ResimInfraError(RuntimeError):
    """The env failed (a crashed browser, a hung page): not a state to simulate; the episode is dropped."""


@dataclass
class ResimConfig:
    """How ReSim expands and writes its trees."""

    branching: int = 3
    """b: actions considered per state: the base policy's plus b-1 alternatives (fewer when the
    page lists fewer elements)."""
    depth: int = 2
    """d: real steps simulated per branch (the considered action, then d-1 base-policy steps)."""
    value_steps: int = 8
    """Base-policy steps after a branch's last simulated step to find its value (0: a branch
    that has not ended is worth 0)."""
    step_cost: float = 0.05
    """Subtracted from a branch's value per env step it took (simulated and rollout steps), as
    the paper's per-step penalty: of two branches that both succeed the shorter is worth more."""
    max_states: int = 15
    """States expanded per episode; the trajectory stops (truncated) after this many turns."""
    seed: int = 0
    """Seeds the choice of alternatives (with the task id and step)."""
    summary_elements: int = 5
    """Element lines quoted per simulated state in the trace."""
    action_format: str = "pointer"
    """How the chosen call is written after the reasoning: "som", "compact" or "pointer" (the
    format of the policy that will train on the traces; webrl:tiny-webagent-pointer: "pointer")."""
    keep: str = "success"
    """Which episodes become demonstrations: "success" (the checker's reward >= 0.5; the paper
    distils successful searches) or "all" (also failed and unfinished ones)."""

    def __post_init__(self) -> None:
        for name, low in (("branching", 1), ("depth", 1), ("value_steps", 0), ("max_states", 1),
                          ("summary_elements", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"ResimConfig.{name} must be an integer >= {low}, got {value!r}")
        cost = self.step_cost
        if isinstance(cost, bool) or not isinstance(cost, (int, float)) or not 0 <= cost < 1:
            raise ValueError(f"ResimConfig.step_cost must be a number in [0, 1), got {self.step_cost!r}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise ValueError(f"ResimConfig.seed must be an integer, got {self.seed!r}")
        if self.keep not in KEEP_MODES:
            raise ValueError(f"ResimConfig.keep must be one of {KEEP_MODES}, got {self.keep!r}")
        if self.action_format not in TRACE_FORMATS:
            raise ValueError(f"ResimConfig.action_format must be one of {TRACE_FORMATS}, got {self.action_format!r}")


class ReplayEnv(Protocol):
    """The env ReSim drives. Observations are dicts with "url", "title", "elements_text",
    "feedback", "last_action_error", "step", optionally "elements" (element dicts) and
    "screenshot" ((H, W, 3) uint8). Every reset must give the same page for the same task."""

    def reset(self, task: Any) -> dict[str, Any]: ...

    def step(self, action: Action) -> tuple[dict[str, Any], float, bool, dict[str, Any]]: ...


class GymReplayEnv:
    """`ReplayEnv` over a Gymnasium web env (`WebEnv`): elements folded into the observation,
    terminated or truncated as done (the reason in info["end_reason"])."""

    def __init__(self, env: Any):
        self.env = env

    def reset(self, task: Any) -> dict[str, Any]:
        obs, info = self.env.reset(options={"task": task})
        return {**obs, "elements": info.get("elements", [])}

    def step(self, action: Action) -> tuple[dict[str, Any], float, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        info = dict(info, end_reason="terminated" if terminated else info.get("truncation_reason", ""))
        return {**obs, "elements": info.get("elements", [])}, reward, bool(terminated or truncated), info

    def close(self) -> None:
        self.env.close()


BasePolicy = Callable[[Any, dict], Action]


def oracle_policy(task: Any, obs: dict) -> Action:
    """The task's scripted oracle (sees the observation without the screenshot), stop() if it has none."""
    return task.oracle_action({k: v for k, v in obs.items() if k != "screenshot"}) or Action.stop()


# -- the tree (plain data, JSON-able via asdict) ---------------------------------------------------
@dataclass
class StateView:
    """What a real state showed: the text fields of the observation."""

    url: str = ""
    title: str = ""
    elements_text: str = ""
    feedback: str = ""
    error: str = ""

    @classmethod
    def of(cls, obs: dict) -> "StateView":
        return cls(obs.get("url", ""), obs.get("title", ""), obs.get("elements_text", ""),
                   obs.get("feedback", ""), obs.get("last_action_error", ""))

    def same_page(self, other: "StateView") -> bool:
        return (self.url, self.title, self.elements_text) == (other.url, other.title, other.elements_text)


@dataclass
class SimStep:
    """One real step of a branch: the action taken and the state it led to."""

    action: str
    """The action in the compact grammar."""
    state: StateView
    reward: float = 0.0
    done: bool = False
    raised: str = ""
    """The exception the env raised on this action ("" if none); the branch ends there."""


@dataclass
class Branch:
    """One considered action at a state and where it really led."""

    action: str
    proposed_by: str
    """"base" (the base policy's action) or "alternative"."""
    steps: list[SimStep] = field(default_factory=list)
    reward: float = 0.0
    """The env reward where the branch (or its rollout) ended; 0 if it did not end or raised."""
    value: float = 0.0
    """reward - step_cost * env_steps."""
    env_steps: int = 0
    """Env steps the branch took after the replay (simulated plus rollout)."""
    value_source: str = "unfinished"
    """"terminal" (ended within the branch), "rollout" (the base policy finished it within
    value_steps), "unfinished" or "raised"."""
    diverged: bool = False
    """The replay of the prefix did not reach the state's page: never chosen."""


@dataclass
class StateTree:
    """The tree of one state: its real view, the prefix that reaches it, its branches, the choice."""

    step: int
    state: StateView
    prefix: list[str]
    branches: list[Branch]
    chosen: int = 0


@dataclass
class ResimCounts:
    """What `resim_demos` did."""

    episodes: int = 0
    states: int = 0
    branches: int = 0
    env_steps: int = 0
    traces: int = 0
    diverged: int = 0
    not_kept: int = 0
    """Episodes not written: dropped (infrastructure error, a chosen action that raised, every
    branch diverged) or, with keep="success", unsuccessful."""


# -- expansion against the env ----------------------------------------------------------------------
def alternative_actions(base: Action, elements: Sequence[dict], k: int, rng: random.Random) -> list[Action]:
    """Up to `k` actions on other listed elements, in a seeded order: `type` with the base
    action's text into a text field when the base action types, `select` of an option other
    than the selected one for a select, `click` otherwise."""
    pool = [e for e in elements if e.get("id") != base.element]
    rng.shuffle(pool)
    out: list[Action] = []
    for e in pool:
        if len(out) == k:
            break
        options = [o for o in e.get("options") or () if o != e.get("selected")]
        if options:
            action = Action.select(int(e["id"]), options[0])
        elif base.kind == "type" and e.get("tag") in ("input", "textarea"):
            action = Action.type_text(base.text or "", element=int(e["id"]))
        else:
            action = Action.click(int(e["id"]))
        if action != base and action not in out:
            out.append(action)
    return out


def _checked_step(env: ReplayEnv, action: Action) -> tuple[dict, float, bool, dict]:
    """env.step, with an infrastructure end (GymReplayEnv's end_reason "infra_error") raised as
    `ResimInfraError`: a crashed browser must not read as a simulated episode end."""
    obs, reward, done, info = env.step(action)
    if (info or {}).get("end_reason") == "infra_error" or (info or {}).get("infra_error"):
        raise ResimInfraError(f"infrastructure error at {action.to_compact()}: "
                              f"{(info or {}).get('infra_error') or 'the env truncated the episode'}")
    return obs, reward, done, info


def _replay(env: ReplayEnv, task: Any, prefix: Sequence[Action], counts: ResimCounts) -> dict:
    obs = env.reset(task)
    for i, action in enumerate(prefix):
        obs, _, done, _ = _checked_step(env, action)
        counts.env_steps += 1
        if done:
            raise RuntimeError(f"ReSim replay of {task.spec.id}: the prefix ended at its step {i} "
                               f"({action.to_compact()})")
    return obs


def simulate_branch(env: ReplayEnv, task: Any, prefix: Sequence[Action], action: Action, state: StateView,
                    config: ResimConfig, policy: BasePolicy, counts: ResimCounts,
                    proposed_by: str = "base") -> tuple[Branch, Optional[dict]]:
    """Replay `prefix`, take `action`, follow `policy` for depth-1 steps, then find the value.
    Returns the branch and the raw observation after `action` (None if the env raised)."""
    obs = _replay(env, task, prefix, counts)
    branch = Branch(action.to_compact(), proposed_by, diverged=not StateView.of(obs).same_page(state))
    first = None
    for k in range(config.depth + config.value_steps):
        try:
            obs, reward, done, _ = _checked_step(env, action)
        except ValueError as error:  # an env that rejects an action by raising: recorded, not fatal
            counts.env_steps += 1
            if k < config.depth:
                branch.steps.append(SimStep(action.to_compact(), StateView.of(obs), 0.0, True,
                                            f"{type(error).__name__}: {error}"))
            branch.value_source = "raised"
            return _valued(branch, 0.0, k + 1, config), first
        counts.env_steps += 1
        first = obs if k == 0 else first
        if k < config.depth:
            branch.steps.append(SimStep(action.to_compact(), StateView.of(obs), float(reward), bool(done)))
        if done:
            branch.value_source = "terminal" if k < config.depth else "rollout"
            return _valued(branch, float(reward), k + 1, config), first
        action = policy(task, obs)
    return _valued(branch, 0.0, config.depth + config.value_steps, config), first


def _valued(branch: Branch, reward: float, env_steps: int, config: ResimConfig) -> Branch:
    branch.reward, branch.env_steps = reward, env_steps
    branch.value = round(reward - config.step_cost * env_steps, 6)  # no 0.9000000001 in the traces
    return branch


def expand_state(env: ReplayEnv, task: Any, prefix: Sequence[Action], obs: dict, config: ResimConfig,
                 policy: BasePolicy, counts: ResimCounts) -> tuple[StateTree, list[Optional[dict]], list[Action]]:
    """The tree of the state `obs` reached by `prefix`; also each branch's first next observation
    and its action."""
    base = policy(task, obs)
    rng = random.Random(f"{config.seed}:{task.spec.id}:{len(prefix)}")
    actions = [base] + alternative_actions(base, obs.get("elements", []), config.branching - 1, rng)
    state, branches, firsts = StateView.of(obs), [], []
    for i, action in enumerate(actions):
        branch, first = simulate_branch(env, task, prefix, action, state, config, policy, counts,
                                        "base" if i == 0 else "alternative")
        branches.append(branch)
        firsts.append(first)
        counts.diverged += branch.diverged
    ranked = [i for i, b in enumerate(branches) if not b.diverged]
    if not ranked:
        raise ResimInfraError(f"every replay of {task.spec.id} at step {len(prefix)} reached another page "
                              f"(the env is not deterministic under the task's seed)")
    chosen = max(ranked, key=lambda i: (branches[i].value, -i))
    return StateTree(len(prefix), state, [a.to_compact() for a in prefix], branches, chosen), firsts, actions


# -- traces (pure) --------------------------------------------------------------------------------
def describe_state(view: StateView, n_elements: int) -> str:
    """One line of a real state: URL, title, feedback, error and the first `n_elements` element
    lines (ReSim's traces and Dyna-GRPO's refine prompts describe states this way)."""
    parts = [f"URL {view.url}"] + [f'title "{view.title}"'] * bool(view.title)
    if view.feedback:
        parts.append(f"feedback: {view.feedback}")
    if view.error:
        parts.append(f"error: {view.error}")
    lines = [ln for ln in view.elements_text.splitlines() if ln.strip()]
    if n_elements and lines:
        more = f" (+{len(lines) - n_elements} more)" if len(lines) > n_elements else ""
        parts.append("elements: " + "; ".join(lines[:n_elements]) + more)
    return ", ".join(parts)


def _outcome(branch: Branch) -> str:
    worth = f"{branch.env_steps} step(s), so this option is worth {branch.value:.2f}"
    if branch.value_source == "raised":
        return f"an action on this path is rejected after {worth}"
    if branch.value_source == "terminal":
        return f"the episode ends with reward {branch.steps[-1].reward:.2f} after {worth}"
    if branch.value_source == "rollout":
        return f"not finished yet; continuing from there, it ends with reward {branch.reward:.2f} after {worth}"
    return f"not finished yet and no end in sight after {worth}"


def resim_trace(tree: StateTree, summary_elements: int = 5) -> str:
    """The reasoning text of one tree: every considered action's real future states, its value,
    then the chosen action and why."""
    lines = [f"I consider {len(tree.branches)} action(s) and simulate where each leads."]
    for i, b in enumerate(tree.branches, 1):
        who = "my first idea" if b.proposed_by == "base" else "an alternative"
        lines.append(f"Option {i} ({who}): {b.action}.")
        if b.diverged:
            lines.append("  (the page differed on replay; this option is not considered.)")
            continue
        for k, s in enumerate(b.steps, 1):
            lead = "after it" if k == 1 else f"then {s.action}"
            if s.raised:
                lines.append(f"  Step {k}, {lead}: it cannot be done ({s.raised}).")
            else:
                end = f"; the episode ends (reward {s.reward:.2f})" if s.done else ""
                lines.append(f"  Step {k}, {lead}: {describe_state(s.state, summary_elements)}{end}.")
        lines.append(f"  Outcome: {_outcome(b)}.")
    best = tree.branches[tree.chosen]
    ties = [i + 1 for i, b in enumerate(tree.branches) if not b.diverged and b.value == best.value]
    why = (f"it has the highest value ({best.value:.2f})" if len(ties) == 1 else
           f"options {', '.join(map(str, ties))} tie at {best.value:.2f} and it comes first")
    lines.append(f"Decision: option {tree.chosen + 1}, {best.action}, because {why}.")
    return "\n".join(lines)


def resim_response(tree: StateTree, action: Action, config: ResimConfig) -> str:
    """The turn's response: the trace inside <think>, then the call in `config.action_format`."""
    call = make_format(config.action_format).render(action)
    return f"<think>\n{resim_trace(tree, config.summary_elements)}\n</think>\n{call}"


# -- episodes and files ----------------------------------------------------------------------------
def _turn(obs: dict, action: Action, text: str) -> Turn:
    from webrl.envs.observation import compact_elements

    shot = obs.get("screenshot")
    observation = TurnObservation(url=obs.get("url", ""), title=obs.get("title", ""),
                                  elements_text=obs.get("elements_text", ""), feedback=obs.get("feedback", ""),
                                  last_action_error=obs.get("last_action_error", ""), tabs=obs.get("tabs", ""),
                                  step=int(obs.get("step", 0)),
                                  screenshot_size=list(shot.shape[1::-1]) if shot is not None else None,
                                  elements=compact_elements(obs.get("elements", [])))
    return Turn(images=[Image.from_array(shot)] if shot is not None else [], response_text=text, action=action,
                decided_by="resim", observation=observation)


def resim_episode(env: ReplayEnv, task: Any, config: ResimConfig, policy: BasePolicy = oracle_policy,
                  counts: Optional[ResimCounts] = None) -> tuple[Trajectory, list[StateTree]]:
    """One ReSim episode of `task`: a trajectory of trace turns along the chosen actions, and its trees."""
    counts = counts if counts is not None else ResimCounts()
    spec = task.spec
    traj = Trajectory(task_id=spec.id, goal=spec.goal, info=TrajectoryInfo(
        site=getattr(spec, "site", ""), level=int(getattr(spec, "level", 0) or 0), split=getattr(spec, "split", ""),
        start_url=getattr(spec, "start_url", ""), source="resim"))
    obs, prefix, trees = env.reset(task), [], []
    ended, reward = False, None
    while len(trees) < config.max_states and not ended:
        try:
            tree, firsts, actions = expand_state(env, task, prefix, obs, config, policy, counts)
        except ResimInfraError as error:
            traj.drop(f"resim: {error}")
            break
        trees.append(tree)
        counts.states += 1
        counts.branches += len(tree.branches)
        chosen, first = actions[tree.chosen], firsts[tree.chosen]
        turn = _turn(obs, chosen, resim_response(tree, chosen, config))
        traj.turns.append(turn)
        step = tree.branches[tree.chosen].steps[0]
        turn.feedback = step.state.feedback
        ended = step.done
        reward = step.reward if ended and not step.raised else reward
        if first is None:  # the chosen action raised: no next state to go on from
            traj.drop(f"resim: the chosen action {step.action} raised {step.raised}")
            break
        prefix.append(chosen)
        obs = first
    traj.info.task_reward = reward
    traj.info.terminated, traj.info.truncated = ended, not ended
    traj.reward_details = {"resim": {"config": asdict(config), "values": [[b.value for b in t.branches] for t in trees],
                                     "chosen": [t.chosen for t in trees]}}
    return traj, trees


def resim_demos(tasks: Any, env_factory: Callable[[], ReplayEnv], n: int, out_dir: str | Path,
                config: Optional[ResimConfig] = None, policy: BasePolicy = oracle_policy) -> ResimCounts:
    """ReSim traces of `n` episodes into `<out_dir>/demos.jsonl` (what `sft.demos_dir` reads).

    tasks: a TaskSource (`sample(rng)`, drawn with numpy's rng seeded by `config.seed`) or a
    sequence of tasks (the first n). env_factory: a new `ReplayEnv` (closed afterwards if it has
    `close`). Dropped episodes, and with keep="success" unsuccessful ones, are not written (`not_kept`).
    """
    import numpy as np

    config = config or ResimConfig()
    if n < 0:
        raise ValueError(f"resim_demos: n must be >= 0, got {n}")
    if hasattr(tasks, "sample"):
        rng = np.random.default_rng(config.seed)
        chosen = [tasks.sample(rng) for _ in range(n)]
    else:
        chosen = list(tasks)[:n]
    counts, path = ResimCounts(), Path(out_dir) / "demos.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")
    env = env_factory()
    try:
        for task in chosen:
            traj, _ = resim_episode(env, task, config, policy, counts)
            counts.episodes += 1
            reward = traj.info.task_reward
            succeeded = reward is not None and reward >= SUCCESS_THRESHOLD
            if traj.status == "ok" and (config.keep == "all" or succeeded):
                save_trajectories(path, [traj])
                counts.traces += len(traj.turns)
            else:
                counts.not_kept += 1
    finally:
        if hasattr(env, "close"):
            env.close()
    return counts

