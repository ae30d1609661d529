"""The cross-section rules table (webrl.run.rules), presets as overlays (a later layer's switch
drops what an earlier layer set in the section it switches off) and `webrl config --explain`."""
import pytest

from webrl.cli import main
from webrl.config import ConfigError, config_keys, load_config
from webrl.run.config import WebRLConfig
from webrl.run.rules import RULES, check_rules, rules_for

SERVER = ["rollout.engine=server", "rollout.server.urls=[http://127.0.0.1:9]"]
LAUNCHED = ["rollout.engine=server", "rollout.server.launch=webrl", "rollout.server.max_concurrency=4"]

# every rule, by its check's name: overrides that break it (and only it first) -> its refusal
BROKEN = {
    "_live_web_file_needs_a_judge": (["tasks.source=file", "tasks.file=t.json", "reward.kind=programmatic"],
                                     r"reward.kind=programmatic cannot score a live-web tasks file"),
    "_deterministic_needs_sync": (["run.deterministic=true", "rollout.mode=async"],
                                  r"run.deterministic=true needs rollout.mode=sync"),
    "_deterministic_batches_one": (["run.deterministic=true", "inference.max_batch_size=4"],
                                   r"runs one request per forward in process, but inference.max_batch_size=4"),
    "_rl_objective": (["learner.objective=sft"], r"learner.objective must be one of \('grpo', 'ppo'\)"),
    "_sections_of_the_objective": (["learner.ppo.lam=0.5"], r"learner.ppo=.* only objective=ppo reads it"),
    "_kl_needs_a_reference": (["learner.loss.kl_mode=reward", "learner.loss.kl_coef=0.1"],
                              r"with learner.reference=none there is no reference"),
    "_balanced_needs_enabled": (["rollout.balanced.max_group=8"], r"rollout.balanced.enabled is false"),
    "_dynamic_sampling_needs_filtering": (["learner.advantage.filter_zero_variance=false",
                                           "rollout.dynamic_sampling.enabled=true"],
                                          r"filter_zero_variance=false trains on every group, so there is no filtered"),
    "_dynamic_sampling_needs_enabled": (["rollout.dynamic_sampling.enabled=false", "rollout.dynamic_sampling.max_rounds=3"],
                                        r"rollout.dynamic_sampling.enabled is false"),
    "_direct_fraction_needs_reasoning": (["trainer.stages=[sft,rl]", "sft.direct_fraction=0.5"],
                                         r"sft.direct_fraction=0.5 has no effect"),
    "_judge_needs_a_model": (["reward.kind=judge", "reward.base_url=http://127.0.0.1:9/v1"],
                             r"reward.kind=judge scores with a judge, which needs reward.model: .*"
                             r"GET http://127.0.0.1:9/v1/models lists them"),
    # issue 54: settings the run would ignore are refused, each naming the key and what to set instead
    "_programmatic_has_no_judge": (["reward.base_url=http://127.0.0.1:9/v1", "reward.cache_dir=c"],
                                   r"reward.base_url='http://127.0.0.1:9/v1' has no effect: reward.kind=programmatic"
                                   r".* leave reward.base_url, reward.cache_dir unset"),
    "_sft_needs_its_stage": (["sft.action_weight=2.0", "sft.lr=0.01"],
                             r"sft.lr=0.01 has no effect: trainer.stages=\['rl'\] runs no sft stage.*"
                             r"leave sft.lr, sft.action_weight unset"),
    "_evaluation_needs_tasks": (["tasks.eval_tasks=0", "eval.samples_per_task=2"],
                                r"eval.samples_per_task=2 has no effect: tasks.eval_tasks=0 runs no evaluation"),
    "_dyna_off_means_defaults": (["dyna.horizon=3"], r"dyna=.* has no effect: dyna.every is 0"),
    "_dyna_needs_grpo": (["dyna.every=2", "learner.objective=ppo"], r"dyna.every \(Dyna-GRPO\) needs learner.objective=grpo"),
    "_dyna_needs_sync": (["dyna.every=2", "rollout.mode=async"], r"dyna.every \(Dyna-GRPO\) needs rollout.mode=sync"),
    "_dyna_needs_tokens": (["dyna.every=2", "policy.wrappers=[cascade]", "policy.cascade.heads_dir=HEADS",
                            "policy.cascade.head_turns=exclude"], r"head_turns=exclude: a refined action"),
    "_server_has_no_sparse_prefill": ([*SERVER, "generator.sparse_prefill=auto"], r"generator.sparse_prefill runs in"),
    "_server_workers_hold_no_gpu": ([*SERVER, "resources.gpus_per_inference_worker=1"],
                                    r"resources.gpus_per_inference_worker must be 0 with rollout.engine=server"),
    "_server_concurrency_fits_a_batch": ([*SERVER, "rollout.server.max_concurrency=32"],
                                         r"max_concurrency=32 exceeds inference.max_batch_size=16"),
    "_server_keys_are_set": ([*SERVER, "rollout.server.admin_api_key_env=WEBRL_NO_SUCH_KEY"],
                             r"admin_api_key_env='WEBRL_NO_SUCH_KEY' names an environment variable that is not set"),
    "_server_has_one_worker": ([*SERVER, "resources.num_inference_workers=2"], r"num_inference_workers must be 1"),
    "_weight_sync_reaches_the_engine": (["learner.weight_sync.mode=disk"], r"mode='disk' cannot reach rollout.engine"),
    "_collective_survives_no_restart": ([*LAUNCHED, "learner.weight_sync.mode=collective"],
                                        r"collective with rollout.server.launch cannot survive a server restart"),
}


