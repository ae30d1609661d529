"""Experiment trackers (webrl.run.trackers through RunLog): off by default, validated config keys,
and a run with W&B and MLflow on writes offline files that each library's own reader reads
back with the TensorBoard tags and steps, the config, and the before/after table."""
import json
import os
import subprocess
import sys

import pytest

from webrl.config import ConfigError, RunConfig, load_config
from webrl.run.log import RunLog
from webrl.run.config import WebRLConfig
from webrl.run.trackers import OFFLINE_ENV, before_after_rows, flatten

TRACKER_ENV = [*OFFLINE_ENV, "WANDB_CONFIG_DIR", "WANDB_DATA_DIR", "WANDB_CACHE_DIR", "WANDB_ARTIFACT_DIR"]


@pytest.fixture
def tracker_env(monkeypatch):
    """The trackers set these in os.environ; monkeypatch puts the old values back afterwards."""
    for key in TRACKER_ENV:
        monkeypatch.setenv(key, "unset-by-test")
        monkeypatch.delenv(key)


def test_trackers_are_off_by_default_and_nothing_is_written(tmp_path):
    cfg = WebRLConfig()
    assert cfg.run.trackers == []
    log = RunLog(tmp_path, config=cfg)
    log({"iteration": 1, "loss": 0.5})
    log.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl", "tb"]


