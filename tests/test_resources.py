"""Resources checked before anything starts (webrl.run.resources): the placement check worked by hand,
the 4B preset's layout, and, on a real local Ray, a run that asks for GPUs this machine lacks
refused before any actor starts, and start-up waits that end with a named error."""
from __future__ import annotations

import pytest

from webrl.config import load_config
from webrl.config import ConfigError
from webrl.run.resources import (ResourceError, check_resources, placement_refusal, request_rows, resource_table,
                             row_bundles, wait_for)
from webrl.run.config import WebRLConfig
from webrl.run.resources import ResourcesConfig, bundle_layout, run_layout

PRESET_4B = ("online_mind2web_qwen3vl_4b", ["tasks.file=/x.json", "model.path=/m",
                                            "reward.base_url=http://127.0.0.1:1/v1"])
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


def test_the_4b_preset_fits_8_gpus_and_its_servers_take_the_rollout_gpus():
    config = load_config(WebRLConfig, *PRESET_4B)
    assert config.tasks.eval_tasks == 0
    layout = run_layout(config)
    assert not layout.eval_worker
    actors, kinds = row_bundles(request_rows(config, "train"))
    # 4 learner ranks x (4 CPU, 1 GPU) + 1 inference worker x 1 CPU + 8 env workers x 1 CPU
    # + 4 launched SGLang servers x (4 CPU, 1 GPU): 16 + 1 + 8 + 16 = 41 CPUs, 4 + 4 = 8 GPUs
    assert sum(b.get("GPU", 0) for b in actors) == 8 and sum(b["CPU"] for b in actors) == 41
    assert kinds.count("inference server") == 4
    # what a Tune trial reserves: the same bundles in the same order, the servers' last
    assert [{k: v for k, v in b.items() if v} for b in actors] == layout.bundles[1:]
    assert layout.servers == len(layout.bundles) - 4 and layout.bundles[layout.servers] == {"CPU": 4.0, "GPU": 1.0}
    assert placement_refusal(actors, EIGHT_GPU_NODE) is None
    print(check_resources(request_rows(config), EIGHT_GPU_NODE))
    # evaluation tasks add a greedy worker that samples on the same servers: one more CPU, no GPU
    with_eval = load_config(WebRLConfig, PRESET_4B[0], PRESET_4B[1] + ["tasks.eval_tasks=8"])
    check_resources(request_rows(with_eval), EIGHT_GPU_NODE)
    assert sum(count * gpus for _, count, _, gpus in request_rows(with_eval)) == 8
    # a fifth server is a ninth GPU: refused, naming the settings
    too_many = load_config(WebRLConfig, PRESET_4B[0], PRESET_4B[1] + ["rollout.server.num_servers=5"])
    with pytest.raises(ResourceError) as raised:
        check_resources(request_rows(too_many), EIGHT_GPU_NODE)
    message = str(raised.value)
    assert "asks for 9 GPUs in all and the cluster has 8" in message
    for setting in ("resources.learner_ranks", "rollout.server.num_servers", "rollout.server.gpus_per_server"):
        assert setting in message
    # without launched servers the layout has none
    assert run_layout(load_config(WebRLConfig, "smoke", [])).servers == -1


