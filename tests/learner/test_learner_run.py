"""`LearnerRun`, the values a run derives for its learner: validation names the field, and the
learner config no longer has a place for them (so no config can disagree with the rollout)."""
import dataclasses
import math
import pickle

import pytest

from webrl.learner import LearnerConfig, LearnerGroup, LearnerRun

#: PromptConfig's default smart_resize bounds: 56 * 56 = 3136 and 28 * 28 * 1280 = 1003520 pixels
GOOD = dict(model_path="/models/tiny", seed=3, temperature=0.8, image_min_pixels=3136, image_max_pixels=1003520)


def run_with(**changes) -> LearnerRun:
    return LearnerRun(**{**GOOD, **changes})


def test_a_valid_run_keeps_its_values_and_is_frozen():
    run = LearnerRun(**GOOD)
    assert (run.model_path, run.seed, run.temperature) == ("/models/tiny", 3, 0.8)
    assert run.pixel_bounds == (3136, 1003520)
    assert pickle.loads(pickle.dumps(run)) == run  # travels to spawned ranks and Ray actors
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.temperature = 1.0
    assert run_with(image_min_pixels=1003520).pixel_bounds == (1003520, 1003520)  # min == max is allowed


def test_empty_model_path_is_refused():
    with pytest.raises(ValueError, match=r"^LearnerRun.model_path must name the policy's checkpoint folder, got ''$"):
        run_with(model_path="")
    with pytest.raises(ValueError, match="LearnerRun.model_path .* got None"):
        run_with(model_path=None)


@pytest.mark.parametrize("temperature, shown", [(0.0, "0.0"), (-0.5, "-0.5"), (math.nan, "nan"), (math.inf, "inf"),
                                                ("0.8", "'0.8'")])
def test_temperature_must_be_a_finite_positive_number(temperature, shown):
    message = (r"^LearnerRun.temperature \(the rollout's sampling temperature\) must be a finite number > 0, "
               rf"got {shown}$")
    with pytest.raises(ValueError, match=message):
        run_with(temperature=temperature)


@pytest.mark.parametrize("low, high, shown", [(0, 1003520, "0, 1003520"), (-1, 4, "-1, 4"),
                                              (1003521, 1003520, "1003521, 1003520"),
                                              (3136.0, 1003520, r"3136\.0, 1003520")])
def test_pixel_bounds_need_integers_with_min_at_most_max(low, high, shown):
    message = (r"^LearnerRun.image_min_pixels / image_max_pixels need integers with 0 < min <= max "
               rf"\(the rollout prompt's smart_resize bounds\), got {shown}$")
    with pytest.raises(ValueError, match=message):
        run_with(image_min_pixels=low, image_max_pixels=high)


def test_seed_must_be_an_integer():
    with pytest.raises(ValueError, match=r"^LearnerRun.seed must be an integer, got '3'$"):
        run_with(seed="3")


def test_group_without_a_run_fails_before_starting_any_rank():
    with pytest.raises(TypeError, match="LearnerGroup needs a LearnerRun as its second argument, got int"):
        LearnerGroup(LearnerConfig(), 2, use_ray=False)  # the call shape from before LearnerRun


@pytest.mark.parametrize("key", ["model_path", "seed", "temperature", "image_min_pixels", "image_max_pixels"])
def test_learner_config_has_no_place_for_the_derived_values(key):
    from webrl.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=f"unknown config key '{key}'"):
        load_config(LearnerConfig, overrides=[f"{key}=1"])


def test_deepspeed_is_imported_without_mlflow_which_stays_importable():
    """`import_deepspeed` keeps DeepSpeed's autotuner from importing mlflow (1.4 s of every learner
    start-up); mlflow itself (webrl's tracker) still imports afterwards. A fresh interpreter: this
    one may have loaded either already."""
    import subprocess
    import sys

    script = ("import sys\n"
              "from webrl.learner.engine import import_deepspeed\n"
              "ds = import_deepspeed()\n"
              "import deepspeed.autotuning.autotuner as tuner\n"
              "loaded_with_deepspeed = 'mlflow' in sys.modules\n"
              "import mlflow\n"
              "print(ds.__name__, tuner.has_mlflow, loaded_with_deepspeed, mlflow.MlflowClient.__name__)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-4:] == ["deepspeed", "False", "False", "MlflowClient"], out.stdout
