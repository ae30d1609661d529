"""Rollouts over real Ray actors: EnvWorkers with Chromium on sandbox pages, an InferenceActor
running the tiny Qwen2.5-VL generator, the coordinator in the driver."""
import os
import tempfile

import pytest

ray = pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")

from webrl.envs.sites.source import make_task  # noqa: E402
from webrl.envs.worker import EnvWorkerConfig, make_env_worker_actor  # noqa: E402
from webrl.policy import GeneratorConfig, SamplingConfig, make_format  # noqa: E402
from webrl.policy.prompt import PromptConfig  # noqa: E402
from webrl.run.ray_local import start_local_ray  # noqa: E402
from webrl.rollout import InferenceActor, InferenceConfig, RolloutConfig, RolloutCoordinator  # noqa: E402
from webrl.engines.engine import GeneratorEngineFactory  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.browser, pytest.mark.slow]


def _env_config():
    return EnvWorkerConfig(num_slots=2, threads=1, viewport="640x480")


def _tasks(n):
    return [make_task("widgets", 0, "train", seed, start_server=False) for seed in range(n)]


def _inference(path):
    generator = GeneratorConfig(prompt=PromptConfig(action_format="compact"),
                                sampling=SamplingConfig(temperature=1.0, max_new_tokens=12))
    actor = ray.remote(num_cpus=0.5)(InferenceActor).options(max_concurrency=64)
    return actor.remote(GeneratorEngineFactory(path, generator), InferenceConfig(batch_window_s=0.05))


def _pid(actor):
    return ray.get(actor.__ray_call__.remote(lambda self: os.getpid()))


def test_groups_complete_and_turns_decode_to_their_actions(ray_cluster, tiny_qwen25vl_path):
    from transformers import AutoTokenizer

    workers = [make_env_worker_actor(_env_config(), num_cpus=0.5) for _ in range(2)]
    inference = _inference(tiny_qwen25vl_path)
    coord = RolloutCoordinator([(w, i) for w in workers for i in range(2)], [inference],
                               RolloutConfig(group_size=3, max_turns=2, screenshot="som"))
    trajs, stats = coord.collect(_tasks(2))
    assert len(trajs) == 6 and stats.dropped == 0
    by_group = {}
    for t in trajs:
        by_group.setdefault(t.group_id, []).append(t)
    assert sorted(map(len, by_group.values())) == [3, 3]
    tok = AutoTokenizer.from_pretrained(tiny_qwen25vl_path)
    fmt = make_format("compact", "qwen2.5-vl")
    for t in trajs:
        assert 1 <= len(t.turns) <= 2
        for turn in t.turns:
            assert turn.policy_version == 0 and len(turn.logprobs) == len(turn.response_ids) > 0
            decoded = tok.decode(turn.response_ids, skip_special_tokens=False)
            assert decoded.startswith(turn.response_text) or turn.response_text in decoded
            parsed = fmt.parse(turn.response_text)
            assert (parsed if turn.action is not None else None) == turn.action
            assert turn.images and turn.images[0].data[:4] == b"\x89PNG"
    for w in workers:
        ray.kill(w)


def test_killed_env_worker_is_retried_and_nothing_is_lost(ray_cluster, tiny_qwen25vl_path):
    workers = [make_env_worker_actor(_env_config(), num_cpus=0.5, max_restarts=2) for _ in range(2)]
    ray.get([w.ping.remote() for w in workers])
    victim_pid = _pid(workers[0])
    inference = _inference(tiny_qwen25vl_path)
    killed = []

    def kill_victim_once(trajectory):
        # When the first trajectory ends, the other three slots are busy and four trajectories
        # wait: at least one in-flight or later trajectory on the victim fails and is retried.
        if not killed:
            psutil.Process(victim_pid).kill()
            killed.append(trajectory.task_id)

    coord = RolloutCoordinator([(w, i) for w in workers for i in range(2)], [inference],
                               RolloutConfig(group_size=4, max_turns=3, max_retries=3),
                               on_trajectory=kill_victim_once)
    trajs, stats = coord.collect(_tasks(2))
    assert killed and len(trajs) == 8 and stats.dropped == 0, [t.drop_reason for t in trajs]
    assert stats.retries >= 1 and max(t.info.attempts for t in trajs) >= 2
    assert sorted(len(g) for g in _groups(trajs).values()) == [4, 4]
    for w in workers:
        ray.kill(w)


def _groups(trajs):
    groups = {}
    for t in trajs:
        groups.setdefault(t.group_id, []).append(t)
    return groups


def test_shutdown_leaves_no_chromium_behind(run_dir, tiny_qwen25vl_path):
    temp = tempfile.mkdtemp(prefix="r", dir=run_dir)
    ray.shutdown()
    start_local_ray(2, temp)
    worker = make_env_worker_actor(_env_config(), num_cpus=0.5)
    ray.get(worker.ping.remote())
    children = psutil.Process(_pid(worker)).children(recursive=True)
    assert any("chrom" in c.name() for c in children)
    ray.get(worker.close.remote())
    ray.shutdown()
    gone, alive = psutil.wait_procs(children, timeout=15)
    assert not alive, [p.pid for p in alive]
