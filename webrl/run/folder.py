"""The run folder and what a run starts from or leaves in it: where the folder is
(`resolve_run_dir`), the model the run starts from (`initial_model`, a tiny one made in the folder
when model.path is empty), the checkpoint a resumed run continues from, the trajectory viewer
page, and the report of a one-off evaluation (`webrl eval`)."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from webrl.evaluation.evaluator import sampled_line
from webrl.evaluation.summary import EvalSummary, export_om2w, resolve_checkpoint, success_table, summarize
from webrl.run.config import WebRLConfig


def resolve_run_dir(config: WebRLConfig) -> Path:
    """run.run_dir, or a new `<output_dir>/<name>-<time>` folder."""
    if config.run.run_dir:
        return Path(config.run.run_dir).resolve()
    if config.run.resume:
        raise ValueError("run.resume=true needs run.run_dir (the folder of the run to continue)")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return (Path(config.run.output_dir) / f"{config.run.name}-{stamp}").resolve()


def initial_model(config: WebRLConfig, run_dir: Path) -> str:
    """model.path (a checkpoint folder's hf/ if given one), else a tiny random-init model made
    once in `<run>/model-init`. A prompt that differs from the checkpoint's is warned about."""
    m = config.model
    if m.path:
        from webrl.policy.trained_prompt import check_prompt_matches

        path = resolve_checkpoint(m.path)
        try:
            check_prompt_matches(path, config.generator.prompt)
        except ValueError as e:
            print(f"webrl: warning: {e}")
        return path
    from webrl.models import tiny_model
    from webrl.models.corpus import corpus_lines

    out = run_dir / "model-init"
    if (out / "config.json").exists():
        return str(out)
    return str(tiny_model(m.family, corpus=corpus_lines(m.tiny_corpus, config.run.seed), out_dir=out,
                          seed=config.run.seed, hidden=m.tiny_hidden, layers=m.tiny_layers, vocab_size=m.tiny_vocab,
                          element_tokens=m.tiny_element_tokens))


def resume_checkpoint(run_dir: Path) -> Path:
    """The newest checkpoint of the run in `run_dir` (run.resume=true); FileNotFoundError if none."""
    from webrl.learner.checkpoint import latest_checkpoint

    latest = latest_checkpoint(run_dir / "checkpoints")
    if latest is None:
        raise FileNotFoundError(f"run.resume=true but {run_dir / 'checkpoints'} holds no checkpoint")
    return latest


def show_viewer(run_dir: Path) -> None:
    """Write the trajectory viewer page and print where it is (nothing when no trajectory was logged)."""
    from webrl.rollout import view_run

    try:
        print(f"trajectory viewer: {view_run(run_dir)}")
    except FileNotFoundError:
        pass


def report_evaluation(config: WebRLConfig, result: Any, run_dir: Path) -> EvalSummary:
    """Print an evaluation's per-site/level table and sampled-success line and, with
    eval.export_om2w, write the Online-Mind2Web result folders; returns the summary."""
    summary = summarize(result.tasks, result.trajectories)
    print(success_table(summary))
    line = sampled_line(result.metrics, config.generator.sampling.temperature, config.eval.samples_per_task)
    if line:
        print(line)
    if config.eval.export_om2w:
        folders = export_om2w(result.trajectories, run_dir / "om2w")
        print(f"Online-Mind2Web results: {len(folders)} task folders in {run_dir / 'om2w'}")
    return summary
