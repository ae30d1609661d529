"""Resources checked before anything starts (webrl.resources): the placement check worked by hand,
the 4B preset's layout, and, on a real local Ray, a run that asks for GPUs this machine lacks
refused before any actor starts, and start-up waits that end with a named error."""
from __future__ import annotations

import pytest

from webrl.config import load_config
from webrl.config import ConfigError
from webrl.resources import (ResourceError, check_resources, placement_refusal, request_rows, resource_table,
                             row_bundles, wait_for)
from webrl.train_config import ResourcesConfig, WebRLConfig, bundle_layout, run_layout

PRESET_4B = ("online_mind2web_qwen3vl_4b", ["tasks.file=/x.json", "model.path=/m",
                                            "reward.openai.base_url=http://127.0.0.1:1/v1"])
EIGHT_GPU_NODE = [{"node": "10.0.0.1", "CPU": 96.0, "GPU": 8.0}]


def gpu(n: float, cpus: float = 1.0) -> dict[str, float]:
    return {"CPU": cpus, "GPU": n}


def test_placement_by_hand():
    two_nodes = [{"node": "a", "CPU": 8.0, "GPU": 4.0}, {"node": "b", "CPU": 8.0, "GPU": 4.0}]
    assert placement_refusal([gpu(1)] * 8, two_nodes) is None                # 4 + 4
    assert placement_refusal([gpu(1)] * 9, two_nodes) == "the run asks for 9 GPUs in all and the cluster has 8"
    assert placement_refusal([gpu(0, cpus=17)], two_nodes) == "the run asks for 17 CPUs in all and the cluster has 16"
    # 8 GPUs in all, but a bundle of 6 GPUs fits on neither 4-GPU node
    reason = placement_refusal([gpu(6), gpu(2)], two_nodes, kinds=["learner rank", "env worker"])
    assert reason.startswith("a learner rank needs 1 CPU, 6 GPU on one node")
    # largest first: 3 + 1 on a, 3 + 1 on b; in the given order (1, 1, 3, 3) first-fit would fail
    assert placement_refusal([gpu(1), gpu(1), gpu(3), gpu(3)], two_nodes) is None
    # CPUs run out on a node before its GPUs: 4 bundles of 1 GPU + 3 CPUs fit a 12-CPU node, not an 11-CPU one
    assert placement_refusal([gpu(1, cpus=3)] * 4, [{"node": "a", "CPU": 12.0, "GPU": 4.0},
                                                    {"node": "b", "CPU": 0.0, "GPU": 0.0}]) is None
    assert placement_refusal([gpu(1, cpus=3)] * 4, [{"node": "a", "CPU": 11.0, "GPU": 4.0}]) is not None
    # fractions share one GPU as Ray places them: 0.3 x 3 per GPU, so 9 fit on 3 GPUs and a 10th does not
    three_gpus = [{"node": "a", "CPU": 64.0, "GPU": 3.0}]
    assert placement_refusal([gpu(0.3)] * 9, three_gpus) is None
    assert placement_refusal([gpu(0.3)] * 10, three_gpus).startswith("a actor needs 1 CPU, 0.3 GPU on one node")
    # best fit: two 0.5 share a GPU, leaving a whole one for the 1-GPU bundle
    assert placement_refusal([gpu(1), gpu(0.5), gpu(0.5)], [{"node": "a", "CPU": 8.0, "GPU": 2.0}]) is None
    assert placement_refusal([gpu(1)], []) == "the run asks for 1 CPUs in all and the cluster has 0"  # no nodes


def test_the_4b_preset_fits_8_gpus_once_no_evaluation_worker_is_started():
    config = load_config(WebRLConfig, *PRESET_4B)
    assert config.tasks.eval_tasks == 0
    layout = run_layout(config)
    assert not layout.eval_worker
    actors, _ = row_bundles(request_rows(config, "train"))
    # 4 learner ranks x (4 CPU, 1 GPU) + 4 inference x (1 CPU, 1 GPU) + 8 env workers x 1 CPU
    assert sum(b.get("GPU", 0) for b in actors) == 8 and sum(b["CPU"] for b in actors) == 28
    assert [{k: v for k, v in b.items() if v} for b in actors] == layout.bundles[1:]  # what Tune reserves
    assert placement_refusal(actors, EIGHT_GPU_NODE) is None
    print(check_resources(request_rows(config), EIGHT_GPU_NODE))
    # with evaluation tasks the greedy worker takes a ninth GPU: refused, naming the settings
    with_eval = load_config(WebRLConfig, PRESET_4B[0], PRESET_4B[1] + ["tasks.eval_tasks=8"])
    with pytest.raises(ResourceError) as raised:
        check_resources(request_rows(with_eval), EIGHT_GPU_NODE)
    message = str(raised.value)
    assert "asks for 9 GPUs in all and the cluster has 8" in message
    for setting in ("resources.learner_ranks", "resources.gpus_per_inference_worker", "tasks.eval_tasks"):
        assert setting in message


