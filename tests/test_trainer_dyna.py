"""Dyna-GRPO through the trainer from the config: a SimRollout iteration then a GRPO iteration,
on real Chromium sandbox pages with the shipped tiny model and the real learner in process (no Ray)."""
import json

import pytest

from tests.rollout.test_dyna import ThreadedWorker
from tests.test_trainer import LocalActors
from webrl.config import ConfigError, load_config
from webrl.run.config import WebRLConfig


@pytest.mark.parametrize("overrides, message", [
    (["dyna.horizon=3"], r"dyna=.* has no effect: dyna.every is 0 \(off\)"),
    (["dyna.train_collected=true"], r"dyna=.*train_collected=True.* has no effect: dyna.every is 0 \(off\)"),
    (["dyna.every=2", "learner.objective=ppo"],
     r"dyna.every \(Dyna-GRPO\) needs learner.objective=grpo"),
    (["dyna.every=2", "rollout.mode=async"], r"dyna.every \(Dyna-GRPO\) needs rollout.mode=sync"),
    (["dyna.every=2", "policy.wrappers=[cascade]", "policy.cascade.head_turns=exclude",
      "policy.cascade.heads_dir=HEADS"], r"dyna.every \(Dyna-GRPO\) with policy.cascade.head_turns=exclude"),
    (["dyna.every=2", "dyna.refine_advantage=best"], r"dyna.refine_advantage must be one of"),
    (["dyna.every=2", "dyna.states_per_iteration=0"], r"dyna.states_per_iteration must be an integer >= 1"),
])
def test_dyna_settings_that_cannot_run_are_refused(overrides, message, tmp_path):
    (tmp_path / "heads_config.json").write_text("{}")  # a heads folder as `webrl heads-train` writes
    overrides = [o.replace("HEADS", str(tmp_path)) for o in overrides]
    with pytest.raises(ConfigError, match=message):
        load_config(WebRLConfig, None, overrides)


@pytest.mark.parametrize("overrides", [
    ["rollout.engine=server", "rollout.server.urls=[http://127.0.0.1:9]"],
    ["policy.wrappers=[loci]"],
    ["rollout.engine=server", "rollout.server.urls=[http://127.0.0.1:9]", "policy.wrappers=[loci]"],
])
def test_dyna_runs_on_either_engine_and_with_the_wrappers(overrides):
    cfg = load_config(WebRLConfig, None, ["dyna.every=2", *overrides])
    assert cfg.dyna.enabled


class RecordingLearnerGroup:
    """The real learner (DeepSpeed, one rank in this process), recording what `compute_logprobs` scores."""

    def __init__(self, section, run):
        from webrl.learner import LearnerGroup

        self.group, self.scored, self.updates = LearnerGroup(section, run, 1, use_ray=False), [], []

    def __getattr__(self, name):
        return getattr(self.group, name)

    def compute_logprobs(self, samples, reference=False):
        self.scored.append([list(s.prompt_ids) for s in samples])
        return self.group.compute_logprobs(samples, reference)

    def update(self, samples):
        self.updates.append(list(samples))
        return self.group.update(samples)


class ChromiumActors(LocalActors):
    """A real EnvWorker (one slot, its own thread) and the real tiny model in process."""

    def __init__(self, config):
        super().__init__()
        self.config, self.env = config, None

    def start_env_workers(self):
        import dataclasses

        self.env = ThreadedWorker(dataclasses.replace(self.config.env, num_slots=1, threads=1))
        return [(self.env, 0)]

    def start_inference(self, model_path, generator, index, count=1, endpoint=False):
        from tests.rollout.test_coordinator_logic import AsyncInference
        from webrl.rollout import InferenceConfig, InferenceWorker
        from webrl.engines.engine import GeneratorEngineFactory

        return [AsyncInference(InferenceWorker(GeneratorEngineFactory(model_path, generator)(),
                                               InferenceConfig(batch_window_s=0.0))) for _ in range(count)]

    def start_learner(self, section, run):
        self.learners.append(RecordingLearnerGroup(section, run))
        return self.learners[-1]

    def close(self):
        if self.env is not None:
            self.env.close()
            self.env = None
        for learner in self.learners:
            learner.shutdown()
        self.closed = True


