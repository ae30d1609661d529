"""Experiment trackers beside `metrics.jsonl` and TensorBoard: Weights & Biases and MLflow,
both offline only, chosen with `run.trackers` (default none).

Contract (`Tracker`): `log_config(config)` once at start (the run's config as a nested dict
and as YAML text), `log_metrics(metrics, step)` for every `RunLog` record with the TensorBoard
tags and step (`<stage or rl>/<key>`, the iteration), `log_table(name, text, rows)` for the
before/after table at the end, then `close()`.

Where each writes, inside the run folder (nothing leaves the machine):
  wandb    `<run_dir>/wandb/wandb/offline-run-*/run-*.wandb` (mode="offline"; read back with
           `wandb leet inspect --json`, upload later with `wandb sync` if wanted). Its config,
           data, cache and artifact-staging folders are pointed inside `<run_dir>/wandb` too.
  mlflow   a local file store `file:<run_dir>/mlruns` (experiment from `run.trackers=[mlflow:EXPERIMENT]`).

Interpretations:
  - W&B steps must only grow, but RunLog's steps do not (stage events before RL use their
    record number, RL then restarts at iteration 1), so records go to W&B with no explicit
    step and the TensorBoard step as the metric `webrl_step`, declared as every key's x-axis.
  - MLflow 3's file store is in maintenance mode and refuses to open unless
    MLFLOW_ALLOW_FILE_STORE=true; a sqlite store would need SQLAlchemy and Alembic on top of
    mlflow-skinny, so the file store it is (it still reads and writes as before).
  - MLflow params are the config flattened to dotted keys (values cut to 500 characters); the
    whole config is also an artifact, `config.yaml`.

Telemetry and network off (`OFFLINE_ENV`, set in this process before either library is
imported): WANDB_MODE=offline, WANDB_ERROR_REPORTING=false (no Sentry reports),
WANDB_DISABLE_GIT / WANDB_DISABLE_CODE (no repository or code capture), WANDB_SILENT;
MLFLOW_DISABLE_TELEMETRY=true and DO_NOT_TRACK=true (MLflow 3's usage telemetry). W&B also
gets `x_disable_stats/meta/machine_info` (no system-metrics sampler) and console="off" (the
trainer's stdout is not captured).
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path
from typing import Any, Protocol, Sequence

from webrl.config import TRACKERS

"""Tracker names `run.trackers` accepts."""

OFFLINE_ENV = {
    "WANDB_MODE": "offline", "WANDB_ERROR_REPORTING": "false", "WANDB_DISABLE_GIT": "true",
    "WANDB_DISABLE_CODE": "true", "WANDB_SILENT": "true",
    "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true", "MLFLOW_ALLOW_FILE_STORE": "true",
}
"""Environment set before a tracker library is imported (see the module docstring)."""

_MLFLOW_KEY = re.compile(r"[^A-Za-z0-9_\-. /]")


class Tracker(Protocol):
    def log_config(self, config: dict[str, Any], yaml_text: str) -> None: ...

    def log_metrics(self, metrics: dict[str, float], step: int) -> None: ...

    def log_table(self, name: str, text: str, rows: Sequence[Sequence[Any]], columns: Sequence[str]) -> None: ...

    def close(self) -> None: ...


def open_trackers(projects: dict[str, str], run_dir: Path, *, run_name: str) -> list[Tracker]:
    """The trackers `projects` asks for (name -> W&B project / MLflow experiment), writing under
    `run_dir`."""
    unknown = [n for n in projects if n not in TRACKERS]
    if unknown:
        raise ValueError(f"run.trackers entries must be among {TRACKERS}, got {unknown}")
    return [WandbTracker(Path(run_dir), run_name, project) if name == "wandb"
            else MlflowTracker(Path(run_dir), run_name, project) for name, project in projects.items()]


def _require(module: str, package: str):
    os.environ.update(OFFLINE_ENV)  # before the import: both libraries read some of it then
    try:
        return __import__(module)
    except ImportError as error:
        raise ImportError(f"run.trackers includes {module!r} but {package} is not installed: "
                          f"pip install -c constraints.txt {package} (or '.[dev]')") from error


class WandbTracker:
    """An offline W&B run in `<run_dir>/wandb`."""

    def __init__(self, run_dir: Path, run_name: str, project: str):
        folder = run_dir / "wandb"
        for var, sub in (("WANDB_CONFIG_DIR", "config"), ("WANDB_DATA_DIR", "data"),
                         ("WANDB_CACHE_DIR", "cache"), ("WANDB_ARTIFACT_DIR", "artifacts")):
            (folder / sub).mkdir(parents=True, exist_ok=True)
            os.environ[var] = str(folder / sub)
        self._wandb = wandb = _require("wandb", "wandb")
        settings = wandb.Settings(console="off", x_disable_stats=True, x_disable_meta=True,
                                  x_disable_machine_info=True, x_save_requirements=False)
        self.run = wandb.init(project=project, name=run_name, dir=str(folder), mode="offline",
                              settings=settings, reinit="create_new")
        self.run.define_metric("webrl_step")
        self.run.define_metric("*", step_metric="webrl_step")

    def log_config(self, config: dict[str, Any], yaml_text: str) -> None:
        self.run.config.update(config, allow_val_change=True)

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.run.log({**metrics, "webrl_step": step})

    def log_table(self, name: str, text: str, rows: Sequence[Sequence[Any]], columns: Sequence[str]) -> None:
        self.run.log({name: self._wandb.Table(columns=list(columns), data=[list(r) for r in rows])})
        self.run.summary[f"{name}_text"] = text

    def close(self) -> None:
        self.run.finish()


class MlflowTracker:
    """An MLflow run in the local file store `<run_dir>/mlruns`."""

    def __init__(self, run_dir: Path, run_name: str, experiment: str):
        mlflow = _require("mlflow", "mlflow-skinny")
        self.tracking_uri = (run_dir / "mlruns").resolve().as_uri()
        self.client = mlflow.MlflowClient(tracking_uri=self.tracking_uri)
        found = self.client.get_experiment_by_name(experiment)
        experiment_id = found.experiment_id if found else self.client.create_experiment(experiment)
        self.run_id = self.client.create_run(experiment_id, run_name=run_name).info.run_id
        self._entities = mlflow.entities

    def log_config(self, config: dict[str, Any], yaml_text: str) -> None:
        params = [self._entities.Param(_mlflow_key(k), str(v)[:500]) for k, v in flatten(config).items()]
        for start in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
            self.client.log_batch(self.run_id, params=params[start:start + 100])
        self.client.log_text(self.run_id, yaml_text, "config.yaml")

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        import time

        now = int(time.time() * 1000)
        batch = [self._entities.Metric(_mlflow_key(k), float(v), now, step) for k, v in metrics.items()]
        for start in range(0, len(batch), 1000):  # MLflow's per-batch metric limit
            self.client.log_batch(self.run_id, metrics=batch[start:start + 1000])

    def log_table(self, name: str, text: str, rows: Sequence[Sequence[Any]], columns: Sequence[str]) -> None:
        self.client.log_text(self.run_id, text, f"{name}.txt")
        self.client.log_dict(self.run_id, {"columns": list(columns), "rows": [list(r) for r in rows]}, f"{name}.json")

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


def _mlflow_key(key: str) -> str:
    return _MLFLOW_KEY.sub("_", key)


def flatten(config: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts/dataclasses to {"a.b.c": leaf}; lists and other leaves stay as they are."""
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        config = dataclasses.asdict(config)
    if not isinstance(config, dict) or not config:
        return {prefix: config} if prefix else {}
    out: dict[str, Any] = {}
    for key, value in config.items():
        out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def config_dict(config: Any) -> dict[str, Any]:
    """A JSON-able nested dict of a config dataclass (non-JSON leaves as their str)."""
    raw = dataclasses.asdict(config) if dataclasses.is_dataclass(config) else dict(config)
    return json.loads(json.dumps(raw, default=str))


def before_after_rows(before: dict | None, after: dict | None) -> list[list[Any]]:
    """The before/after table's rows as [key, before, after] (success fractions, None = absent):
    "overall", then every site/level, then "overall, sampled" when either has it."""
    keys = sorted(set((before or {}).get("per_site_level", {})) | set((after or {}).get("per_site_level", {})))

    def get(record: dict | None, key: str) -> Any:
        if not record:
            return None
        return record.get("success") if key == "overall" else record.get("per_site_level", {}).get(key)

    rows = [[key, get(before, key), get(after, key)] for key in ["overall", *keys]]
    if any("success_sampled" in (r or {}) for r in (before, after)):
        rows.append(["overall, sampled", (before or {}).get("success_sampled"), (after or {}).get("success_sampled")])
    return rows
