"""The SFT stage: oracle demonstrations -> per-turn SFT samples -> SFT learner -> HF checkpoint.

    path = sft_stage(config, run_dir, model_path, actors, log, learner_for)   # the HF folder of the SFT weights

Each phase of `sft.curriculum` ([max_level, epochs]; default one phase of `sft.epochs` over
everything) shuffles its turns every pass with the run's seed and takes one optimizer step per
`sft.batch_size` turns; the checkpoint at `<run>/sft` is rewritten after every pass, so a long
run can be stopped and its last pass used. Prompts are rendered by the rollout policy's own
`GeneratorPolicy`, so SFT trains on exactly the tokens rollouts will produce.

Action-aware SFT (GUI-Libra): every turn sample carries its response's action / coordinate
masks (`webrl.policy.sft`), so `sft.action_weight` and `coordinate_factor` weight
those tokens in the loss sum(m * w * CE) / sum(m * w). Reasoning mix: a turn whose response has
a `<think>` block is a "source"; every pass trains on each source with its reasoning and, for a
`sft.direct_fraction` of them drawn afresh each pass (`ReasoningMixSampler`, seeded
by the run's seed and the pass), also on its direct-action variant; turns without reasoning are
used once per pass. A pass therefore has plain + sources + round(direct_fraction * sources)
samples, and the LR schedule is sized for that.

Departure from the OpenWebRL recipe: the demonstrations are recorded from the sandbox oracles
(or read from `sft.demos_dir`) instead of loading the recipe's 0.4K human trajectories; offline
datasets in `sft.data` ("FORMAT:PATH" or "PATH", `webrl.datasets.load_offline`) are added to
them. A dataset trajectory without a difficulty level counts as level 0 for `sft.curriculum`.
"""
from __future__ import annotations

import dataclasses
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional


