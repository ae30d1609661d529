"""Resources checked before anything starts, and deadlines on everything that waits for Ray.

    nodes = cluster_nodes()                               # [{"node": ip, "CPU": 16.0, "GPU": 8.0}, ...]
    rows = request_rows(config, mode="train")             # [(kind, count, CPUs each, GPUs each), ...]
    print(check_resources(rows, nodes))                   # the table; ResourceError when it cannot fit
    wait_for(refs, timeout_s, "4 learner ranks to start")  # ray.get with a deadline and a named wait

A run asks for one bundle per actor it starts (`request_rows`; training: learner ranks, rollout
inference workers, the greedy evaluation worker when there are evaluation tasks, env workers,
the inference servers of rollout.server.launch; `webrl sft` and `webrl eval` ask only for what
they start). Ray waits forever for
resources it does not have (`placement_group.ready()`, an actor that cannot be scheduled), so
`RunActors.start_ray` compares the request with the cluster's nodes first and refuses, in
seconds, a run that cannot be placed, naming the settings to change.

The check is on node totals (what could ever be placed), not on what other jobs hold now: a
request that fits the totals but not the free resources waits, and the wait has a deadline
(`resources.startup_timeout_s`). Placement is first-fit by decreasing GPUs then CPUs, each
bundle on one node (Ray places a bundle on one node), a fraction of a GPU inside one GPU, as Ray
places it. An autoscaling cluster's nodes that are not up yet are not counted. First-fit can refuse a request an exact
bin packing would place, which needs 3+ nodes of unequal sizes and bundles of mixed sizes: the
error then says that the check is first-fit.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Sequence

from webrl.config import ConfigError, ResourceError, wait_for  # noqa: F401  (raised and used here)

if TYPE_CHECKING:
    from webrl.run.config import WebRLConfig

@dataclass
class ResourcesConfig:
    ray_address: str = ""
    """Ray cluster to join ("auto", "ray://..."); empty = the job's cluster if inside one, else local."""
    num_cpus: int = 0
    """Logical CPUs of a local Ray instance; 0 = what the actors reserve or this machine's cores,
    whichever is more (browsers and inference mostly wait, so oversubscribing is fine)."""
    num_env_workers: int = 1
    """EnvWorker actors (one Chromium each; env.num_slots episodes each)."""
    num_inference_workers: int = 1
    """InferenceWorker actors for rollouts (plus one greedy worker for evaluation)."""
    learner_ranks: int = 1
    """DeepSpeed ranks of the learner."""
    cpus_per_env_worker: float = 1.0
    """Ray CPUs reserved per EnvWorker."""
    cpus_per_inference_worker: float = 1.0
    """Ray CPUs reserved per InferenceWorker."""
    gpus_per_inference_worker: float = 0.0
    """GPUs per InferenceWorker (0 on CPU machines)."""
    cpus_per_learner_rank: float = 1.0
    """Ray CPUs per learner rank."""
    gpus_per_learner_rank: float = 0.0
    """GPUs per learner rank (0 on CPU machines)."""
    startup_timeout_s: float = 900.0
    """Deadline of every start-up wait on Ray: placement groups placed, actors constructed (a
    model loaded, a browser launched), the learner's process group formed. Past it the run
    fails naming what it waited for (`webrl.run.resources`)."""

    def __post_init__(self) -> None:
        if min(self.num_env_workers, self.num_inference_workers, self.learner_ranks) < 1:
            raise ConfigError("resources: num_env_workers, num_inference_workers and learner_ranks must be >= 1")
        if not self.startup_timeout_s > 0:
            raise ConfigError(f"resources.startup_timeout_s must be > 0, got {self.startup_timeout_s!r}")
        for name in ("gpus_per_inference_worker", "gpus_per_learner_rank"):
            gpus = getattr(self, name)
            if gpus < 0 or (gpus > 1 and gpus != int(gpus)):
                raise ConfigError(f"resources.{name} must be 0, a fraction below 1 (GPUs shared) or a whole "
                                  f"number, got {gpus!r} (Ray places no fraction of a GPU above 1)")


@dataclass
class BundleLayout:
    """Bundles of a run's placement group and the index of each actor kind's first bundle."""

    bundles: list[dict[str, float]]
    learner: int
    inference: int
    """Rollout inference workers; the greedy evaluation worker (if any) follows them."""
    env: int
    eval_worker: bool = True
    """Whether the layout has the greedy evaluation worker's bundle."""
    servers: int = -1
    """First bundle of the inference servers the run launches (rollout.server.launch); -1: none."""


MIN_BUNDLE_CPU = 0.01
"""The CPU of a bundle whose actor reserves no CPU and no GPU (`ray.util.placement_group`
refuses bundles with only zero resources)."""


