"""`Trainer`: the single-controller loop of a webrl run, read top to bottom.

    evaluate (held-out tasks, greedy; + eval.samples_per_task sampled episodes per task)
    sft:  record oracle demonstrations -> per-turn SFT samples -> SFT learner -> HF checkpoint
    rl:   for each iteration:
              collect G trajectories per task (RolloutCoordinator over EnvWorkers + InferenceWorkers)
              reward (checker or judge) -> group advantages (GRPO) -> learner.update
              sync weights to inference workers (version += 1) -> log -> evaluate? -> checkpoint
    evaluate again; print the before/after table

Everything lands in the run folder: `config.yaml`, `metrics.jsonl`, `tb/` (TensorBoard),
`trajectories/` (the log the viewer reads), `viewer/index.html`, `checkpoints/step-N/` (with
`hf/`, loadable by plain transformers). `run.resume=true` with `run.run_dir` continues from
the newest checkpoint: the learner state, the policy version and the iteration counter.

Entry points: `fit()` (all stages; `webrl train`), `run_sft()` (only the SFT stage; `webrl sft`),
`run_eval()` (one evaluation of a checkpoint or an endpoint; `webrl eval`), and for Ray Tune
`prepare()` + `step()` (one RL iteration) + `save(dir)` / `load(dir)`. Given a placement group
(a Tune trial's), every actor goes into its own bundle of it (`bundle_layout`): bundle 0 is the
trial's driver, then the learner ranks, the rollout inference workers, the greedy evaluation
worker and the env workers. Task draws of iteration i depend only on (seed, i), so a resumed or
restored run draws what an uninterrupted one would (sync mode). With `rollout.mode=async` an
`AsyncCollector` keeps collecting while the learner updates (at most `rollout.max_staleness`
versions behind; the clipped objective's ratio against each turn's stored sampling log-probs
corrects the lag) and draws tasks on its own thread, so those draws do not replay on resume.

Departures from the OpenWebRL recipe (CPU default only; presets restore the recipe):
the SFT stage records demonstrations from the sandbox oracles instead of loading 0.4K human
trajectories; and the default learning rate is 2e-4 (LEARNING.md: RL moved a tiny model the
right way only at a low one).
"""
from __future__ import annotations

import dataclasses
import json
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

from webrl.config import to_yaml
from webrl.evaluation import before_after_table, summarize
from webrl.ray_local import start_local_ray
from webrl.run_log import RunLog
from webrl.train_config import WebRLConfig, bundle_layout


def _resolve_run_dir(config: WebRLConfig) -> Path:
    if config.run.run_dir:
        return Path(config.run.run_dir).resolve()
    if config.run.resume:
        raise ValueError("run.resume=true needs run.run_dir (the folder of the run to continue)")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return (Path(config.run.output_dir) / f"{config.run.name}-{stamp}").resolve()


def _ray_temp_dir(run_dir: Path) -> str:
    """Ray's temp dir inside the run folder, unless the path is too long for its sockets."""
    candidate = run_dir / "ray"
    if len(str(candidate)) <= 48:
        candidate.mkdir(parents=True, exist_ok=True)
        return str(candidate)
    return tempfile.mkdtemp(prefix="webrl-ray-")


