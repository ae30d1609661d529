"""SimRollout (Dyna-GRPO, Dyna-Mind stage 2): refine a sampled response with the real future
states it led to, and train the refined response on the plain prompt.

    sim = SimRollout(coordinator, config.dyna)
    states = choose_states(trajectories, config.dyna.states_per_iteration, rng)
    simulated = sim.run(tasks_by_id, trajectories, states, max_turns)   # env + inference
    score_trajectories(reward_fn, [e for s in simulated for e in s.refined])
    samples, metrics = refined_samples(simulated, trajectories, config.dyna, success_threshold)
    samples = with_plain_logprobs(samples, learner)                     # old log-probs, plain prompt

Notation: tau a collected trajectory of group g (task T, sampled by the plain policy), s_t the
state of its turn t, a_t the response sampled there, h = `horizon`, K = `REFINEMENTS`.

Per chosen state (tau, t):
1. The plan's real future: tau itself executed a_t in the env and went on, so the real states
   s_{t+1} .. s_{t+h} (each with the action that led there and its feedback, or the episode's
   end) are read from tau's turns (`future_block`). The sandbox sites and MiniWoB++ are
   deterministic under the task's seed, so a second execution would show the same states.
2. The refine prompt is the policy's own prompt for s_t (the same observation and history the
   plain turn was decided on, rendered by the inference workers' PromptBuilder), with the
   future block appended to the task text (`refine_request`). K refined responses a'_t are
   sampled from it by the rollout's inference workers.
3. Each a'_t is executed for real: reset, replay a_0 .. a_{t-1} (the page reached is compared
   with tau's s_t: URL, title and element list; a replay that differs is marked `diverged`
   and its state yields no sample), take a'_t, then let the plain policy finish the episode
   (at most max_turns turns in all). The refined episode is a `Trajectory` (prefix turns,
   refined turn, continuation) scored by the run's reward function like any other.
4. `refined_samples`: A' per refined episode from `webrl.algos.dyna.refine_advantages` against
   the plain group g's rewards; the trained sample is the PLAIN prompt of s_t (tau's turn t:
   its prompt ids and images, exactly what the model saw without future states) + the refined
   response ids. Samples with A' = 0 are left out (they carry no gradient).
5. `with_plain_logprobs`: the refined response was sampled under the refine prompt, so its
   rollout log-probs are not the old policy's on the plain prompt. They are replaced by the
   learner's recomputation on the plain prompt (`LearnerGroup.compute_logprobs`), so the PPO
   ratio starts at 1 and the rollout/learner mismatch check compares like with like.

Departures from the paper (Yu et al. 2025, arXiv 2510.09577; only its abstract and summaries
were readable here) and why:
- One refined state per SimRollout episode (the chosen (tau, t)), the rest of the episode
  follows the plain policy; `states_per_iteration` states a SimRollout iteration. Refining
  every step of every episode would cost a replay of the prefix per step (t steps each) on 2 CPU
  cores.
- The future states come from the collected trajectory instead of a fresh execution of a_t
  (same states in a deterministic env, no env steps spent).
- The future block is text (URL, title, feedback, the first `SUMMARY_ELEMENTS` elements of
  each state, as ReSim's traces describe states); no future screenshots enter the prompt.
- It rides in the task text of the refine prompt: the PromptBuilder has no block of its own for
  it (an `Observation` field would be cleaner; webrl/policy/prompt.py is not this module's).
- The SimRollout iteration trains only on the refined samples (simulation improvement); the
  other iterations are plain GRPO (policy improvement), alternating by `dyna.every`. Our option
  `dyna.train_collected` (off by default) also trains the SimRollout iteration's collected batch
  with GRPO, so no outcome reward is left untrained: at the defaults a SimRollout iteration
  refines 2 states and keeps 0-1 refined samples, which left every other iteration's 3-6
  informative groups unused (measured in benchmarks/credit_assignment.py).

- Refined episodes are not written to the run's trajectory log (the viewer shows collected groups).
- A refine prompt is longer than the plain one; under generator.prompt.max_prompt_tokens the
  PromptBuilder drops its oldest past turns first, as for any long prompt (the shipped tiny
  model's 512-token budget does so after a few turns).

Refined episodes run through the shared episode runner (`webrl.rollout.episode`: the prefix
replay, its check against the recorded state, the refined decision as the first answer) on the
coordinator's env slots and inference workers (`RolloutCoordinator.episode` / `decide`), so they
are built exactly as collected ones are, on either engine and with the run's policy wrappers.
"""
from __future__ import annotations

import asyncio
import dataclasses
import random
from dataclasses import dataclass, field
from typing import Any, Sequence

