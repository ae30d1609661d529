"""ReSim (Dyna-Mind stage 1): search trees from real environment interactions, written out as
simulation-aware reasoning traces that `webrl sft` trains on (`sft.demos_dir=<out_dir>`).

    counts = resim_demos(SandboxTaskSource(sites=["widgets"], levels=[0]), make_env, n=64,
                         out_dir="runs/resim", config=ResimConfig(branching=3, depth=2))

Notation: s_t the real state at step t of the episode; a*_t the base policy's action there
(here the task's scripted oracle); b = `branching` actions considered at s_t (a*_t first, then
b-1 alternatives); d = `depth` real steps per branch; V the value of a branch.

Algorithm (per episode, for t = 0 .. `max_states`-1):
1. Each considered action a at s_t is one episode of the episode runner (`webrl.rollout.episode`):
   reset, replay the chosen prefix a_0..a_{t-1} (`prefix`; the sandbox sites and MiniWoB++ are
   deterministic under the task's seed, so this reaches s_t again; a replay whose page differs
   from s_t, `expect`, is marked `diverged` and never chosen), take a (`first`), then the base
   policy acts (the agent) for at most d-1 + `value_steps` more steps (`max_turns`). The first d
   real next states (URL, title, the first listed elements, feedback, error, reward, done) are
   the branch's simulated steps.
2. V(branch) = R - `step_cost` * n: R the reward at the branch's end if the episode ended
   within its d steps, else the reward the base policy reaches within `value_steps` further
   steps (0 if it does not finish): a Monte Carlo rollout of the base policy standing in for the
   paper's value function; n the env steps taken (the paper's reward likewise charges each step).
3. The chosen action is the branch of highest V (ties go to the earlier branch, i.e. to the base
   policy's proposal); its first real next state is s_{t+1}.
4. `resim_trace(tree)` (`webrl.recipes.resim_trace`, beside the tree's dataclasses) writes the
   tree as one reasoning text: each option's simulated future states and value, then the choice
   and why. The turn's response is `<think>{trace}</think>` + the chosen action rendered in
   `action_format`, so the SFT target is the reasoning and the call together
   (`decided_by="resim"`: the prompt builder keeps a non-oracle turn's text as it is).

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
- An action the env rejects is a step whose state carries the error (`WebEnv` reports it as the
  observation's last_action_error, and the trace says so); an env that raises on an action is an
  infrastructure failure under the episode runner's contract and drops the episode, so there is
  no "raised" value source. A diverged replay is not simulated further (no steps, value 0).
- No MiniWoB++ env was run here: any env slot of the episode runner works (`GymSlot` wraps
  `WebEnv`); only sandbox tasks were tested.
"""
from __future__ import annotations

import dataclasses
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from webrl.actions import Action
from webrl.policy.formats import make_format
from webrl.recipes.resim_trace import Branch, SimStep, StateTree, resim_trace
from webrl.rollout.agents import action_decision
from webrl.rollout.episode import (Decided, Episode, EpisodeInfraError, EpisodeSpec, check_infra, new_trajectory,
                                   observation_of, run_episode)
from webrl.rollout.states import StateView
from webrl.types import Trajectory, Turn, save_trajectories

TRACE_FORMATS = ("som", "compact", "pointer")  # formats that render an action without screenshot geometry
KEEP_MODES = ("success", "all")
SUCCESS_THRESHOLD = 0.5  # a checker reward >= this is a success (as the sandbox checkers score)


class ResimInfraError(RuntimeError):
    """No state to simulate (every replay reached another page); the episode is dropped, as it is
    when the env reports an infrastructure failure (`EpisodeInfraError`)."""


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


BasePolicy = Callable[[Any, dict], Action]
"""(task, view) -> the base policy's action; `view` is what an oracle sees (`oracle_view`: the
observation without the screenshot, plus "elements")."""


def oracle_policy(task: Any, view: dict) -> Action:
    """The task's scripted oracle, stop() if it has none."""
    return task.oracle_action(view) or Action.stop()


def oracle_view_of(result: Any) -> dict:
    """The base policy's view of an `EnvStepResult` (`oracle_view`)."""
    from webrl.envs.observation import oracle_view  # playwright comes with it: only when an env runs

    return oracle_view(result.observation, result.info)


class BaseAgent:
    """The base policy as the episode runner's agent."""

    def __init__(self, policy: BasePolicy, task: Any):
        self.policy, self.task = policy, task

    def __call__(self, request: Any, result: Any) -> Decided:
        action = self.policy(self.task, oracle_view_of(result))
        return Decided(action_decision(action, request.observation))


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
    """Episodes not written: dropped (infrastructure error, every branch diverged) or, with
    keep="success", unsuccessful."""


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


