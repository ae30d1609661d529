"""The main job end to end under the smoke preset: Ray, Chromium, sandbox sites, tiny model,
SFT -> GRPO -> evaluation, checkpoints that `run.resume=true` continues from, a viewer page.
The first smoke run is a Ray job (`ray job submit --working-dir . -- python
examples/train_online_mind2web.py --config smoke ...`) against a `ray start --head` the test
starts (and alone stops) on 127.0.0.1; the resumed run is a plain local one (its own local Ray),
and a straight run of the same seed to the resumed run's iteration must be the same run (seeded sampling)."""
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

from webrl.config import ConfigError, load_config
from webrl.rollout.balanced import SuccessEstimates
from webrl.run.config import WebRLConfig

ROOT = Path(__file__).resolve().parents[1]


def test_trainer_config_errors_name_the_key():
    with pytest.raises(ConfigError, match="trainer.stages entries must be among"):
        load_config(WebRLConfig, "smoke", ["trainer.stages=[sft,dance]"])
    with pytest.raises(ConfigError, match="closest|Closest"):
        load_config(WebRLConfig, "smoke", ["rollout.group_sise=3"])
    for derived in ("model_path=/x", "temperature=0.5", "seed=3", "image_max_pixels=100"):  # the run derives these
        with pytest.raises(ConfigError, match=f"unknown config key 'learner.{derived.split('=')[0]}'"):
            load_config(WebRLConfig, "smoke", [f"learner.{derived}"])
    with pytest.raises(ConfigError, match="eval.samples_per_task must be >= 0, got -1"):
        load_config(WebRLConfig, "smoke", ["eval.samples_per_task=-1"])
    with pytest.raises(ConfigError, match="eval.samples_per_task needs the checkpoint's own sampler"):
        load_config(WebRLConfig, "smoke", ["eval.samples_per_task=2", "eval.endpoint=http://127.0.0.1:9/v1"])


@pytest.mark.parametrize("overrides, message", [
    (["learner.objective=sft"], r"learner.objective must be one of \('grpo', 'ppo'\)"),
    (["learner.ppo.lam=0.5"], r"learner.ppo=.* has no effect.*learner.objective is 'grpo'"),
    (["learner.objective=ppo", "learner.advantage.estimator=rloo"],
     r"learner.advantage=.* has no effect.*only objective=grpo reads it and learner.objective is 'ppo'"),
    (["learner.value_head=true"], r"'learner.value_head' .* is gone: removed: learner.objective=ppo implies its value head"),
    (["rollout.engine=server"], r"rollout.engine=server needs servers: rollout.server.urls .* or rollout.server.launch=webrl\|sglang"),
    (["rollout.server.urls=[http://127.0.0.1:9]"],
     r"rollout.server.\* is set but rollout.engine is not 'server' \(rollout.server.urls=\['http://127.0.0.1:9'\]\)"),
    (["rollout.engine=server", "rollout.server.urls=[http://127.0.0.1:9]", "resources.gpus_per_inference_worker=1"],
     r"resources.gpus_per_inference_worker must be 0 with rollout.engine=server"),
    (["rollout.engine=server", "rollout.server.urls=[http://127.0.0.1:9]", "resources.num_inference_workers=2"],
     r"resources.num_inference_workers must be 1 with rollout.engine=server"),
    (["rollout.engine=server", "rollout.server.urls=[ftp://127.0.0.1:9]"], r"rollout.server.urls entries must be http"),
    (["rollout.engine=server", "rollout.server.urls=[http://127.0.0.1:9]", "rollout.server.max_concurrency=32"],
     r"rollout.server.max_concurrency=32 exceeds inference.max_batch_size=16"),
    (["rollout.engine=server", "rollout.server.urls=[http://127.0.0.1:9]", "rollout.server.api_key_env=WEBRL_NO_SUCH_KEY"],
     r"rollout.server.api_key_env='WEBRL_NO_SUCH_KEY' names an environment variable that is not set"),
    (["rollout.engine=server", "rollout.server.urls=[http://127.0.0.1:9]", "generator.sparse_prefill=auto"],
     r"generator.sparse_prefill runs in the in-process model's prefill"),
    (["generator.max_batch_size=8"], r"'generator.max_batch_size' .* is not a run setting: fixed at 16 in runs \(the run "
                                    r"sets it to inference.max_batch_size\)"),
    (["rollout.inference_timeout_s=900", "rollout.trajectory_timeout_s=600"], r"rollout.inference_timeout_s \(900.0\) must be below rollout.trajectory_timeout_s"),
    (["rollout.balanced.min_group=3"], r"rollout.balanced=.* has no effect.*rollout.balanced.enabled is false"),
    (["rollout.balanced.enabled=true", "rollout.group_size=20"],
     r"rollout.group_size=20 must lie in \[rollout.balanced.min_group, rollout.balanced.max_group\] = \[2, 16\]"),
    # kl_mode=reward works with a reference (tests/learner/test_kl_reward.py); without one it is refused
    (["learner.objective=ppo", "learner.loss.kl_mode=reward",
      "learner.loss.kl_coef=0.1"],
     r"learner.loss.kl_mode='reward' has no effect.*learner.reference=none"),
    (["learner.loss.kl_mode=reward", "learner.loss.kl_coef=0.1"],
     r"learner.loss.kl_mode='reward' has no effect.*no reference to take a KL to"),
    # sft.action_weight / coordinate_factor now act (tests/recipes/test_action_aware_sft.py);
    # direct_fraction is refused only where the demonstrations cannot hold reasoning
    (["trainer.stages=[sft,rl]", "sft.direct_fraction=0.5"],
     r"sft.direct_fraction=0.5 has no effect.*oracle demonstrations have no reasoning"),
    (["sft.learner.consistency.every=1"], r"'sft.learner.consistency.every' .* is gone: removed: the SFT stage uses the RL learner's"),
])
def test_settings_the_run_would_ignore_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(WebRLConfig, None, overrides)