from webrl.policy.seeds import derive_seed, sub_seed
from webrl.policy.types import PolicyRequest, marked_from_turn
from webrl.rollout.episode import Decided, light_history, new_trajectory
from webrl.types import Trajectory, Turn

REFINE_RULES = ("beat_both", "joint_group")
FUTURE_HEADER = "Real outcome of a draft action at this step (it was executed; use it to choose your action):"


SUMMARY_ELEMENTS = 5
"""Element lines quoted per future state in the refine prompt (ReSim's state summaries run about
this long; more lengthen a prompt the tiny model's 512-token budget already cuts)."""
REFINEMENTS = 1
"""K: refined responses sampled per chosen state, each executed to the episode's end (the
paper's one; `SimRollout(refinements=)` takes more, each costing a replay and an episode)."""


@dataclass
class DynaConfig:
    """Dyna-GRPO: SimRollout iterations (refine with real future states) alternating with GRPO.
    Off unless `every` is set."""

    every: int = 0
    """0 = off (plain GRPO). N >= 1 runs Dyna-GRPO: iteration i (0-based) is a SimRollout iteration
    when i % N == 0, a plain GRPO iteration otherwise (2: SimRollout, GRPO, SimRollout, ..., the
    paper's alternation; 1: SimRollout only). Needs learner.objective=grpo and rollout.mode=sync;
    runs on either rollout engine and with the policy wrappers, except a cascade whose head turns
    keep no tokens."""
    states_per_iteration: int = 2
    """States s_t refined per SimRollout iteration, drawn from the iteration's collected turns."""
    horizon: int = 2
    """h: real future states (after a_t, a_{t+1}, ...) shown in the refine prompt."""
    refine_advantage: str = "beat_both"
    """A' rule (`webrl.algos.dyna.REFINE_ADVANTAGES`): beat_both | joint_group."""
    train_collected: bool = False
    """Also train the SimRollout iteration's own collected batch (its GRPO samples beside the
    refined ones, `alongside`). Off: the paper's alternation, where that batch only supplies the
    states to refine and its outcome rewards go untrained (half of the iterations' batches)."""

    def __post_init__(self) -> None:
        if not isinstance(self.every, int) or isinstance(self.every, bool) or self.every < 0:
            raise ValueError(f"dyna.every must be an integer >= 0 (0 = off), got {self.every!r}")
        for name in ("states_per_iteration", "horizon"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"dyna.{name} must be an integer >= 1, got {value!r}")
        if self.refine_advantage not in REFINE_RULES:
            raise ValueError(f"dyna.refine_advantage must be one of {REFINE_RULES}, got {self.refine_advantage!r}")

    @property
    def enabled(self) -> bool:
        """Whether the run is Dyna-GRPO (dyna.every > 0)."""
        return self.every > 0

    def is_sim_iteration(self, iteration: int) -> bool:
        """Whether 0-based `iteration` is a SimRollout iteration."""
        return self.enabled and iteration % self.every == 0


def _register_moved_keys() -> None:
    from webrl.config import moved_keys

    moved_keys({
        "dyna.enabled": "merged into dyna.every: dyna.every=2 (SimRollout every other iteration, the old default) "
                        "runs Dyna-GRPO, 0 (the default) is off",
        "dyna.refinements": f"removed: fixed at {REFINEMENTS} (webrl.rollout.dyna.REFINEMENTS; SimRollout(refinements=))",
        "dyna.summary_elements": f"removed: fixed at {SUMMARY_ELEMENTS} (webrl.rollout.dyna.SUMMARY_ELEMENTS)",
    })


_register_moved_keys()


@dataclass
class SimState:
    """One simulated state (tau, t) and its K refined episodes."""

    trajectory_index: int
    turn_index: int
    future: str
    """The future block shown in the refine prompt."""
    refined: list[Trajectory] = field(default_factory=list)
    """Refined episodes: tau's prefix turns, the refined turn (index t), the continuation."""
    diverged: int = 0
    """Refined episodes whose prefix replay reached another page than s_t (not trained on)."""
    replayed: list[dict] = field(default_factory=list)
    """Per refined episode: the replayed page's url / title / elements_text (for checks)."""
    env_steps: int = 0
    """Env steps spent: prefix replays plus refined turns and continuations."""


# -- pure pieces ---------------------------------------------------------------------------------
def choose_states(trajectories: Sequence[Trajectory], n: int, rng: random.Random) -> list[tuple[int, int]]:
    """Up to n (trajectory index, turn index) pairs, drawn uniformly without replacement among the
    sampled turns (response ids present) of scored "ok" trajectories; sorted."""
    pool = [(i, t) for i, traj in enumerate(trajectories) if traj.status == "ok" and traj.reward is not None
            for t, turn in enumerate(traj.turns) if turn.response_ids]
    return sorted(rng.sample(pool, min(n, len(pool))))


