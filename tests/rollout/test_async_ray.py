"""Async mode and placement groups over real Ray actors: the tiny Qwen2.5-VL generator in an
InferenceActor (weights bumped by a fake learner with set_weights), and EnvWorkers with Chromium
placed into a placement group handed in from outside."""
import time

import pytest

ray = pytest.importorskip("ray")

from webrl.policy import GeneratorConfig, SamplingConfig  # noqa: E402
from webrl.policy.prompt import PromptConfig  # noqa: E402
from webrl.rollout import AsyncCollector, InferenceConfig, RolloutConfig, RolloutCoordinator  # noqa: E402
from webrl.engines.engine import GeneratorEngineFactory  # noqa: E402
from webrl.rollout.placement import start_env_workers, start_inference_workers  # noqa: E402

from tests.rollout.test_coordinator_logic import CountEnv, _tasks  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]


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
                overlapped += sum(busy[-1][0] <= t.info.started_at < busy[-1][1] for t in trajs)
            # even steps: one update (the prefetched groups stay 1 version old: used);
            # odd steps: two updates (groups finished before the first are 2 old: stale)
            version = _learner_step(collector, inference, version, 1 + step % 2, busy)
    # step 1 returns the groups prefetched during step 0's update; step 2 discards (at least)
    # the group that completed before step 1's first update, G = 2 trajectories per group
    assert overlapped >= 2 and stale >= 2 and stale % 2 == 0
    ray.kill(inference)


def test_actors_start_in_a_placement_group_handed_in(ray_cluster, tiny_qwen25vl_path):
    from ray.util.placement_group import placement_group, remove_placement_group

    from webrl.run.resources import ResourcesConfig, bundle_layout

    # the run's one layout: driver, learner rank, rollout inference, greedy evaluation inference, env worker
    layout = bundle_layout(ResourcesConfig(cpus_per_learner_rank=0.25, cpus_per_inference_worker=0.25,
                                           cpus_per_env_worker=0.5), driver_cpus=0.25)
    assert layout.bundles == [{"CPU": 0.25}] * 4 + [{"CPU": 0.5}]
    assert (layout.learner, layout.inference, layout.env) == (1, 2, 4)
    pg = placement_group(layout.bundles, strategy="PACK")
    ray.get(pg.ready(), timeout=60)
    envs = start_env_workers({"num_slots": 1, "viewport": "640x480"}, 1,
                             cpus_per_worker=0.5, placement_group=pg, bundle_offset=layout.env)
    inference = start_inference_workers(_factory(tiny_qwen25vl_path), None, 1, cpus_per_worker=0.25,
                                        placement_group=pg, bundle_offset=layout.inference)
    actors = envs + inference
    assert ray.get(envs[0].ping.remote()) and ray.get(inference[0].version.remote()) == 0
    pg_ids = ray.get([a.__ray_call__.remote(lambda self: ray.get_runtime_context().get_placement_group_id())
                      for a in actors])
    assert pg_ids == [pg.id.hex()] * 2
    # Bundle-level resources: the driver's, learner's and evaluation worker's bundles (0, 1, 3)
    # untouched, the rollout inference (2) and env (4) bundles fully used by the two actors
    # (Ray leaves a resource with nothing available out of available_resources()).
    def placed(free):
        untouched = all(free.get(f"CPU_group_{i}_{pg.id.hex()}") == 0.25 for i in (0, 1, 3))
        return untouched and all(free.get(f"CPU_group_{i}_{pg.id.hex()}", 0.0) == 0 for i in (2, 4))

    deadline, free = time.monotonic() + 30, {}
    while time.monotonic() < deadline and not placed(free):
        time.sleep(0.2)
        free = {k: v for k, v in ray.available_resources().items() if k.startswith("CPU_group_")}
    assert placed(free), free
    with pytest.raises(ValueError, match="bundle_offset"):
        start_env_workers({}, 1, placement_group=pg, bundle_offset=5)
    ray.get(envs[0].close.remote())
    for a in actors:
        ray.kill(a)
    remove_placement_group(pg)