def bundle_layout(res: ResourcesConfig, driver_cpus: float = 1.0, eval_worker: bool = True,
                  servers: tuple[int, float, float] = (0, 0.0, 0.0)) -> BundleLayout:
    """[driver] + learner ranks + rollout inference workers (+ 1 greedy evaluation worker when
    `eval_worker`: a run with tasks.eval_tasks=0 starts none) + env workers (+ `servers`:
    (count, CPUs, GPUs) of launched inference servers, one bundle each)."""
    def bundle(cpus: float, gpus: float) -> dict[str, float]:
        # Ray refuses a bundle of zeros; an actor that reserves nothing still gets a sliver
        return {"CPU": cpus if cpus or gpus else MIN_BUNDLE_CPU, **({"GPU": gpus} if gpus else {})}

    inference_workers = res.num_inference_workers + (1 if eval_worker else 0)
    bundles = [bundle(driver_cpus, 0.0)]
    bundles += [bundle(res.cpus_per_learner_rank, res.gpus_per_learner_rank)] * res.learner_ranks
    bundles += [bundle(res.cpus_per_inference_worker, res.gpus_per_inference_worker)] * inference_workers
    bundles += [bundle(res.cpus_per_env_worker, 0.0)] * res.num_env_workers
    first_server = len(bundles) if servers[0] else -1
    bundles += [bundle(servers[1], servers[2])] * servers[0]
    learner = 1
    inference = learner + res.learner_ranks
    return BundleLayout([dict(b) for b in bundles], learner, inference, inference + inference_workers, eval_worker,
                        first_server)


def run_layout(config: "WebRLConfig") -> BundleLayout:
    """The bundle layout of a run: its evaluation worker only when it has evaluation tasks, its
    launched inference servers when rollout.server.launch starts them."""
    server = config.rollout.server
    launched = config.rollout.engine == "server" and server.launch != "none"
    servers = (server.num_servers, server.cpus_per_server, server.gpus_per_server) if launched else (0, 0.0, 0.0)
    return bundle_layout(config.resources, eval_worker=config.tasks.eval_tasks > 0, servers=servers)


RESOURCE_KEYS = ("CPU", "GPU")
SETTINGS = {
    "learner": ("resources.learner_ranks", "resources.cpus_per_learner_rank", "resources.gpus_per_learner_rank"),
    "inference": ("resources.num_inference_workers", "resources.cpus_per_inference_worker",
                  "resources.gpus_per_inference_worker"),
    "eval": ("tasks.eval_tasks (0: no evaluation worker)",),
    "env": ("resources.num_env_workers", "resources.cpus_per_env_worker"),
    "server": ("rollout.server.num_servers", "rollout.server.cpus_per_server", "rollout.server.gpus_per_server"),
}


def cluster_nodes() -> list[dict[str, Any]]:
    """The alive nodes of the connected Ray cluster: [{"node": address, "CPU": n, "GPU": n}]."""
    import ray

    return [{"node": n.get("NodeManagerAddress", "?"),
             **{key: float(n.get("Resources", {}).get(key, 0.0)) for key in RESOURCE_KEYS}}
            for n in ray.nodes() if n.get("Alive")]


MODES = ("train", "sft", "eval")


def request_rows(config: Any, mode: str = "train") -> list[tuple[str, int, float, float]]:
    """(kind, count, CPUs each, GPUs each) of the actors a run in `mode` starts (the driver is not
    an actor). train: everything (and the inference servers of rollout.server.launch; eval too); sft (`webrl sft`): the learner only; eval (`webrl eval`): env
    workers, the greedy worker (no GPU when eval.endpoint serves it) and, with
    eval.samples_per_task, one sampler."""
    if mode not in MODES:
        raise ValueError(f"request_rows mode must be one of {MODES}, got {mode!r}")
    res = config.resources
    evaluating = config.tasks.eval_tasks > 0 and mode != "sft"
    if mode == "train":
        rollout = res.num_inference_workers
    else:
        rollout = 1 if mode == "eval" and evaluating and config.eval.samples_per_task else 0
    eval_gpus = 0.0 if mode == "eval" and config.eval.endpoint else res.gpus_per_inference_worker
    return [("learner rank", res.learner_ranks if mode != "eval" else 0, res.cpus_per_learner_rank,
             res.gpus_per_learner_rank),
            ("rollout inference worker", rollout, res.cpus_per_inference_worker, res.gpus_per_inference_worker),
            ("evaluation inference worker", 1 if evaluating else 0, res.cpus_per_inference_worker, eval_gpus),
            ("env worker", res.num_env_workers if mode != "sft" else 0, res.cpus_per_env_worker, 0.0),
            *_server_rows(config, mode)]