def test_every_rule_has_a_case_and_names_live_keys():
    assert {r.check.__name__ for r in RULES} == set(BROKEN)
    keys = config_keys(WebRLConfig)
    for r in RULES:
        for k in r.keys:
            assert k in keys or any(key.startswith(k + ".") for key in keys), (r.check.__name__, k)
        assert r.why and not r.why.endswith(".")


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_each_rule_refuses_its_broken_config_and_is_the_rule_that_breaks(name, monkeypatch, tmp_path):
    (tmp_path / "heads_config.json").write_text("{}")  # a heads folder as `webrl heads-train` writes
    overrides, message = BROKEN[name]
    overrides = [o.replace("HEADS", str(tmp_path)) for o in overrides]
    with pytest.raises(ConfigError, match=message):
        load_config(WebRLConfig, None, overrides)
    import webrl.run.config as run_config

    monkeypatch.setattr(run_config, "check_rules", lambda config: None)  # build it, then ask the table
    config = load_config(WebRLConfig, None, overrides)
    broken = [r.check.__name__ for r in RULES if r.check(config)]
    assert broken[:1] == [name]


def test_the_default_and_every_preset_keep_every_rule():
    check_rules(load_config(WebRLConfig, None, []))
    for preset, extra in (("smoke", []), ("default", []), ("level0", []), ("vllm", []), ("tiny_webagent_sft", []), ("tiny_webagent_pointer_sft", []),
                          ("online_mind2web_qwen3vl_4b", ["model.path=x", "reward.base_url=http://127.0.0.1:9/v1",
                                                          "tasks.file=t.json"])):
        check_rules(load_config(WebRLConfig, preset, extra))


def test_rules_for_a_key_a_section_and_a_key_below_a_section():
    names = lambda key: {r.check.__name__ for r in rules_for(key)}  # noqa: E731
    assert "_dyna_needs_grpo" in names("learner.objective") and "_rl_objective" in names("learner.objective")
    assert names("dyna.horizon") == {"_dyna_off_means_defaults"}  # under the section `dyna`
    assert "_server_keys_are_set" in names("rollout.server")  # a section above the rule's keys
    assert names("run.seed") == set()


def test_switching_the_objective_on_a_preset_drops_the_sections_it_turns_off(capsys):
    smoke = load_config(WebRLConfig, "smoke", [])
    assert smoke.learner.advantage.filter_zero_variance is False  # the preset's GRPO setting
    ppo = load_config(WebRLConfig, "smoke", ["learner.objective=ppo"])
    err = capsys.readouterr().err
    assert ppo.learner.objective == "ppo" and ppo.learner.advantage == type(smoke.learner.advantage)()
    assert ("learner.objective (from the command line) switches off learner.advantage: dropped what preset "
            "smoke.yaml set there (learner.advantage.filter_zero_variance)") in err
    assert ppo.trainer.iterations == smoke.trainer.iterations  # the rest of the preset stays