def test_sft_and_eval_ask_only_for_what_they_start():
    config = load_config(WebRLConfig, PRESET_4B[0], PRESET_4B[1] + ["tasks.eval_tasks=8", "eval.samples_per_task=2"])
    counts = {mode: {kind: (n, gpus) for kind, n, _, gpus in request_rows(config, mode)} for mode in
              ("train", "sft", "eval")}
    assert counts["sft"] == {"learner rank": (4, 1.0), "rollout inference worker": (0, 1.0),
                             "evaluation inference worker": (0, 1.0), "env worker": (0, 0.0)}
    assert counts["eval"] == {"learner rank": (0, 1.0), "rollout inference worker": (1, 1.0),
                              "evaluation inference worker": (1, 1.0), "env worker": (8, 0.0)}
    assert counts["train"]["rollout inference worker"] == (4, 1.0)
    # an evaluation served by eval.endpoint needs no GPU on a machine without one
    served = load_config(WebRLConfig, "smoke", ["eval.endpoint=http://127.0.0.1:1/v1",
                                                "resources.gpus_per_inference_worker=1",
                                                "resources.gpus_per_learner_rank=1"])
    no_gpu = [{"node": "a", "CPU": 4.0, "GPU": 0.0}]
    check_resources(request_rows(served, "eval"), no_gpu)
    with pytest.raises(ResourceError):
        check_resources(request_rows(served, "train"), no_gpu)
    with pytest.raises(ValueError, match="mode must be one of"):
        request_rows(config, "serve")


def test_layout_indices_with_and_without_the_evaluation_worker():
    res = ResourcesConfig(learner_ranks=2, num_inference_workers=3, num_env_workers=2)
    with_eval, without = bundle_layout(res), bundle_layout(res, eval_worker=False)
    assert (with_eval.learner, with_eval.inference, with_eval.env, len(with_eval.bundles)) == (1, 3, 7, 9)
    assert (without.learner, without.inference, without.env, len(without.bundles)) == (1, 3, 6, 8)


def test_the_table_lists_each_kind_its_totals_and_the_nodes():
    config = load_config(WebRLConfig, "smoke", ["resources.learner_ranks=2", "resources.gpus_per_learner_rank=1",
                                                "resources.num_env_workers=3", "tasks.eval_tasks=2"])
    table = resource_table(request_rows(config), [{"node": "127.0.0.1", "CPU": 4.0, "GPU": 0.0}])
    lines = table.splitlines()
    assert lines[1].split() == ["learner", "rank", "2", "1", "1", "2", "2"]
    assert [line.split()[-2:] for line in lines if line.startswith("asked for")] == [["7", "2"]]
    assert lines[-2].split() == ["node", "127.0.0.1", "4", "0"] and lines[-1].split() == ["cluster", "4", "0"]


def test_startup_timeout_and_gpu_fractions_are_validated():
    with pytest.raises(ConfigError, match="resources.startup_timeout_s must be > 0"):
        ResourcesConfig(startup_timeout_s=0)
    with pytest.raises(ConfigError, match="resources.gpus_per_learner_rank must be 0, a fraction below 1"):
        ResourcesConfig(gpus_per_learner_rank=1.5)
    assert ResourcesConfig(gpus_per_inference_worker=0.25, gpus_per_learner_rank=2.0).gpus_per_learner_rank == 2.0


@pytest.mark.ray
def test_a_run_asking_for_gpus_this_machine_lacks_is_refused_before_any_actor_starts(ray_cluster, tmp_path):
    import ray

    from webrl.actors import RunActors

    config = load_config(WebRLConfig, "smoke", [f"run.run_dir={tmp_path}", "resources.gpus_per_learner_rank=1"])
    actors = RunActors(config, tmp_path)
    before = len(ray.util.list_named_actors(all_namespaces=True)), ray.available_resources().get("CPU")
    with pytest.raises(ResourceError) as raised:
        actors.start_ray()
    assert "asks for 1 GPUs in all and the cluster has 0" in str(raised.value)
    assert "resources.gpus_per_learner_rank" in str(raised.value)
    assert not actors.env_workers and not actors.inference and not actors.learners
    assert (len(ray.util.list_named_actors(all_namespaces=True)), ray.available_resources().get("CPU")) == before


