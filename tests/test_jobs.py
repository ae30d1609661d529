"""Ray Jobs: `ray job submit --working-dir . -- python examples/train_online_mind2web.py --config
smoke ...` against a `ray start --head` this test starts (and alone stops) on 127.0.0.1."""
import ipaddress
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.helpers import free_port, stop_started
from webrl.run.ray_local import CLUSTER_MODE_ENV

ROOT = Path(__file__).resolve().parents[1]
# what --working-dir must not upload: the venv, run folders, build outputs, git objects
EXCLUDES = [".venv", "runs", "build", ".git", "*.egg-info", "__pycache__", ".pytest_cache"]


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.browser
@pytest.mark.timeout(1800)
def test_ray_job_submit_runs_the_smoke_preset(tmp_path, run_dir):
    from ray.job_submission import JobStatus, JobSubmissionClient

    venv_bin = Path(sys.executable).parent
    temp_dir = tempfile.mkdtemp(prefix="rj", dir=run_dir)  # short: Ray's socket paths have a length limit
    # cluster mode off: `ray start` would otherwise resolve 127.0.0.1 to this machine's interface
    # address (webrl.run.ray_local); the job's driver inherits it from the head
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1",
           CLUSTER_MODE_ENV: "0", "PATH": f"{venv_bin}:{os.environ.get('PATH', '')}"}
    env.pop("RAY_ADDRESS", None)
    dashboard_port = free_port()
    head_log = open(tmp_path / "head.log", "w")
    head = subprocess.Popen(
        [str(venv_bin / "ray"), "start", "--head", "--block", "--node-ip-address=127.0.0.1",
         f"--port={free_port()}", "--include-dashboard=true", "--dashboard-host=127.0.0.1",
         f"--dashboard-port={dashboard_port}", f"--temp-dir={temp_dir}", "--num-cpus=8", "--disable-usage-stats",
         # the agent's HTTP port (the job server submits through it) defaults to 52365, which
         # any other Ray on the machine (a local training run) may already hold
         f"--dashboard-agent-listen-port={free_port()}"],
        env=env, stdout=head_log, stderr=subprocess.STDOUT, start_new_session=True)
    address = f"http://127.0.0.1:{dashboard_port}"
    out_dir = tmp_path / "runs"
    try:
        client = None
        for _ in range(120):  # the dashboard's job server answers once the head is up
            try:
                client = JobSubmissionClient(address)
                client.list_jobs()
                break
            except Exception:
                assert head.poll() is None, (tmp_path / "head.log").read_text()[-3000:]
                time.sleep(2)
        assert client is not None, "the head's job server never answered"
        runtime_env = {"excludes": EXCLUDES}
        for _ in range(10):  # under load the job server answers before its agent is registered
            submit = subprocess.run(
                [str(venv_bin / "ray"), "job", "submit", "--address", address, "--submission-id", "webrl-smoke",
                 "--no-wait", "--working-dir", ".", "--runtime-env-json", json.dumps(runtime_env), "--",
                 "python", "examples/train_online_mind2web.py", "--config", "smoke", f"run.output_dir={out_dir}",
                 "trainer.iterations=1", "tasks.tasks_per_iteration=1", "tasks.eval_tasks=1", "sft.demos=2"],
                cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
            if submit.returncode == 0 or "No available agent" not in submit.stdout + submit.stderr:
                break
            time.sleep(6)
        assert submit.returncode == 0, submit.stdout[-2000:] + submit.stderr[-2000:]
        deadline = time.monotonic() + 1500
        status = client.get_job_status("webrl-smoke")
        while status not in {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED} and time.monotonic() < deadline:
            time.sleep(5)
            status = client.get_job_status("webrl-smoke")
        logs = client.get_job_logs("webrl-smoke")
        assert status == JobStatus.SUCCEEDED, logs[-4000:]
        assert "held-out success (greedy)" in logs
        nodes = re.findall(r"^node (\S+)", logs, re.M)  # the resource table's node rows
        assert nodes and all(ipaddress.ip_address(n).is_loopback for n in nodes), nodes
        run_dirs = list(out_dir.glob("smoke-*"))
        assert len(run_dirs) == 1 and (run_dirs[0] / "checkpoints" / "step-00000001" / "hf" / "config.json").exists()
    finally:
        stop_started(head, temp_dir)
        head_log.close()
