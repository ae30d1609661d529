"""`Trainer`: the single-controller loop of a webrl run, read top to bottom.

    fit():   evaluate "before" -> [sft_stage] -> step() x trainer.iterations -> evaluate "after" -> table
    step():  draw tasks (balanced rollout: plan tasks and group sizes from success estimates)
             -> collect G trajectories per task -> reward (dynamic sampling: more rounds until
             the batch holds enough groups with a reward difference) -> credit (trajectories -> samples;
             on a Dyna-GRPO SimRollout iteration: refined responses on the plain prompts instead,
             or beside them with dyna.train_collected)
             -> learner.update -> sync weights (version += 1) -> log (-> evaluate every N)

The pieces it composes, each readable on its own: `RunActors` (Ray and every actor),
`RolloutCoordinator` (episodes over env slots and inference workers), `webrl.reward` (checker or
judge), `webrl.learner.credit.trajectories_to_samples` (the pure advantage stage), `LearnerGroup`
(DeepSpeed), `Evaluator` (held-out success and the per-task outcome log), `webrl.recipes.sft`;
the iteration's own pieces (task draw, Dyna's SimRollout phase, collection metrics) are in
`webrl.run.iteration`, its batch (collection and scoring, in rounds with dynamic sampling; so
time_collect_s includes scoring) in `webrl.run.dynamic_sampling`, the run folder's (initial model,
resume checkpoint, viewer) in `webrl.run.folder`.

Everything lands in the run folder: `config.yaml`, `metrics.jsonl`, `tb/`, `trajectories/` (the
viewer's log), `viewer/index.html`, `eval_outcomes.jsonl`, `checkpoints/step-N/` (with `hf/`,
loadable by plain transformers). `run.resume=true` with `run.run_dir` continues from the newest
checkpoint: learner state, policy version and iteration. Task draws of iteration i depend only
on (seed, i) and the success estimates (balanced rollout, dynamic sampling's extra rounds), which
checkpoints keep, so a resumed or restored run draws what an uninterrupted one would (sync mode).
With `rollout.mode=async` an `AsyncCollector` keeps collecting while the learner updates (at
most `rollout.max_staleness` versions behind) and draws on its own thread, so its draws do not
replay on resume. A checkpoint also keeps the byte sizes of the run folder's append-only logs
(`webrl.run.log.APPEND_ONLY_LOGS`: metrics, trajectories, evaluation outcomes) as of its iteration
(saved after that iteration's `log`), and resuming from it cuts them back: an attempt that died
after logging iteration i + 1 but before checkpointing it leaves no lines the redo writes again,
so no group or iteration is counted twice (a finished run extended leaves its "after" evaluation
to the extended run's end).

Entry points: `fit()` (`webrl train`), `run_sft()` (`webrl sft`), `run_eval()` (`webrl eval`),
and for Ray Tune `prepare()` + `step()` + `save(dir)` / `load(dir)`.

Departure from the OpenWebRL recipe (CPU default only; presets restore the recipe): the default
learning rate is 2e-4 (docs/LEARNING.md: RL moved a tiny model the right way only at a low one).
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Optional

from webrl.config import to_yaml
from webrl.evaluation.evaluator import drop_failure
from webrl.evaluation.summary import paired_changes
from webrl.learner.credit import trajectories_to_samples
from webrl.recipes.sft import sft_stage
from webrl.reward import reward_metrics
from webrl.rollout.balanced import SuccessEstimates
from webrl.rollout.dyna import alongside
from webrl.run.actors import RunActors
from webrl.run.config import WebRLConfig, learner_run, rl_learner, sft_learners
from webrl.run.folder import initial_model, report_evaluation, resolve_run_dir, resume_checkpoint, show_viewer
from webrl.run.dynamic_sampling import Batch, collect_batch, score_round
from webrl.run.iteration import collect_metrics, sim_rollout
from webrl.run.log import RunLog, cut_logs, log_sizes, logged_evaluation
from webrl.run.parts import RunParts, start_parts
from webrl.run.tasks import check_start_urls


class Trainer:
    """Composes a run's components; `fit()` runs the stages and returns the before/after results."""

    def __init__(self, config: WebRLConfig, placement_group: Any = None, actors: Optional[RunActors] = None):
        """`actors`: a stand-in with RunActors' methods (tests run the loop without Ray)."""
        self.config = config
        self.run_dir = resolve_run_dir(config)
        self.actors = actors if actors is not None else RunActors(config, self.run_dir, placement_group)
        self.model_path = ""  # model.path resolved, or a tiny model made in the run folder (start_actors)
        self.log: Optional[RunLog] = None
        self.parts: Optional[RunParts] = None  # rewards, task sources, coordinators, evaluator (start_actors)
        self.learner: Any = None
        self.iteration = 0
        self.before: Optional[dict] = None
        self._last_eval: tuple[Optional[tuple[int, int]], dict] = (None, {})  # ((iteration, version), metrics)
        self._records: dict[str, dict] = {}  # label -> that evaluation's per-task outcomes record
        self.estimates = SuccessEstimates.from_config(config.rollout.balanced)  # per task family, for balanced rollout
        self.evaluation_failures: list[str] = []  # evaluations that scored too little (`drop_failure`)

    # -- entry points ----------------------------------------------------------------------------
    def fit(self) -> dict[str, Any]:
        cfg = self.config.trainer
        try:
            self.prepare(evaluate_before=True)
            while "rl" in cfg.stages and self.iteration < cfg.iterations:
                self.step()
                if self.iteration % cfg.checkpoint_every == 0 or self.iteration == cfg.iterations:
                    self.save(self.run_dir / "checkpoints" / f"step-{self.iteration:08d}")
            at, metrics = self._last_eval
            after = metrics if at == (self.iteration, self.learner.policy_version) else self.evaluate("after")
            show_viewer(self.run_dir)
            before = self.before  # a resumed run's, read back from its logs (`prepare`)
            paired = (paired_changes(self._records["before"], self._records["last"])
                      if before and after and "before" in self._records else None)
            print(self.log.before_after(before, after, paired))
            print(f"run folder: {self.run_dir}")
            return {"run_dir": str(self.run_dir), "before": before, "after": after}
        finally:
            self.close()

    def prepare(self, evaluate_before: bool = False) -> bool:
        """Start every actor; resume from the newest checkpoint (run.resume) or evaluate and run
        the SFT stage; leaves the RL learner running. Returns whether the run resumed."""
        cfg = self.config
        self.start_actors(rollout=True)
        if not cfg.run.resume and evaluate_before:
            self.before = self.evaluate("before")
        sft = "sft" in cfg.trainer.stages and not cfg.run.resume
        if sft:
            self.model_path = sft_stage(cfg, self.run_dir, self.model_path, self.actors, self.log,
                                        sft_learners(cfg, self.model_path))
        self.learner = self.actors.start_learner(
            rl_learner(cfg), learner_run(cfg, self.model_path, temperature=cfg.generator.sampling.temperature))
        if cfg.run.resume:
            latest = resume_checkpoint(self.run_dir)
            self.load(latest)
            print(f"webrl: resumed from {latest} (iteration {self.iteration}, "
                  f"policy version {self.learner.policy_version})")
            if evaluate_before:  # the table compares the last evaluation with the run's first
                self.before, record = logged_evaluation(self.run_dir, "before")
                if record is not None:
                    self._records["before"] = record
        elif sft:  # the inference workers started from the pre-SFT weights
            self.actors.sync_weights(self.learner, 0)
        return cfg.run.resume

    def step(self) -> dict[str, Any]:
        """One RL iteration: collect -> reward -> credit -> update -> sync -> log (-> eval)."""
        cfg, parts, version = self.config, self.parts, self.learner.policy_version
        t0 = time.monotonic()
        if parts.collector is not None:  # async: groups collected while the last update ran
            trajectories, stats = parts.collector.next_batch(version, cfg.tasks.tasks_per_iteration, self.iteration)
            batch = Batch([], trajectories, trajectories, score_round(cfg, parts, self.estimates, trajectories, stats),
                          stats)
        else:  # scored and logged round by round (dynamic sampling draws more until the batch is full)
            batch = collect_batch(cfg, parts, self.estimates, self.iteration)
        t_collect = time.monotonic() - t0
        rewards = reward_metrics(batch.results)
        sim = cfg.dyna.is_sim_iteration(self.iteration)  # Dyna-GRPO: refine with the real future states
        samples, credit = ([], {}) if sim and not cfg.dyna.train_collected else trajectories_to_samples(
            batch.train, cfg.learner.objective, cfg.learner.objective_config)
        if sim:
            refined, dyna_metrics = sim_rollout(cfg, parts, self.learner, batch.tasks, batch.trajectories,
                                                self.iteration)
            samples, credit = alongside(samples, refined), {**credit, **dyna_metrics}
        t1 = time.monotonic()
        learn = self.learner.update(samples) if samples else {"skipped_update": 1.0}
        self.actors.sync_weights(self.learner, self.learner.policy_version)
        self.iteration += 1
        metrics = {"iteration": self.iteration, **credit, **rewards, **learn, **batch.metrics, "samples": len(samples),
                   **collect_metrics(batch.trajectories, batch.stats, version, t_collect),
                   "time_update_s": time.monotonic() - t1,
                   **{f"weight_sync/{k}": v for k, v in getattr(self.actors, "last_sync", {}).items()}}
        if cfg.trainer.eval_every and self.iteration % cfg.trainer.eval_every == 0:
            evaluated = self.evaluate(f"iteration {self.iteration}")
            metrics.update({f"eval_{k}": v for k, v in evaluated.items() if isinstance(v, float)})
        self.log(metrics)
        return metrics

    def evaluate(self, label: str) -> dict[str, Any]:
        """Held-out success now (greedy, and sampled with eval.samples_per_task); {} with no eval tasks."""
        if self.parts.collector is not None:  # evaluation borrows the collector's env slots
            self.parts.collector.pause()
        evaluation = self.parts.evaluator.evaluate(label, self.iteration)
        self._check_drops(label, evaluation)
        metrics = evaluation.metrics
        self._records["last"] = evaluation.record
        if label == "before":
            self._records["before"] = evaluation.record
        if metrics and self.learner is not None:
            self._last_eval = ((self.iteration, self.learner.policy_version), metrics)
        return metrics

    def run_sft(self) -> str:
        """Only the SFT stage: demonstrations -> SFT learner -> checkpoint; returns its HF folder."""
        try:
            self.start_actors(rollout=False, evaluation=False)
            path = sft_stage(self.config, self.run_dir, self.model_path, self.actors, self.log,
                             sft_learners(self.config, self.model_path))
            print(f"SFT checkpoint (Hugging Face folder): {path}")
            return path
        finally:
            self.close()

    def run_eval(self):
        """One evaluation of model.path (or eval.endpoint): the per-site/level table, the
        trajectories and viewer, and (eval.export_om2w) the Online-Mind2Web result folders."""
        cfg = self.config
        try:
            self.start_actors(rollout=False)
            result = self.parts.evaluator.evaluate("eval", self.iteration)
            self._check_drops("eval", result)
            summary = report_evaluation(cfg, result, self.run_dir)
            show_viewer(self.run_dir)
            print(f"run folder: {self.run_dir}")
            return summary
        finally:
            self.close()

    def _check_drops(self, label: str, evaluation: Any) -> None:
        """Note an evaluation that scored too little; the CLI exits non-zero when any did."""
        failure = drop_failure(evaluation, self.config.eval.max_dropped_share)
        if failure:
            self.evaluation_failures.append(f"{label}: {failure}")

    # -- checkpoints ---------------------------------------------------------------------------
    def save(self, path: str | Path) -> str:
        """Checkpoint the learner (weights, optimizer, version), the iteration and the prompt."""
        from webrl.models.shipped import write_trained_prompt

        out = self.learner.save(str(path), {"iteration": self.iteration, "model_path": self.model_path,
                                            "success_estimates": self.estimates.state_dict(),
                                            "log_sizes": log_sizes(self.run_dir)})
        write_trained_prompt(out, dataclasses.asdict(self.config.generator.prompt))
        return out

    def load(self, path: str | Path) -> None:
        """Continue from a checkpoint `save` wrote: learner state, iteration, rollout weights."""
        state = self.learner.load(str(path))
        self._cut_logs(Path(path), state)
        self.iteration = int(state["iteration"])
        if "success_estimates" in state:  # the counts carry over; the prior is this run's config
            self.estimates = SuccessEstimates.from_config(self.config.rollout.balanced)
            self.estimates.counts = SuccessEstimates.from_state(state["success_estimates"]).counts
        self.actors.sync_weights(self.learner, self.learner.policy_version)

    def _cut_logs(self, path: Path, state: dict[str, Any]) -> None:
        """Cut the logs back to their sizes at checkpoint `path` (a checkpoint of this run folder;
        one from elsewhere, e.g. a PBT exploit's, tells nothing about this folder's logs). Runs
        before anything is logged: `prepare` loads before the first step or evaluation."""
        if not path.resolve().is_relative_to(self.run_dir.resolve()):
            print(f"webrl: {path} lies outside the run folder {self.run_dir}, whose logs are left as they are")
        elif "log_sizes" not in state:
            print(f"webrl: {path.name} keeps no log sizes (an older checkpoint): the logs are left as they are, "
                  f"lines written after it included")
        else:
            cut = cut_logs(self.run_dir, state["log_sizes"], path.name)
            if cut:
                print(cut)

    # -- start-up and shutdown -----------------------------------------------------------------
    def start_actors(self, rollout: bool, evaluation: bool = True) -> None:
        """Run folder, model, Ray and the log; then (evaluation) the rollout side (`start_parts`)."""
        cfg = self.config
        if evaluation:  # a configuration fault fails here, before Ray starts
            check_start_urls(cfg.tasks, cfg.env, max_steps=cfg.rollout.max_turns)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.yaml").write_text(to_yaml(cfg))
        self.model_path = initial_model(cfg, self.run_dir)
        self.actors.start_ray("train" if rollout else "eval" if evaluation else "sft")
        self.log = RunLog(self.run_dir, config=cfg)
        if evaluation:
            self.parts = start_parts(cfg, self.actors, self.model_path, self.run_dir, self.log, rollout, self.iteration)

    def close(self) -> None:
        if self.parts is not None and self.parts.collector is not None:
            self.parts.collector.close()
            self.parts.collector = None
        self.actors.close()
        self.learner = None
        if self.log is not None:
            self.log.close()