def _action_text(turn: Turn) -> str:
    if turn.action is not None:
        return turn.action.to_compact()
    return f"(unparseable: {turn.parse_error or 'no action'})"


def future_block(traj: Trajectory, t: int, horizon: int, summary_elements: int = SUMMARY_ELEMENTS) -> str:
    """The real future of turn t's response: for k = 0 .. h-1, the action of turn t+k and the state
    it led to (turn t+k+1's page), or, after the last turn, its feedback and how the episode ended."""
    from webrl.rollout.states import StateView, describe_state

    lines = [FUTURE_HEADER, f"Draft action: {_action_text(traj.turns[t])}"]
    for k in range(t, min(t + horizon, len(traj.turns))):
        action = _action_text(traj.turns[k])
        if k + 1 < len(traj.turns):
            rec = traj.turns[k + 1].observation
            view = StateView(rec.url, rec.title, rec.elements_text, rec.feedback, rec.last_action_error)
            lines.append(f"After {action}: {describe_state(view, summary_elements)}.")
            continue
        feedback = f" (feedback: {traj.turns[k].feedback})" if traj.turns[k].feedback else ""
        info = traj.info
        scored = info.terminated and info.task_reward is not None
        end = (f"the episode ended with reward {info.task_reward:.2f}" if scored
               else "the episode ended" if info.terminated else "the step limit was reached")
        lines.append(f"After {action}{feedback}: {end}.")
    return "\n".join(lines)


def plain_request(traj: Trajectory, t: int, keep_images: int) -> PolicyRequest:
    """The request turn t of `traj` was decided on: its recorded observation and the past turns."""
    observation = marked_from_turn(traj.turns[t], traj.goal)
    return PolicyRequest(observation, light_history(traj.turns[:t], keep_images), request_id=f"{traj.group_id}/{t}")


def refine_request(traj: Trajectory, t: int, future: str, keep_images: int) -> PolicyRequest:
    """`plain_request` with the future block appended to the task text."""
    plain = plain_request(traj, t, keep_images)
    observation = dataclasses.replace(plain.observation, goal=f"{plain.observation.goal}\n\n{future}")
    return PolicyRequest(observation, plain.history, request_id=f"dyna/{plain.request_id}")


# -- the env and inference side -------------------------------------------------------------------
class SimRollout:
    """Runs refined episodes over a `RolloutCoordinator`'s env slots and inference workers (the
    run's sampling policy, whatever its engine and wrappers): each one is an episode of the shared
    runner (`webrl.rollout.episode`) that replays tau's first t turns, checks it reached s_t, takes
    the refined decision and lets the policy finish."""

    def __init__(self, coordinator: Any, config: DynaConfig, refinements: int = REFINEMENTS):
        if refinements < 1:
            raise ValueError(f"SimRollout.refinements must be >= 1, got {refinements}")
        self.coordinator, self.config, self.refinements = coordinator, config, refinements

    def run(self, tasks: dict[str, Any], trajectories: Sequence[Trajectory], states: Sequence[tuple[int, int]],
            max_turns: int) -> list[SimState]:
        """Simulate every state (tasks: task id -> task); states run concurrently over the env slots."""
        from webrl.rollout.coordinator import run_coroutine

        return run_coroutine(self._run(tasks, trajectories, states, max_turns))

    async def _run(self, tasks, trajectories, states, max_turns) -> list[SimState]:
        slots = self.coordinator.slot_queue()
        return list(await asyncio.gather(*(self._state(tasks[trajectories[i].task_id], trajectories[i], i, t,
                                                       max_turns, slots) for i, t in states)))

    async def _state(self, task, traj: Trajectory, i: int, t: int, max_turns: int, slots) -> SimState:
        c, co = self.config, self.coordinator
        state = SimState(i, t, future_block(traj, t, c.horizon))
        request = refine_request(traj, t, state.future, co.config.keep_history_images)
        plain = traj.turns[t].observation
        for k in range(self.refinements):
            seed = None if co.seed is None else derive_seed(co.seed, "dyna", traj.group_id, i, t, k)
            decision, version = await co.decide(dataclasses.replace(request, request_id=f"{request.request_id}/{k}",
                                                                     seed=sub_seed(seed, "refine")))
            spec = co.episode_spec(task, f"dyna:{traj.group_id}", max_turns, prefix=traj.turns[:t], source="dyna",
                                   expect=(plain.url, plain.title, plain.elements_text),
                                   first=Decided(decision, version, "dyna_refine"), seed=seed)
            slot = await slots.get()
            try:
                episode = await co.episode(spec, slot)
                refined, replayed, steps = episode.trajectory, episode.replayed or {}, episode.env_steps
            except Exception as error:  # an infrastructure failure: the episode is not scored
                refined = new_trajectory(task, spec.group_id, "dyna")
                refined.drop(f"dyna: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}")
                replayed, steps = {}, 0
            finally:
                slots.put_nowait(slot)
            state.refined.append(refined)
            state.replayed.append(replayed)
            state.env_steps += steps
            state.diverged += refined.status == "dropped" and (refined.drop_reason or "").startswith("diverged")
        return state