@pytest.mark.ray
def test_start_up_waits_end_with_an_error_naming_what_they_waited_for(ray_cluster, tmp_path):
    import ray

    from webrl.actors import RunActors
    from webrl.learner import LearnerGroup
    from webrl.learner.config import LearnerConfig, LearnerRun

    @ray.remote(resources={"webrl_test_absent": 1})
    class Unplaceable:
        pass

    handle = Unplaceable.remote()
    with pytest.raises(ResourceError, match=r"timed out after 1 s waiting for an unplaceable actor"):
        wait_for(handle.__ray_ready__.remote(), 1.0, "an unplaceable actor")
    ray.kill(handle)

    # env workers the cluster cannot hold (the check was skipped, e.g. resources held elsewhere)
    config = load_config(WebRLConfig, "smoke", [f"run.run_dir={tmp_path}", "resources.cpus_per_env_worker=64",
                                                "resources.startup_timeout_s=2"])
    actors = RunActors(config, tmp_path)
    actors.start_env_workers()
    with pytest.raises(ResourceError, match=r"timed out after 2 s waiting for actors to start \(not started: an env worker"):
        actors.wait_started()
    for worker in actors.env_workers:
        ray.kill(worker)

    run = LearnerRun(model_path=str(tmp_path / "no-model"), seed=0, temperature=1.0,
                     image_min_pixels=3136, image_max_pixels=12544)
    with pytest.raises(ResourceError, match=r"waiting for the learner's placement group"):
        LearnerGroup(LearnerConfig(), run, num_ranks=1, resources_per_rank={"CPU": 64.0}, startup_timeout_s=2)
    ray.get(ray.remote(num_cpus=4)(lambda: 1).remote(), timeout=60)  # the group was removed: all 4 CPUs free


def test_launched_inference_servers_are_asked_for_and_refused_when_the_cluster_lacks_their_gpus():
    # The 4B preset with 4 SGLang servers the run launches itself (1 GPU each) instead of in-process
    # inference GPUs: 4 learner GPUs + 4 server GPUs = 8 fits one 8-GPU node; 5 servers (9 GPUs) do not.
    server = ["rollout.engine=server", "rollout.server.launch=sglang", "rollout.server.gpus_per_server=1",
              "resources.gpus_per_inference_worker=0", "resources.num_inference_workers=1",
              "inference.max_batch_size=16", "rollout.server.max_restarts=0"]
    config = load_config(WebRLConfig, PRESET_4B[0], PRESET_4B[1] + server + ["rollout.server.num_servers=4"])
    rows = request_rows(config, "train")
    assert ("inference server", 4, config.rollout.server.cpus_per_server, 1.0) in rows
    assert sum(count * gpus for _, count, _, gpus in rows) == 8
    check_resources(rows, EIGHT_GPU_NODE)
    too_many = load_config(WebRLConfig, PRESET_4B[0], PRESET_4B[1] + server + ["rollout.server.num_servers=5"])
    with pytest.raises(ResourceError, match="9 GPUs in all and the cluster has 8") as raised:
        check_resources(request_rows(too_many), EIGHT_GPU_NODE)
    assert "rollout.server.num_servers" in str(raised.value)
    # an evaluation of the policy launches them too; sft starts none, nor an eval of an endpoint
    assert ("inference server", 4, config.rollout.server.cpus_per_server, 1.0) in request_rows(config, "eval")
    assert all(kind != "inference server" for kind, *_ in request_rows(config, "sft"))
    endpoint = load_config(WebRLConfig, PRESET_4B[0], PRESET_4B[1] + server + ["eval.endpoint=http://127.0.0.1:1/v1"])
    assert all(kind != "inference server" for kind, *_ in request_rows(endpoint, "eval"))


def test_a_driver_joining_a_loopback_cluster_registers_on_loopback():
    from webrl.actors import _loopback_node

    assert _loopback_node("127.0.0.1:6379") == {"_node_ip_address": "127.0.0.1"}
    assert _loopback_node("[::1]:6379") == {"_node_ip_address": "::1"}
    for address in ("10.0.0.5:6379", "head-node:6379", "auto", "ray://127.0.0.1:10001", ""):
        assert _loopback_node(address) == {}, address  # Ray's own choice elsewhere
