"""The weight broadcast (`webrl.learner.weight_broadcast`, `weight_buckets`): bucket plans worked out by hand, exact
bytes across buckets (one dtype per bucket, a tensor larger than a bucket), the version header, set-up
deadlines that name who never came, the config's refusals, and learner rank 0 -> an in-process
InferenceWorker giving the same weights as the object-store path.

Members run as threads of this process: each holds its own store client and gloo group, as the
separate processes of a run do."""
import threading
import time

import pytest
import torch

from webrl.config import ConfigError
from webrl.learner.config import WeightSyncConfig, resolve_weight_sync
from webrl.learner.weight_broadcast import GroupSetupError, WeightBroadcastGroup, host_store
from webrl.learner.weight_buckets import (TensorSpec, dtype_name, flatten_bucket, header_of, plan_buckets,
                                          unflatten_bucket)


def specs_of(named):
    return [TensorSpec(n, tuple(t.shape), dtype_name(t.dtype)) for n, t in named]


def test_bucket_plan_by_hand():
    # bytes: 400, 400, 1200 (over the 1000-byte bucket: alone), 100, 600 -> [0, 1] 800, [2], [3, 4] 700
    sizes = [100, 100, 300, 25, 150]  # float32 elements
    specs = [TensorSpec(f"t{i}", (n,), "float32") for i, n in enumerate(sizes)]
    assert [s.num_bytes for s in specs] == [400, 400, 1200, 100, 600]
    assert plan_buckets(specs, 1000) == [[0, 1], [2], [3, 4]]
    assert plan_buckets(specs, 1) == [[0], [1], [2], [3], [4]]
    assert plan_buckets(specs, 10**9) == [[0, 1, 2, 3, 4]]
    with pytest.raises(ValueError, match="bucket_bytes must be >= 1"):
        plan_buckets(specs, 0)
    # a change of dtype starts a bucket: fp32 400 B, bf16 14 B, bf16 6 B, fp32 4 B -> [0], [1, 2], [3]
    mixed = [TensorSpec("a", (100,), "float32"), TensorSpec("b", (7,), "bfloat16"), TensorSpec("c", (3,), "bfloat16"),
             TensorSpec("d", (1,), "float32")]
    assert plan_buckets(mixed, 10**9) == [[0], [1, 2], [3]]


def test_every_tp_rank_of_every_server_is_a_member():
    from webrl.learner.weight_broadcast import ServerTargets, group_ranks

    assert group_ranks([1, 1]) == ([1, 2], 3)
    assert group_ranks([2, 1, 4]) == ([1, 3, 4], 8)  # ranks: learner 0 | 1 2 | 3 | 4 5 6 7
    with pytest.raises(ValueError, match="integers >= 1"):
        group_ranks([2, 0])
    targets = ServerTargets(["http://127.0.0.2:1", "http://127.0.0.3:1"], tp_sizes=[2, 1])
    assert targets.members() == ([1, 3], ["http://127.0.0.2:1 tp rank 0", "http://127.0.0.2:1 tp rank 1",
                                          "http://127.0.0.3:1"], 4)


def test_names_travel_to_servers_as_checkpoint_names_and_map_back():
    from webrl.learner.weights import checkpoint_name, module_name

    assert checkpoint_name("model.language_model.layers.0.mlp.up_proj.weight") == "model.layers.0.mlp.up_proj.weight"
    assert checkpoint_name("model.visual.merger.mlp.0.bias") == "visual.merger.mlp.0.bias"
    assert checkpoint_name("lm_head.weight") == "lm_head.weight"
    assert checkpoint_name("element_pointer.query.weight") == "element_pointer.query.weight"
    own = {"model.language_model.norm.weight", "model.visual.patch_embed.proj.weight", "lm_head.weight",
           "element_pointer.query.weight"}
    for name in own:
        assert module_name(checkpoint_name(name), own) == name
    assert module_name("model.language_model.norm.weight", own) is None  # the module tree's spelling
    assert module_name("model.norm.bias", own) is None and module_name("visual.nothing", own) is None
    flat_tree = {"model.layers.0.mlp.up_proj.weight", "lm_head.weight"}  # a model without the nested tree
    assert module_name("model.layers.0.mlp.up_proj.weight", flat_tree) == "model.layers.0.mlp.up_proj.weight"