def test_switching_the_4b_preset_to_the_in_process_engine_takes_one_key(capsys):
    required = ["model.path=x", "reward.base_url=http://127.0.0.1:9/v1", "tasks.file=t.json"]
    served = load_config(WebRLConfig, "online_mind2web_qwen3vl_4b", required)
    local = load_config(WebRLConfig, "online_mind2web_qwen3vl_4b", [*required, "rollout.engine=transformers"])
    assert served.rollout.server.launch == "vllm"
    assert local.rollout.engine == "transformers" and local.rollout.server == type(served.rollout.server)()
    assert "rollout.engine (from the command line) switches off rollout.server" in capsys.readouterr().err
    assert local.learner == served.learner  # nothing outside the switched-off section moved


def test_the_4b_preset_broadcasts_to_vllm_and_sglang_is_one_key_away():
    from webrl.run.config import weight_sync

    required = ["model.path=x", "reward.base_url=http://127.0.0.1:9/v1", "tasks.file=t.json"]
    vllm = load_config(WebRLConfig, "online_mind2web_qwen3vl_4b", required)
    assert vllm.rollout.server.speaks == "vllm" and weight_sync(vllm) == ("collective", "nccl")
    sglang = load_config(WebRLConfig, "online_mind2web_qwen3vl_4b", [
        *required, "rollout.server.launch=sglang", "rollout.server.launch_args=[--mem-fraction-static,0.8]"])
    assert sglang.rollout.server.speaks == "sglang" and weight_sync(sglang) == ("collective", "nccl")
    assert sglang.learner == vllm.learner


def test_a_layer_that_contradicts_itself_is_still_refused(tmp_path):
    preset = tmp_path / "mine.yaml"
    preset.write_text("learner:\n  objective: ppo\n  advantage:\n    estimator: rloo\n")
    with pytest.raises(ConfigError, match=r"learner.advantage=.* only objective=grpo reads it"):
        load_config(WebRLConfig, str(preset), [])
    # and a switch in an earlier layer does not drop a later layer's explicit setting
    preset.write_text("learner:\n  objective: ppo\n")
    with pytest.raises(ConfigError, match=r"learner.advantage=.* only objective=grpo reads it"):
        load_config(WebRLConfig, str(preset), ["learner.advantage.estimator=rloo"])


def test_explain_prints_a_section_its_rules_a_fixed_and_an_old_key(capsys):
    assert main(["config", "--explain", "learner.advantage"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("learner.advantage.estimator (str, default 'grpo')")
    assert "learner.advantage.filter_zero_variance (bool, default True)" in out
    assert "rules (2, webrl.run.rules):" in out and "GRPO learner.advantage and learner.step" in out
    assert "dynamic sampling refills groups the GRPO filter drops" in out  # filter_zero_variance's rule
    assert main(["config", "--explain", "rollout.server.port"]) == 0
    assert "rollout.server.port: not a run setting: fixed at 0 in runs" in capsys.readouterr().out
    assert main(["config", "--explain", "run.wandb_project"]) == 0
    assert "run.wandb_project: gone: renamed: run.trackers=[wandb:PROJECT]" in capsys.readouterr().out
    assert main(["config", "--explain", "learner.objectiv"]) == 2
    assert "unknown config key 'learner.objectiv' for webrl config; closest: learner.objective" in capsys.readouterr().err


def test_deterministic_runs_one_request_per_forward_in_process_only():
    """run.deterministic derives inference.max_batch_size=1 for the in-process engine; the server
    engine keeps its batches (the server's batch-invariant mode is what makes them safe) and a
    launched SGLang server is told so."""
    from webrl.engines.launcher import server_flags

    assert load_config(WebRLConfig, None, ["run.deterministic=true"]).inference.max_batch_size == 1
    assert load_config(WebRLConfig, None, []).inference.max_batch_size == 16
    assert load_config(WebRLConfig, None, ["run.deterministic=true", *SERVER]).inference.max_batch_size == 16
    assert server_flags("sglang", deterministic=True)[-1] == "--enable-deterministic-inference"
    assert "--enable-deterministic-inference" not in server_flags("sglang")
    assert server_flags("webrl", deterministic=True) == server_flags("webrl")


def test_a_dropped_share_without_evaluation_tasks_is_refused():
    with pytest.raises(ConfigError, match=r"eval.max_dropped_share=0.5 has no effect: tasks.eval_tasks=0"):
        load_config(WebRLConfig, None, ["tasks.eval_tasks=0", "eval.max_dropped_share=0.5"])
    assert load_config(WebRLConfig, None, ["eval.max_dropped_share=0.5"]).eval.max_dropped_share == 0.5