def sft_stage(config: Any, run_dir: Path, model_path: str, actors: Any, log: Callable,
              learner_for: Callable[[int], tuple[Any, Any]]) -> str:
    """Train `model_path` on the demonstrations; returns the HF folder of the result (or
    `model_path` unchanged when there is nothing to train on).

    config: the run's `WebRLConfig` (its sft, run, tasks, env and generator sections are read);
    learner_for(total_optimizer_steps) -> (LearnerConfig, LearnerRun) of the stage's learner
    (`webrl.run.config.sft_learner` and `learner_run`, which the run layer owns)."""
    from webrl.models.shipped import write_trained_prompt

    cfg = config
    demos = demonstrations(cfg, run_dir, log)
    policy = _render_policy(model_path, cfg)
    # dataset turns answer in this policy's own action format (webrl.datasets.render_for_policy)
    demos += offline_trajectories(cfg.sft.data, log, builder=policy.builder)
    sources = turn_sources(demos, policy)
    if not sources:
        print("webrl sft: no demonstrations to train on; skipping the SFT stage")
        return model_path
    mix = cfg.sft.direct_fraction
    phases = [(int(lv), int(n)) for lv, n in cfg.sft.curriculum] or [(max(s.level for s in sources), cfg.sft.epochs)]
    batch = cfg.sft.batch_size
    pools = [[s for s in sources if s.level <= max_level] for max_level, _ in phases]
    steps = sum(n * -(-pass_size(pool, mix) // batch) for (_, n), pool in zip(phases, pools))
    log({"stage": "sft_data", "turns": len(sources), "reasoning_turns": sum(s.direct is not None for s in sources),
         "direct_fraction": mix})
    learner = actors.start_learner(*learner_for(steps))
    rng, epoch, path = random.Random(f"{cfg.run.seed}:sft"), 0, ""
    try:
        for (max_level, n), pool in zip(phases, pools):
            for _ in range(n):
                t0 = time.monotonic()
                order = rng.sample(epoch_samples(pool, mix, seed=cfg.run.seed, epoch=epoch), pass_size(pool, mix))
                metrics = [learner.update(order[i:i + batch]) for i in range(0, len(order), batch)]
                epoch += 1
                mean = {k: sum(m[k] for m in metrics) / len(metrics) for k in metrics[0]
                        if k not in ("policy_version", "optimizer_steps")}
                path = learner.save(str(run_dir / "sft"), {"stage": "sft", "epoch": epoch})
                write_trained_prompt(path, dataclasses.asdict(cfg.generator.prompt))
                log({"stage": "sft", "epoch": epoch, "max_level": max_level, "samples": len(order),
                     "optimizer_steps": len(metrics), "time_s": time.monotonic() - t0, **mean})
    finally:
        actors.stop_learner(learner)
    return str(Path(path) / "hf")


@dataclass
class TurnSource:
    """One demonstrated turn: its sample as demonstrated (`sample`, with reasoning if it had any)
    and, for a reasoning turn, its direct-action variant (`direct`); `level` is the task's."""

    level: int
    sample: Any
    direct: Optional[Any] = None


def turn_sources(trajectories: list, policy) -> list[TurnSource]:
    """Every trajectory turn as a `TurnSource` of `LearnerSample`s with action / coordinate masks."""
    from webrl.learner.samples import LearnerSample
    from webrl.policy import sft_samples_from_trajectory

    def learner_sample(s) -> LearnerSample:
        return LearnerSample(s.prompt_ids, s.response_ids, images=list(s.images), action_mask=s.action_mask,
                             coordinate_mask=s.coordinate_mask)

    out: list[TurnSource] = []
    for traj in trajectories:
        level = int(getattr(traj.info, "level", 0) or 0)
        for s in sft_samples_from_trajectory(traj, policy, direct=True):
            if s.variant == "direct":
                out[-1].direct = learner_sample(s)
            else:
                out.append(TurnSource(level, learner_sample(s)))
    return out


def pass_size(pool: list[TurnSource], direct_fraction: float) -> int:
    """Samples in one pass over `pool`: every turn once, plus the direct share of reasoning turns."""
    return len(pool) + round(direct_fraction * sum(s.direct is not None for s in pool))


def epoch_samples(pool: list[TurnSource], direct_fraction: float, *, seed: int, epoch: int) -> list:
    """The samples of pass `epoch` (unshuffled): plain turns once, reasoning turns with their
    reasoning, and the `ReasoningMixSampler`'s pick of them as direct actions."""
    from webrl.algos.sft import ReasoningMixSampler

    plain = [s.sample for s in pool if s.direct is None]
    reasoning = [s for s in pool if s.direct is not None]
    sampler = ReasoningMixSampler(len(reasoning), direct_fraction=direct_fraction, seed=seed)
    sampler.set_epoch(epoch)
    mixed = [reasoning[i].sample if with_reasoning else reasoning[i].direct for i, with_reasoning in sampler]
    return plain + mixed


def demonstrations(config: Any, run_dir: Path, log: Callable) -> list:
    """`sft.demos_dir`'s demos.jsonl, or `sft.demos` oracle episodes recorded into `<run>/demos`
    (none when sft.demos=0); `sft_stage` adds the `sft.data` datasets (`offline_trajectories`)."""
    from webrl.types import load_trajectories

    cfg = config
    folder = Path(cfg.sft.demos_dir) if cfg.sft.demos_dir else run_dir / "demos"
    demos: list = []
    if cfg.sft.demos_dir:
        demos = load_trajectories(folder / "demos.jsonl")
    elif cfg.sft.demos:
        from webrl.recipes.demos import record_demos

        summary = record_demos(cfg.sft.demos, folder, seed=cfg.run.seed, levels=cfg.sft.demo_levels,
                               sites=cfg.tasks.sites, split="train", viewport=cfg.env.viewport)
        log({"stage": "demos", "episodes": summary["episodes"], "saved": summary["saved"]})
        demos = load_trajectories(folder / "demos.jsonl")
    return demos


def offline_trajectories(specs: list[str], log: Callable, builder: Any = None) -> list:
    """The trajectories of each "FORMAT:PATH" / "PATH" in `specs` (`webrl.datasets.load_offline`),
    their responses re-rendered in `builder`'s action format (a PromptBuilder; None: as converted),
    logging each conversion report's summary. A spec that fails to load raises ConfigError naming
    `sft.data[i]`."""
    if not specs:
        return []
    from webrl.config import ConfigError

    try:
        from webrl.datasets import load_offline
    except ImportError as e:
        raise ConfigError(f"sft.data needs webrl.datasets.load_offline, which cannot be imported: {e}") from e
    out: list = []
    for i, spec in enumerate(specs):
        try:
            result = load_offline(spec, builder=builder)
        except (ValueError, OSError) as e:
            raise ConfigError(f"sft.data[{i}]={spec!r}: {e}") from e
        log({"stage": "sft_dataset", "spec": spec, "trajectories": len(result.trajectories),
             **result.report.summary()})
        out.extend(result.trajectories)
    return out


def _render_policy(model_path: str, config: Any):
    """A GeneratorPolicy used only to render prompts (SFT shares the rollout's prompt code)."""
    from webrl.models import load_model
    from webrl.policy import GeneratorPolicy

    model, processor = load_model(model_path)
    return GeneratorPolicy(model, processor, config.generator)