def test_kl_mode_reward_without_a_coefficient_is_the_off_switch_and_allowed():
    cfg = load_config(WebRLConfig, None, ["learner.loss.kl_mode=reward", "learner.loss.kl_coef=0"])
    assert cfg.learner.loss.kl_mode == "reward"  # kl_coef 0: no KL term either way


def _command(run_dir: Path) -> list[str]:
    return [sys.executable, str(ROOT / "examples" / "train_online_mind2web.py"), "--config", "smoke",
            f"run.run_dir={run_dir}"]


SFT_STEPS = ("sft.batch_size=2",)
"""Smoke's 4 demonstrations give 8 or more SFT turns; in batches of 2 the pass's shuffle decides
what each of its optimizer steps sees, so SFT's weights repeat only if that shuffle is seeded (in
one batch of 32 its order would not matter, and an unseeded shuffle went unnoticed)."""


def _run(run_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run([*_command(run_dir), *overrides], capture_output=True, text=True, timeout=1500, cwd=ROOT)


TIMING = re.compile(r"^time|_s$|_per_(s|min)$|^log_bytes$|^cached_prompt_tokens$")
"""Metrics that measure the machine (wall times, rates, bytes written, prefix-cache hits), not the run."""


def _outcomes(folder: Path) -> tuple:
    """What a run trained on and how, timings left out: its RL iterations' metrics and its logged
    trajectories (group, checker reward, response tokens)."""
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    rl = [{k: v for k, v in r.items() if not TIMING.search(k)} for r in rows
          if "iteration" in r and r.get("stage") is None]
    trajectories = [json.loads(line) for line in (folder / "trajectories" / "trajectories.jsonl").read_text().splitlines()]
    tokens = [(t["group_id"], t["info"]["task_reward"], [turn["response_ids"] for turn in t["turns"]])
              for t in trajectories]
    return rl, sorted(tokens, key=repr)


# what --working-dir must not upload: the venv, run folders, build outputs, git objects
JOB_EXCLUDES = [".venv", "runs", "build", ".git", "*.egg-info", "__pycache__", ".pytest_cache",
                "benchmarks/results"]  # not needed by the job (1.6 MB tracked; untracked runs/ are gitignored)


def _start_job_head(log: Path, temp_dir: str, env: dict) -> tuple[subprocess.Popen, str]:
    """`ray start --head` with its dashboard (the job server) on 127.0.0.1 -> (process, job address)."""
    venv_bin = Path(sys.executable).parent
    dashboard_port = free_port()
    head = subprocess.Popen(
        [str(venv_bin / "ray"), "start", "--head", "--block", "--node-ip-address=127.0.0.1",
         f"--port={free_port()}", "--include-dashboard=true", "--dashboard-host=127.0.0.1",
         f"--dashboard-port={dashboard_port}", f"--temp-dir={temp_dir}", "--num-cpus=8", "--disable-usage-stats",
         # the agent's HTTP port (the job server submits through it) defaults to 52365, which
         # any other Ray on the machine (a local training run) may already hold
         f"--dashboard-agent-listen-port={free_port()}"],
        env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)
    return head, f"http://127.0.0.1:{dashboard_port}"


def _run_as_ray_job(address: str, head: subprocess.Popen, head_log: Path, env: dict, *overrides: str) -> str:
    """Submit the smoke preset as a Ray job, wait for it to succeed; its logs (the driver's output)."""
    from ray.job_submission import JobStatus, JobSubmissionClient

    venv_bin = Path(sys.executable).parent
    client = None
    for _ in range(120):  # the dashboard's job server answers once the head is up
        try:
            client = JobSubmissionClient(address)
            client.list_jobs()
            break
        except Exception:
            client = None
            assert head.poll() is None, head_log.read_text()[-3000:]
            time.sleep(2)
    assert client is not None, "the head's job server never answered"
    for _ in range(10):  # under load the job server answers before its agent is registered
        submit = subprocess.run(
            [str(venv_bin / "ray"), "job", "submit", "--address", address, "--submission-id", "webrl-smoke",
             "--no-wait", "--working-dir", ".", "--runtime-env-json", json.dumps({"excludes": JOB_EXCLUDES}), "--",
             "python", "examples/train_online_mind2web.py", "--config", "smoke", *overrides],
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
    return logs


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.browser
@pytest.mark.timeout(2400)  # a Ray head, then two full runs (~8 min each on 2 loaded cores)
def test_smoke_run_as_a_ray_job_checkpoints_resumes_and_writes_the_viewer(tmp_path, run_dir):
    venv_bin = Path(sys.executable).parent
    temp_dir = tempfile.mkdtemp(prefix="rj", dir=run_dir)  # short: Ray's socket paths have a length limit
    # cluster mode off: `ray start` would otherwise resolve 127.0.0.1 to this machine's interface
    # address (webrl.run.ray_local); the job's driver inherits it from the head
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1",
           CLUSTER_MODE_ENV: "0", "PATH": f"{venv_bin}:{os.environ.get('PATH', '')}"}
    env.pop("RAY_ADDRESS", None)
    out_dir = tmp_path / "runs"
    head, address = _start_job_head(tmp_path / "head.log", temp_dir, env)
    try:
        logs = _run_as_ray_job(address, head, tmp_path / "head.log", env, f"run.output_dir={out_dir}", *SFT_STEPS)
    finally:
        stop_started(head, temp_dir)
    assert "held-out success (greedy)" in logs
    nodes = re.findall(r"^node (\S+)", logs, re.M)  # the resource table's node rows
    assert nodes and all(ipaddress.ip_address(n).is_loopback for n in nodes), nodes
    run_dirs = list(out_dir.glob("smoke-*"))  # run.output_dir: a new <name>-<time> folder
    assert len(run_dirs) == 1 and (run_dirs[0] / "checkpoints" / "step-00000001" / "hf" / "config.json").exists()
    folder = run_dirs[0]
    checkpoints = sorted((folder / "checkpoints").glob("step-*"))
    assert [c.name for c in checkpoints] == ["step-00000001", "step-00000002"]
    assert (checkpoints[-1] / "hf" / "config.json").exists()
    trained = json.loads((checkpoints[-1] / "hf" / "webrl_prompt.json").read_text())  # `webrl eval CKPT` adopts it
    assert trained["action_format"] == load_config(WebRLConfig, "smoke").generator.prompt.action_format
    assert (folder / "viewer" / "index.html").exists()
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records if "iteration" in r and r.get("stage") is None] == [1, 2]
    outcomes = [json.loads(line) for line in (folder / "eval_outcomes.jsonl").read_text().splitlines()]
    assert outcomes[0]["label"] == "before" and len(outcomes) == 2  # before and after (or the last eval_every)
    ids = [[task_id for task_id, _ in r["outcomes"]] for r in outcomes]
    assert len(ids[0]) == 2 and ids[0] == ids[1]  # the same eval_tasks=2 tasks, in the same order
    assert all(v in (0.0, 1.0, None) for r in outcomes for _, v in r["outcomes"])
    # one optimizer step per iteration: the learner's log-probs before it equal the rollout's,
    # which were sampled at temperature 0.8 (smoke preset), so the ratio is 1 up to float noise
    first = next(r for r in records if r.get("iteration") == 1 and r.get("stage") is None)
    assert first["ratio_max"] < 1.01 and abs(first["approx_kl"]) < 1e-3, first

    second = _run(folder, "run.resume=true", "trainer.iterations=3", "eval.samples_per_task=2")
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    last = json.loads((folder / "eval_outcomes.jsonl").read_text().splitlines()[-1])
    assert [t for t, _ in last["sampled"]] == ids[0]  # 2 episodes per task at the rollout temperature
    assert all(m in (0.0, 0.5, 1.0) for _, m in last["sampled"])
    assert "overall, sampled" in second.stdout
    assert "resumed from" in second.stdout and "iteration 2" in second.stdout
    assert sorted(c.name for c in (folder / "checkpoints").glob("step-*"))[-1] == "step-00000003"
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in records if "iteration" in r and r.get("stage") is None]
    assert [r["iteration"] for r in rl] == [1, 2, 3]
    # smoke keeps zero-variance groups, so every iteration is one learner update: the resumed
    # iteration trained on top of version 2 and produced version 3; rollouts were never stale
    assert [r["policy_version"] for r in rl] == [1.0, 2.0, 3.0]
    assert all(r["staleness"] == 0.0 for r in rl)

    # one seed, one run: the job (demonstrations, SFT, 2 RL iterations on the job's cluster,
    # resumed to 3) equals a plain local run of the same seed straight through demonstrations, SFT
    # and 3 RL iterations (its own Ray, no evaluation: evaluation draws nothing the training reads):
    # the same SFT weights, every iteration's metrics but timings, every logged trajectory's tokens
    # and checker reward, and the same final weights, bit for bit
    straight = _run(tmp_path / "straight", "trainer.iterations=3", "tasks.eval_tasks=0", *SFT_STEPS)
    assert straight.returncode == 0, straight.stdout[-3000:] + straight.stderr[-3000:]
    sft = "sft/hf/model.safetensors"
    assert (folder / sft).read_bytes() == (tmp_path / "straight" / sft).read_bytes()
    assert _outcomes(folder) == _outcomes(tmp_path / "straight")
    final = "checkpoints/step-00000003/hf/model.safetensors"
    assert (folder / final).read_bytes() == (tmp_path / "straight" / final).read_bytes()