# -- samples --------------------------------------------------------------------------------------
def refined_samples(states: Sequence[SimState], trajectories: Sequence[Trajectory], config: DynaConfig,
                    success_threshold: float = 0.5) -> tuple[list, dict[str, float]]:
    """Learner samples of the scored refined episodes: tau's plain prompt at s_t + the refined
    response, advantage A' against the plain group's rewards; A' = 0 left out. Also the metrics."""
    import torch

    from webrl.algos.dyna import refine_advantages, refine_metrics
    from webrl.learner.samples import LearnerSample

    groups: dict[str, list[float]] = {}
    for traj in trajectories:
        if traj.status == "ok" and traj.reward is not None:
            groups.setdefault(traj.group_id, []).append(float(traj.reward))
    group_numbers = {g: n for n, g in enumerate(dict.fromkeys(t.group_id for t in trajectories))}
    samples, all_adv, all_r, all_plain = [], [], [], []
    for state in states:
        traj = trajectories[state.trajectory_index]
        scored = [e for e in state.refined if e.status == "ok" and e.reward is not None]
        if not scored or traj.group_id not in groups:
            continue
        plain = torch.tensor(groups[traj.group_id], dtype=torch.float32)  # (N,)
        refined = torch.tensor([e.reward for e in scored], dtype=torch.float32)  # (K,)
        adv = refine_advantages(refined, plain, config.refine_advantage, success_threshold=success_threshold)
        all_adv.append(adv)
        all_r.append(refined)
        all_plain.append(plain.mean().expand(len(scored)))
        original = traj.turns[state.turn_index]
        for episode, a in zip(scored, adv.tolist()):
            refined_turn = episode.turns[state.turn_index]
            if a == 0.0 or not refined_turn.response_ids:
                continue
            samples.append(LearnerSample(prompt_ids=list(original.prompt_ids),  # the plain prompt of s_t
                                         response_ids=list(refined_turn.response_ids),
                                         images=list(original.images), advantage=float(a),
                                         group_index=group_numbers[traj.group_id], trajectory_index=len(samples),
                                         turn_index=state.turn_index, reward=float(episode.reward),
                                         policy_version=refined_turn.policy_version))
    cat = (lambda xs: torch.cat(xs) if xs else torch.zeros(0))
    metrics = {f"dyna/{k}": v for k, v in refine_metrics(cat(all_adv), cat(all_r), cat(all_plain),
                                                         success_threshold=success_threshold).items()}
    metrics.update({"dyna/states_simulated": float(len(states)),
                    "dyna/refined_episodes": float(sum(len(s.refined) for s in states)),
                    "dyna/refined_scored": float(len(torch.cat(all_r)) if all_r else 0),
                    "dyna/replays_diverged": float(sum(s.diverged for s in states)),
                    "dyna/sim_env_steps": float(sum(s.env_steps for s in states)),
                    "dyna/refine_samples": float(len(samples))})
    return samples, metrics


def alongside(collected: Sequence[Any], refined: Sequence[Any]) -> list:
    """One update's samples: the collected batch's GRPO samples, then the refined ones, whose
    trajectory_index and group_index move past the collected ones' (a refined episode is its own
    trajectory: "traj-mean-token-mean" aggregation weighs it as one, not as part of collected
    trajectory i). Indices are shifted, not renumbered, so refined samples of one state stay
    together."""
    if not collected:
        return list(refined)
    t0 = max(s.trajectory_index for s in collected) + 1
    g0 = max(s.group_index for s in collected) + 1
    return [*collected, *(dataclasses.replace(s, trajectory_index=t0 + s.trajectory_index, group_index=g0 + s.group_index)
                          for s in refined)]


def with_plain_logprobs(samples: Sequence[Any], learner: Any) -> list:
    """The samples with rollout_logprobs = the learner's log-probs of the refined response on the
    plain prompt (`learner.compute_logprobs`): the old policy of the prompt actually trained on."""
    if not samples:
        return []
    logprobs = learner.compute_logprobs(list(samples)).logprobs
    return [dataclasses.replace(s, rollout_logprobs=[float(x) for x in lp]) for s, lp in zip(samples, logprobs)]
