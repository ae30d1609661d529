"""Where a `LearnerGroup`'s ranks run: `LocalRanks` (this process), `ProcessRanks` (spawned
children, no Ray) and `RayRanks` (actors in a placement group). Each exposes the same two
methods, `call(method, args_per_rank)` (every rank runs `LearnerWorker.<method>`; the results
in rank order) and `shutdown()`."""
from __future__ import annotations

import socket
from typing import Optional, Sequence

from webrl.config import wait_for
from webrl.learner.config import LearnerConfig, LearnerRun
from webrl.learner.worker import LearnerWorker


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def node_address() -> tuple[str, int]:
    """(this node's IP, a free TCP port on it): where rank 0's rendezvous store listens."""
    import ray

    return ray.util.get_node_ip_address(), free_port()


class LocalRanks:
    """One rank in the calling process."""

    def __init__(self, config: LearnerConfig, run: LearnerRun, num_cpus: int = 1):
        self.workers = [LearnerWorker(config, run, 0, 1, "127.0.0.1", free_port(), num_cpus)]

    def call(self, method: str, args_per_rank: Sequence[tuple]) -> list:
        return [getattr(w, method)(*args) for w, args in zip(self.workers, args_per_rank)]

    def shutdown(self) -> None:
        for w in self.workers:
            w.shutdown()


class _RankFailure:
    def __init__(self, message: str):
        self.message = message


def _serve_rank(conn, config: LearnerConfig, run: LearnerRun, rank: int, world_size: int, port: int,
                num_cpus: int) -> None:
    """Body of a `ProcessRanks` child: build the rank, then run (method, args) messages."""
    import traceback

    try:
        worker = LearnerWorker(config, run, rank, world_size, "127.0.0.1", port, num_cpus)
    except Exception:
        worker, failure = None, _RankFailure(traceback.format_exc())
    while True:
        message = conn.recv()
        if message is None:
            if worker is not None:
                worker.shutdown()
            return
        if worker is None:
            conn.send(failure)
            continue
        method, args = message
        try:
            conn.send(getattr(worker, method)(*args))
        except Exception:
            conn.send(_RankFailure(traceback.format_exc()))


class ProcessRanks:
    """`num_ranks` ranks as spawned child processes of this one (no Ray): quick local multi-rank
    runs and the step benchmark, where Ray's start-up would only add noise."""

    def __init__(self, config: LearnerConfig, run: LearnerRun, num_ranks: int, num_cpus: int = 1):
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        port = free_port()
        self.conns, self.procs = [], []
        for rank in range(num_ranks):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_serve_rank, args=(child, config, run, rank, num_ranks, port, num_cpus),
                               daemon=True)
            proc.start()
            self.conns.append(parent)
            self.procs.append(proc)
        self.call("pid", [()] * num_ranks)

    def call(self, method: str, args_per_rank: Sequence[tuple]) -> list:
        for conn, args in zip(self.conns, args_per_rank):
            conn.send((method, args))
        results = [conn.recv() for conn in self.conns]
        for rank, result in enumerate(results):
            if isinstance(result, _RankFailure):
                raise RuntimeError(f"learner rank {rank} failed in {method}:\n{result.message}")
        return results

    def shutdown(self, timeout_s: float = 60.0) -> None:
        """Ask every rank to exit; terminate those still running after `timeout_s` (a rank stuck
        in a collective never reads the request)."""
        for conn in self.conns:
            conn.send(None)
        for proc in self.procs:
            proc.join(timeout=timeout_s)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=10)
        self.conns, self.procs = [], []


class RayRanks:
    """`num_ranks` LearnerWorker actors, rank r in bundle `bundle_offset + r` of a placement group."""

    def __init__(self, config: LearnerConfig, run: LearnerRun, num_ranks: int, resources_per_rank: dict[str, float],
                 placement_group=None, bundle_offset: int = 0, env_vars: Optional[dict[str, str]] = None,
                 startup_timeout_s: float = 900.0):
        from ray.util.placement_group import placement_group as make_pg, remove_placement_group

        self._owned_pg = placement_group is None
        if placement_group is not None and not 0 <= bundle_offset <= placement_group.bundle_count - num_ranks:
            raise ValueError(f"bundle_offset {bundle_offset} with {num_ranks} learner ranks needs bundles "
                             f"{bundle_offset}..{bundle_offset + num_ranks - 1}, the placement group has "
                             f"{placement_group.bundle_count}")
        if placement_group is None:
            placement_group = make_pg([dict(resources_per_rank) for _ in range(num_ranks)], strategy="PACK")
        self.placement_group, self._remove_pg, self.workers = placement_group, remove_placement_group, []
        try:  # whatever fails from here (a deadline, a rank's constructor) frees the ranks and our group
            self._start(config, run, num_ranks, resources_per_rank, bundle_offset, env_vars, startup_timeout_s)
        except BaseException:
            self.shutdown()
            raise

    def _start(self, config: LearnerConfig, run: LearnerRun, num_ranks: int, resources_per_rank: dict[str, float],
               bundle_offset: int, env_vars: Optional[dict[str, str]], startup_timeout_s: float) -> None:
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        placement_group = self.placement_group
        if self._owned_pg:
            wait_for(placement_group.ready(), startup_timeout_s,
                     f"the learner's placement group ({num_ranks} x {resources_per_rank})")
        cpus, gpus = resources_per_rank.get("CPU", 1), resources_per_rank.get("GPU", 0)

        def where(rank: int):
            return PlacementGroupSchedulingStrategy(placement_group, placement_group_bundle_index=bundle_offset + rank)

        addr, port = wait_for(ray.remote(num_cpus=0)(node_address).options(scheduling_strategy=where(0)).remote(),
                              startup_timeout_s, "the learner's rank-0 node address")
        runtime_env = {"env_vars": dict(env_vars)} if env_vars else None
        actor_cls = ray.remote(LearnerWorker)
        self.workers = [
            actor_cls.options(num_cpus=cpus, num_gpus=gpus, scheduling_strategy=where(r), runtime_env=runtime_env)
            .remote(config, run, r, num_ranks, addr, port, int(max(1, cpus)))
            for r in range(num_ranks)]
        # construction errors surface here; a rank that cannot start leaves the rest in rendezvous
        wait_for([w.pid.remote() for w in self.workers], startup_timeout_s,
                 f"{num_ranks} learner rank(s) to load the model and form their process group")

    def call(self, method: str, args_per_rank: Sequence[tuple]) -> list:
        import ray

        return ray.get([getattr(w, method).remote(*args) for w, args in zip(self.workers, args_per_rank)])

    def shutdown(self) -> None:
        import ray

        for w in self.workers:
            ray.kill(w)
        self.workers = []
        if self._owned_pg:
            self._remove_pg(self.placement_group)