def test_flatten_round_trip_is_bit_exact_and_a_misaligned_offset_is_refused():
    g = torch.Generator().manual_seed(0)
    named = [("a", torch.randn(3, 5, generator=g)), ("b", torch.randn(7, generator=g).to(torch.bfloat16)),
             ("c", torch.randn(2, 2, 2, generator=g).to(torch.float16)), ("d", torch.tensor(3.5))]
    flat = flatten_bucket([t for _, t in named[:3]])  # offsets 0, 60, 74: each a multiple of its element size
    assert flat.dtype == torch.uint8 and flat.numel() == 15 * 4 + 7 * 2 + 8 * 2
    for (_, sent), got in zip(named, unflatten_bucket(flat, specs_of(named[:3]))):
        assert got.dtype == sent.dtype and torch.equal(got, sent)
    with pytest.raises(ValueError, match="bucket holds 90 bytes"):
        unflatten_bucket(flat, specs_of(named)[:2])
    # d (float32) would start at byte 90 = 7 bf16 + 8 fp16 elements after a: SGLang's view fails there
    with pytest.raises(ValueError, match=r"d \(float32\) starts at byte 90 of its bucket, not a multiple of its "
                                         r"element size 4: a bucket must hold one dtype"):
        unflatten_bucket(flatten_bucket([t for _, t in named]), specs_of(named))