def run_dyna(tmp_path, seed: int, overrides: list[str]):
    """A Dyna-GRPO run from the config on ChromiumActors (one refined state per SimRollout
    iteration, joint_group A', 2 turns, no evaluation): its RL metric rows and the actors."""
    import torch

    from webrl.run.trainer import Trainer

    torch.manual_seed(seed)
    config = load_config(WebRLConfig, None, [
        f"run.run_dir={tmp_path}", "rollout.max_turns=2", "tasks.eval_tasks=0", "dyna.every=2",
        "dyna.states_per_iteration=1", "dyna.refine_advantage=joint_group",
        "rollout.dynamic_sampling.enabled=false",  # the counts below are one draw's (dynamic sampling adds rounds)
        *overrides])
    actors = ChromiumActors(config)
    Trainer(config, actors=actors).fit()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    return config, [r for r in rows if "iteration" in r and "stage" not in r], actors


@pytest.mark.browser
@pytest.mark.slow
def test_one_simrollout_iteration_then_one_grpo_iteration_from_the_config(tmp_path):
    from webrl.types import load_trajectories

    _, (sim, grpo), actors = run_dyna(tmp_path, 0, [
        "trainer.iterations=2", "tasks.tasks_per_iteration=1", "rollout.group_size=2", "trainer.checkpoint_every=2",
        "dyna.every=2"])
    # iteration 0 is SimRollout (0 % 2 == 0), iteration 1 plain GRPO
    assert sim["dyna/sim_iteration"] == 1.0 and not any(k.startswith("dyna/") for k in grpo)
    assert sim["dyna/states_simulated"] == 1.0 and sim["dyna/refined_episodes"] == 1.0
    assert sim["dyna/replays_diverged"] == 0.0 and sim["dyna/refined_scored"] == 1.0  # the replay reached the page
    assert 1.0 <= sim["dyna/sim_env_steps"] <= 2.0  # a replayed prefix of t <= 1 steps + the refined turn(s)
    assert sim["samples"] == sim["dyna/refine_samples"]
    (learner,) = actors.learners
    collected = load_trajectories(next((tmp_path / "trajectories").glob("*.jsonl")))
    plain_prompts = [t.prompt_ids for traj in collected[:2] for t in traj.turns]  # iteration 0's group
    if sim["dyna/refine_samples"]:  # A' != 0: the refined response on a collected plain prompt
        update = learner.updates[0]
        assert learner.scored[0] == [s.prompt_ids for s in update]
        assert all(s.prompt_ids in plain_prompts for s in update)
        # old log-probs = the learner's on the plain prompt, so the one step's ratio starts at 1
        # (the refine prompt's log-probs would put it far from 1)
        assert sim["ratio_max"] < 1.01 and abs(sim["approx_kl"]) < 1e-3, sim
    else:  # every reward of the state's group and its refinement equal: nothing to learn, no update
        assert sim.get("skipped_update") == 1.0 and learner.scored == []
    assert grpo["kept_trajectories"] in (0.0, 2.0) and "dyna/sim_env_steps" not in grpo


@pytest.mark.browser
@pytest.mark.slow
def test_train_collected_trains_the_collected_batch_beside_the_refined_samples(tmp_path):
    from webrl.learner.credit import trajectories_to_samples
    from webrl.reward import build_reward, score_trajectories
    from webrl.types import load_trajectories

    config, (sim,), actors = run_dyna(tmp_path, 1, [
        "trainer.iterations=1", "tasks.tasks_per_iteration=2", "rollout.group_size=3", "trainer.checkpoint_every=1",
        "dyna.train_collected=true"])
    assert sim["dyna/sim_iteration"] == 1.0
    # the collected batch as logged (in finishing order, before scoring), scored as the run scored it:
    # its GRPO samples are what a plain GRPO iteration would train
    collected = load_trajectories(next((tmp_path / "trajectories").glob("*.jsonl")))
    assert len(collected) == 6
    score_trajectories(build_reward(config.reward), collected)
    expected, _ = trajectories_to_samples(collected, "grpo", config.learner.objective_config)
    assert sim["samples"] == len(expected) + sim["dyna/refine_samples"]
    (learner,) = actors.learners
    if not sim["samples"]:  # no group with reward variance and no refined sample: nothing to update
        assert sim.get("skipped_update") == 1.0 and learner.updates == []
        return
    (update,) = learner.updates
    key = lambda s: (tuple(s.prompt_ids), tuple(s.response_ids), round(s.advantage, 5))  # noqa: E731
    head, tail = update[:len(expected)], update[len(expected):]
    assert sorted(map(key, head)) == sorted(map(key, expected))  # the collected batch, first
    assert len(tail) == sim["dyna/refine_samples"]  # then the refined responses, their own trajectories
    assert all(s.trajectory_index > max((e.trajectory_index for e in head), default=-1) for s in tail)
