"""SimRollout (webrl/rollout/dyna.py): the future block, the state draw, the refine request, the
samples on the plain prompt, the replay over stand-ins and, with Chromium and the shipped tiny
model, the replay reaching the collected page and the trained prompt being the plain one."""
import asyncio
import concurrent.futures
import random

import pytest

from webrl.actions import Action
from webrl.rollout.dyna import (FUTURE_HEADER, DynaConfig, SimRollout, SimState, alongside, choose_states,
                                future_block, plain_request, refine_request, refined_samples)
from webrl.types import Image, Trajectory, TrajectoryInfo, Turn


def _turn(step, url, elements="", feedback="", action=None, ids=(7,), image=False):
    obs = {"url": url, "title": f"Page {step}", "elements_text": elements, "feedback": feedback, "step": step,
           "screenshot_size": [2, 2] if image else None}
    return Turn(prompt_ids=[100 + step, 1], response_ids=list(ids), logprobs=[-0.1] * len(ids),
                images=[Image.from_array(__import__("numpy").zeros((2, 2, 3), "uint8"))] if image else [],
                response_text=action.to_compact() if action else "???", action=action,
                parse_error=None if action else "no call", observation=obs, policy_version=3)


def _trajectory(group="0:0:t", reward=1.0, terminated=True):
    turns = [_turn(0, "http://s/a", "[1] button Go", action=Action.click(1), image=True),
             _turn(1, "http://s/b", "[2] link x\n[3] link y", feedback="Clicked 1", action=Action.click(3), image=True),
             _turn(2, "http://s/c", "", feedback="Clicked 3", action=Action.stop(), image=True)]
    turns[-1].feedback = "Stopped"
    info = TrajectoryInfo(task_reward=reward if terminated else 0.0, terminated=terminated, truncated=not terminated)
    return Trajectory(task_id="t", group_id=group, goal="Open y.", turns=turns, reward=reward, info=info)


def test_future_block_reads_the_real_next_states_by_hand():
    traj = _trajectory()
    # after click(1) the page was turn 1's (b, with its feedback and elements); after click(3) turn 2's
    assert future_block(traj, 0, 2, summary_elements=1) == "\n".join([
        FUTURE_HEADER, "Draft action: click(1)",
        'After click(1): URL http://s/b, title "Page 1", feedback: Clicked 1, elements: [2] link x (+1 more).',
        'After click(3): URL http://s/c, title "Page 2", feedback: Clicked 3.'])
    # the last turn: its own feedback, then how the episode ended (the horizon runs past the end)
    assert future_block(traj, 2, 3).splitlines()[1:] == [
        "Draft action: stop()", "After stop() (feedback: Stopped): the episode ended with reward 1.00."]
    truncated = _trajectory(terminated=False)
    assert future_block(truncated, 2, 1).endswith("After stop() (feedback: Stopped): the step limit was reached.")
    truncated.turns[2].action, truncated.turns[2].parse_error = None, "no call"
    assert "Draft action: (unparseable: no call)" in future_block(truncated, 2, 1)


def test_choose_states_draws_sampled_turns_of_scored_trajectories():
    scored, unscored, dropped = _trajectory(), _trajectory(reward=None), _trajectory()
    dropped.drop("infra")
    scored.turns[1].response_ids = []  # an unsampled (scripted) turn is no state to refine
    trajectories = [unscored, scored, dropped]
    assert choose_states(trajectories, 10, random.Random(0)) == [(1, 0), (1, 2)]
    one = choose_states(trajectories, 1, random.Random(5))
    assert one == choose_states(trajectories, 1, random.Random(5)) and one[0] in [(1, 0), (1, 2)]


def test_refine_request_is_the_plain_request_plus_the_block_in_the_task():
    traj = _trajectory()
    plain = plain_request(traj, 2, keep_images=1)
    refine = refine_request(traj, 2, "FUTURE", keep_images=1)
    assert plain.observation.goal == "Open y." and refine.observation.goal == "Open y.\n\nFUTURE"
    assert plain.observation.url == "http://s/c" and plain.observation.feedback == "Clicked 3"
    assert plain.observation.screenshot is traj.turns[2].images[-1]
    assert refine.history == plain.history and len(plain.history) == 2
    assert [len(t.images) for t in plain.history] == [0, 1]  # images only on the last keep_images past turns
    assert traj.turns[0].images  # the trajectory itself keeps them


