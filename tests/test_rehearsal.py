"""A CPU rehearsal of the GPU recipe (#23 item 9): the preset `online_mind2web_qwen3vl_4b` on a
two-node Ray cluster this test starts (and alone stops) on 127.0.0.1. It places, runs one
iteration, checkpoints, and a second run with run.resume=true continues to iteration 2.

Only these settings differ from the preset, each for the reason given:

    model            model.path=webrl:tiny-webagent (a tiny Qwen2.5-VL, so model.family=qwen2.5-vl),
                     model.dtype / learner.dtype float32 (bf16 on these CPUs is emulated and slow;
                     the GPU run keeps bf16). Its prompt settings follow the checkpoint, as `webrl
                     train` adopts them from its webrl_prompt.json (compact actions, brief prompt,
                     no think, 12,544 pixels, 512 prompt tokens): under the preset's computer_use
                     prompt every turn of the tiny model is unparseable, every reward is the same
                     format-failure 0 and the judge is never called (this test's first version).
                     Neither shipped model reads computer_use; the -pointer one needs element tokens.
    resources        CPU only (gpus_* = 0): 1 learner rank with the preset's 4 CPUs, the preset's 1
                     inference worker, 1 env worker x 2 slots on 2 browsers (env.threads=2);
                     tasks_per_iteration=1, group_size=2,
                     max_turns=3 (horizon_schedule=[]: its stages are 15 and 30 turns),
                     max_new_tokens=48, mini_batches=1, a 600 s start-up deadline (loaded CI cores)
    servers          the preset's rollout.engine=server with launched servers, but 1 `webrl serve`
                     (launch=webrl, launch_args=[log_level=info] for its request log, no CPU or GPU reserved)
                     instead of 4 vLLM servers on 4 GPUs: vLLM's
                     weight transfer is NCCL only. The preset's collective weight sync then runs on gloo,
                     from learner rank 0 on node 2 to the server through the same
                     /init_weights_update_group and /update_weights_from_distributed routes
    tasks.file       an Online-Mind2Web JSON whose websites are the sandbox sites served here, plus
                     one probe page (below)
    network policy   env.network.public_stand_ins=[127.0.0.1/32]: the preset's "public"
                     policy refuses loopback; the rest of 127.0.0.0/8 stays internal. The probe page
                     on 127.0.0.1 embeds an image from 127.0.0.3: the browser reports it blocked
                     and the server on 127.0.0.3 never sees a request
    judge            reward.base_url = `webrl serve` (a subprocess started here) with the
                     same tiny model, max_retries=0, timeout_s=300 (a CPU judge on loaded cores),
                     max_tokens=64 (the preset's 1,024 would only lengthen replies that are
                     unreadable at any length); every judged trajectory is dropped as
                     judge_unparseable (or judge_timeout) and counted in the metrics
    cluster          resources.ray_address = the head below; the head has 3 CPUs and node 2 has 4,
                     so the learner's 4-CPU bundle fits only on node 2 and the env worker (1 CPU)
                     lands on the head: the two actors must run on different nodes. The server
                     reserves no CPU: Ray places freely scheduled actors where it likes, and a
                     1-CPU server on node 2 left the learner's bundle nowhere to go (the run waited
                     out its start-up deadline)


The run is `webrl train --config online_mind2web_qwen3vl_4b ...` as a subprocess; the resumed run
reuses the cluster and the servers. Not covered: a learner step. With the tiny model every group
has equal rewards (the judge's unreadable verdicts drop the episodes that stop, the others score
0), so both runs log skipped_update=1; the learner is placed, loaded, checkpointed, restored and
its weights broadcast to the launched server every iteration, but not stepped.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import free_port, stop_started
from tests.plugins.browser import start_http_server

ROOT = Path(__file__).resolve().parents[1]
PRESET = "online_mind2web_qwen3vl_4b"
HEAD_CPUS, NODE2_CPUS = 3, 4  # learner rank: the preset's 4 CPUs -> node 2 only
JUDGE_DROPS = {"reward/dropped/judge_unparseable", "reward/dropped/judge_timeout"}
PROBE_PAGE = ('<!doctype html><title>Probe</title><h1>Probe page</h1>'
              '<p>Find the shop.</p><img src="http://127.0.0.3:{port}/probe.png" alt="internal">')


# -- cluster ---------------------------------------------------------------------------------
def _start(args: list[str], log: Path, env: dict) -> subprocess.Popen:
    return subprocess.Popen(args, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)


def _wait_for_nodes(address: str, env: dict, n: int, procs: list, logs: list[Path]) -> None:
    probe = ("import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR'); "
             "print(sum(1 for x in ray.nodes() if x['Alive']))")
    for _ in range(90):
        for proc, log in zip(procs, logs):
            assert proc.poll() is None, log.read_text()[-3000:]
        out = subprocess.run([sys.executable, "-c", probe, address], env=env, capture_output=True, text=True,
                             timeout=120)
        if out.returncode == 0 and out.stdout.strip().splitlines()[-1:] == [str(n)]:
            return
        time.sleep(2)
    raise AssertionError(f"the cluster never had {n} nodes: " + "".join(l.read_text()[-1500:] for l in logs))


def _actor_nodes(address: str, env: dict) -> dict[str, set[str]]:
    """Actor class name -> node ids it ran on (dead actors included: the run has ended)."""
    script = ("import json, sys, ray; from ray._private import state; "
              "ray.init(address=sys.argv[1], logging_level='ERROR'); "
              "print(json.dumps([[a.get('ActorClassName') or a.get('Name') or '', a['Address']['NodeID']] "
              "for a in state.actors().values()]))")
    out = subprocess.run([sys.executable, "-c", script, address], env=env, capture_output=True, text=True,
                         timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    nodes: dict[str, set[str]] = {}
    for name, node in json.loads(out.stdout.strip().splitlines()[-1]):
        nodes.setdefault(name.rsplit(".", 1)[-1], set()).add(node)
    return nodes


# -- servers ---------------------------------------------------------------------------------
def _start_judge(log: Path, env: dict) -> tuple[subprocess.Popen, str]:
    from webrl.models.shipped import resolve_shipped

    path = resolve_shipped("webrl:tiny-webagent")
    proc = _start([sys.executable, "-m", "webrl.serve", f"model_path={path}", "port=0", "served_model_name=judge",
                   "log_level=info"], log, env)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()[-3000:]
        m = re.search(r"on (http://127\.0\.0\.1:\d+)/v1", log.read_text())
        if m:
            return proc, m.group(1) + "/v1"
        time.sleep(0.5)
    raise AssertionError("webrl serve never printed its address: " + log.read_text()[-3000:])


def _task_file(path: Path, sites_url: str, probe_url: str, seed: int) -> None:
    """An Online-Mind2Web tasks file over the sandbox sites plus the probe page, placed where the
    trainer's draw for iteration 0 falls (`task_rng(seed, "rl", i)`; LiveWebTaskSource draws
    uniformly): with 5 rows iterations 0 and 1 draw rows 2 and 3, so the first run (one
    iteration) visits the probe and the resumed run a sandbox site."""
    rows = [{"task_id": "shop-1", "confirmed_task": "Add the cheapest kettle to the cart.",
             "website": f"{sites_url}/shop/", "reference_length": 4, "level": "easy"},
            {"task_id": "travel-1", "confirmed_task": "Find a one-way flight from Oslo to Rome.",
             "website": f"{sites_url}/travel/", "level": "medium"},
            {"task_id": "wiki-1", "task_description": "Open the article about the river Danube.",
             "website": f"{sites_url}/wiki/", "level": "easy"},
            {"task_id": "widgets-1", "confirmed_task": "Tick the newsletter checkbox.",
             "website": f"{sites_url}/widgets/", "level": "easy"}]
    draws = [int(np.random.default_rng([seed, 1, i]).integers(len(rows) + 1)) for i in range(2)]
    assert draws[1] != draws[0], draws  # iteration 1 must draw a sandbox site
    rows.insert(draws[0], {"task_id": "probe-1", "confirmed_task": "Go to the shop.", "website": probe_url,
                           "level": "easy"})
    path.write_text(json.dumps(rows, indent=1))


def _overrides(run_dir: Path, tasks: Path, judge_url: str, address: str) -> list[str]:
    return [f"run.run_dir={run_dir}", "run.seed=0",
            "model.path=webrl:tiny-webagent", "model.family=qwen2.5-vl", "model.dtype=float32",
            "learner.dtype=float32", f"tasks.file={tasks}", "tasks.tasks_per_iteration=1",
            f"resources.ray_address={address}", "resources.num_env_workers=1", "resources.learner_ranks=1",
            "resources.gpus_per_learner_rank=0",
            "resources.startup_timeout_s=600", "env.num_slots=2", "env.threads=2",
            "rollout.server.launch=webrl", "rollout.server.launch_args=[log_level=info]", "rollout.server.num_servers=1",
            "rollout.server.gpus_per_server=0", "rollout.server.cpus_per_server=0",
            'env.network.public_stand_ins=["127.0.0.1/32"]',
            "rollout.group_size=2", "rollout.max_turns=3", "rollout.horizon_schedule=[]",
            "generator.sampling.max_new_tokens=48",
            "learner.batching.mini_batches=1", f"reward.base_url={judge_url}", "reward.model=judge",
            "reward.max_retries=0", "reward.timeout_s=300", "reward.max_tokens=64"]


def _train(overrides: list[str], log: Path, env: dict) -> str:
    proc = _start([str(Path(sys.executable).parent / "webrl"), "train", "--config", PRESET, *overrides], log, env)
    try:
        proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            stop_started(proc)
    text = log.read_text()
    assert proc.returncode == 0, text[-6000:]
    return text


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.browser
@pytest.mark.timeout(900)
def test_the_4b_preset_places_trains_checkpoints_and_resumes_on_two_nodes(tmp_path, run_dir):
    from webrl.envs.sites.server import ensure_server

    work = Path(tempfile.mkdtemp(prefix="rh", dir=run_dir))  # short: Ray's socket paths have a length limit
    head_temp, node_temp = str(work / "h"), str(work / "n")
    venv_bin = Path(sys.executable).parent
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1",
           "PATH": f"{venv_bin}:{os.environ.get('PATH', '')}", "PYTHONPATH": str(ROOT),
           # loaded cores: a raylet or agent slow to register is waited for (as webrl.run.ray_local does)
           "RAY_raylet_start_wait_time_s": "120", "RAY_agent_register_timeout_ms": "120000"}
    env.pop("RAY_ADDRESS", None)
    port = free_port()
    address = f"127.0.0.1:{port}"
    logs = [tmp_path / "head.log", tmp_path / "node2.log"]
    started: list[tuple[subprocess.Popen, str]] = []
    internal = start_http_server(tmp_path, host="127.0.0.3")  # the internal address nothing may reach
    (tmp_path / "probe.html").write_text(PROBE_PAGE.format(port=internal.port))
    public = start_http_server(tmp_path)
    try:
        head = _start([str(venv_bin / "ray"), "start", "--head", "--block", "--node-ip-address=127.0.0.1",
                       f"--port={port}", "--include-dashboard=false", f"--temp-dir={head_temp}",
                       f"--num-cpus={HEAD_CPUS}", "--num-gpus=0", "--disable-usage-stats"], logs[0], env)
        started.append((head, head_temp))
        _wait_for_nodes(address, env, 1, [head], logs[:1])
        node2 = _start([str(venv_bin / "ray"), "start", f"--address={address}", "--block",
                        "--node-ip-address=127.0.0.1", f"--temp-dir={node_temp}", f"--num-cpus={NODE2_CPUS}",
                        "--num-gpus=0", "--disable-usage-stats"], logs[1], env)
        started.append((node2, node_temp))
        judge, judge_url = _start_judge(tmp_path / "judge.log", env)
        started.append((judge, ""))
        _wait_for_nodes(address, env, 2, [head, node2], logs)

        sites_url = ensure_server()
        tasks = tmp_path / "online_mind2web_tasks.json"
        _task_file(tasks, sites_url, public.url("probe.html"), seed=0)
        out = tmp_path / "run"
        overrides = _overrides(out, tasks, judge_url, address)
        first = _train([*overrides, "trainer.iterations=1"], tmp_path / "train1.log", env)
        # the checkpoint's own prompt is adopted (its webrl_prompt.json), the table printed first
        assert "webrl:tiny-webagent was trained with generator.prompt.action_format=compact" in first
        assert re.search(r"learner rank +1 +4 +0", first) and re.search(r"env worker +1 +1 +0", first), first[-4000:]
        assert len(re.findall(rf"^node \S+ +{HEAD_CPUS} +0$|^node \S+ +{NODE2_CPUS} +0$", first, re.M)) == 2
        placed = _actor_nodes(address, env)
        assert len(placed["LearnerWorker"]) == 1 and len(placed["EnvWorker"]) == 1, placed
        assert placed["LearnerWorker"] != placed["EnvWorker"], placed  # 4-CPU bundle: node 2; env: the head
        assert re.search(r"inference server +1 +0 +0", first) and len(placed["InferenceServerActor"]) == 1, placed
        # the rollout sampled on the launched `webrl serve`, which the run stopped with itself
        server_log = next((out / "servers").glob("server_*/server.log")).read_text()
        assert "POST /generate" in server_log and "POST /update_weights_from_distributed" in server_log, server_log[-3000:]
        assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-00000001"]
        assert (out / "checkpoints" / "step-00000001" / "hf" / "config.json").exists()
        assert [row["iteration"] for row in _metrics(out)] == [1]

        # the preset's collective weight sync ran every iteration: learner rank 0 on node 2 to the
        # launched server, over gloo, not through the driver
        assert all(row["weight_sync/buckets"] >= 1 and row["weight_sync/bytes"] > 0 for row in _metrics(out))
        second = _train([*overrides, "trainer.iterations=2", "run.resume=true"], tmp_path / "train2.log", env)
        assert re.search(r"resumed from \S+step-00000001 \(iteration 1,", second), second[-4000:]
        assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-00000001", "step-00000002"]
        rows = _metrics(out)
        assert [row["iteration"] for row in rows] == [1, 2]

        # every trajectory has a reward outcome: scored by a rule, or dropped with a named category;
        # the tiny judge's verdicts are unreadable (judge_unparseable), and on loaded cores a reply can
        # outlast even 300 s (judge_timeout): both are named drops, neither a crash
        for row in rows:
            assert row["reward/n"] == 2 == row["reward/n_scored"] + row["reward/n_dropped"], row
            categories = {k: v for k, v in row.items() if k.startswith("reward/dropped/")}
            assert sum(categories.values()) == row["reward/n_dropped"], row
            assert set(categories) <= JUDGE_DROPS, row
        assert sum(row.get(k, 0) for row in rows for k in JUDGE_DROPS) >= 1, rows
        assert "POST /v1/chat/completions HTTP/1.1\" 200" in (tmp_path / "judge.log").read_text()

        # the probe's image on 127.0.0.3 was refused in the browser and never reached its server
        trajectories = [json.loads(line) for line in
                        (out / "trajectories" / "trajectories.jsonl").read_text().splitlines() if line.strip()]
        feedback = [turn["observation"]["feedback"] for t in trajectories for turn in t["turns"]]
        refused = f"Blocked image request to {internal.netloc}: 127.0.0.3 is an internal address"
        assert any(refused in f for f in feedback), feedback
        assert internal.requests == [], internal.requests
        sandbox = [t for t in trajectories if not t["task_id"].endswith("/probe-1")]
        assert sandbox and all(t["turns"][0]["observation"]["url"].startswith(sites_url) for t in sandbox)
    finally:
        for proc, temp in reversed(started):
            stop_started(proc, temp)
        public.stop()
        internal.stop()