# -- the loop without Ray: the trainer over in-process stand-ins of RunActors' actors ------------
class FirstMoveEngine:
    """Trajectory k (in the order episodes start) clicks twice then stops when k is even (reward
    1 from CountEnv), stops at once when k is odd (reward 0): every group of 2 is [1, 0]."""

    def __init__(self):
        self.first_moves = 0

    def act(self, requests):
        from webrl.actions import Action
        from webrl.policy.types import Decision

        out = []
        for r in requests:
            if r.observation.step == 0 and not r.history:
                self.first_moves += 1
                action = Action.click(0) if self.first_moves % 2 == 1 else Action.stop()
            else:
                action = Action.stop() if r.observation.feedback == "clicks=2" else Action.click(0)
            out.append(Decision(parsed=action, response_text=action.to_compact(), prompt_ids=[1, 2],
                                response_ids=[3, 4], logprobs=[-0.5, -0.25]))
        return out

    def load_weights(self, weights):
        pass


class RecordingLearner:
    def __init__(self, run):
        self.run, self.updates, self.policy_version, self.saved = run, [], 0, []

    def update(self, samples):
        self.updates.append(list(samples))
        self.policy_version += 1
        return {"loss": 0.5, "policy_version": float(self.policy_version)}

    def get_weights_ref(self):
        return self.policy_version

    def save(self, path, extra):
        Path(path, "hf").mkdir(parents=True, exist_ok=True)
        self.saved.append((Path(path).name, dict(extra)))
        return str(path)

    def shutdown(self):
        pass