def _refined(traj, t, reward, response=(9, 9)):
    turns = [Turn(**{**x.__dict__}) for x in traj.turns[:t]]
    refined_turn = Turn(prompt_ids=[555, 556, 557], response_ids=list(response), logprobs=[-2.0] * len(response),
                        action=Action.click(3), policy_version=4, decided_by="dyna_refine")
    return Trajectory(task_id="t", group_id=f"dyna:{traj.group_id}", goal=traj.goal, turns=turns + [refined_turn],
                      reward=reward)


def test_refined_samples_train_the_refined_response_on_the_plain_prompt():
    # group g: plain rewards [0, 0] (mean 0); group h: [1, 1]. State (0, 1) of g refines to
    # success: beat_both A' = 1. State (2, 0) of h refines to success too, but the plain group
    # already succeeds (1 > 1 fails): A' = 0, left out. A dropped refinement is not scored.
    g0, g1 = _trajectory("g", 0.0), _trajectory("g", 0.0)
    h0, h1 = _trajectory("h", 1.0), _trajectory("h", 1.0)
    trajectories = [g0, g1, h0, h1]
    lost = _refined(g0, 1, None)
    lost.drop("dyna: replay diverged")
    states = [SimState(0, 1, "F", refined=[_refined(g0, 1, 1.0), lost], diverged=1, env_steps=5),
              SimState(2, 0, "F", refined=[_refined(h0, 0, 1.0, response=(8,))], env_steps=2)]
    samples, metrics = refined_samples(states, trajectories, DynaConfig(every=2), success_threshold=0.5)
    (sample,) = samples
    assert sample.prompt_ids == g0.turns[1].prompt_ids == [101, 1]  # the plain prompt, not [555, 556, 557]
    assert sample.images == g0.turns[1].images and sample.response_ids == [9, 9]
    assert sample.rollout_logprobs == []  # filled in by the learner on the plain prompt (with_plain_logprobs)
    assert (sample.advantage, sample.group_index, sample.turn_index, sample.reward) == (1.0, 0, 1, 1.0)
    assert metrics == {"dyna/refine_success_rate": 1.0, "dyna/refine_improved": 0.5, "dyna/refine_positive": 1.0,
                       "dyna/refine_zero": 1.0, "dyna/refine_negative": 0.0, "dyna/states_simulated": 2.0,
                       "dyna/refined_episodes": 3.0, "dyna/refined_scored": 2.0, "dyna/replays_diverged": 1.0,
                       "dyna/sim_env_steps": 7.0, "dyna/refine_samples": 1.0}
    joint, _ = refined_samples(states, trajectories, DynaConfig(every=2, refine_advantage="joint_group"))
    # g: union [0, 0, 1]: (1 - 1/3) / (std 0.57735 + 1e-6); h: union [1, 1, 1] has no spread -> 0, left out
    assert [round(s.advantage, 4) for s in joint] == [round((2 / 3) / (0.5773503 + 1e-6), 4)]


def test_alongside_moves_refined_samples_past_the_collected_trajectories():
    from webrl.learner.samples import LearnerSample

    def sample(traj, group, adv):
        return LearnerSample(prompt_ids=[1], response_ids=[2], advantage=adv, group_index=group, trajectory_index=traj)

    # collected: trajectories 0, 0, 3 (groups 0, 0, 1), e.g. after a zero-variance group was dropped
    collected = [sample(0, 0, 0.5), sample(0, 0, 0.5), sample(3, 1, -0.5)]
    refined = [sample(0, 0, 1.0), sample(1, 2, -1.0)]  # refined_samples numbers them 0, 1
    out = alongside(collected, refined)
    assert out[:3] == collected  # untouched, in order
    # shifted by max + 1: trajectories 4 and 5, groups 2 and 4; advantages kept
    assert [(s.trajectory_index, s.group_index, s.advantage) for s in out[3:]] == [(4, 2, 1.0), (5, 4, -1.0)]
    assert alongside([], refined) == refined and alongside(collected, []) == collected


def test_with_plain_logprobs_asks_the_learner_for_the_plain_prompts():
    from webrl.learner.samples import LearnerSample
    from webrl.rollout.dyna import with_plain_logprobs

    class Learner:
        def compute_logprobs(self, samples):
            self.seen = [s.prompt_ids for s in samples]
            return type("R", (), {"logprobs": [[-0.25] * len(s.response_ids) for s in samples]})()

    learner = Learner()
    out = with_plain_logprobs([LearnerSample([1, 2], [3, 4], advantage=1.0)], learner)
    assert learner.seen == [[1, 2]] and out[0].rollout_logprobs == [-0.25, -0.25] and out[0].advantage == 1.0
    assert with_plain_logprobs([], learner) == []