@pytest.mark.parametrize("override, message", [
    (["run.trackers=[tensorboard]"], r"run.trackers entries must be distinct, .* among \['wandb', 'mlflow'\]"),
    (["run.trackers=[wandb,wandb:p]"], r"must be distinct"),
    (["run.trackers=['mlflow:']"], r"a non-empty PROJECT, got \['mlflow:'\]"),
    (["run.wandb_project=mine"], r"'run.wandb_project' .* is gone: renamed: run.trackers=\[wandb:PROJECT\]"),
    (["run.mlflow_experiment=x"], r"'run.mlflow_experiment' .* is gone: renamed: run.trackers=\[mlflow:EXPERIMENT\]"),
])
def test_bad_tracker_settings_name_the_key_and_allowed_values(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(WebRLConfig, None, override)


def test_tracker_keys_load_from_overrides():
    cfg = load_config(WebRLConfig, None, ["run.trackers=[mlflow,wandb:p]"])
    assert cfg.run.trackers == ["mlflow", "wandb:p"] and cfg.run.tracker_projects() == {"mlflow": "webrl", "wandb": "p"}


def test_missing_library_is_a_clear_error(tmp_path, monkeypatch, tracker_env):
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` now raises ImportError
    cfg = WebRLConfig(run=RunConfig(trackers=["wandb"]))
    with pytest.raises(ImportError, match=r"run.trackers includes 'wandb' but wandb is not installed: pip install"):
        RunLog(tmp_path, config=cfg)


def test_flatten_and_before_after_rows():
    assert flatten({"a": {"b": 1, "c": [1, 2]}, "d": "x", "e": {}}) == {"a.b": 1, "a.c": [1, 2], "d": "x", "e": {}}
    before = {"success": 0.25, "per_site_level": {"shop/l0": 0.5}}
    after = {"success": 0.5, "per_site_level": {"shop/l0": 1.0, "wiki/l1": 0.0}, "success_sampled": 0.4}
    # "overall" first, then site/levels sorted; a site missing on one side is None there
    assert before_after_rows(before, after) == [["overall", 0.25, 0.5], ["shop/l0", 0.5, 1.0],
                                                ["wiki/l1", None, 0.0], ["overall, sampled", None, 0.4]]
    assert before_after_rows(None, after)[0] == ["overall", None, 0.5]


RECORDS = [  # what the trainer logs: a stage event at step = record number, then RL iterations 1, 2
    {"stage": "eval", "label": "before", "success": 0.25, "dropped": 0},
    {"iteration": 1, "loss": 0.5, "reward/mean": 0.125, "note": "not numeric"},
    {"iteration": 2, "loss": 0.25, "reward/mean": 0.75},
]


@pytest.mark.slow
def test_wandb_and_mlflow_offline_runs_read_back(tmp_path, tracker_env):
    pytest.importorskip("wandb")
    mlflow = pytest.importorskip("mlflow")
    cfg = WebRLConfig(run=RunConfig(name="tracked", trackers=["wandb:proj", "mlflow:exp"], seed=7))
    log = RunLog(tmp_path, config=cfg)
    for record in RECORDS:
        log(record)
    text = log.before_after({"success": 0.25, "per_site_level": {"shop/l0": 0.5}},
                            {"success": 0.5, "per_site_level": {"shop/l0": 1.0}})
    log.close()
    assert text.splitlines()[1].split() == ["overall", "25.0%", "50.0%"]

    # W&B: its offline run folder, read with its own transaction-log reader
    runs = list((tmp_path / "wandb" / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 1
    out = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(runs[0])],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    history = [r["history"]["item"] for r in records if r["type"] == "history"]
    # TensorBoard's tags and steps: eval/* at step 1 (the record number), rl/* at iterations 1, 2
    points = [(h["webrl_step"], {k: v for k, v in h.items() if "/" in k}) for h in history
              if any("/" in k for k in h)]  # the table's own record has no "/" key
    assert points == [(1, {"eval/success": 0.25, "eval/dropped": 0}),
                      (1, {"rl/iteration": 1, "rl/loss": 0.5, "rl/reward/mean": 0.125}),
                      (2, {"rl/iteration": 2, "rl/loss": 0.25, "rl/reward/mean": 0.75})]
    run_record = next(r["run"] for r in records if r["type"] == "run")
    assert run_record["project"] == "proj" and run_record["display_name"] == tmp_path.name
    config_updates = [r for r in records if r["type"] == "config"] + [{"config": run_record.get("config", {})}]
    seeds = [c["config"]["update"]["run"]["seed"] for c in config_updates if "run" in c["config"].get("update", {})]
    assert 7 in seeds
    assert list(runs[0].parent.glob("files/media/table/before_after_*.table.json"))
    for key in ("WANDB_CONFIG_DIR", "WANDB_DATA_DIR", "WANDB_CACHE_DIR", "WANDB_ARTIFACT_DIR"):
        assert os.environ[key].startswith(str(tmp_path / "wandb")), key  # W&B's own folders: in the run folder
    assert os.environ["WANDB_MODE"] == "offline" and os.environ["MLFLOW_DISABLE_TELEMETRY"] == "true"

    # MLflow: the local store inside the run folder, read with MlflowClient
    client = mlflow.MlflowClient(tracking_uri=(tmp_path / "mlruns").as_uri())
    [run] = client.search_runs([client.get_experiment_by_name("exp").experiment_id])
    assert run.info.status == "FINISHED" and run.info.run_name == tmp_path.name
    loss = client.get_metric_history(run.info.run_id, "rl/loss")
    assert sorted((m.step, m.value) for m in loss) == [(1, 0.5), (2, 0.25)]
    assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "eval/success")] == [(1, 0.25)]
    assert "rl/note" not in run.data.metrics
    assert run.data.params["run.seed"] == "7" and run.data.params["run.trackers"] == "['wandb:proj', 'mlflow:exp']"
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config.yaml", "before_after.txt", "before_after.json"} <= artifacts
    table = json.loads(open(client.download_artifacts(run.info.run_id, "before_after.json", str(tmp_path))).read())
    assert table["rows"] == [["overall", 0.25, 0.5], ["shop/l0", 0.5, 1.0]]
    assert "seed: 7" in open(client.download_artifacts(run.info.run_id, "config.yaml", str(tmp_path))).read()


def test_a_tracker_failing_mid_run_is_dropped_and_the_log_goes_on(tmp_path, capsys):
    from webrl.run.log import RunLog

    class Broken:
        def __init__(self):
            self.calls = 0

        def log_metrics(self, metrics, step):
            self.calls += 1
            raise OSError("disk full")

        def close(self):
            raise AssertionError("a dropped tracker is not closed")

    log = RunLog(tmp_path)
    broken = Broken()
    log.trackers = [broken]
    log({"iteration": 1, "loss": 0.5})
    log({"iteration": 2, "loss": 0.25})
    log.close()
    assert broken.calls == 1 and log.trackers == []
    assert "Broken failed in log_metrics (OSError: disk full)" in capsys.readouterr().err
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [__import__("json").loads(line)["loss"] for line in lines] == [0.5, 0.25]
