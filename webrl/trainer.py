"""`Trainer`: the single-controller loop of a webrl run, read top to bottom.

    evaluate (held-out tasks, greedy)
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

Departures from the OpenWebRL recipe (CPU default only; presets restore the recipe):
the SFT stage records demonstrations from the sandbox oracles instead of loading 0.4K human
trajectories; and the default learning rate is 1e-4 (LEARNING.md: tiny models need it).
"""
from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

from webrl.config import to_yaml
from webrl.ray_local import start_local_ray
from webrl.train_config import WebRLConfig


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

    def __init__(self, config: WebRLConfig):
        self.config = config
        self.run_dir = _resolve_run_dir(config)
        self.iteration = 0
        self.history: list[dict[str, Any]] = []
        self._ray_started = False

    # -- the loop ----------------------------------------------------------------------------
    def fit(self) -> dict[str, Any]:
        cfg = self.config
        self._setup()
        try:
            results: dict[str, Any] = {"run_dir": str(self.run_dir)}
            resumed = self._maybe_resume()
            results["before"] = self.evaluate("before") if not resumed else None
            if "sft" in cfg.trainer.stages and not resumed:
                self._sft_stage()
            if "rl" in cfg.trainer.stages:
                self._rl_stage()
            results["after"] = self.evaluate("after")
            self._view()
            print(_before_after_table(results["before"], results["after"]))
            print(f"run folder: {self.run_dir}")
            return results
        finally:
            self.close()

    def _rl_stage(self) -> None:
        cfg = self.config
        rng = _rng(cfg.run.seed, "rl")
        for _ in range(self.iteration):  # resuming: the same task draws as an uninterrupted run
            self._sample_tasks(rng, cfg.tasks.tasks_per_iteration, cfg.tasks.train_levels, "train")
        while self.iteration < cfg.trainer.iterations:
            t0 = time.monotonic()
            tasks = self._sample_tasks(rng, cfg.tasks.tasks_per_iteration, cfg.tasks.train_levels, "train")
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
                       "staleness": staleness}
            if cfg.trainer.eval_every and self.iteration % cfg.trainer.eval_every == 0:
                metrics.update({f"eval_{k}": v for k, v in self.evaluate(f"iteration {self.iteration}").items()
                                if isinstance(v, float)})
            self._log(metrics)
            if self.iteration % cfg.trainer.checkpoint_every == 0 or self.iteration == cfg.trainer.iterations:
                self._checkpoint()

    # -- stages and steps ----------------------------------------------------------------------
    def _sft_stage(self) -> None:
        from webrl.learner import LearnerGroup
        from webrl.learner.samples import LearnerSample
        from webrl.policy import sft_samples_from_trajectory

        cfg = self.config
        demos = self._demonstrations()
        policy = self._render_policy()
        samples = [LearnerSample(s.prompt_ids, s.response_ids, images=list(s.images))
                   for traj in demos for s in sft_samples_from_trajectory(traj, policy)]
        if not samples:
            print("webrl sft: no demonstrations to train on; skipping the SFT stage")
            return
        self.learner.shutdown()  # its CPUs go to the SFT learner; the RL learner restarts from SFT weights
        self.learner = None
        learner = LearnerGroup(dataclasses.replace(cfg.sft.learner, model_path=self.model_path, seed=cfg.run.seed),
                               num_ranks=cfg.resources.learner_ranks, **self._learner_resources())
        try:
            for epoch in range(cfg.sft.epochs):
                m = learner.update(samples)
                self._log({"stage": "sft", "epoch": epoch + 1, "samples": len(samples), **m})
            path = learner.save(str(self.run_dir / "sft"), {"stage": "sft"})
        finally:
            learner.shutdown()
        self.model_path = str(Path(path) / "hf")
        self._start_learner()  # the RL learner starts from the SFT weights
        self._sync_weights(force_version=0)

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
        """Greedy success on held-out (test-split) tasks, overall and per site/level."""
        cfg = self.config
        if not cfg.tasks.eval_tasks:
            return {}
        tasks = self._sample_tasks(_rng(cfg.run.seed, "eval"), cfg.tasks.eval_tasks, cfg.tasks.eval_levels, "test")
        trajectories, stats = self.eval_coordinator.collect(tasks, self.iteration)
        self._score(trajectories)
        scored = [t for t in trajectories if t.status == "ok"]
        out: dict[str, Any] = {"success": _mean([float((t.reward or 0) > 0) for t in scored]),
                               "dropped": float(stats.dropped), "tasks": float(len(tasks))}
        reasons = sorted({t.drop_reason for t in trajectories if t.status == "dropped"})
        if reasons:
            print(f"webrl eval: {len(reasons)} distinct drop reasons, e.g. {reasons[0]}")
        by_key: dict[str, list[float]] = {}
        for task, traj in zip(tasks, trajectories):
            if traj.status == "ok":
                by_key.setdefault(f"{task.spec.site}/l{task.spec.level}", []).append(float((traj.reward or 0) > 0))
        out["per_site_level"] = {k: _mean(v) for k, v in sorted(by_key.items())}
        self._log({"stage": "eval", "label": label, "success": out["success"], "dropped": out["dropped"]})
        return out

    # -- setup -------------------------------------------------------------------------------
    def _setup(self) -> None:
        import ray

        from webrl.reward import build_reward
        from webrl.rollout import ProgressBar, RolloutCoordinator, TrajectoryLog

        cfg = self.config
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.yaml").write_text(to_yaml(cfg))
        os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(self.run_dir / "torch_extensions"))
        self.model_path = cfg.model.path or self._tiny_model()
        self._start_ray(ray)
        self.reward_fn = build_reward(cfg.reward)
        self.env_workers = self._start_env_workers()
        slots = [(w, i) for w in self.env_workers for i in range(cfg.env.num_slots)]
        self.inference = [self._start_inference(cfg.generator) for _ in range(cfg.resources.num_inference_workers)]
        greedy = dataclasses.replace(cfg.generator, sampling=dataclasses.replace(cfg.generator.sampling, greedy=True))
        self.eval_inference = self._start_inference(greedy)
        log = TrajectoryLog(self.run_dir)
        self.coordinator = RolloutCoordinator(slots, self.inference, cfg.rollout, on_trajectory=log,
                                              progress=ProgressBar())
        eval_rollout = dataclasses.replace(cfg.rollout, group_size=1)
        self.eval_coordinator = RolloutCoordinator(slots, [self.eval_inference], eval_rollout,
                                                   progress=ProgressBar())
        self._start_learner()
        self._metrics_file = open(self.run_dir / "metrics.jsonl", "a")
        self._tb = _tensorboard(self.run_dir / "tb")

    def _start_ray(self, ray) -> None:
        cfg = self.config.resources
        env_vars = {"RAY_USAGE_STATS_ENABLED": os.environ.get("RAY_USAGE_STATS_ENABLED", "0"),
                    "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"),
                    "TORCH_EXTENSIONS_DIR": os.environ["TORCH_EXTENSIONS_DIR"]}
        if ray.is_initialized():
            return
        address = cfg.ray_address or os.environ.get("RAY_ADDRESS", "")
        if address:  # a cluster (e.g. inside `ray job submit`): its own temp dir and CPUs
            ray.init(address=address, runtime_env={"env_vars": env_vars}, log_to_driver=False)
        else:
            needed = (cfg.num_env_workers * cfg.cpus_per_env_worker + cfg.learner_ranks * cfg.cpus_per_learner_rank
                      + (cfg.num_inference_workers + 1) * cfg.cpus_per_inference_worker)
            num_cpus = cfg.num_cpus or max(int(needed + 0.999), os.cpu_count() or 1)
            start_local_ray(num_cpus, _ray_temp_dir(self.run_dir), env_vars)
        self._ray_started = True

    def _start_env_workers(self) -> list:
        from webrl.envs.worker import make_env_worker_actor

        cfg = self.config
        return [make_env_worker_actor(cfg.env, num_cpus=cfg.resources.cpus_per_env_worker)
                for _ in range(cfg.resources.num_env_workers)]

    def _start_inference(self, generator) -> Any:
        import ray

        from webrl.rollout import InferenceActor
        from webrl.rollout.engines import GeneratorEngineFactory

        res = self.config.resources
        actor = ray.remote(num_cpus=res.cpus_per_inference_worker, num_gpus=res.gpus_per_inference_worker)
        factory = GeneratorEngineFactory(self.model_path, generator, dtype=self.config.model.dtype,
                                         device="cuda" if res.gpus_per_inference_worker else None)
        return actor(InferenceActor).options(max_concurrency=256).remote(factory, self.config.inference)

    def _learner_resources(self) -> dict[str, Any]:
        res = self.config.resources
        per_rank = {"CPU": res.cpus_per_learner_rank}
        if res.gpus_per_learner_rank:
            per_rank["GPU"] = res.gpus_per_learner_rank
        return {"resources_per_rank": per_rank,
                "env_vars": {"TORCH_EXTENSIONS_DIR": os.environ["TORCH_EXTENSIONS_DIR"]}}

    def _start_learner(self) -> None:
        from webrl.learner import LearnerGroup

        if getattr(self, "learner", None) is not None:
            self.learner.shutdown()
        cfg = self.config
        self.learner = LearnerGroup(dataclasses.replace(cfg.learner, model_path=self.model_path, seed=cfg.run.seed),
                                    num_ranks=cfg.resources.learner_ranks, **self._learner_resources())

    def _tiny_model(self) -> str:
        from webrl.models import tiny_model

        m = self.config.model
        out = self.run_dir / "model-init"
        if (out / "config.json").exists():
            return str(out)
        return str(tiny_model(m.family, out_dir=out, seed=self.config.run.seed, hidden=m.tiny_hidden,
                              layers=m.tiny_layers))

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

    def _sample_tasks(self, rng, n: int, levels, split: str) -> list:
        from webrl.envs.sites.source import SandboxTaskSource

        source = SandboxTaskSource(sites=tuple(self.config.tasks.sites), levels=tuple(levels), split=split,
                                   start_server=False)
        return [source.sample(rng) for _ in range(n)]

    # -- weights, checkpoints, logs ----------------------------------------------------------
    @property
    def policy_version(self) -> int:
        return self.learner.policy_version

    def _sync_weights(self, force_version: Optional[int] = None) -> None:
        import ray

        ref = self.learner.get_weights_ref()
        version = force_version if force_version is not None else self.policy_version
        ray.get([a.set_weights.remote(ref, version) for a in [*self.inference, self.eval_inference]])

    def _checkpoint(self) -> None:
        path = self.run_dir / "checkpoints" / f"step-{self.iteration:08d}"
        self.learner.save(str(path), {"iteration": self.iteration, "model_path": self.model_path})

    def _maybe_resume(self) -> bool:
        from webrl.learner.checkpoint import latest_checkpoint

        if not self.config.run.resume:
            return False
        latest = latest_checkpoint(self.run_dir / "checkpoints")
        if latest is None:
            raise FileNotFoundError(f"run.resume=true but {self.run_dir / 'checkpoints'} holds no checkpoint")
        state = self.learner.load(str(latest))
        self.iteration = int(state["iteration"])
        self._sync_weights()
        print(f"webrl: resumed from {latest} (iteration {self.iteration}, policy version {self.policy_version})")
        return True

    def _log(self, metrics: dict[str, Any]) -> None:
        record = {"time": time.time(), **metrics}
        self.history.append(record)
        self._metrics_file.write(json.dumps(record, default=str) + "\n")
        self._metrics_file.flush()
        step = int(metrics.get("iteration", len(self.history)))
        for k, v in metrics.items():
            if isinstance(v, (int, float)) and self._tb is not None:
                self._tb.add_scalar(f"{metrics.get('stage', 'rl')}/{k}", v, step)
        if "iteration" in metrics and metrics["iteration"] % self.config.trainer.log_every == 0:
            print(_metrics_table(metrics))
        elif "stage" in metrics:
            print("webrl " + " ".join(f"{k}={_fmt(v)}" for k, v in metrics.items() if k != "time"))

    def _view(self) -> None:
        from webrl.rollout import view_run

        try:
            print(f"trajectory viewer: {view_run(self.run_dir)}")
        except FileNotFoundError:
            pass

    def close(self) -> None:
        import ray

        for name in ("env_workers",):
            for w in getattr(self, name, []) or []:
                try:
                    ray.get(w.close.remote(), timeout=30)
                except Exception:  # already dead: nothing to close
                    pass
        if getattr(self, "learner", None) is not None:
            self.learner.shutdown()
            self.learner = None
        if getattr(self, "_tb", None) is not None:
            self._tb.close()
        if getattr(self, "_metrics_file", None) is not None:
            self._metrics_file.close()
        if self._ray_started:
            ray.shutdown()
            self._ray_started = False