def test_dyna_config_errors_name_the_key():
    with pytest.raises(ValueError, match=r"dyna.every must be an integer >= 0 \(0 = off\), got -1"):
        DynaConfig(every=-1)
    with pytest.raises(ValueError, match=r"dyna.horizon must be an integer >= 1, got 0"):
        DynaConfig(horizon=0)
    with pytest.raises(ValueError, match=r"dyna.refine_advantage must be one of \('beat_both', 'joint_group'\)"):
        DynaConfig(refine_advantage="max")
    assert [DynaConfig(every=2).is_sim_iteration(i) for i in range(4)] == [True, False, True, False]
    assert [DynaConfig(every=1).is_sim_iteration(i) for i in range(3)] == [True, True, True]
    assert not DynaConfig().enabled and not DynaConfig().is_sim_iteration(0)  # every=0: off


@pytest.mark.parametrize("old, new", [("dyna.enabled=true", "dyna.every=2"),
                                      ("dyna.refinements=2", "webrl.rollout.dyna.REFINEMENTS"),
                                      ("dyna.summary_elements=3", "webrl.rollout.dyna.SUMMARY_ELEMENTS")])
def test_old_dyna_keys_fail_naming_their_replacement(old, new):
    from webrl.config import ConfigError, load_config
    from webrl.run.config import WebRLConfig

    with pytest.raises(ConfigError, match=rf"{old.split('=')[0]}.*is gone: .*{new}"):
        load_config(WebRLConfig, None, [old])


# -- over the coordinator's stand-ins (tests/rollout/test_coordinator_logic.py) ------------------
class DriftEnv:
    """CountEnv whose element list names the reset count when `drift`: a replay never matches."""

    def __init__(self, drift=False):
        from tests.rollout.test_coordinator_logic import CountEnv

        self.inner, self.drift, self.resets = CountEnv(target=2), drift, 0

    async def reset(self, slot, seed, options):
        self.resets += 1
        result = await self.inner.reset(slot, seed, options)
        result.observation["elements_text"] = f"reset {self.resets}" if self.drift else "[0] button"
        return result

    async def step(self, slot, action):
        result = await self.inner.step(slot, action)
        result.observation["elements_text"] = f"reset {self.resets}" if self.drift else "[0] button"
        return result


class RecordingEngine:
    """Clicks until clicks=2, then stops (as ScriptedEngine); records every request's goal."""

    def __init__(self):
        self.goals = []

    def act(self, requests):
        from webrl.policy.types import Decision

        out = []
        for r in requests:
            self.goals.append(r.observation.goal)
            action = Action.stop() if r.observation.feedback == "clicks=2" else Action.click(0)
            out.append(Decision(parsed=action, response_text=action.to_compact(), prompt_ids=[1, 2],
                                response_ids=[3], logprobs=[-0.5]))
        return out

    def load_weights(self, weights):
        pass


def _stand_in_run(env, max_turns=5):
    from tests.rollout.test_coordinator_logic import AsyncInference, _tasks
    from webrl.rollout import InferenceConfig, InferenceWorker, RolloutConfig, RolloutCoordinator

    engine = RecordingEngine()
    worker = InferenceWorker(engine, InferenceConfig(batch_window_s=0.0), version=2)
    config = RolloutConfig(group_size=1, max_turns=max_turns)
    coordinator = RolloutCoordinator([(env, 0)], [AsyncInference(worker)], config)
    (task,) = _tasks(1)
    (traj,), _ = coordinator.collect([task], 0)
    traj.reward = traj.info.task_reward
    states = SimRollout(coordinator, DynaConfig(every=1, horizon=1), refinements=2).run(
        {task.spec.id: task}, [traj], [(0, 1)], max_turns)
    return traj, states[0], engine


def test_sim_rollout_replays_the_prefix_and_finishes_the_refined_episode():
    traj, state, engine = _stand_in_run(DriftEnv())
    # collected: click, click, stop (reward 1). State t=1: the draft click(0) led to clicks=2
    assert [t.action.kind for t in traj.turns] == ["click", "click", "stop"] and traj.reward == 1.0
    assert state.future.splitlines()[1:] == ["Draft action: click(0)",
                                             'After click(0): URL http://127.0.0.1/, feedback: clicks=2, '
                                             'elements: [0] button.']
    refine_goals = [g for g in engine.goals if FUTURE_HEADER in g]
    assert refine_goals == [f"click twice then stop\n\n{state.future}"] * 2  # K = 2 refinements
    assert len(state.refined) == 2 and state.diverged == 0
    for episode in state.refined:
        # the prefix (1 click replayed), the refined click, then the policy stops at clicks=2
        assert episode.status == "ok" and [t.decided_by for t in episode.turns] == ["generator", "dyna_refine",
                                                                                     "generator"]
        assert episode.info.task_reward == 1.0 and episode.group_id == "dyna:" + traj.group_id
        assert episode.turns[0].prompt_ids == traj.turns[0].prompt_ids
    assert state.env_steps == 2 * (1 + 2)  # per refinement: 1 replayed step, the refined click, the stop


