"""Ray Tune: WebRLTrainable's config mapping, its placement group, and a real 2-trial search
(2 iterations each) in which one trial fails once and is restored from its checkpoint."""
import tempfile
from pathlib import Path

import pytest

from webrl.config import ConfigError
from webrl.run.resources import bundle_layout
from webrl.run.tune import trial_config


def test_trial_config_maps_dotted_keys_onto_the_preset():
    cfg = trial_config({"preset": "smoke", "overrides": ["trainer.stages=[rl]"], "learner.optim.lr": 3e-4,
                        "learner.loss.kl_coef": 0.01, "learner.reference": "copy",
                        "learner.loss.clip_eps_high": 0.3,
                        "tasks.sites": ["widgets", "shop"]}, run_dir="/tmp/x")
    assert cfg.learner.optim.lr == 3e-4 and cfg.learner.loss.kl_coef == 0.01
    assert cfg.learner.loss.clip_eps_high == 0.3 and cfg.tasks.sites == ["widgets", "shop"]
    assert cfg.trainer.stages == ["rl"] and cfg.run.run_dir == "/tmp/x"
    assert cfg.trainer.iterations == 2  # from the smoke preset
    with pytest.raises(ConfigError, match="learner.optim.lr"):
        trial_config({"preset": "smoke", "learner.optim.lrr": 1e-3})


def test_resource_request_covers_every_actor_of_the_trial():
    from ray import tune

    from webrl.run.tune import WebRLTrainable

    cfg = {"preset": "smoke", "resources.learner_ranks": 2, "resources.num_inference_workers": 2,
           "resources.num_env_workers": 3, "resources.gpus_per_learner_rank": 1.0}
    pgf = WebRLTrainable.default_resource_request(cfg)
    assert isinstance(pgf, tune.PlacementGroupFactory)
    # driver 1 + learner 2 ranks + inference (2 rollout + 1 greedy eval) + 3 env workers = 9 bundles
    assert len(pgf.bundles) == 9
    assert pgf.bundles[1] == pgf.bundles[2] == {"CPU": 1.0, "GPU": 1.0}
    assert sum(b.get("CPU", 0) for b in pgf.bundles) == 9 and sum(b.get("GPU", 0) for b in pgf.bundles) == 2
    layout = bundle_layout(trial_config(cfg).resources)
    assert (layout.learner, layout.inference, layout.env) == (1, 3, 6)


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.browser
@pytest.mark.timeout(1500)  # three trial starts (one restore): ~10 min on 2 loaded cores
def test_two_trials_two_iterations_and_a_trial_restored_from_its_checkpoint(tmp_path, run_dir):
    import ray
    from ray import tune

    from webrl.run.ray_local import start_local_ray
    from webrl.run.tune import WebRLTrainable

    markers = tmp_path / "failed"
    markers.mkdir()

    class FailsOnceAfterACheckpoint(WebRLTrainable):
        """The lr=1e-3 trial raises in its second step once; Tune restarts it from checkpoint 1."""

        def step(self):
            marker = markers / self.trial_id
            if self.webrl_config.learner.optim.lr == 1e-3 and self.trainer.iteration == 1 and not marker.exists():
                marker.touch()
                raise RuntimeError("injected failure")
            return super().step()

    param_space = {"preset": "smoke",
                   "overrides": ["trainer.stages=[rl]", "tasks.eval_tasks=0", "tasks.tasks_per_iteration=1",
                                 "rollout.max_turns=1"],
                   "learner.optim.lr": tune.grid_search([1e-4, 1e-3])}
    start_local_ray(16, tempfile.mkdtemp(prefix="tu", dir=run_dir))
    try:
        tuner = tune.Tuner(
            FailsOnceAfterACheckpoint, param_space=param_space,
            tune_config=tune.TuneConfig(max_concurrent_trials=1),
            run_config=tune.RunConfig(name="grpo", storage_path=str(tmp_path / "tune"), verbose=0,
                                      stop={"training_iteration": 2},
                                      checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=1),
                                      failure_config=tune.FailureConfig(max_failures=1)))
        results = tuner.fit()
    finally:
        ray.shutdown()
    assert results.num_errors == 0, [str(r.error)[:2000] for r in results if r.error]
    assert len(results) == 2
    assert len(list(markers.iterdir())) == 1  # exactly one trial failed once
    for result in results:
        assert result.metrics["training_iteration"] == 2
        # smoke keeps zero-variance groups: each iteration is one update. The restored trial
        # reached iteration 2 / policy version 2 only because load_checkpoint brought back
        # iteration 1 and version 1 (a fresh start would report iteration 1, version 1).
        assert result.metrics["iteration"] == 2
        assert result.metrics["policy_version"] == 2.0
        assert result.checkpoint is not None
        assert (Path(result.checkpoint.path) / "learner").is_dir()