# -- small helpers -------------------------------------------------------------------------------
def _rng(seed: int, stream: str):
    import numpy as np

    return np.random.default_rng([seed, {"rl": 1, "eval": 2}[stream]])


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def _staleness(trajectories, version: int) -> float:
    """Most policy versions any collected turn lags behind the learner (0 in sync mode)."""
    versions = [t.policy_version for traj in trajectories for t in traj.turns if t.policy_version >= 0]
    return float(max((version - v for v in versions), default=0))


def _tensorboard(folder: Path):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # tensorboard is optional at run time
        return None
    return SummaryWriter(str(folder))


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


_TABLE_KEYS = ("iteration", "reward/mean", "reward/success_rate", "success_rate", "filtered_groups", "samples", "loss", "kl",
               "entropy", "clip_fraction", "env_steps_per_s", "dropped", "staleness", "time_collect_s",
               "time_update_s")


def _metrics_table(metrics: dict[str, Any]) -> str:
    keys = [k for k in _TABLE_KEYS if k in metrics] + sorted(
        k for k in metrics if k.startswith(("loss", "kl", "entropy", "clip")) and k not in _TABLE_KEYS)[:4]
    return " | ".join(f"{k} {_fmt(metrics[k])}" for k in dict.fromkeys(keys))


def _before_after_table(before: Optional[dict], after: Optional[dict]) -> str:
    rows = ["held-out success (greedy)      before    after"]
    keys = sorted(set((before or {}).get("per_site_level", {})) | set((after or {}).get("per_site_level", {})))
    for key in ["overall", *keys]:
        def get(r):
            if not r:
                return "   -  "
            v = r.get("success") if key == "overall" else r.get("per_site_level", {}).get(key)
            return f"{100 * v:5.1f}%" if v is not None else "   -  "
        rows.append(f"{key:<30} {get(before):>7} {get(after):>8}")
    return "\n".join(rows)