class Trainer:
    """Owns the actors of a run; `fit()` runs the stages and returns the before/after results."""

    def __init__(self, config: WebRLConfig, placement_group: Any = None):
        self.config = config
        self.run_dir = _resolve_run_dir(config)
        self.placement_group = placement_group
        heads_dir = config.cascade.heads_dir
        if heads_dir and not (Path(heads_dir) / "heads_config.json").is_file():  # fail before Ray starts
            raise FileNotFoundError(f"cascade.heads_dir={heads_dir}: no heads_config.json there "
                                    f"(write heads with `webrl heads-train`)")
        self.layout = bundle_layout(config.resources)
        self.iteration = 0
        self.history: list[dict[str, Any]] = []
        self.learner: Any = None
        self.env_workers: list = []
        self.inference: list = []
        self.eval_inference: Any = None
        self.sampled_eval_coordinator: Any = None  # eval.samples_per_task episodes at the rollout temperature
        self.last_eval: Optional[tuple[list, list]] = None
        self._evaluated_at: Optional[tuple[int, int]] = None  # (iteration, policy version) of last_eval
        self._last_metrics: dict[str, Any] = {}
        self.collector: Any = None  # AsyncCollector when rollout.mode == "async"
        self._ray_started = False

    # -- entry points ----------------------------------------------------------------------------
    def fit(self) -> dict[str, Any]:
        cfg = self.config
        try:
            resumed = self.prepare(evaluate_before=True)
            results: dict[str, Any] = {"run_dir": str(self.run_dir), "before": self.before if not resumed else None}
            if "rl" in cfg.trainer.stages:
                self._rl_stage()
            evaluated = self._evaluated_at == (self.iteration, self.policy_version)  # eval_every just did
            results["after"] = self._last_metrics if evaluated else self.evaluate("after")
            self._view()
            print(before_after_table(results["before"], results["after"]))
            print(f"run folder: {self.run_dir}")
            return results
        finally:
            self.close()

    def prepare(self, evaluate_before: bool = False) -> bool:
        """Start every actor; resume from the newest checkpoint (run.resume) or evaluate and run
        the SFT stage; leaves the RL learner running. Returns whether the run resumed."""
        self._setup_base()
        self._setup_rollout(rollout=True)
        self.before = None
        if self.config.run.resume:
            self._start_learner()
            self._resume()
            return True
        if evaluate_before:
            self.before = self.evaluate("before")
        sft = "sft" in self.config.trainer.stages
        if sft:
            self.model_path = self.sft()
        self._start_learner()
        if sft:  # the rollout workers started from the pre-SFT weights
            self._sync_weights(force_version=0)
        return False

    def run_sft(self) -> str:
        """Only the SFT stage: demonstrations -> SFT learner -> checkpoint; returns its HF folder."""
        try:
            self._setup_base()
            path = self.sft()
            print(f"SFT checkpoint (Hugging Face folder): {path}")
            return path
        finally:
            self.close()

    def run_eval(self):
        """One greedy evaluation of model.path (or eval.endpoint); prints the per-site/level table,
        writes the trajectories, the viewer and (eval.export_om2w) the Online-Mind2Web folders."""
        from webrl.evaluation import export_om2w, success_table

        try:
            self._setup_base()
            self._setup_rollout(rollout=False)
            out = self.evaluate("eval")
            tasks, trajectories = self.last_eval or ([], [])
            summary = summarize(tasks, trajectories)
            print(success_table(summary))
            if "success_sampled" in out:
                print(f"overall, sampled at temperature {self.config.generator.sampling.temperature:g} "
                      f"({self.config.eval.samples_per_task} per task): {100 * out['success_sampled']:.1f}%")
            if self.config.eval.export_om2w:
                folders = export_om2w(trajectories, self.run_dir / "om2w")
                print(f"Online-Mind2Web results: {len(folders)} task folders in {self.run_dir / 'om2w'}")
            self._view()
            print(f"run folder: {self.run_dir}")
            return summary
        finally:
            self.close()

    # -- the loop ----------------------------------------------------------------------------
    def _rl_stage(self) -> None:
        cfg = self.config.trainer
        while self.iteration < cfg.iterations:
            self.step()
            if self.iteration % cfg.checkpoint_every == 0 or self.iteration == cfg.iterations:
                self._checkpoint()

    def step(self) -> dict[str, Any]:
        """One RL iteration: collect -> reward -> advantages -> update -> sync -> log (-> eval)."""
        from webrl.task_sources import draw_tasks

        cfg = self.config
        t0 = time.monotonic()
        if self.collector is not None:  # async: groups collected while the last update ran
            trajectories, stats = self.collector.next_batch(self.policy_version, cfg.tasks.tasks_per_iteration,
                                                            self.iteration)
        else:
            tasks = draw_tasks(self.train_source, _rng(cfg.run.seed, "rl", self.iteration),
                               cfg.tasks.tasks_per_iteration)
            trajectories, stats = self.coordinator.collect(tasks, self.iteration)
        t_collect = time.monotonic() - t0
        staleness = _staleness(trajectories, self.policy_version)
        reward_metrics = self._score(trajectories)
        samples, adv_metrics = self._samples(trajectories)
        t1 = time.monotonic()
        learn = self.learner.update(samples) if samples else {"skipped_update": 1.0}
        self._sync_weights()
        t_update = time.monotonic() - t1
        self.iteration += 1
        metrics = {"iteration": self.iteration, **adv_metrics, **reward_metrics, **learn,
                   "trajectories": stats.trajectories, "dropped": stats.dropped, "env_steps": stats.env_steps,
                   "env_steps_per_s": stats.steps_per_s, "samples": len(samples),
                   "time_collect_s": t_collect, "time_update_s": t_update,
                   "staleness": staleness, "stale": stats.stale}
        if cfg.trainer.eval_every and self.iteration % cfg.trainer.eval_every == 0:
            metrics.update({f"eval_{k}": v for k, v in self.evaluate(f"iteration {self.iteration}").items()
                            if isinstance(v, float)})
        self._log(metrics)
        return metrics

    # -- stages and steps ----------------------------------------------------------------------
    def sft(self) -> str:
        """The SFT stage on the learner's bundles; returns the HF folder of the SFT weights.

        Each phase of `sft.curriculum` ([max_level, epochs]; default one phase of `sft.epochs`
        over everything) shuffles its turns every pass with the run's seed and takes one
        optimizer step per `sft.batch_size` turns; the checkpoint at `<run>/sft` is rewritten
        after every pass, so a long run can be stopped and its last pass used.
        """
        from webrl.learner import LearnerGroup
        from webrl.learner.samples import LearnerSample
        from webrl.policy import sft_samples_from_trajectory

        cfg = self.config
        demos = self._demonstrations()
        policy = self._render_policy()
        samples = [(int(traj.info.get("level", 0)), LearnerSample(s.prompt_ids, s.response_ids, images=list(s.images)))
                   for traj in demos for s in sft_samples_from_trajectory(traj, policy)]
        if not samples:
            print("webrl sft: no demonstrations to train on; skipping the SFT stage")
            return self.model_path
        phases = [(int(lv), int(n)) for lv, n in cfg.sft.curriculum] or [(max(lv for lv, _ in samples), cfg.sft.epochs)]
        batch = cfg.sft.batch_size
        pools = [[s for lv, s in samples if lv <= max_level] for max_level, _ in phases]
        steps = sum(n * -(-len(pool) // batch) for (_, n), pool in zip(phases, pools))
        section = cfg.sft.learner
        learner_cfg = self._learner_config(
            section, batching=dataclasses.replace(section.batching, mini_batches=1, ppo_epochs=1),
            optim=dataclasses.replace(section.optim, total_steps=max(steps, 1)))
        learner = LearnerGroup(learner_cfg, num_ranks=cfg.resources.learner_ranks, **self._learner_resources())
        rng, epoch, path = random.Random(f"{cfg.run.seed}:sft"), 0, ""
        try:
            for (max_level, n), pool in zip(phases, pools):
                for _ in range(n):
                    t0, order = time.monotonic(), rng.sample(pool, len(pool))
                    metrics = [learner.update(order[i:i + batch]) for i in range(0, len(order), batch)]
                    epoch += 1
                    mean = {k: sum(m[k] for m in metrics) / len(metrics) for k in metrics[0]
                            if k not in ("policy_version", "optimizer_steps")}
                    path = learner.save(str(self.run_dir / "sft"), {"stage": "sft", "epoch": epoch})
                    self._write_prompt(path)
                    self._log({"stage": "sft", "epoch": epoch, "max_level": max_level, "samples": len(pool),
                               "optimizer_steps": len(metrics), "time_s": time.monotonic() - t0, **mean})
        finally:
            learner.shutdown()
        return str(Path(path) / "hf")

    def _score(self, trajectories) -> dict[str, float]:
        from webrl.reward import reward_metrics, score_trajectories

        return reward_metrics(score_trajectories(self.reward_fn, trajectories))

    def _samples(self, trajectories):
        import torch

        from webrl.algos import group_advantages
        from webrl.learner.samples import samples_from_trajectories

        ok = [t for t in trajectories if t.status == "ok" and t.reward is not None]
        if not ok:
            return [], {"kept_trajectories": 0.0}
        groups = {g: i for i, g in enumerate(dict.fromkeys(t.group_id for t in ok))}
        rewards = torch.tensor([t.reward for t in ok], dtype=torch.float32)
        group_index = torch.tensor([groups[t.group_id] for t in ok])
        result = group_advantages(rewards, group_index, self.config.learner.objective_config)
        samples = samples_from_trajectories(ok, result.advantages.tolist(), result.keep.tolist())
        return samples, dict(result.metrics)

    def evaluate(self, label: str) -> dict[str, Any]:
        """Greedy success on held-out tasks, overall and per site/level."""
        from webrl.task_sources import draw_tasks

        cfg = self.config
        if not cfg.tasks.eval_tasks:
            return {}
        tasks = draw_tasks(self.eval_source, _rng(cfg.run.seed, "eval"), cfg.tasks.eval_tasks, in_order=True)
        if self.collector is not None:  # evaluation borrows the same env slots
            self.collector.pause()
        t0 = time.monotonic()
        trajectories, _ = self.eval_coordinator.collect(tasks, self.iteration)
        self._score(trajectories)
        t_greedy = time.monotonic() - t0
        self.last_eval = (tasks, trajectories)
        reasons = sorted({t.drop_reason for t in trajectories if t.status == "dropped"})
        if reasons:
            print(f"webrl eval: {len(reasons)} distinct drop reasons, e.g. {reasons[0]}")
        out = summarize(tasks, trajectories).as_metrics()
        record = {"label": label, "iteration": self.iteration, "outcomes": [
            [task.spec.id, None if traj.status != "ok" else float((traj.reward or 0) > 0)]
            for task, traj in zip(tasks, trajectories)]}
        t0 = time.monotonic()
        sampled = self._sampled_outcomes(tasks) if cfg.eval.samples_per_task else None
        log = {"stage": "eval", "label": label, "success": out["success"], "dropped": out["dropped"],
               "time_eval_s": t_greedy}
        if sampled is not None:
            log["time_eval_sampled_s"] = time.monotonic() - t0
            record["sampled"] = sampled
            scored = [m for _, m in sampled if m is not None]
            out["success_sampled"] = log["success_sampled"] = sum(scored) / len(scored) if scored else 0.0
        self._log(log)
        with open(self.run_dir / "eval_outcomes.jsonl", "a") as f:  # per task, in draw order: paired comparisons
            f.write(json.dumps(record) + "\n")
        if self.learner is not None:
            self._evaluated_at, self._last_metrics = (self.iteration, self.policy_version), out
        return out

    def _sampled_outcomes(self, tasks) -> list[list]:
        """[task id, mean success of its eval.samples_per_task sampled episodes (None: all
        dropped)] per task, in draw order."""
        k = self.config.eval.samples_per_task
        trajectories, _ = self.sampled_eval_coordinator.collect(tasks, self.iteration)  # grouped in task order
        self._score(trajectories)
        out = []
        for i, task in enumerate(tasks):
            ok = [float((t.reward or 0) > 0) for t in trajectories[i * k:(i + 1) * k] if t.status == "ok"]
            out.append([task.spec.id, sum(ok) / len(ok) if ok else None])
        return out

    # -- setup -------------------------------------------------------------------------------
    def _setup_base(self) -> None:
        """Run folder, config, model, Ray, metrics files: what every entry point needs."""
        import ray

        cfg = self.config
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.yaml").write_text(to_yaml(cfg))
        os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(self.run_dir / "torch_extensions"))
        self.model_path = self._initial_model()
        self._start_ray(ray)
        self._log = RunLog(self.run_dir, cfg.trainer.log_every)
        self.history = self._log.history

    def _setup_rollout(self, rollout: bool) -> None:
        """Reward, task sources, env workers, inference workers and coordinators (`rollout=False`:
        only what evaluation needs; the eval worker serves eval.endpoint when one is set)."""
        from webrl.reward import build_reward
        from webrl.rollout import ProgressBar, RolloutCoordinator, TrajectoryLog
        from webrl.task_sources import task_sources

        cfg = self.config
        self.reward_fn = build_reward(cfg.reward)
        self.train_source, self.eval_source = task_sources(cfg.tasks, max_steps=cfg.rollout.max_turns)
        self.env_workers = self._start_env_workers()
        slots = [(w, i) for w in self.env_workers for i in range(cfg.env.num_slots)]
        log = TrajectoryLog(self.run_dir)
        greedy = dataclasses.replace(cfg.generator, sampling=dataclasses.replace(cfg.generator.sampling, greedy=True))
        self.eval_inference = self._start_inference(greedy, cfg.resources.num_inference_workers,
                                                    endpoint=bool(cfg.eval.endpoint) and not rollout)[0]
        eval_rollout = dataclasses.replace(cfg.rollout, group_size=1)
        self.eval_coordinator = RolloutCoordinator(slots, [self.eval_inference], eval_rollout,
                                                   on_trajectory=None if rollout else log, progress=ProgressBar())
        if rollout:
            self.inference = self._start_inference(cfg.generator, 0, cfg.resources.num_inference_workers,
                                                   cascade=cfg.cascade)
            self.coordinator = RolloutCoordinator(slots, self.inference, cfg.rollout, on_trajectory=log,
                                                  progress=ProgressBar())
        if cfg.eval.samples_per_task:  # the rollout's sampler; one of its own when only evaluating
            if not self.inference:
                self.inference = self._start_inference(cfg.generator, 0, cascade=cfg.cascade)
            self.sampled_eval_coordinator = RolloutCoordinator(
                slots, self.inference, dataclasses.replace(cfg.rollout, group_size=cfg.eval.samples_per_task),
                on_trajectory=None, progress=ProgressBar())
        if rollout:
            if cfg.rollout.mode == "async":  # task draws happen on the collector's own thread and RNG
                from webrl.rollout import AsyncCollector
                from webrl.task_sources import draw_tasks

                rng = _rng(cfg.run.seed, "rl", 10**6 + self.iteration)
                self.collector = AsyncCollector(self.coordinator, lambda: draw_tasks(self.train_source, rng, 1)[0],
                                                progress=ProgressBar())

    def _start_ray(self, ray) -> None:
        cfg = self.config.resources
        env_vars = {"RAY_USAGE_STATS_ENABLED": os.environ.get("RAY_USAGE_STATS_ENABLED", "0"),
                    "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"),
                    "TORCH_EXTENSIONS_DIR": os.environ["TORCH_EXTENSIONS_DIR"]}
        if ray.is_initialized():  # inside a Tune trial, or a caller's own ray.init
            return
        address = cfg.ray_address or os.environ.get("RAY_ADDRESS", "")
        if address:  # a cluster (e.g. inside `ray job submit`): its own temp dir and CPUs
            taken = _job_env_vars()  # Ray refuses a driver env var the job's runtime env also sets
            ray.init(address=address, runtime_env={"env_vars": {k: v for k, v in env_vars.items() if k not in taken}},
                     log_to_driver=False)
        else:
            needed = sum(b.get("CPU", 0.0) for b in self.layout.bundles[1:])
            num_cpus = cfg.num_cpus or max(int(needed + 0.999), os.cpu_count() or 1)
            start_local_ray(num_cpus, _ray_temp_dir(self.run_dir), env_vars)
        self._ray_started = True

    def _start_env_workers(self) -> list:
        from webrl.rollout.placement import start_env_workers

        res = self.config.resources
        return start_env_workers(self.config.env, res.num_env_workers, cpus_per_worker=res.cpus_per_env_worker,
                                 placement_group=self.placement_group, bundle_offset=self.layout.env)

    def _start_inference(self, generator, index: int, count: int = 1, endpoint: bool = False,
                         cascade: Any = None) -> list:
        """`count` inference workers from bundle inference + index on; `endpoint`: eval.endpoint's engine."""
        from webrl.evaluation import EndpointEngineFactory, endpoint_config
        from webrl.rollout.engines import GeneratorEngineFactory
        from webrl.rollout.placement import start_inference_workers

        res = self.config.resources
        if endpoint:
            factory: Any = EndpointEngineFactory(endpoint_config(self.config))
        else:
            factory = GeneratorEngineFactory(self.model_path, generator, dtype=self.config.model.dtype,
                                             device="cuda" if res.gpus_per_inference_worker else None,
                                             cascade=cascade)
        return start_inference_workers(factory, self.config.inference, count, cpus_per_worker=res.cpus_per_inference_worker,
                                       gpus_per_worker=0.0 if endpoint else res.gpus_per_inference_worker,
                                       placement_group=self.placement_group, bundle_offset=self.layout.inference + index)

    def _learner_resources(self) -> dict[str, Any]:
        res = self.config.resources
        per_rank = {"CPU": res.cpus_per_learner_rank}
        if res.gpus_per_learner_rank:
            per_rank["GPU"] = res.gpus_per_learner_rank
        placement = ({"placement_group": self.placement_group, "bundle_offset": self.layout.learner}
                     if self.placement_group is not None else {})
        return {"resources_per_rank": per_rank, **placement,
                "env_vars": {"TORCH_EXTENSIONS_DIR": os.environ["TORCH_EXTENSIONS_DIR"]}}

    def _start_learner(self) -> None:
        from webrl.learner import LearnerGroup

        if self.learner is not None:
            self.learner.shutdown()
        cfg = self.config
        # rollout log-probs are taken at the sampling temperature: the learner's must be too
        self.learner = LearnerGroup(self._learner_config(cfg.learner, temperature=cfg.generator.sampling.temperature),
                                    num_ranks=cfg.resources.learner_ranks,
                                    **self._learner_resources())

    def _learner_config(self, section, **changes):
        """A learner section completed by the run: model path, seed, and the image size of the
        generator's prompts (the learner must encode screenshots exactly as rollouts did)."""
        prompt = self.config.generator.prompt
        return dataclasses.replace(section, model_path=self.model_path, seed=self.config.run.seed,
                                   image_min_pixels=prompt.min_pixels, image_max_pixels=prompt.max_pixels, **changes)

    def _initial_model(self) -> str:
        """model.path (a checkpoint folder's hf/ if given one), else a tiny random-init model."""
        from webrl.evaluation import resolve_checkpoint

        if self.config.model.path:
            from webrl.models.shipped import check_prompt_matches

            path = resolve_checkpoint(self.config.model.path)
            try:
                check_prompt_matches(path, self.config.generator.prompt)
            except ValueError as e:
                print(f"webrl: warning: {e}")
            return path
        from webrl.models import tiny_model
        from webrl.models.corpus import corpus_lines

        m = self.config.model
        out = self.run_dir / "model-init"
        if (out / "config.json").exists():
            return str(out)
        seed = self.config.run.seed
        return str(tiny_model(m.family, corpus=corpus_lines(m.tiny_corpus, seed), out_dir=out, seed=seed,
                              hidden=m.tiny_hidden, layers=m.tiny_layers, vocab_size=m.tiny_vocab,
                              element_tokens=m.tiny_element_tokens))

    def _render_policy(self):
        """A GeneratorPolicy used only to render prompts (the SFT path shares rollout's code)."""
        from webrl.models import load_model
        from webrl.policy import GeneratorPolicy

        model, processor = load_model(self.model_path)
        return GeneratorPolicy(model, processor, self.config.generator)

    def _demonstrations(self):
        from webrl.envs.sites.cli import record_demos
        from webrl.types import load_trajectories

        cfg = self.config
        folder = Path(cfg.sft.demos_dir) if cfg.sft.demos_dir else self.run_dir / "demos"
        if not cfg.sft.demos_dir:
            summary = record_demos(cfg.sft.demos, folder, seed=cfg.run.seed, levels=cfg.sft.demo_levels,
                                   sites=cfg.tasks.sites, split="train", viewport=cfg.env.env.browser.viewport)
            self._log({"stage": "demos", "episodes": summary["episodes"], "saved": summary["saved"]})
        return load_trajectories(folder / "demos.jsonl")

    # -- weights, checkpoints, logs ----------------------------------------------------------
    @property
    def policy_version(self) -> int:
        return self.learner.policy_version

    def _sync_weights(self, force_version: Optional[int] = None) -> None:
        import ray

        ref = self.learner.get_weights_ref()
        version = force_version if force_version is not None else self.policy_version
        ray.get([a.set_weights.remote(ref, version) for a in [*self.inference, self.eval_inference]])

    def save(self, path: str | Path) -> str:
        """Checkpoint the learner (weights, optimizer, version) and the iteration at `path`."""
        out = self.learner.save(str(path), {"iteration": self.iteration, "model_path": self.model_path})
        self._write_prompt(out)
        return out

    def _write_prompt(self, checkpoint: str | Path) -> None:
        """hf/webrl_prompt.json: the prompt these weights were trained with (check_prompt_matches,
        and `webrl eval CHECKPOINT` adopts it). Not in the manifest: the weights are verified, not it."""
        (Path(checkpoint) / "hf" / "webrl_prompt.json").write_text(
            json.dumps(dataclasses.asdict(self.config.generator.prompt), indent=1))

    def load(self, path: str | Path) -> None:
        """Continue from a checkpoint `save` wrote: learner state, iteration, rollout weights."""
        state = self.learner.load(str(path))
        self.iteration = int(state["iteration"])
        self._sync_weights()

    def _checkpoint(self) -> None:
        self.save(self.run_dir / "checkpoints" / f"step-{self.iteration:08d}")

    def _resume(self) -> None:
        from webrl.learner.checkpoint import latest_checkpoint

        latest = latest_checkpoint(self.run_dir / "checkpoints")
        if latest is None:
            raise FileNotFoundError(f"run.resume=true but {self.run_dir / 'checkpoints'} holds no checkpoint")
        self.load(latest)
        print(f"webrl: resumed from {latest} (iteration {self.iteration}, policy version {self.policy_version})")
    def _view(self) -> None:
        from webrl.rollout import view_run

        try:
            print(f"trajectory viewer: {view_run(self.run_dir)}")
        except FileNotFoundError:
            pass

    def close(self) -> None:
        import ray

        if self.collector is not None:
            self.collector.close()
            self.collector = None
        for w in self.env_workers:
            try:
                ray.get(w.close.remote(), timeout=30)
            except Exception:  # already dead: nothing to close
                pass
        if self.learner is not None:
            self.learner.shutdown()
            self.learner = None
        if not self._ray_started and ray.is_initialized():  # someone else's Ray (a Tune trial): free our actors
            for actor in [*self.env_workers, *self.inference, self.eval_inference]:
                if actor is not None:
                    ray.kill(actor)
        self.env_workers, self.inference, self.eval_inference = [], [], None
        if getattr(self, "_log", None) is not None:
            self._log.close()
        if self._ray_started:
            ray.shutdown()
            self._ray_started = False


# -- small helpers -------------------------------------------------------------------------------
def _rng(seed: int, stream: str, iteration: int = 0):
    import numpy as np

    return np.random.default_rng([seed, {"rl": 1, "eval": 2}[stream], iteration])


def _job_env_vars() -> dict[str, str]:
    """The env vars of the runtime env of the Ray job this driver runs in (none outside a job)."""
    job = json.loads(os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR") or "{}")
    return dict((job.get("runtime_env") or {}).get("env_vars") or {})


def _staleness(trajectories, version: int) -> float:
    """Most policy versions any collected turn lags behind the learner (0 in sync mode)."""
    versions = [t.policy_version for traj in trajectories for t in traj.turns if t.policy_version >= 0]
    return float(max((version - v for v in versions), default=0))