class LocalActors:
    """`RunActors`' interface in process: one CountEnv slot (episodes run one at a time, so the
    engine's first-move counter gives each trajectory its outcome), an inference worker per
    request over `FirstMoveEngine`, and recording learners."""

    def __init__(self):
        from tests.rollout.test_coordinator_logic import CountEnv

        self.env, self.learners, self.synced, self.closed = CountEnv(target=2), [], [], False

    def start_ray(self, mode="train"):
        pass

    def start_env_workers(self):
        return [(self.env, 0)]

    def start_inference(self, model_path, generator, index, count=1, endpoint=False):
        from tests.rollout.test_coordinator_logic import AsyncInference
        from webrl.rollout import InferenceConfig, InferenceWorker

        return [AsyncInference(InferenceWorker(FirstMoveEngine(), InferenceConfig(batch_window_s=0.0), version=0))
                for _ in range(count)]

    def wait_started(self):
        pass

    def start_learner(self, section, run):
        self.learners.append(RecordingLearner(run))
        return self.learners[-1]

    def stop_learner(self, learner):
        pass

    def sync_weights(self, learner, version):
        self.synced.append(version)

    def close(self):
        self.closed = True


def test_the_loop_collects_scores_credits_updates_syncs_and_checkpoints_without_ray(tmp_path, capsys):
    import math

    from webrl.run.trainer import Trainer

    config = load_config(WebRLConfig, None, [f"run.run_dir={tmp_path}", "trainer.iterations=2",
                                              "tasks.tasks_per_iteration=2", "rollout.group_size=2",
                                              "tasks.eval_tasks=2", "trainer.checkpoint_every=2"])
    actors = LocalActors()
    trainer = Trainer(config, actors=actors)
    results = trainer.fit()

    (learner,) = actors.learners
    assert learner.run.model_path.endswith("tiny-webagent-pointer") and learner.run.temperature == 1.0
    assert learner.run.image_max_pixels == config.generator.prompt.max_pixels == 12544
    # two iterations, each 2 groups of [1, 0]: advantages +-0.5 / (sqrt(0.5) + 1e-6); the winner
    # has 3 turns (click, click, stop), the loser 1 (stop), so each update gets 2 * (3 + 1) samples
    adv = 0.5 / (math.sqrt(0.5) + 1e-6)
    assert [len(u) for u in learner.updates] == [8, 8]
    assert sorted(round(s.advantage, 5) for s in learner.updates[0]) == [round(-adv, 5)] * 2 + [round(adv, 5)] * 6
    assert actors.synced == [1, 2]  # after each update, the new version
    # dynamic sampling (on by default) keeps success estimates: 2 iterations x 2 groups of [1, 0]
    ((name, extra),) = learner.saved
    assert name == "step-00000002" and extra["iteration"] == 2 and extra["model_path"] == learner.run.model_path
    counts = extra["success_estimates"]["counts"].values()
    assert [sum(c[0] for c in counts), sum(c[1] for c in counts)] == [4.0, 4.0]
    assert (tmp_path / "checkpoints" / "step-00000002" / "hf" / "webrl_prompt.json").exists()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rows if "iteration" in r and "stage" not in r]
    assert [r["iteration"] for r in rl] == [1, 2] and all(r["samples"] == 8 for r in rl)
    assert [(r["reward/mean"], r["filtered_groups"], r["kept_trajectories"]) for r in rl] == [(0.5, 0.0, 4.0)] * 2
    evals = [r["label"] for r in rows if r.get("stage") == "eval"]
    assert evals == ["before", "after"] and results["before"] is not None and results["after"] is not None
    out = capsys.readouterr().out
    assert "held-out success (greedy)" in out and actors.closed
    assert re.search(r"^change, greedy: \d+ tasks up, \d+ down \(mean change [+-]\d+\.\d points\), paired permutation "
                     r"test p = [01]\.\d{3}: (within|beyond) noise", out, re.M)


