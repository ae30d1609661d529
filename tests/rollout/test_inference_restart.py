"""A dead inference worker, restarted by Ray: it must not decide with the checkpoint's weights
under the policy's name. Real Ray actors (`start_inference_workers`, the run's own starter), a
stand-in engine (what is tested is the actor's shell, not the model)."""
import time

import pytest

ray = pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")

from webrl.rollout.inference import InferenceRestarted  # noqa: E402
from webrl.rollout.placement import start_inference_workers  # noqa: E402

pytestmark = [pytest.mark.ray]


def _engine_factory():
    """A picklable factory (by value: defined here, not importable in the worker) of an engine
    that decides nothing and records the weights it was given."""
    class Engine:
        def __init__(self):
            self.loaded = None

        def act(self, requests):
            return []

        def load_weights(self, weights, label=None):
            self.loaded = dict(weights)

    return Engine()


def _kill_and_wait(actor, timeout_s=60.0):
    pid = ray.get(actor.__ray_call__.remote(lambda self: __import__("os").getpid()))
    psutil.Process(pid).kill()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:  # calls fail while Ray restarts it, then answer
        try:
            if ray.get(actor.__ray_call__.remote(lambda self: __import__("os").getpid()), timeout=10) != pid:
                return
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            time.sleep(0.5)
    raise AssertionError("the inference worker was not restarted")


def test_a_restarted_worker_waits_for_the_next_weight_sync(ray_cluster):
    [actor] = start_inference_workers(_engine_factory, None, 1, cpus_per_worker=0.25, max_restarts=1,
                                      takes_weights=True)
    assert ray.get(actor.set_weights.remote({"w": 1}, 3)) == 3
    assert ray.get(actor.act_batch.remote([])) == []  # a first start decides

    _kill_and_wait(actor)
    assert ray.get(actor.version.remote()) == 0  # the constructor's version: the checkpoint's weights
    with pytest.raises(ray.exceptions.RayTaskError) as refused:
        ray.get(actor.act_batch.remote([]))
    assert isinstance(refused.value.cause, InferenceRestarted)
    assert "once the run's next weight sync reaches it" in str(refused.value.cause)
    with pytest.raises(ray.exceptions.RayTaskError, match="InferenceRestarted"):
        ray.get(actor.act_one.remote(None))  # refused before the request is looked at

    assert ray.get(actor.set_weights.remote({"w": 2}, 4)) == 4  # the run's next sync
    assert ray.get(actor.act_batch.remote([])) == [] and ray.get(actor.version.remote()) == 4
    assert ray.get(actor.__ray_call__.remote(lambda self: self.worker.engine.loaded)) == {"w": 2}
    ray.kill(actor)


def test_a_worker_that_takes_no_weights_decides_at_once_after_a_restart(ray_cluster):
    """eval.endpoint's workers decide with a model served elsewhere: no weight sync ever comes."""
    [actor] = start_inference_workers(_engine_factory, None, 1, cpus_per_worker=0.25, max_restarts=1)
    _kill_and_wait(actor)
    assert ray.get(actor.act_batch.remote([])) == []
    ray.kill(actor)


def test_without_restarts_a_dead_worker_stays_dead(ray_cluster):
    """max_restarts 0 (a collective weight sync, whose group a new process cannot rejoin)."""
    [actor] = start_inference_workers(_engine_factory, None, 1, cpus_per_worker=0.25, takes_weights=True)
    pid = ray.get(actor.__ray_call__.remote(lambda self: __import__("os").getpid()))
    psutil.Process(pid).kill()
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(actor.act_batch.remote([]), timeout=60)
