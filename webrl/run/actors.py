"""`RunActors`: Ray and every actor of a run, started and stopped in one place.

    actors = RunActors(config, run_dir, placement_group=None)
    actors.start_ray()                                      # + the resource check (webrl.run.resources)
    slots = actors.start_env_workers()                      # [(EnvWorker actor, slot index), ...]
    greedy = actors.start_inference(model_path, greedy_generator, index=N)   # the evaluation worker
    rollout = actors.start_inference(model_path, config.generator, index=0, count=N)
    actors.wait_started()                                   # every actor above constructed, with a deadline
    learner = actors.start_learner(config.learner, run)     # a LearnerGroup; shut down in close()
    actors.sync_weights(learner, version)                   # learner weights -> every inference worker
    actors.close()

Weight sync (`learner.weight_sync.mode`, resolved at construction against `rollout.engine`):
"object_store" (rank 0 -> one `ray.put` -> every in-process worker), "collective" (a broadcast
group of learner rank 0 and the receivers, formed at the first sync: in-process workers join
through Ray, servers through SGLang's `/init_weights_update_group`; the bytes never pass the
driver), "disk" (servers load an exported folder).

Nothing else in the loop talks to Ray: the coordinators call the handles they are given, the
learner is a `LearnerGroup`, and the trainer asks this object for both.

Placement: given a placement group (a Tune trial's), every actor goes into its own bundle of it
(`run_layout`): bundle 0 is the trial's driver, then the learner ranks, the rollout inference
workers, the greedy evaluation worker (only with evaluation tasks), the env workers and the
inference servers the run launches (rollout.server.launch). Without one, actors are scheduled
freely on a local Ray instance (its temp dir inside the run folder) or on the cluster of
`resources.ray_address` / `RAY_ADDRESS`.
"""
from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

from webrl.run.resources import ResourceError, check_resources, cluster_nodes, request_rows
from webrl.engines.launcher import ServerLaunchError
from webrl.run.config import WebRLConfig, weight_sync
from webrl.run.resources import run_layout

INFERENCE_MAX_RESTARTS = 3
"""Ray restarts a dead inference worker this often (`InferenceActor`: it waits for the next weight
sync); as the env workers' max_restarts."""