def _server_rows(config: Any, mode: str) -> list[tuple[str, int, float, float]]:
    """The inference servers a run launches itself (rollout.server.launch): training, and an
    evaluation whose policy is not an eval.endpoint; none for SFT."""
    rollout = getattr(config, "rollout", None)
    server = getattr(rollout, "server", None)
    if getattr(rollout, "engine", "") != "server" or getattr(server, "launch", "none") == "none":
        return []
    if mode == "sft" or (mode == "eval" and config.eval.endpoint):
        return []
    return [("inference server", server.num_servers, server.cpus_per_server, server.gpus_per_server)]


def row_bundles(rows: Sequence[tuple[str, int, float, float]]) -> tuple[list[dict[str, float]], list[str]]:
    """One {"CPU", "GPU"} bundle per actor of `rows`, and each bundle's actor kind."""
    bundles = [{"CPU": cpus, "GPU": gpus} for _, count, cpus, gpus in rows for _ in range(count)]
    kinds = [kind for kind, count, _, _ in rows for _ in range(count)]
    return bundles, kinds


def resource_table(rows: Sequence[tuple[str, int, float, float]], nodes: Sequence[dict[str, Any]]) -> str:
    """What the run asks for (`request_rows`), per actor kind and in total, beside what the cluster has."""
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

    bundles: {"CPU": c, "GPU": g} each, g = 0, a fraction < 1 (shares one GPU, as Ray places
    it) or a whole number; kinds: the actor kind of each bundle (for the message).
    """
    kinds = list(kinds) if kinds is not None else ["actor"] * len(bundles)
    for key in RESOURCE_KEYS:
        need = sum(b.get(key, 0.0) for b in bundles)
        have = sum(n.get(key, 0.0) for n in nodes)
        if need > have + 1e-9:
            return f"the run asks for {need:g} {key}s in all and the cluster has {have:g}"
    free = [{"CPU": n.get("CPU", 0.0), "GPUS": _gpu_slots(n.get("GPU", 0.0))} for n in nodes]
    order = sorted(range(len(bundles)), key=lambda i: (-bundles[i].get("GPU", 0.0), -bundles[i].get("CPU", 0.0)))
    for i in order:
        bundle = bundles[i]
        node = next((f for f in free if _take(f, bundle, dry_run=True)), None)
        if node is None:
            want = ", ".join(f"{bundle.get(k, 0.0):g} {k}" for k in RESOURCE_KEYS)
            largest = max(free, key=lambda f: (sum(f["GPUS"]), f["CPU"])) if free else {"CPU": 0.0, "GPUS": []}
            return (f"a {kinds[i]} needs {want} on one node, and after placing the larger bundles first-fit "
                    f"no node has that left (the most left on a node: {largest['CPU']:g} CPU, "
                    f"{sum(largest['GPUS']):g} GPU)")
        _take(node, bundle, dry_run=False)
    return None


def _gpu_slots(total: float) -> list[float]:
    """A node's GPUs as free capacities: whole GPUs, plus the remainder of a fractional total."""
    whole = int(total + 1e-9)
    rest = total - whole
    return [1.0] * whole + ([rest] if rest > 1e-9 else [])


def _take(node: dict[str, Any], bundle: dict[str, float], dry_run: bool) -> bool:
    """Whether `bundle` fits what is left of `node`; takes it unless `dry_run`. A fraction of a
    GPU goes to the GPU with the least room that holds it (best fit), whole GPUs to free ones."""
    cpus, gpus = bundle.get("CPU", 0.0), bundle.get("GPU", 0.0)
    if node["CPU"] + 1e-9 < cpus:
        return False
    slots = node["GPUS"]
    if 0 < gpus < 1:
        fitting = [k for k, left in enumerate(slots) if left + 1e-9 >= gpus]
        if not fitting:
            return False
        chosen = [min(fitting, key=lambda k: slots[k])]
    else:
        chosen = [k for k, left in enumerate(slots) if left >= 1.0 - 1e-9][:int(round(gpus))]
        if len(chosen) < round(gpus):
            return False
    if not dry_run:
        node["CPU"] -= cpus
        for k in chosen:
            slots[k] -= gpus if gpus < 1 else 1.0
    return True


def check_resources(rows: Sequence[tuple[str, int, float, float]], nodes: Sequence[dict[str, Any]]) -> str:
    """The resource table of `request_rows`; raises ResourceError naming the settings when the
    actors cannot be placed."""
    table = resource_table(rows, nodes)
    bundles, kinds = row_bundles(rows)
    reason = placement_refusal(bundles, nodes, kinds)
    if reason is None:
        return table
    kinds_asked = ("learner", "inference", "eval", "env") + (("server",) if any(
        kind == "inference server" and count for kind, count, _, _ in rows) else ())
    settings = [s for kind in kinds_asked for s in SETTINGS[kind]]
    raise ResourceError(f"this run cannot be placed: {reason}.\n{table}\n"
                        f"Lower what it asks for ({', '.join(settings)}) or join a larger cluster "
                        "(resources.ray_address).")