def test_balanced_rollout_plans_group_sizes_and_keeps_its_estimates_in_checkpoints(tmp_path, monkeypatch):
    """tasks 2 x group 3 = 6 rollouts per iteration, 4 candidates drawn. Iteration 1: every family
    unseen (p = 0.5), so the first 2 candidates get 3 + 3. Iteration 2 plans from the estimates of
    iteration 1's outcomes; the estimates (12 outcomes by family) go into the checkpoint."""
    from webrl.rollout import RolloutCoordinator
    from webrl.rollout.balanced import family_key, plan_rollouts, update_estimates
    from webrl.envs.task import draw_tasks, task_rng
    from webrl.run.tasks import task_sources
    from webrl.run.trainer import Trainer

    calls = []
    collect = RolloutCoordinator.collect

    def recording_collect(self, tasks, iteration=0, group_sizes=None, first_group=0):
        out = collect(self, tasks, iteration, group_sizes, first_group)
        calls.append(([t.spec.id for t in tasks], list(group_sizes), out[0]))
        return out

    monkeypatch.setattr(RolloutCoordinator, "collect", recording_collect)
    config = load_config(WebRLConfig, None, [f"run.run_dir={tmp_path}", "trainer.iterations=2",
                                              "tasks.tasks_per_iteration=2", "rollout.group_size=3",
                                              "tasks.eval_tasks=0", "trainer.checkpoint_every=2",
                                              "rollout.balanced.enabled=true", "rollout.balanced.candidate_factor=2"])
    actors = LocalActors()
    Trainer(config, actors=actors).fit()
    source = task_sources(config.tasks)[0]
    candidates = [[t.spec.id for t in draw_tasks(source, task_rng(config.run.seed, "rl", i), 4)] for i in range(2)]
    assert calls[0][:2] == (candidates[0][:2], [3, 3])
    estimates = SuccessEstimates()
    update_estimates(estimates, calls[0][2])
    plan = plan_rollouts([family_key(c) for c in candidates[1]], estimates, 6, config.rollout.balanced)
    assert calls[1][:2] == ([candidates[1][i] for i, _ in plan], [n for _, n in plan])
    assert [len(c[2]) for c in calls] == [6, 6]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rows if "iteration" in r and "stage" not in r]
    assert rl[0]["balanced/min_group"] == rl[0]["balanced/max_group"] == 3.0 and rl[0]["balanced/chosen_unseen"] == 2.0
    for row, (_, _, trajectories) in zip(rl, calls):
        rewards = {}
        for t in trajectories:
            rewards.setdefault(t.group_id, set()).add(t.reward)
        assert row["informative_groups"] == sum(len(v) > 1 for v in rewards.values())
    (learner,) = actors.learners
    (_, state), = learner.saved
    update_estimates(estimates, calls[1][2])
    assert state["success_estimates"] == estimates.state_dict()
    assert sum(s + f for s, f in state["success_estimates"]["counts"].values()) == 12.0
    assert all(not key.rsplit("/", 1)[1].isdigit() for key in state["success_estimates"]["counts"])  # seeds stripped