class RunActors:
    """Owns Ray (when it started it), env workers, inference workers and learner groups."""

    def __init__(self, config: WebRLConfig, run_dir: Path, placement_group: Any = None):
        self.config = config
        self.run_dir = Path(run_dir)
        self.placement_group = placement_group
        self.layout = run_layout(config)
        self.env_workers: list = []
        self.inference: list = []
        self.learners: list = []
        self._starting: list[tuple[str, Any]] = []  # (what, actor) started and not yet waited for
        self._ray_started = False
        # rollout.engine=server: inference workers by bundle index (rollout workers, index 0, load
        # first), the checkpoint the servers start from, and a per-run tag that makes every load's
        # version label unique, so servers holding another run's or an older load's weights never
        # look up to date
        self._indexed: list[tuple[int, Any]] = []
        self._server_actors: list = []  # rollout.server.launch: the actors that own the servers
        self._server_urls: list[str] = []
        self._server_model = ""
        self._server_tag, self._server_loads = uuid.uuid4().hex[:8], 0
        # weight sync: the resolved mode and backend, the in-process workers that receive a
        # broadcast (not the endpoint evaluation worker), and the group once formed
        self.weight_sync, self.weight_backend = weight_sync(config)
        self._receivers: list = []
        self._weight_group: Any = None  # (learner, ServerTargets or None) of the group formed
        self.last_sync: dict[str, float] = {}
        """{"seconds", "bytes", "buckets"} of the latest collective sync."""

    # -- Ray ------------------------------------------------------------------------------------
    def start_ray(self, mode: str = "train") -> None:
        """Join the caller's Ray (a Tune trial), a cluster, or start a local instance; then check
        that what `mode` starts ("train", "sft", "eval": `request_rows`) can be placed
        (`webrl.run.resources`; a Tune trial's group is already placed)."""
        rows = request_rows(self.config, mode)
        self._init_ray()
        if self.placement_group is None:
            print(check_resources(rows, cluster_nodes()))

    def _init_ray(self) -> None:
        import ray

        from webrl.run.ray_local import start_local_ray

        cfg = self.config.resources
        os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(self.run_dir / "torch_extensions"))
        env_vars = {"RAY_USAGE_STATS_ENABLED": os.environ.get("RAY_USAGE_STATS_ENABLED", "0"),
                    "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"),
                    "TORCH_EXTENSIONS_DIR": os.environ["TORCH_EXTENSIONS_DIR"]}
        key_env = self.config.rollout.server.api_key_env  # the servers' key reaches the inference actors
        for name in (key_env, self.config.rollout.server.admin_api_key_env):
            if self.config.rollout.engine == "server" and name:
                env_vars[name] = os.environ[name]  # present: checked at config load
        if ray.is_initialized():
            return
        address = cfg.ray_address or os.environ.get("RAY_ADDRESS", "")
        if address:  # a cluster (e.g. inside `ray job submit`): its own temp dir and CPUs
            taken = _job_env_vars()  # Ray refuses a driver env var the job's runtime env also sets
            ray.init(address=address, runtime_env={"env_vars": {k: v for k, v in env_vars.items() if k not in taken}},
                     log_to_driver=False, **_loopback_node(address))
        else:
            needed = sum(b.get("CPU", 0.0) for b in self.layout.bundles[1:])
            num_cpus = cfg.num_cpus or max(int(needed + 0.999), os.cpu_count() or 1)
            start_local_ray(num_cpus, _ray_temp_dir(self.run_dir), env_vars)
        self._ray_started = True

    # -- actors ---------------------------------------------------------------------------------
    def start_env_workers(self) -> list[tuple[Any, int]]:
        """`resources.num_env_workers` EnvWorkers; returns their episode slots (worker, index)."""
        from webrl.rollout.placement import start_env_workers

        res = self.config.resources
        workers = start_env_workers(self.config.env, res.num_env_workers, cpus_per_worker=res.cpus_per_env_worker,
                                    placement_group=self.placement_group, bundle_offset=self.layout.env,
                                    include_raw_screenshot=self.config.rollout.screenshot == "raw")
        self.env_workers += workers
        self._starting += [("an env worker", w) for w in workers]
        return [(w, i) for w in workers for i in range(self.config.env.num_slots)]

    def start_inference(self, model_path: str, generator: Any, index: int, count: int = 1,
                        endpoint: bool = False) -> list:
        """`count` inference workers from bundle `layout.inference + index` on, each serving the
        run's policy stack over `generator` on `model_path` (`endpoint`: eval.endpoint instead)."""
        from webrl.evaluation.summary import EndpointEngineFactory, endpoint_config
        from webrl.engines.engine import GeneratorEngineFactory
        from webrl.rollout.placement import start_inference_workers

        res = self.config.resources
        server = self.config.rollout.server
        # the model's forward batches are the batcher's: one size for both (GeneratorConfig.max_batch_size)
        generator = dataclasses.replace(generator, max_batch_size=self.config.inference.max_batch_size)
        if endpoint:
            factory: Any = EndpointEngineFactory(endpoint_config(self.config))
        elif self.config.rollout.engine == "server":
            from webrl.engines.sglang import ServerEngineFactory

            urls = self._launch_servers(model_path) if server.launch != "none" else server.urls
            factory = ServerEngineFactory(urls, model_path, generator, server.timeout_s or self.config.rollout.inference_timeout_s,
                                          server.max_concurrency,
                                          server.api_key_env, down_wait_s=server.request_down_wait_s(
                                              self.config.rollout.inference_timeout_s),
                                          policy=self.config.policy, admin_api_key_env=server.admin_api_key_env,
                                          protocol=server.speaks, dtype=self.config.model.dtype)
            self._server_model = model_path
        else:
            factory = GeneratorEngineFactory(model_path, generator, dtype=self.config.model.dtype,
                                             device="cuda" if res.gpus_per_inference_worker else None,
                                             policy=self.config.policy)
        # a worker that dies is restarted and waits for the next weight sync (InferenceActor); not in
        # a collective weight sync, whose broadcast group a restarted worker cannot rejoin
        restarts = 0 if self.weight_sync == "collective" else INFERENCE_MAX_RESTARTS
        workers = start_inference_workers(factory, self.config.inference, count,
                                          cpus_per_worker=res.cpus_per_inference_worker,
                                          gpus_per_worker=0.0 if endpoint else res.gpus_per_inference_worker,
                                          placement_group=self.placement_group,
                                          bundle_offset=self.layout.inference + index,
                                          max_restarts=restarts, takes_weights=not endpoint)
        self.inference += workers
        if not endpoint:
            self._receivers += workers
        self._indexed += [(index + i, w) for i, w in enumerate(workers)]
        self._starting += [(f"inference worker {index + i}", w) for i, w in enumerate(workers)]
        return workers

    def _launch_servers(self, model_path: str) -> list[str]:
        """rollout.server.launch: start the run's inference servers once (the evaluation worker
        shares the rollout's), each a Ray actor that restarts its server when it dies
        (`webrl.engines.launcher`); their URLs once every one answers /health. close()
        stops them."""
        from webrl.models.shipped import resolve_shipped
        from webrl.engines.launcher import start_server_actors

        if not self._server_urls:
            prompt = self.config.generator.prompt
            self._server_actors, self._server_urls = start_server_actors(
                self.config.rollout.server, resolve_shipped(model_path), self.run_dir / "servers",
                placement_group=self.placement_group, bundle_offset=self.layout.servers,
                image_pixels=(prompt.min_pixels, prompt.max_pixels),
                hidden_states="cascade" in self.config.policy.wrappers, deterministic=self.config.run.deterministic,
                max_images=max(1, prompt.num_screenshots), dtype=self.config.model.dtype)
        return self._server_urls

    def wait_started(self) -> None:
        """Wait (up to resources.startup_timeout_s) until every actor started so far is
        constructed; raise ResourceError naming those that are not, or an actor's own error."""
        import ray

        starting, self._starting = self._starting, []
        refs = [actor.__ray_ready__.remote() for _, actor in starting]
        if not refs:
            return
        timeout_s = self.config.resources.startup_timeout_s
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        ray.get(list(ready))  # an actor whose constructor raised: its own error first
        done = set(ready)
        missing = sorted({what for (what, _), ref in zip(starting, refs) if ref not in done})
        if missing:
            raise ResourceError(f"timed out after {timeout_s:g} s waiting for actors to start (not started: "
                                f"{', '.join(missing)}; resources.startup_timeout_s): the cluster may lack the "
                                "resources (see the table printed at start-up), or start-up is slow")
        if self._server_model and self._server_loads == 0:  # the servers start from the run's checkpoint
            from webrl.models.shipped import resolve_shipped

            self._load_servers(resolve_shipped(self._server_model), 0)

    def start_learner(self, section: Any, run: Any) -> Any:
        """A `LearnerGroup` of `resources.learner_ranks` ranks for `section` (the RL or the SFT
        learner config) and `run` (what the run derives: model path, seed, temperature, pixels)."""
        from webrl.learner import LearnerGroup

        res = self.config.resources
        per_rank = {"CPU": res.cpus_per_learner_rank}
        if res.gpus_per_learner_rank:
            per_rank["GPU"] = res.gpus_per_learner_rank
        placement = ({"placement_group": self.placement_group, "bundle_offset": self.layout.learner}
                     if self.placement_group is not None else {})
        learner = LearnerGroup(section, run, num_ranks=res.learner_ranks, resources_per_rank=per_rank,
                               env_vars={"TORCH_EXTENSIONS_DIR": os.environ["TORCH_EXTENSIONS_DIR"]},
                               startup_timeout_s=res.startup_timeout_s, **placement)
        self.learners.append(learner)
        return learner

    def stop_learner(self, learner: Any) -> None:
        if self._weight_group is not None and self._weight_group[0] is learner:
            self._weight_group = None  # the next learner forms its own group
        learner.shutdown()
        self.learners = [g for g in self.learners if g is not learner]

    def sync_weights(self, learner: Any, version: int) -> None:
        """The learner's current weights into every inference worker, stamped `version`. First
        (once per iteration): a launched server that is down for good ends the run, naming it."""
        import ray

        if self._server_actors:
            failed = [s["failed"] for s in ray.get([a.status.remote() for a in self._server_actors], timeout=60)
                      if s["failed"]]
            if failed:
                raise ServerLaunchError("an inference server is down for good (rollout.server.max_restarts):\n"
                                        + "\n".join(failed))
        if self.weight_sync == "collective":
            self._broadcast(learner, version)
            return
        if self.weight_sync == "disk":  # servers load a folder; the previous one stays for in-flight reads
            root = self.run_dir / "server_weights"
            self._load_servers(learner.export_hf(str(root / f"v{version:08d}")), version)
            for old in root.glob("v*"):
                if old.name[1:].isdigit() and int(old.name[1:]) < version - 1:
                    shutil.rmtree(old, ignore_errors=True)
            return
        ref = learner.get_weights_ref()
        ray.get([a.set_weights.remote(ref, version) for a in self.inference])

    def _broadcast(self, learner: Any, version: int) -> None:
        """mode=collective: rank 0 broadcasts beside the receivers (in-process workers receive
        through Ray; servers get each bucket's names over HTTP from rank 0 itself)."""
        import ray

        cfg = self.config.learner.weight_sync
        servers = self._weight_group_for(learner, cfg)
        if servers is None:
            self.last_sync = _beside(lambda: learner.broadcast_weights(cfg.bucket_bytes, version),
                                     [w.receive_weights.remote(version) for w in self._receivers], cfg.timeout_s,
                                     "the inference workers to receive the weights")
            return
        self._server_loads += 1
        label = f"{self._server_tag}-{self._server_loads}:v{version}"
        self.last_sync = learner.broadcast_weights(cfg.bucket_bytes, None, dataclasses.replace(
            servers, weight_version=label))
        ray.get([worker.note_weights.remote(version, label) for _, worker in self._indexed])
        if self.config.rollout.server.speaks == "vllm" and "cascade" in self.config.policy.wrappers:
            # the cascade's heads read hidden states from each worker's in-process copy (vLLM returns
            # none): the same weights reach it through the object store
            ref = learner.get_weights_ref()
            ray.get([worker.set_weights.remote(ref, version) for _, worker in self._indexed])

    def _weight_group_for(self, learner: Any, cfg: Any) -> Any:
        """Form the broadcast group of `learner`'s rank 0 and the receivers once (again for a new
        learner); returns the servers' `ServerTargets`, or None for in-process receivers."""
        from webrl.learner.weight_broadcast import ServerTargets

        if self._weight_group is not None and self._weight_group[0] is learner:
            return self._weight_group[1]
        if self._weight_group is not None and self._weight_group[1] is not None:
            self._weight_group[1].destroy_group()
        server = self.config.rollout.server
        if self.config.rollout.engine == "server" and server.speaks == "vllm":  # vLLM's own NCCL transfer
            from webrl.engines.vllm_launch import workers_per_server
            from webrl.learner.vllm_transfer import VLLMTargets

            urls = list(self._server_urls or server.urls)  # launched: their workers from launch_args; else 1 each
            sizes = [workers_per_server(server.launch_args)] * len(urls) if server.launch != "none" else None
            vllm = VLLMTargets(urls, server.api_key_env, cfg.timeout_s, tp_sizes=sizes)
            learner.join_vllm_servers(vllm)
            self._weight_group = (learner, vllm)
            return vllm
        address, port = learner.host_weight_group(cfg.timeout_s)
        join = dict(backend=self.weight_backend, group_name=cfg.group_name, timeout_s=cfg.timeout_s)
        if self.config.rollout.engine == "server":
            server = self.config.rollout.server
            urls = list(self._server_urls or server.urls)  # launched by the run, or the user's
            targets = ServerTargets(urls, cfg.group_name, server.api_key_env, cfg.timeout_s,
                                    admin_api_key_env=server.admin_api_key_env)
            _, names, world = targets.members()  # each server's TP ranks join (rank_offset + tp_rank)
            answers = targets.init_group(address, port, self.weight_backend)
            learner.join_weight_group(world, members=["learner rank 0", *names], **join)
            answers()
        else:
            targets, world, specs = None, 1 + len(self._receivers), learner.weight_specs()
            members = ["learner rank 0", *[f"inference worker {i}" for i in range(len(self._receivers))]]
            refs = [w.join_weight_group.remote(address, port, 1 + i, world, self.weight_backend, cfg.group_name,
                                               cfg.timeout_s, specs, cfg.bucket_bytes)
                    for i, w in enumerate(self._receivers)]
            _beside(lambda: learner.join_weight_group(world, members=members, **join), refs, cfg.timeout_s,
                    "the inference workers to join the weight-broadcast group")
        self._weight_group = (learner, targets)
        return targets

    def _load_servers(self, path: str, version: int) -> None:
        """The servers load `path` once, through the first rollout worker (it waits for its batch
        in flight); the other workers sharing them then expect the same label."""
        import ray

        self._server_loads += 1
        label = f"{self._server_tag}-{self._server_loads}:v{version}"
        (_, first), *rest = sorted(self._indexed, key=lambda pair: pair[0])
        ray.get(first.set_weights.remote(path, version, label))
        ray.get([worker.note_weights.remote(version, label, path) for _, worker in rest])

    def close(self) -> None:
        """Close browsers, shut learners down, free our actors in someone else's Ray, stop ours."""
        import ray

        closing = [w.close.remote() for w in self.env_workers]
        if closing:  # one 30 s bound for all (a worker that never started never answers)
            ready, _ = ray.wait(closing, num_returns=len(closing), timeout=30)
            for ref in ready:
                try:
                    ray.get(ref)
                except Exception:  # already dead: nothing to close
                    pass
        if self._weight_group is not None and self._weight_group[1] is not None:
            self._weight_group[1].destroy_group()
        self._weight_group = None
        for learner in self.learners:
            learner.shutdown()
        if self._server_actors:  # stop the servers (their process groups) before their actors go
            stopping = [a.stop.remote() for a in self._server_actors]
            ready, _ = ray.wait(stopping, num_returns=len(stopping), timeout=60)
            for ref in ready:
                try:
                    ray.get(ref)
                except Exception:  # the actor died with its server: nothing left to stop
                    pass
        if not self._ray_started and ray.is_initialized():  # a Tune trial's Ray: free our actors only
            for actor in [*self.env_workers, *self.inference, *self._server_actors]:
                ray.kill(actor)
        self.env_workers, self.inference, self.learners = [], [], []
        self._server_actors, self._server_urls = [], []
        if self._ray_started:
            ray.shutdown()
            self._ray_started = False


