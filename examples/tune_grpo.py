"""Tune GRPO with Ray Tune: ASHA over learning rate, KL coefficient and clip range.

    python examples/tune_grpo.py                               # the sandbox default, 8 trials
    python examples/tune_grpo.py --config smoke --samples 2 --iterations 2
    python examples/tune_grpo.py --model runs/sft/hf           # tune from an SFT checkpoint

Every trial is one `Trainer` in its own placement group (driver, learner, inference and env
workers; `WebRLTrainable.default_resource_request`); a Tune iteration is one RL iteration.
The SFT stage runs once here, before the search, and every trial starts RL from its checkpoint
(unless `--model` names one already). ASHA stops trials whose training success lags after
`grace` iterations; the best trial's config and checkpoint are printed at the end.
"""
import argparse
import os
import sys
from pathlib import Path

from ray import tune
from ray.tune.schedulers import ASHAScheduler

from webrl.config import load_config
from webrl.run.ray_local import start_local_ray
from webrl.run.config import WebRLConfig
from webrl.run.trainer import Trainer
from webrl.run.tune import WebRLTrainable


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=None, help="preset name or YAML path; none = the embedded default")
    parser.add_argument("--samples", type=int, default=8, help="trials drawn from the search space")
    parser.add_argument("--iterations", type=int, default=8, help="most RL iterations per trial")
    parser.add_argument("--grace", type=int, default=2, help="ASHA: iterations before a trial can be stopped")
    parser.add_argument("--model", default="", help="start every trial from this checkpoint (skips SFT)")
    parser.add_argument("--storage", default="runs/tune", help="Tune's storage folder")
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    args = parser.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    storage = Path(args.storage).resolve()

    model = args.model
    if not model:  # SFT once on oracle demonstrations; the trials share its checkpoint
        sft_config = load_config(WebRLConfig, args.config, [*args.overrides, f"run.run_dir={storage / 'sft'}"])
        model = Trainer(sft_config).run_sft()

    param_space = {
        "preset": args.config,
        "overrides": [*args.overrides, f"model.path={model}", "trainer.stages=[rl]",
                      "learner.reference=copy"],  # a KL term needs the frozen reference policy
        "learner.optim.lr": tune.loguniform(1e-5, 1e-3),
        "learner.loss.kl_coef": tune.choice([0.0, 0.01, 0.05]),
        "learner.loss.clip_eps_high": tune.choice([0.2, 0.28, 0.4]),
    }
    # logical CPUs: room for two trials' bundles (browsers and inference mostly wait on each other)
    trial_cpus = sum(b["CPU"] for b in WebRLTrainable.default_resource_request(param_space | {
        "learner.optim.lr": 1e-4, "learner.loss.kl_coef": 0.0, "learner.loss.clip_eps_high": 0.28}).bundles)
    start_local_ray(max(os.cpu_count() or 2, int(2 * trial_cpus)), str(storage / "ray"))
    tuner = tune.Tuner(
        WebRLTrainable, param_space=param_space,
        tune_config=tune.TuneConfig(num_samples=args.samples, metric="reward/mean", mode="max",
                                    scheduler=ASHAScheduler(max_t=args.iterations, grace_period=args.grace)),
        run_config=tune.RunConfig(name="grpo", storage_path=str(storage), stop={"training_iteration": args.iterations},
                                  checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=1, num_to_keep=2)))
    best = tuner.fit().get_best_result()
    print("best trial:", {k: v for k, v in best.config.items() if k not in ("preset", "overrides")})
    print(f"reward/mean {best.metrics.get('reward/mean')}, checkpoint {best.checkpoint}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