def test_sft_and_eval_ask_only_for_what_they_start():
    config = load_config(WebRLConfig, PRESET_4B[0], PRESET_4B[1] + ["tasks.eval_tasks=8", "eval.samples_per_task=2"])
    counts = {mode: {kind: (n, gpus) for kind, n, _, gpus in request_rows(config, mode)} for mode in
              ("train", "sft", "eval")}
    # the preset's inference workers hold no GPU (its launched servers do)
    assert counts["sft"] == {"learner rank": (4, 1.0), "rollout inference worker": (0, 0.0),
                             "evaluation inference worker": (0, 0.0), "env worker": (0, 0.0)}
    assert counts["eval"] == {"learner rank": (0, 1.0), "rollout inference worker": (1, 0.0),
                              "evaluation inference worker": (1, 0.0), "env worker": (8, 0.0),
                              "inference server": (4, 1.0)}
    assert counts["train"]["rollout inference worker"] == (1, 0.0)
    assert counts["train"]["inference server"] == (4, 1.0)
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
    # launched servers come last; a server (or any actor) that reserves nothing gets a sliver of a
    # CPU, since Ray refuses a bundle of zeros
    from webrl.run.resources import MIN_BUNDLE_CPU

    zero_env = ResourcesConfig(num_env_workers=1, cpus_per_env_worker=0.0)
    layout = bundle_layout(zero_env, eval_worker=False, servers=(2, 0.0, 0.0))
    assert layout.servers == 4 and layout.bundles[3:] == [{"CPU": MIN_BUNDLE_CPU}] * 3
    assert all(any(v > 0 for v in b.values()) for b in layout.bundles)
    assert bundle_layout(res, servers=(1, 4.0, 1.0)).bundles[-1] == {"CPU": 4.0, "GPU": 1.0}


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

    from webrl.run.actors import RunActors

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

    from webrl.run.actors import RunActors
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


def test_launched_inference_servers_are_asked_for_in_eval_and_not_in_sft():
    # the 4B preset launches 4 SGLang servers (1 GPU each): an evaluation of the policy launches
    # them too; sft starts none, nor an eval of an endpoint
    config = load_config(WebRLConfig, *PRESET_4B)
    assert ("inference server", 4, config.rollout.server.cpus_per_server, 1.0) in request_rows(config, "eval")
    assert all(kind != "inference server" for kind, *_ in request_rows(config, "sft"))
    endpoint = load_config(WebRLConfig, PRESET_4B[0], PRESET_4B[1] + ["eval.endpoint=http://127.0.0.1:1/v1"])
    assert all(kind != "inference server" for kind, *_ in request_rows(endpoint, "eval"))


def test_a_driver_joining_a_loopback_cluster_registers_on_loopback():
    from webrl.run.actors import _loopback_node

    assert _loopback_node("127.0.0.1:6379") == {"_node_ip_address": "127.0.0.1"}
    assert _loopback_node("[::1]:6379") == {"_node_ip_address": "::1"}
    for address in ("10.0.0.5:6379", "head-node:6379", "auto", "ray://127.0.0.1:10001", ""):
        assert _loopback_node(address) == {}, address  # Ray's own choice elsewhere


def test_ray_temp_dir_stays_in_the_run_folder_only_while_its_sockets_fit(run_dir):
    import tempfile
    from pathlib import Path

    from webrl.run.actors import RAY_TEMP_DIR_MAX, _ray_temp_dir

    # the longest socket path Ray builds below its temp dir, with a 7-digit pid
    longest = "/session_2026-12-02_02-12-08_301205_4194304/sockets/plasma_store"
    base = Path(tempfile.mkdtemp(prefix="t", dir=run_dir))  # the suite's short run folder
    short = base / "r"
    if len(str(short / "ray")) > RAY_TEMP_DIR_MAX - 1:
        pytest.skip(f"WEBRL_TEST_DIR={run_dir} is too long to hold a Ray temp dir")
    assert _ray_temp_dir(short) == str(short / "ray") and (short / "ray").is_dir()
    assert len(_ray_temp_dir(short) + longest) <= 107
    # a run folder one character too long for the sockets: Ray goes to a fresh short temp dir
    deep = base / ("d" * (RAY_TEMP_DIR_MAX - len(str(base)) - len("/ray")))
    assert len(str(deep / "ray")) == RAY_TEMP_DIR_MAX + 1
    chosen = _ray_temp_dir(deep)
    assert not chosen.startswith(str(deep)) and len(chosen + longest) <= 107
    assert not (deep / "ray").exists()
    Path(chosen).rmdir()