def test_a_replay_that_reaches_another_page_is_dropped_not_trained():
    _, state, _ = _stand_in_run(DriftEnv(drift=True))
    assert state.diverged == 2 and all(e.status == "dropped" and "diverged" in e.drop_reason for e in state.refined)
    assert state.env_steps == 2 * 1  # only the replayed prefix


# -- real Chromium, the shipped tiny model -------------------------------------------------------
class ThreadedWorker:
    """The coordinator's async env interface over a plain EnvWorker, on the thread its sync
    Playwright objects belong to."""

    def __init__(self, config):
        from webrl.envs import EnvWorker

        self.pool = concurrent.futures.ThreadPoolExecutor(1)
        self.worker = self.pool.submit(EnvWorker, config).result()

    async def reset(self, slot, seed, options):
        return await asyncio.get_running_loop().run_in_executor(self.pool, self.worker.reset, slot, seed, options)

    async def step(self, slot, action):
        return await asyncio.get_running_loop().run_in_executor(self.pool, self.worker.step, slot, action)

    def close(self):
        self.pool.submit(self.worker.close).result()
        self.pool.shutdown()


@pytest.mark.browser
@pytest.mark.slow
def test_sim_rollout_on_a_sandbox_page_replays_to_the_collected_state_and_trains_the_plain_prompt():
    from tests.rollout.test_coordinator_logic import AsyncInference
    from webrl.config import load_config
    import dataclasses
    from webrl.envs.sites.source import make_task
    from webrl.evaluation.summary import resolve_checkpoint
    from webrl.reward import build_reward, score_trajectories
    from webrl.rollout import InferenceConfig, InferenceWorker, RolloutCoordinator
    from webrl.engines.engine import GeneratorEngineFactory
    from webrl.run.config import WebRLConfig

    import torch

    torch.manual_seed(0)  # the tiny model samples: the same trajectory every run
    cfg = load_config(WebRLConfig, None, ["rollout.max_turns=2", "rollout.group_size=1"])
    engine = GeneratorEngineFactory(resolve_checkpoint(cfg.model.path), cfg.generator)()
    inference = AsyncInference(InferenceWorker(engine, InferenceConfig(batch_window_s=0.0)))
    env = ThreadedWorker(dataclasses.replace(cfg.env, num_slots=1, threads=1))
    try:
        coordinator = RolloutCoordinator([(env, 0)], [inference], cfg.rollout)
        task = make_task("widgets", 1, "train", 3)  # a multi-step task: the tiny model takes several turns
        (traj,), _ = coordinator.collect([task], 0)
        score_trajectories(build_reward(cfg.reward), [traj])
        t = len(traj.turns) - 1  # the latest state: the longest prefix to replay
        (state,) = SimRollout(coordinator, DynaConfig(every=2, horizon=2)).run(
            {task.spec.id: task}, [traj], [(0, t)], cfg.rollout.max_turns)
        (episode,) = state.refined
        assert episode.status == "ok", episode.drop_reason
        original = traj.turns[t].observation
        page = {"url": original.url, "title": original.title, "elements_text": original.elements_text}
        assert state.replayed == [page]
        assert original.elements_text  # a page with elements, compared line for line
        assert episode.turns[t].observation.elements_text == original.elements_text
        assert state.env_steps >= t + 1

        policy = engine.policy
        decode = policy.tokenizer.decode
        # the plain request rebuilt from the trajectory renders to exactly the prompt the turn saw
        assert policy.prompt_ids(policy.builder.render(plain_request(traj, t, cfg.rollout.keep_history_images))) \
            == traj.turns[t].prompt_ids
        assert FUTURE_HEADER in decode(episode.turns[t].prompt_ids)  # the refined response saw the future

        episode.reward = 1.0  # score the refinement as a success over a failed plain group: A' = 1
        traj.reward = 0.0
        (sample,), _ = refined_samples([state], [traj], DynaConfig(every=2))
        assert sample.prompt_ids == traj.turns[t].prompt_ids and FUTURE_HEADER not in decode(sample.prompt_ids)
        assert sample.response_ids == episode.turns[t].response_ids and sample.advantage == 1.0
        assert len(sample.images) == len(traj.turns[t].images)
    finally:
        env.close()