def simulate_branch(env: Any, task: Any, prefix: Sequence[Action], action: Action, state: Any, config: ResimConfig,
                    policy: BasePolicy, counts: ResimCounts, proposed_by: str = "base") -> tuple[Branch, Episode]:
    """One runner episode from reset on the env slot `env`: replay `prefix`, take `action` at
    `state` (the `EnvStepResult` of s_t), follow `policy` for depth-1 + value_steps steps. Returns
    the branch and the episode (turn len(prefix) is the action's, `results[len(prefix)]` its next
    state). Raises `EpisodeInfraError`."""
    t, view = len(prefix), StateView.of(state.observation)
    spec = EpisodeSpec(task, max_turns=t + config.depth + config.value_steps,
                       prefix=[Turn(action=a, response_text=a.to_compact()) for a in prefix],
                       expect=(view.url, view.title, view.elements_text),
                       first=Decided(action_decision(action, observation_of(state))))
    episode = run_episode(spec, env, BaseAgent(policy, task))
    counts.env_steps += episode.env_steps
    turns = episode.trajectory.turns
    # the runner checks `expect` after a replayed prefix; at t = 0 the reset itself must show s_0
    reached = StateView.of(dataclasses.asdict(turns[t].observation)) if len(turns) > t else None
    branch = Branch(action.to_compact(), proposed_by, diverged=reached is None or not reached.same_page(view))
    if branch.diverged:
        return branch, episode
    after = episode.results[t:]
    for turn, result in zip(episode.trajectory.turns[t:t + config.depth], after):
        branch.steps.append(SimStep(turn.action.to_compact(), StateView.of(result.observation), float(result.reward),
                                    result.terminated or result.truncated))
    final = episode.final
    if not (final.terminated or final.truncated):
        return _valued(branch, 0.0, len(after), config), episode
    branch.value_source = "terminal" if len(after) <= config.depth else "rollout"
    return _valued(branch, float(final.reward), len(after), config), episode


def _valued(branch: Branch, reward: float, env_steps: int, config: ResimConfig) -> Branch:
    branch.reward, branch.env_steps = reward, env_steps
    branch.value = round(reward - config.step_cost * env_steps, 6)  # no 0.9000000001 in the traces
    return branch


def expand_state(env: Any, task: Any, prefix: Sequence[Action], state: Any, config: ResimConfig,
                 policy: BasePolicy, counts: ResimCounts) -> tuple[StateTree, list[Episode], list[Action]]:
    """The tree of the state `state` (an `EnvStepResult`) reached by `prefix`; also each branch's
    episode and its action."""
    base = policy(task, oracle_view_of(state))
    rng = random.Random(f"{config.seed}:{task.spec.id}:{len(prefix)}")
    actions = [base] + alternative_actions(base, state.info.get("elements", []), config.branching - 1, rng)
    branches, episodes = [], []
    for i, action in enumerate(actions):
        branch, episode = simulate_branch(env, task, prefix, action, state, config, policy, counts,
                                          "base" if i == 0 else "alternative")
        branches.append(branch)
        episodes.append(episode)
        counts.diverged += branch.diverged
    ranked = [i for i, b in enumerate(branches) if not b.diverged]
    if not ranked:
        raise ResimInfraError(f"every replay of {task.spec.id} at step {len(prefix)} reached another page "
                              f"(the env is not deterministic under the task's seed)")
    chosen = max(ranked, key=lambda i: (branches[i].value, -i))
    tree = StateTree(len(prefix), StateView.of(state.observation), [a.to_compact() for a in prefix], branches, chosen)
    return tree, episodes, actions


def resim_response(tree: StateTree, action: Action, config: ResimConfig) -> str:
    """The turn's response: the trace inside <think>, then the call in `config.action_format`."""
    call = make_format(config.action_format).render(action)
    return f"<think>\n{resim_trace(tree, config.summary_elements)}\n</think>\n{call}"


# -- episodes and files ----------------------------------------------------------------------------
def resim_episode(env: Any, task: Any, config: ResimConfig, policy: BasePolicy = oracle_policy,
                  counts: Optional[ResimCounts] = None) -> tuple[Trajectory, list[StateTree]]:
    """One ReSim episode of `task` on the env slot `env`: a trajectory of trace turns along the
    chosen actions (each the chosen branch's turn as the runner recorded it, its response the
    trace), and its trees."""
    counts = counts if counts is not None else ResimCounts()
    traj = new_trajectory(task, source="resim")
    prefix: list[Action] = []
    trees: list[StateTree] = []
    ended, reward = False, None
    try:
        state = env.reset(task)
        check_infra(state)
        while len(trees) < config.max_states and not ended:
            tree, episodes, actions = expand_state(env, task, prefix, state, config, policy, counts)
            trees.append(tree)
            counts.states += 1
            counts.branches += len(tree.branches)
            chosen, episode = actions[tree.chosen], episodes[tree.chosen]
            turn = episode.trajectory.turns[len(prefix)]
            traj.turns.append(dataclasses.replace(turn, response_text=resim_response(tree, chosen, config),
                                                  decided_by="resim"))
            state = episode.results[len(prefix)]
            ended = state.terminated or state.truncated
            reward = float(state.reward) if ended else reward
            prefix.append(chosen)
    except (ResimInfraError, EpisodeInfraError) as error:
        traj.drop(f"resim: {error}")
    traj.info.task_reward = reward
    traj.info.terminated, traj.info.truncated = ended, not ended
    traj.reward_details = {"resim": {"config": asdict(config), "values": [[b.value for b in t.branches] for t in trees],
                                     "chosen": [t.chosen for t in trees]}}
    return traj, trees


def resim_demos(tasks: Any, env: Any, n: int, out_dir: str | Path, config: Optional[ResimConfig] = None,
                policy: BasePolicy = oracle_policy) -> ResimCounts:
    """ReSim traces of `n` episodes into `<out_dir>/demos.jsonl` (what `sft.demos_dir` reads).

    tasks: a TaskSource (`sample(rng)`, drawn with numpy's rng seeded by `config.seed`) or a
    sequence of tasks (the first n). env: an env slot of the episode runner (`GymSlot(web_env)`;
    the caller closes it). Dropped episodes, and with keep="success" unsuccessful ones, are not
    written (`not_kept`).
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
    return counts
