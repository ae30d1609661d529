"""The main job end to end under the smoke preset: Ray, Chromium, sandbox sites, tiny model,
SFT -> GRPO -> evaluation, checkpoints that `run.resume=true` continues from, a viewer page."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from webrl.config import ConfigError, load_config
from webrl.train_config import WebRLConfig

ROOT = Path(__file__).resolve().parents[1]


def test_trainer_config_errors_name_the_key():
    with pytest.raises(ConfigError, match="trainer.stages entries must be among"):
        load_config(WebRLConfig, "smoke", ["trainer.stages=[sft,dance]"])
    with pytest.raises(ConfigError, match="learner.model_path is set by the trainer"):
        load_config(WebRLConfig, "smoke", ["learner.model_path=/x"])
    with pytest.raises(ConfigError, match="closest|Closest"):
        load_config(WebRLConfig, "smoke", ["rollout.group_sise=3"])


def _run(run_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(ROOT / "examples" / "train_online_mind2web.py"), "--config", "smoke",
           f"run.run_dir={run_dir}", *overrides]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=1500, cwd=ROOT)


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.browser
def test_smoke_run_checkpoints_resumes_and_writes_the_viewer(run_dir):
    folder = Path(run_dir) / "smoke"
    first = _run(folder)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "held-out success (greedy)" in first.stdout
    checkpoints = sorted((folder / "checkpoints").glob("step-*"))
    assert [c.name for c in checkpoints] == ["step-00000001", "step-00000002"]
    assert (checkpoints[-1] / "hf" / "config.json").exists()
    assert (folder / "viewer" / "index.html").exists()
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records if "iteration" in r and r.get("stage") is None] == [1, 2]

    second = _run(folder, "run.resume=true", "trainer.iterations=3")
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "resumed from" in second.stdout and "iteration 2" in second.stdout
    assert sorted(c.name for c in (folder / "checkpoints").glob("step-*"))[-1] == "step-00000003"
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in records if "iteration" in r and r.get("stage") is None]
    assert [r["iteration"] for r in rl] == [1, 2, 3]
    # smoke keeps zero-variance groups, so every iteration is one learner update: the resumed
    # iteration trained on top of version 2 and produced version 3; rollouts were never stale
    assert [r["policy_version"] for r in rl] == [1.0, 2.0, 3.0]
    assert all(r["staleness"] == 0.0 for r in rl)