def test_a_resumed_run_keeps_the_estimates_counts_under_its_own_prior(tmp_path):
    from webrl.run.trainer import Trainer

    saved = SuccessEstimates(prior_success_rate=0.5)
    saved.update("shop/l1/train/add_to_cart", [1.0, 0.0, 0.0])

    class Loading:
        policy_version = 3

        def load(self, path):
            return {"iteration": 3, "success_estimates": saved.state_dict()}

    config = load_config(WebRLConfig, None, [f"run.run_dir={tmp_path}", "rollout.balanced.enabled=true"])
    config.rollout.balanced.prior_success_rate = 0.2  # a fixed setting (0.5 in runs) that code may set
    trainer = Trainer(config, actors=LocalActors())
    trainer.learner = Loading()
    trainer.load(tmp_path / "step-00000003")
    assert trainer.iteration == 3 and trainer.estimates.counts == saved.counts
    # (a0 + s) / (a0 + b0 + s + f) with the new prior 0.2 x 2: (0.4 + 1) / (2 + 3)
    assert trainer.estimates.estimate("shop/l1/train/add_to_cart") == pytest.approx(1.4 / 5)


def test_balanced_rollout_runs_with_evaluation_tasks(tmp_path):
    """The evaluation's one-episode (and sampled) coordinators leave balanced rollout out: its
    group-size bounds (min_group 2) had refused group_size=1 and the run died before iteration 1."""
    from webrl.rollout.balanced import BalancedRolloutConfig
    from webrl.run.parts import evaluation_rollout
    from webrl.run.trainer import Trainer

    config = load_config(WebRLConfig, None, [f"run.run_dir={tmp_path}", "trainer.iterations=1",
                                              "tasks.tasks_per_iteration=2", "rollout.group_size=2",
                                              "tasks.eval_tasks=2", "eval.samples_per_task=2", "rollout.max_turns=2",
                                              "rollout.balanced.enabled=true", "rollout.balanced.candidate_factor=2"])
    greedy = evaluation_rollout(config.rollout, 1)
    assert greedy.group_size == 1 and greedy.balanced == BalancedRolloutConfig() and config.rollout.balanced.enabled
    Trainer(config, actors=LocalActors()).fit()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["label"] for r in rows if r.get("stage") == "eval"] == ["before", "after"]
    assert [r["iteration"] for r in rows if "balanced/min_group" in r] == [1]


