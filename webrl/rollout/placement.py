"""Starting rollout actors, optionally inside a placement group handed in from outside.

A Ray Tune trial (or any caller that gang-schedules a whole run) reserves one placement group
for everything the trial needs, laid out by `webrl.run.resources.bundle_layout` (the one layout:
driver, learner ranks, rollout inference workers, the greedy evaluation worker, env workers);
each component takes the bundles from its `bundle_offset` on:

    layout = bundle_layout(config.resources)
    pg = placement_group(layout.bundles)                                    # or the trial's own
    learner = LearnerGroup(cfg, run, num_ranks=1, placement_group=pg, bundle_offset=layout.learner)
    inference = start_inference_workers(factory, inf_cfg, 1, placement_group=pg, bundle_offset=layout.inference)
    envs = start_env_workers(env_cfg, 2, placement_group=pg, bundle_offset=layout.env)

Worker i of a kind goes to bundle `bundle_offset + i`, so a bundle must hold one worker's
resources. Without a placement group the actors are scheduled freely.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from webrl.engines.launcher import bundle_strategy
from webrl.rollout.inference import InferenceActor, InferenceConfig


def start_env_workers(env_config: Any, num_workers: int, *, cpus_per_worker: float = 1.0, tasks: Any = None,
                      max_restarts: int = 3, placement_group: Any = None, bundle_offset: int = 0,
                      include_raw_screenshot: bool = False) -> list[Any]:
    """`num_workers` EnvWorker actors; worker i in bundle `bundle_offset + i` when a group is given
    (`include_raw_screenshot`: they also return the screenshot without Set-of-Mark boxes)."""
    from webrl.envs.worker import make_env_worker_actor

    return [make_env_worker_actor(env_config, tasks, num_cpus=cpus_per_worker, max_restarts=max_restarts,
                                  include_raw_screenshot=include_raw_screenshot,
                                  **bundle_strategy(placement_group, bundle_offset + i))
            for i in range(num_workers)]


def start_inference_workers(engine_factory: Callable[[], Any], config: Optional[InferenceConfig],
                            num_workers: int, *, cpus_per_worker: float = 1.0, gpus_per_worker: float = 0.0,
                            version: int = 0, max_concurrency: int = 256, placement_group: Any = None,
                            bundle_offset: int = 0, max_restarts: int = 0, takes_weights: bool = False) -> list[Any]:
    """`num_workers` InferenceActor actors (async, `max_concurrency` requests in flight each).
    max_restarts: Ray starts a dead one again this often; with `takes_weights` a restarted one waits
    for the next weight sync before it decides (`InferenceActor`)."""
    import ray

    actor_class = ray.remote(num_cpus=cpus_per_worker, num_gpus=gpus_per_worker)(InferenceActor)
    return [actor_class.options(max_concurrency=max_concurrency, max_restarts=max_restarts,
                                **bundle_strategy(placement_group, bundle_offset + i))
            .remote(engine_factory, config, version, takes_weights)
            for i in range(num_workers)]
