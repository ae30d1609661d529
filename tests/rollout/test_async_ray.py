"""Async mode and placement groups over real Ray actors: the tiny Qwen2.5-VL generator in an
InferenceActor (weights bumped by a fake learner with set_weights), and EnvWorkers with Chromium
placed into a placement group handed in from outside."""
import tempfile
import time

import pytest

ray = pytest.importorskip("ray")

from webrl.policy import GeneratorConfig, SamplingConfig  # noqa: E402
from webrl.policy.prompt import PromptConfig  # noqa: E402
from webrl.ray_local import start_local_ray  # noqa: E402
from webrl.rollout import AsyncCollector, InferenceConfig, RolloutConfig, RolloutCoordinator  # noqa: E402
from webrl.rollout.engines import GeneratorEngineFactory  # noqa: E402
from webrl.rollout.placement import rollout_bundles, start_env_workers, start_inference_workers  # noqa: E402

from tests.rollout.test_coordinator_logic import CountEnv, _tasks  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.fixture(scope="module")
def ray_cluster(run_dir):
    temp = tempfile.mkdtemp(prefix="a", dir=run_dir)
    start_local_ray(4, temp, {"RAY_USAGE_STATS_ENABLED": "0", "HF_HUB_OFFLINE": "1"})
    yield
    ray.shutdown()


def _factory(path):
    generator = GeneratorConfig(prompt=PromptConfig(action_format="compact"),
                                sampling=SamplingConfig(temperature=1.0, max_new_tokens=8))
    return GeneratorEngineFactory(path, generator)


def _learner_step(collector, inference, version, updates, busy):
    """A fake learner: `updates` optimizer steps, each done once a prefetched group is complete
    (so collection provably ran during it), each followed by set_weights(version + 1)."""
    start = time.time()
    for _ in range(updates):
        deadline = time.monotonic() + 120
        while collector.ready_groups < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        version += 1
        assert ray.get(inference.set_weights.remote({}, version)) == version
    busy.append((start, time.time()))
    return version


def test_async_never_returns_a_turn_older_than_max_staleness(ray_cluster, tiny_qwen25vl_path):
    [inference] = start_inference_workers(_factory(tiny_qwen25vl_path), InferenceConfig(batch_window_s=0.02), 1,
                                          cpus_per_worker=0.5)
    config = RolloutConfig(group_size=2, max_turns=2, mode="async", max_staleness=1, retry_backoff_s=0.01)
    coord = RolloutCoordinator([(CountEnv(delay=0.01), i) for i in range(4)], [inference], config)
    tasks = iter(_tasks(100))
    version, busy, stale, overlapped = 0, [], 0, 0
    with AsyncCollector(coord, lambda: next(tasks)) as collector:
        for step in range(4):
            trajs, stats = collector.next_batch(version, num_groups=2, iteration=step)
            assert len(trajs) == 4 and len({t.group_id for t in trajs}) == 2 and stats.dropped == 0
            assert all(version - turn.policy_version <= 1 for t in trajs for turn in t.turns)
            assert all(t.turns for t in trajs)
            stale += stats.stale
            if busy:  # trajectories that started while the learner was training
                overlapped += sum(busy[-1][0] <= t.info["started_at"] < busy[-1][1] for t in trajs)
            # even steps: one update (the prefetched groups stay 1 version old: used);
            # odd steps: two updates (groups finished before the first are 2 old: stale)
            version = _learner_step(collector, inference, version, 1 + step % 2, busy)
    # step 1 returns the groups prefetched during step 0's update; step 2 discards (at least)
    # the group that completed before step 1's first update, G = 2 trajectories per group
    assert overlapped >= 2 and stale >= 2 and stale % 2 == 0
    ray.kill(inference)


def test_actors_start_in_a_placement_group_handed_in(ray_cluster, tiny_qwen25vl_path):
    from ray.util.placement_group import placement_group, remove_placement_group

    # bundle 0 stands for the learner's; the rollout actors take bundles 1 (env) and 2 (inference)
    bundles = [{"CPU": 0.5}, *rollout_bundles(1, 0.5, 1, 0.25)]
    assert bundles[1:] == [{"CPU": 0.5}, {"CPU": 0.25}]
    pg = placement_group(bundles, strategy="PACK")
    ray.get(pg.ready(), timeout=60)
    envs = start_env_workers({"num_slots": 1, "env": {"browser": {"viewport": "640x480"}}}, 1,
                             cpus_per_worker=0.5, placement_group=pg, bundle_offset=1)
    inference = start_inference_workers(_factory(tiny_qwen25vl_path), None, 1, cpus_per_worker=0.25,
                                        placement_group=pg, bundle_offset=2)
    actors = envs + inference
    assert ray.get(envs[0].ping.remote()) and ray.get(inference[0].version.remote()) == 0
    pg_ids = ray.get([a.__ray_call__.remote(lambda self: ray.get_runtime_context().get_placement_group_id())
                      for a in actors])
    assert pg_ids == [pg.id.hex()] * 2
    # Bundle-level resources: bundle 0 untouched, bundles 1 and 2 fully used by the two actors
    # (Ray leaves a resource with nothing available out of available_resources()).
    def placed(free):
        return (free.get(f"CPU_group_0_{pg.id.hex()}") == 0.5 and free.get(f"CPU_group_1_{pg.id.hex()}", 0.0) == 0
                and free.get(f"CPU_group_2_{pg.id.hex()}", 0.0) == 0)

    deadline, free = time.monotonic() + 30, {}
    while time.monotonic() < deadline and not placed(free):
        time.sleep(0.2)
        free = {k: v for k, v in ray.available_resources().items() if k.startswith("CPU_group_")}
    assert placed(free), free
    with pytest.raises(ValueError, match="bundle_offset"):
        start_env_workers({}, 1, placement_group=pg, bundle_offset=3)
    ray.get(envs[0].close.remote())
    for a in actors:
        ray.kill(a)
    remove_placement_group(pg)