def test_balanced_rollout_is_refused_in_async_mode():
    with pytest.raises(ConfigError, match="rollout.balanced.enabled plans the tasks of a sync iteration"):
        load_config(WebRLConfig, None, ["rollout.balanced.enabled=true", "rollout.mode=async"])


class RealLearnerActors(LocalActors):
    """LocalActors with the real DeepSpeed learner (one rank in this process)."""

    def start_learner(self, section, run):
        from webrl.learner import LearnerGroup

        self.learners.append(LearnerGroup(section, run, 1, use_ray=False))
        return self.learners[-1]

    def close(self):
        for learner in self.learners:
            learner.shutdown()
        self.learners, self.closed = [], True


@pytest.mark.slow
def test_ppo_runs_the_loop_and_a_resumed_run_ends_with_the_uninterrupted_weights(tmp_path):
    """objective=ppo through the trainer with the real learner: 2 iterations straight, and 1
    iteration + a resumed second one, give the same step-2 policy and value head (the engine's
    rollouts do not depend on the weights, so both runs train on the same samples)."""
    import torch

    from webrl.learner.checkpoint import read_state
    from webrl.run.trainer import Trainer

    def run(folder, *extra):
        config = load_config(WebRLConfig, None, [f"run.run_dir={folder}", "tasks.tasks_per_iteration=2",
                                                  "rollout.group_size=2", "tasks.eval_tasks=0",
                                                  "learner.objective=ppo", *extra])
        Trainer(config, actors=RealLearnerActors()).fit()

    run(tmp_path / "straight", "trainer.iterations=2", "trainer.checkpoint_every=2")
    run(tmp_path / "resumed", "trainer.iterations=1")
    run(tmp_path / "resumed", "trainer.iterations=2", "run.resume=true")
    rows = [json.loads(line) for line in (tmp_path / "straight" / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rows if "iteration" in r and "stage" not in r]
    assert [r["policy_version"] for r in rl] == [1.0, 2.0] and all("value_loss" in r for r in rl)
    assert rl[0]["return_max"] == 1.0 and rl[0]["filtered_groups"] == 0.0  # every group trained on
    states = []
    for name in ("straight", "resumed"):
        folder = tmp_path / name / "checkpoints" / "step-00000002"
        assert read_state(folder)["policy_version"] == 2
        states.append(torch.load(next((folder / "deepspeed" / "state").glob("mp_rank_00_model_states.pt")),
                                 weights_only=False)["module"])
    assert any("value_head" in name for name in states[0])
    for name, tensor in states[0].items():
        assert torch.equal(states[1][name], tensor), name



def test_train_exits_non_zero_when_an_evaluation_dropped_everything_and_logs_scored_trajectories(
        tmp_path, capsys, monkeypatch):
    """Issue 54: every reset fails (a browser that never starts), so both evaluations drop all their
    trajectories: `webrl train` prints the reasons with counts and exits 1. The trajectory log is
    written after scoring: a logged rollout carries the reward the reward function gave."""
    import webrl.run.trainer
    from webrl.cli import main

    actors = LocalActors()
    actors.env.crash_on_reset = 10**6
    monkeypatch.setattr(webrl.run.trainer, "RunActors", lambda *args: actors)
    overrides = [f"run.run_dir={tmp_path / 'dead'}", "trainer.iterations=1", "tasks.tasks_per_iteration=1",
                 "rollout.group_size=2", "tasks.eval_tasks=2", "rollout.max_retries=0"]
    assert main(["train", *overrides]) == 1
    captured = capsys.readouterr()
    reason = "infrastructure error after 1 attempts: browser crashed"
    assert f"webrl eval (before): 2 of 2 trajectories dropped:\n  2 x {reason}\n" in captured.out
    assert ("webrl train: evaluation failed: before: every trajectory of the evaluation was dropped (2 of 2)"
            in captured.err)
    assert "evaluation failed: after:" in captured.err

    actors = LocalActors()  # episodes succeed and fail in turn: both evaluations score, exit 0
    monkeypatch.setattr(webrl.run.trainer, "RunActors", lambda *args: actors)
    assert main(["train", *overrides[1:-1], f"run.run_dir={tmp_path / 'ok'}"]) == 0
    logged = [json.loads(line) for line in (tmp_path / "ok" / "trajectories" / "trajectories.jsonl").read_text()
              .splitlines()]
    # the rollout's 2 trajectories, scored by the checker: reward == the checker's task reward
    assert len(logged) == 2 and all(t["reward"] == t["info"]["task_reward"] is not None for t in logged)


class ScriptedEvaluator:
    """Stands in for the run's Evaluator: evaluation k returns the k-th scripted record (greedy
    0/1 outcomes and sampled means per task), in the order the trainer asks for them."""

    def __init__(self, records):
        self.records, self.labels = list(records), []

    def evaluate(self, label, iteration):
        from webrl.evaluation.evaluator import Evaluation

        greedy, sampled = self.records[len(self.labels)]
        self.labels.append(label)
        record = {"label": label, "iteration": iteration, "outcomes": [[f"t{i}", v] for i, v in enumerate(greedy)],
                  "sampled": [[f"t{i}", v] for i, v in enumerate(sampled)]}
        metrics = {"success": sum(greedy) / len(greedy), "per_site_level": {}, "tasks": len(greedy),
                   "success_sampled": sum(sampled) / len(sampled)}
        return Evaluation(metrics=metrics, record=record)


def test_the_table_pairs_the_evaluation_before_rl_with_the_last_one(tmp_path, capsys):
    """The change lines compare the evaluation before RL with the last one, task by task. Each
    wrong pairing prints different counts here: before with itself 0 up / 0 down, the two swapped
    1 up / 2 down, before with the middle evaluation 3 up / 0 down, the middle with the last
    0 up / 2 down; the sampled line likewise."""
    from webrl.run.trainer import Trainer

    config = load_config(WebRLConfig, None, [f"run.run_dir={tmp_path}", "trainer.iterations=2", "trainer.eval_every=1",
                                              "tasks.tasks_per_iteration=2", "rollout.group_size=2",
                                              "tasks.eval_tasks=4", "trainer.checkpoint_every=2"])
    evaluator = ScriptedEvaluator([
        ((0, 0, 1, 0), (0.25, 0.5, 0.75, 0.0)),   # before
        ((1, 1, 1, 1), (1.0, 1.0, 1.0, 1.0)),     # after iteration 1 (a distractor)
        ((1, 0, 0, 1), (0.75, 0.5, 0.25, 0.5)),   # after iteration 2: the last
    ])

    class ScriptedTrainer(Trainer):
        def start_actors(self, **kw):
            super().start_actors(**kw)
            self.parts.evaluator = evaluator

    ScriptedTrainer(config, actors=LocalActors()).fit()
    assert evaluator.labels == ["before", "iteration 1", "iteration 2"]  # the last one is reused as "after"
    out = capsys.readouterr().out
    # greedy changes per task (last - before): +1, 0, -1, +1 -> 2 up, 1 down, mean +0.25; the
    # sign-flip test over (+1, -1, +1): every one of the 8 flips sums to an odd number, so p = 1
    assert "change, greedy: 2 tasks up, 1 down (mean change +25.0 points), paired permutation test p = 1.000" in out
    # sampled: +0.5, 0, -0.5, +0.5 -> 2 up, 1 down, mean +0.125; flips of (+.5, -.5, +.5): p = 1
    assert "change, sampled: 2 tasks up, 1 down (mean change +12.5 points)" in out
    assert re.search(r"^overall\s+25\.0%\s+50\.0%$", out, re.M)  # the table's two columns: before, last