def _beside(call: Any, refs: list, timeout_s: float, what: str) -> Any:
    """Run `call()` in a thread while waiting for the Ray `refs` (the other members of a
    collective); a member's error is raised at once, a deadline names `what` was awaited.
    Returns call()'s result."""
    import ray
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(1, thread_name_prefix="webrl-weight-sync")
    future = pool.submit(call)
    pool.shutdown(wait=False)  # on an error below, the thread ends by its own collective deadline
    ready, pending = ray.wait(refs, num_returns=len(refs), timeout=timeout_s + 30) if refs else ([], [])
    ray.get(ready)
    if pending:
        raise ResourceError(f"timed out after {timeout_s + 30:g} s waiting for {what} "
                            f"({len(pending)} of {len(refs)} did not answer; learner.weight_sync.timeout_s)")
    return future.result(timeout=timeout_s + 30)


RAY_TEMP_DIR_MAX = 107 - len("/session_2026-12-02_02-12-08_301205_4194304") - len("/sockets/plasma_store")
"""Longest temp dir Ray's sockets fit under: a Unix socket path has at most 107 bytes, and Ray
puts `session_<date>_<time>_<microseconds>_<pid>/sockets/plasma_store` (up to 64) below it."""


def _ray_temp_dir(run_dir: Path) -> str:
    """Ray's temp dir inside the run folder, unless the path is too long for its sockets."""
    candidate = run_dir.absolute() / "ray"
    if len(str(candidate)) <= RAY_TEMP_DIR_MAX:
        candidate.mkdir(parents=True, exist_ok=True)
        return str(candidate)
    return tempfile.mkdtemp(prefix="webrl-ray-")


def _loopback_node(address: str) -> dict[str, str]:
    """ray.init's driver-address option for a cluster on a loopback address ("127.0.0.1:6379"):
    the driver then registers as 127.0.0.1 too, instead of this machine's interface address
    (which Ray picks by default), so a cluster started on loopback stays there."""
    host = address.rsplit(":", 1)[0].strip("[]") if ":" in address and "://" not in address else ""
    try:
        return {"_node_ip_address": host} if host and ipaddress.ip_address(host).is_loopback else {}
    except ValueError:  # a host name or "auto"
        return {}


def _job_env_vars() -> dict[str, str]:
    """The env vars of the runtime env of the Ray job this driver runs in (none outside a job)."""
    job = json.loads(os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR") or "{}")
    return dict((job.get("runtime_env") or {}).get("env_vars") or {})