def run_group(world, sender, receiver, timeout_s=20.0):
    """Rank 0 runs sender(group), ranks 1.. receiver(group, rank); returns (rank 0's result,
    receivers' results, errors by rank)."""
    store = host_store("127.0.0.1", timeout_s)
    results, errors = {}, {}

    def member(rank):
        try:
            group = WeightBroadcastGroup.join("127.0.0.1", store.port, rank, world, timeout_s=timeout_s,
                                              store=store if rank == 0 else None, group_name="test")
            results[rank] = sender(group) if rank == 0 else receiver(group, rank)
        except Exception as e:  # noqa: BLE001 - collected for the assertion
            errors[rank] = e

    threads = [threading.Thread(target=member, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return results.get(0), [results.get(r) for r in range(1, world)], errors


def test_two_receivers_get_exactly_the_sent_tensors_across_buckets():
    g = torch.Generator().manual_seed(1)
    named = [("embed", torch.randn(10, 20, generator=g)),            # 800 B
             ("norm", torch.randn(7, generator=g).to(torch.bfloat16)),   # 14 B: another dtype, its own bucket
             ("big", torch.randn(64, 64, generator=g)),              # 16384 B > bucket: alone
             ("head", torch.randn(5, 3, generator=g).to(torch.float16))]  # 30 B
    specs, bucket = specs_of(named), 1024
    assert plan_buckets(specs, bucket) == [[0], [1], [2], [3]]  # one dtype per bucket
    header = header_of(7, specs)
    assert header == (7, 4, 800 + 14 + 16384 + 30)

    def send(group):
        return group.send(iter(named), specs, bucket, header=header)

    def receive(group, rank):
        return [[(n, t.clone()) for n, t in b] for b in group.receive(specs, bucket, header=header)]

    stats, received, errors = run_group(3, send, receive)
    assert not errors, errors
    assert stats["buckets"] == 4.0 and stats["bytes"] == float(header[2])
    for buckets in received:
        assert [[n for n, _ in b] for b in buckets] == [["embed"], ["norm"], ["big"], ["head"]]
        got = dict(item for b in buckets for item in b)
        for name, sent in named:
            assert got[name].dtype == sent.dtype and torch.equal(got[name], sent), name


def test_a_receiver_expecting_another_version_refuses_the_sync():
    named = [("w", torch.ones(4))]
    specs = specs_of(named)
    stats, _, errors = run_group(2, lambda g: g.send(iter(named), specs, 64, header=header_of(3, specs)),
                                 lambda g, r: list(g.receive(specs, 64, header=header_of(2, specs))))
    assert stats["buckets"] == 1.0 and 0 not in errors  # the receiver drained the bucket: rank 0 finished
    assert "rank 0 sent (version, tensors, bytes) = (3, 1, 16), this receiver expected (2, 1, 16)" in str(errors[1])


def test_a_receiver_that_never_joins_times_out_in_seconds_naming_it():
    store = host_store("127.0.0.1", 2.0)
    t0 = time.monotonic()
    with pytest.raises(GroupSetupError) as raised:
        WeightBroadcastGroup.join("127.0.0.1", store.port, 0, 3, timeout_s=2.0, store=store, group_name="lonely",
                                  members=["learner rank 0", "inference worker 0", "inference worker 1"])
    assert time.monotonic() - t0 < 30
    message = str(raised.value)
    assert f"'lonely' at 127.0.0.1:{store.port}" in message and "for 3 members to join" in message
    assert "rank 1 (inference worker 0), rank 2 (inference worker 1)" in message


def test_a_receiver_without_a_learner_times_out_naming_the_store():
    store = host_store("127.0.0.1", 1.0)
    port = store.port
    del store  # nobody listens there any more
    with pytest.raises(GroupSetupError, match=rf"127.0.0.1:{port}: rank 1 could not reach rank 0's store"):
        WeightBroadcastGroup.join("127.0.0.1", port, 1, 2, timeout_s=1.0)


def test_weight_sync_config_names_the_key_and_the_allowed_values():
    with pytest.raises(ValueError, match=r"learner.weight_sync.mode must be one of \['auto', 'object_store', "
                                         r"'collective', 'disk'\], got 'p2p'"):
        WeightSyncConfig(mode="p2p")
    with pytest.raises(ValueError, match="learner.weight_sync.bucket_mb must be > 0"):
        WeightSyncConfig(bucket_mb=0)
    assert resolve_weight_sync(WeightSyncConfig(), "transformers", False) == ("object_store", "gloo")
    assert resolve_weight_sync(WeightSyncConfig(), "server", False) == ("disk", "gloo")
    assert resolve_weight_sync(WeightSyncConfig(mode="collective"), "server", True) == ("collective", "nccl")
    with pytest.raises(ConfigError, match=r"mode='object_store' cannot reach rollout.engine='server'; allowed with "
                                          r"it: \['auto', 'disk', 'collective'\]"):
        resolve_weight_sync(WeightSyncConfig(mode="object_store"), "server", False)
    with pytest.raises(ConfigError, match=r"mode='disk' cannot reach rollout.engine='transformers'"):
        resolve_weight_sync(WeightSyncConfig(mode="disk"), "transformers", False)
    with pytest.raises(ConfigError, match="backend='nccl' needs GPUs on the learner and on every receiver"):
        resolve_weight_sync(WeightSyncConfig(mode="collective", backend="nccl"), "transformers", False)
    # auto picks nccl only when the receivers have GPUs too: CPU inference workers or webrl serve get gloo
    assert resolve_weight_sync(WeightSyncConfig(mode="collective"), "transformers", True, False) == ("collective", "gloo")
    with pytest.raises(ConfigError, match="backend='nccl' needs GPUs on the learner and on every receiver"):
        resolve_weight_sync(WeightSyncConfig(mode="collective", backend="nccl"), "server", True, False)
    # the broadcast's settings are read only in collective mode
    for setting in ({"backend": "gloo"},):
        with pytest.raises(ConfigError, match=rf"learner.weight_sync.{next(iter(setting))} only act with "
                                              r"learner.weight_sync.mode=collective"):
            resolve_weight_sync(WeightSyncConfig(**setting), "transformers", False)


@pytest.mark.slow
def test_learner_rank_zero_to_an_inference_worker_equals_the_object_store_weights(tiny_qwen25vl_path):
    """A real learner (one DeepSpeed rank in this process) after one update, broadcast in 64 KiB
    buckets to a plain InferenceWorker, then to `webrl serve` through SGLang's routes: every synced
    parameter equals the object-store update on both."""
    import httpx

    from tests.learner.helpers import learner_config, learner_run, make_samples
    from webrl.learner.weight_broadcast import ServerTargets
    from webrl.serve import LocalChatEngine, ServeConfig, ServerThread, create_app
    from webrl.learner import LearnerGroup
    from webrl.models import load_model
    from webrl.policy import GeneratorPolicy
    from webrl.engines.engine import GeneratorEngine
    from webrl.rollout.inference import InferenceWorker

    model, processor = load_model(tiny_qwen25vl_path)
    worker = InferenceWorker(GeneratorEngine(GeneratorPolicy(model, processor)))
    learner = LearnerGroup(learner_config(), learner_run(tiny_qwen25vl_path), 1, use_ray=False)
    try:
        learner.update(make_samples(processor, 4, images=False))
        specs, bucket = learner.weight_specs(), 64 * 1024
        assert len(plan_buckets(specs, bucket)) > 1 and max(s.num_bytes for s in specs) > bucket
        address, port = learner.host_weight_group(20.0)
        joined = threading.Thread(target=worker.join_weight_group,
                                  args=(address, port, 1, 2, "gloo", "w", 20.0, specs, bucket))
        joined.start()
        learner.join_weight_group(2, "gloo", "w", 20.0)
        joined.join()
        received = threading.Thread(target=worker.receive_weights, args=(1,))
        received.start()
        stats = learner.broadcast_weights(bucket, 1)
        received.join()
        update = learner.get_weights()
        # the same learner into `webrl serve` (a new group; each bucket announced over HTTP by rank 0)
        served = LocalChatEngine.from_pretrained(tiny_qwen25vl_path, model_name="tiny")
        with ServerThread(create_app(served, ServeConfig())) as server:
            address, port = learner.host_weight_group(20.0)
            targets = ServerTargets([server.url], "to-server", timeout_s=60, weight_version="v1")
            answers = targets.init_group(address, port, "gloo")
            learner.join_weight_group(2, "gloo", "to-server", 20.0)
            answers()
            learner.broadcast_weights(bucket, None, targets)
            info = httpx.get(server.url + "/model_info").json()
    finally:
        learner.shutdown()
    assert worker.version == 1 and stats["buckets"] == len(plan_buckets(specs, bucket))
    assert info["weight_version"] == "v1"
    params, on_server = dict(model.named_parameters()), dict(served.model.named_parameters())
    assert update.names == [s.name for s in specs]
    for name, tensor in zip(update.names, update.tensors):
        assert torch.equal(params[name].detach(), tensor) and torch.equal(on_server[name].detach(), tensor), name


@pytest.mark.ray
@pytest.mark.slow
def test_run_actors_sync_through_the_group_decides_as_the_object_store_path(ray_cluster, tiny_qwen25vl_path,
                                                                            tmp_path):
    """`RunActors.sync_weights` with mode=collective: learner rank 0 (a Ray actor) -> 2 in-process
    inference workers in 64 KiB buckets. Their greedy decisions (ids and log-probs) equal those
    after an object-store sync of the same weights, and differ from the initial policy's."""
    import ray

    from tests.learner.helpers import learner_config, learner_run, make_samples
    from webrl.run.actors import RunActors
    from webrl.config import load_config
    from webrl.learner.config import WeightSyncConfig
    from webrl.models import load_model
    from webrl.policy.cascade.synthetic import make_steps
    from webrl.policy.generator import GeneratorConfig, SamplingConfig
    from webrl.policy.prompt import PromptConfig
    from webrl.run.config import WebRLConfig

    config = load_config(WebRLConfig, "smoke", [f"run.run_dir={tmp_path}", "learner.weight_sync.mode=collective"])
    config.learner.weight_sync.bucket_mb = 0.0625  # several buckets (a fixed setting code may set)
    actors = RunActors(config, tmp_path)
    assert (actors.weight_sync, actors.weight_backend) == ("collective", "gloo")
    generator = GeneratorConfig(prompt=PromptConfig(action_format="som", think=False, min_pixels=1024,
                                                    max_pixels=48 * 28 * 28),
                                sampling=SamplingConfig(greedy=True, max_new_tokens=8))
    requests = [s.request for s in make_steps(2, seed=5)]

    def decide(workers):
        return [[(d.response_ids, d.logprobs, v) for d, v in ray.get(w.act_batch.remote(requests))] for w in workers]

    try:
        workers = actors.start_inference(tiny_qwen25vl_path, generator, index=0, count=2)
        actors.wait_started()
        initial = decide(workers)
        section = learner_config(weight_sync=WeightSyncConfig(mode="collective"))
        learner = actors.start_learner(section, learner_run(tiny_qwen25vl_path))
        _, processor = load_model(tiny_qwen25vl_path)
        learner.update(make_samples(processor, 4, images=False))
        actors.sync_weights(learner, 1)
        collective = decide(workers)
        assert actors.last_sync["buckets"] > 1
        ray.get([w.set_weights.remote(learner.get_weights_ref(), 2) for w in workers])
        object_store = decide(workers)
    finally:
        actors.close()
    strip = lambda rows: [[(ids, lp) for ids, lp, _ in row] for row in rows]  # noqa: E731
    assert strip(collective) == strip(object_store) and strip(collective) != strip(initial)
    assert {v for row in collective for *_, v in row} == {1} and {v for row in object_store for *_, v in row} == {2}


def test_a_weight_sync_mode_the_engine_cannot_take_is_refused_when_the_config_loads():
    from webrl.config import ConfigError, load_config
    from webrl.run.config import WebRLConfig

    with pytest.raises(ConfigError, match=r"learner.weight_sync.mode='disk' cannot reach rollout.engine='transformers'"):
        load_config(WebRLConfig, None, ["learner.weight_sync.mode=disk"])
    with pytest.raises(ConfigError, match=r"backend='nccl' needs GPUs on the learner and on every receiver"):
        load_config(WebRLConfig, None, ["learner.weight_sync.mode=collective", "learner.weight_sync.backend=nccl"])
    with pytest.raises(ConfigError, match=r"'sft.learner.weight_sync.mode' .* is gone"):
        load_config(WebRLConfig, None, ["sft.learner.weight_sync.mode=disk"])
    with pytest.raises(ConfigError, match=r"collective with rollout.server.launch cannot survive a server restart"):
        load_config(WebRLConfig, None, ["rollout.engine=server", "rollout.server.launch=webrl",
                                        "rollout.server.max_concurrency=4", "learner.weight_sync.mode=collective"])
    load_config(WebRLConfig, None, ["rollout.engine=server", "rollout.server.launch=webrl", "rollout.server.max_restarts=0",
                                    "rollout.server.max_concurrency=4", "learner.weight_sync.mode=collective"])
    with pytest.raises(ConfigError, match=r"'rollout.server.down_wait_s' .* is not a run setting: fixed at -1.0"):
        load_config(WebRLConfig, None, ["rollout.engine=server", "rollout.server.launch=webrl",
                                        "rollout.server.max_concurrency=4", "rollout.server.down_wait_s=400"])
    assert load_config(WebRLConfig, None, ["learner.weight_sync.mode=collective"]).learner.weight_sync.mode == "collective"
