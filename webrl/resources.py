"""Resources checked before anything starts, and deadlines on everything that waits for Ray.

    nodes = cluster_nodes()                               # [{"node": ip, "CPU": 16.0, "GPU": 8.0}, ...]
    print(resource_table(config.resources, layout, nodes))
    reason = placement_refusal(layout.bundles[1:], nodes)  # None, or why no placement can exist
    wait_for(refs, timeout_s, "4 learner ranks to start")  # ray.get with a deadline and a named wait

A run asks for one bundle per actor (`bundle_layout`): learner ranks, rollout inference workers,
the greedy evaluation worker when there are evaluation tasks, env workers. Ray waits forever for
resources it does not have (`placement_group.ready()`, an actor that cannot be scheduled), so
`RunActors.start_ray` compares the request with the cluster's nodes first and refuses, in
seconds, a run that cannot be placed, naming the settings to change.

The check is on node totals (what could ever be placed), not on what other jobs hold now: a
request that fits the totals but not the free resources waits, and the wait has a deadline
(`resources.startup_timeout_s`). Placement is first-fit by decreasing GPUs then CPUs, each
bundle on one node (Ray places a bundle on one node); first-fit can refuse a request an exact
bin packing would place, which needs 3+ nodes of unequal sizes and bundles of mixed sizes: the
error then says that the check is first-fit.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

RESOURCE_KEYS = ("CPU", "GPU")
SETTINGS = {
    "learner": ("resources.learner_ranks", "resources.cpus_per_learner_rank", "resources.gpus_per_learner_rank"),
    "inference": ("resources.num_inference_workers", "resources.cpus_per_inference_worker",
                  "resources.gpus_per_inference_worker"),
    "eval": ("tasks.eval_tasks (0: no evaluation worker)",),
    "env": ("resources.num_env_workers", "resources.cpus_per_env_worker"),
}


class ResourceError(RuntimeError):
    """The run asks for resources the cluster cannot give, or a wait for Ray ran out of time."""


def cluster_nodes() -> list[dict[str, Any]]:
    """The alive nodes of the connected Ray cluster: [{"node": address, "CPU": n, "GPU": n}]."""
    import ray

    return [{"node": n.get("NodeManagerAddress", "?"),
             **{key: float(n.get("Resources", {}).get(key, 0.0)) for key in RESOURCE_KEYS}}
            for n in ray.nodes() if n.get("Alive")]


def request_rows(res: Any, layout: Any) -> list[tuple[str, int, float, float]]:
    """(kind, count, CPUs each, GPUs each) of the actors a run starts (the driver is not an actor)."""
    eval_workers = 1 if layout.eval_worker else 0
    return [("learner rank", res.learner_ranks, res.cpus_per_learner_rank, res.gpus_per_learner_rank),
            ("rollout inference worker", res.num_inference_workers, res.cpus_per_inference_worker,
             res.gpus_per_inference_worker),
            ("evaluation inference worker", eval_workers, res.cpus_per_inference_worker,
             res.gpus_per_inference_worker),
            ("env worker", res.num_env_workers, res.cpus_per_env_worker, 0.0)]


def resource_table(res: Any, layout: Any, nodes: Sequence[dict[str, Any]]) -> str:
    """What the run asks for, per actor kind and in total, beside what the cluster has."""
    rows = request_rows(res, layout)
    lines = [f"{'actor':<30}{'count':>6}{'CPU each':>10}{'GPU each':>10}{'CPU':>8}{'GPU':>8}"]
    for kind, count, cpus, gpus in rows:
        if count:
            lines.append(f"{kind:<30}{count:>6}{cpus:>10g}{gpus:>10g}{count * cpus:>8g}{count * gpus:>8g}")
    need_cpu = sum(c * cpu for _, c, cpu, _ in rows)
    need_gpu = sum(c * gpu for _, c, _, gpu in rows)
    lines.append(f"{'asked for':<56}{need_cpu:>8g}{need_gpu:>8g}")
    for node in nodes:
        lines.append(f"{'node ' + str(node['node']):<56}{node['CPU']:>8g}{node['GPU']:>8g}")
    lines.append(f"{'cluster':<56}{sum(n['CPU'] for n in nodes):>8g}{sum(n['GPU'] for n in nodes):>8g}")
    return "\n".join(lines)


def placement_refusal(bundles: Sequence[dict[str, float]], nodes: Sequence[dict[str, Any]],
                      kinds: Optional[Sequence[str]] = None) -> Optional[str]:
    """None when every bundle can be placed on the nodes' totals, else the reason.

    bundles: {"CPU": c, "GPU": g} each; kinds: the actor kind of each bundle (for the message).
    """
    kinds = list(kinds) if kinds is not None else ["actor"] * len(bundles)
    for key in RESOURCE_KEYS:
        need = sum(b.get(key, 0.0) for b in bundles)
        have = sum(n.get(key, 0.0) for n in nodes)
        if need > have + 1e-9:
            return f"the run asks for {need:g} {key}s in all and the cluster has {have:g}"
    free = [{key: n.get(key, 0.0) for key in RESOURCE_KEYS} for n in nodes]
    order = sorted(range(len(bundles)), key=lambda i: (-bundles[i].get("GPU", 0.0), -bundles[i].get("CPU", 0.0)))
    for i in order:
        bundle = bundles[i]
        node = next((f for f in free if all(f[k] + 1e-9 >= bundle.get(k, 0.0) for k in RESOURCE_KEYS)), None)
        if node is None:
            want = ", ".join(f"{bundle.get(k, 0.0):g} {k}" for k in RESOURCE_KEYS)
            largest = max(free, key=lambda f: (f["GPU"], f["CPU"])) if free else {"CPU": 0.0, "GPU": 0.0}
            return (f"a {kinds[i]} needs {want} on one node, and after placing the larger bundles first-fit "
                    f"no node has that left (the most left on a node: {largest['CPU']:g} CPU, "
                    f"{largest['GPU']:g} GPU)")
        for k in RESOURCE_KEYS:
            node[k] -= bundle.get(k, 0.0)
    return None


def bundle_kinds(res: Any, layout: Any) -> list[str]:
    """The actor kind of each of `layout.bundles[1:]` (bundle 0 is the driver's)."""
    return [kind for kind, count, _, _ in request_rows(res, layout) for _ in range(count)]


def check_resources(res: Any, layout: Any, nodes: Sequence[dict[str, Any]]) -> str:
    """The resource table; raises ResourceError naming the settings when the run cannot be placed."""
    table = resource_table(res, layout, nodes)
    reason = placement_refusal(layout.bundles[1:], nodes, bundle_kinds(res, layout))
    if reason is None:
        return table
    settings = [s for kind in ("learner", "inference", "eval", "env") for s in SETTINGS[kind]]
    raise ResourceError(f"this run cannot be placed: {reason}.\n{table}\n"
                        f"Lower what it asks for ({', '.join(settings)}) or join a larger cluster "
                        "(resources.ray_address).")


def wait_for(refs: Any, timeout_s: float, what: str) -> Any:
    """`ray.get(refs)` that fails after `timeout_s` naming `what` it was waiting for."""
    import ray
    from ray.exceptions import GetTimeoutError

    try:
        return ray.get(refs, timeout=timeout_s)
    except GetTimeoutError:
        raise ResourceError(f"timed out after {timeout_s:g} s waiting for {what} (resources.startup_timeout_s); "
                            "the cluster may lack the resources (see the resource table printed at start-up), "
                            "or start-up is slow (loading a model, launching a browser)") from None
