"""Config layering and the errors a user sees for typos, wrong types and bad presets."""
import pytest

from webrl.config import ConfigError, ModelConfig, describe, field_docs, list_presets, load_config
from webrl.run.config import WebRLConfig


def test_defaults_preset_and_overrides_layer_in_order(tmp_path):
    preset = tmp_path / "p.yaml"
    preset.write_text("run:\n  seed: 5\n  name: from-preset\n")
    cfg = load_config(WebRLConfig, preset, ["run.seed=9"])
    assert isinstance(cfg, WebRLConfig) and isinstance(cfg.model, ModelConfig)
    assert (cfg.run.name, cfg.run.seed) == ("from-preset", 9)  # override beats preset
    assert cfg.model.family == "qwen2.5-vl"  # untouched default


# Presets that mark keys required (`???`): the values a user must give.
REQUIRED = {"online_mind2web_qwen3vl_4b": ["tasks.file=/x.json", "model.path=/m",
                                          "reward.base_url=http://127.0.0.1:1/v1"]}


def test_shipped_presets_all_load():
    assert "default" in list_presets() and "smoke" in list_presets()
    for name in list_presets():
        assert isinstance(load_config(WebRLConfig, name, REQUIRED.get(name, [])), WebRLConfig)


def test_recipe_preset_names_every_missing_required_key():
    with pytest.raises(ConfigError) as e:
        load_config(WebRLConfig, "online_mind2web_qwen3vl_4b", ["model.path=/m"])
    assert "tasks.file" in str(e.value) and "reward.base_url" in str(e.value)
    assert "model.path" not in str(e.value).split("not set")[-1]


def test_unknown_key_names_it_and_the_closest_valid_keys():
    with pytest.raises(ConfigError) as e:
        load_config(WebRLConfig, None, ["run.sed=3"])
    msg = str(e.value)
    assert "'run.sed'" in msg and "run.seed" in msg and "command line" in msg


def test_unknown_section_is_reported():
    with pytest.raises(ConfigError, match="unknown config key 'modle"):
        load_config(WebRLConfig, None, ["modle.family=qwen3-vl"])


def test_wrong_type_names_key_and_expected_type():
    with pytest.raises(ConfigError) as e:
        load_config(WebRLConfig, None, ["run.seed=abc"])
    assert "'run.seed'" in str(e.value) and "expects int" in str(e.value)


def test_bad_preset_lists_available_ones():
    with pytest.raises(ConfigError) as e:
        load_config(WebRLConfig, "smok")
    assert "unknown preset 'smok'" in str(e.value) and "smoke" in str(e.value)


def test_validation_names_field_and_allowed_values():
    with pytest.raises(ConfigError, match=r"model.family must be one of .*qwen3-vl.*'llama'"):
        load_config(WebRLConfig, None, ["model.family=llama"])


def test_override_without_equals_is_rejected():
    with pytest.raises(ConfigError, match="key=value"):
        load_config(WebRLConfig, None, ["run.seed"])


def test_every_field_is_documented():
    rows = describe(WebRLConfig)
    assert rows and all(doc for _, _, _, doc in rows), [k for k, _, _, d in rows if not d]
    assert field_docs(ModelConfig)["family"].startswith("Model family")


@pytest.mark.parametrize("override, message", [
    ("sft.curriculum=[[0]]", r"sft.curriculum entries are \[max_level, epochs\].*\[0\]"),
    ("sft.curriculum=[[0,0]]", r"epochs >= 1, got \[0, 0\]"),
    ("sft.batch_size=0", "sft.batch_size"),
    ("model.tiny_corpus=wiki", r"model.tiny_corpus must be one of \('default', 'sandbox'\), got 'wiki'"),
    ("model.tiny_vocab=100", "model.tiny_vocab >= 300"),
])
def test_sft_recipe_keys_are_validated(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(WebRLConfig, None, [override])


def test_every_entry_point_resolves_the_one_embedded_default(capsys):
    """The dataclass defaults are the embedded default: the `default` preset adds nothing, and
    `webrl config` (as every config-driven subcommand), the example script and a Tune trial
    without a preset resolve exactly them."""
    import importlib.util
    from pathlib import Path

    from webrl.cli import main
    from webrl.config import to_yaml
    from webrl.run.tune import trial_config

    embedded = to_yaml(WebRLConfig())
    assert to_yaml(load_config(WebRLConfig, None)) == embedded
    assert to_yaml(load_config(WebRLConfig, "default")) == embedded
    assert main(["config"]) == 0 and capsys.readouterr().out == embedded
    assert to_yaml(trial_config({})) == embedded
    example = Path(__file__).resolve().parents[1] / "examples" / "train_online_mind2web.py"
    spec = importlib.util.spec_from_file_location("train_online_mind2web", example)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    args = module.parse_args([])
    assert to_yaml(load_config(WebRLConfig, args.config, args.overrides)) == embedded
    # what the embedded default is: GRPO from the shipped pointer checkpoint, in its prompt format
    cfg = WebRLConfig()
    assert (cfg.model.path, cfg.trainer.stages, cfg.learner.objective) == ("webrl:tiny-webagent-pointer", ["rl"], "grpo")
    assert (cfg.rollout.group_size, cfg.tasks.tasks_per_iteration, cfg.learner.optim.lr) == (8, 8, 5e-4)
    assert (cfg.tasks.kinds, cfg.tasks.train_levels, cfg.tasks.eval_levels) == (["tab_button"], [1], [1])
    assert (cfg.tasks.eval_tasks, cfg.eval.samples_per_task) == (96, 4)
    assert (cfg.generator.prompt.action_format, cfg.tasks.eval_split, cfg.rollout.max_turns) == ("pointer", "train", 4)


def test_the_default_prompt_is_the_shipped_checkpoints_trained_prompt():
    from webrl.models.shipped import resolve_shipped
    from webrl.policy.trained_prompt import check_prompt_matches

    cfg = WebRLConfig()
    check_prompt_matches(resolve_shipped(cfg.model.path), cfg.generator.prompt)  # raises on any difference


@pytest.mark.parametrize("wrappers", [["cascade"], ["loci"], ["skills"], ["loci", "cascade"],
                                      ["skills", "loci", "cascade"]])
@pytest.mark.parametrize("dyna", [False, True])
def test_the_gpu_recipe_resolves_with_every_wrapper_stack_and_dyna(tmp_path, wrappers, dyna):
    """The 4B preset samples on SGLang servers (rollout.engine=server); the wrappers and Dyna-GRPO run
    over them as in process (webrl/policy/backend.py), so nothing here is refused."""
    (tmp_path / "heads_config.json").write_text("{}")  # a heads folder as `webrl heads-train` writes
    (tmp_path / "skill.json").write_text("{}")  # a skill library with one skill file
    sections = {"cascade": f"policy.cascade.heads_dir={tmp_path}", "skills": f"policy.skills.library_dir={tmp_path}"}
    overrides = [*REQUIRED["online_mind2web_qwen3vl_4b"], f"policy.wrappers=[{','.join(wrappers)}]",
                 *[sections[w] for w in wrappers if w in sections], *(["dyna.every=2"] if dyna else [])]
    cfg = load_config(WebRLConfig, "online_mind2web_qwen3vl_4b", overrides)
    assert cfg.rollout.engine == "server" and cfg.policy.wrappers == wrappers and cfg.dyna.enabled == dyna


def test_every_documented_default_is_the_resolved_one():
    """`webrl config --keys` (describe) against the config a run without overrides resolves, key by key."""
    import dataclasses

    from webrl.config import describe, load_config
    from webrl.run.config import WebRLConfig

    resolved = load_config(WebRLConfig)

    def value(key):
        node = resolved
        for part in key.split("."):
            node = getattr(node, part)
        return node

    rows = describe(WebRLConfig)
    assert len(rows) > 100
    wrong = [(key, default, value(key)) for key, _, default, _ in rows
             if not dataclasses.is_dataclass(default) and default != value(key)]
    assert wrong == []
    assert dict((k, d) for k, _, d, _ in rows)["reward.kind"] == resolved.reward.kind


def test_every_moved_key_fails_naming_its_replacement():
    from webrl.config import MOVED_KEYS, ConfigError, load_config
    from webrl.run.config import WebRLConfig

    assert len(MOVED_KEYS) >= 10
    for old, replacement in MOVED_KEYS.items():
        key = old.replace(".*", ".x") if old.endswith(".*") else old
        with pytest.raises(ConfigError) as err:
            load_config(WebRLConfig, None, [f"{key}=1"])
        assert replacement in str(err.value), (old, str(err.value))


def test_a_live_web_tasks_file_runs_under_the_live_web_policy_and_a_judge_unless_told_otherwise():
    from webrl.config import ConfigError, load_config
    from webrl.run.config import WebRLConfig

    sandbox = load_config(WebRLConfig)
    assert (sandbox.env.subresource_policy, sandbox.reward.kind) == ("allowlist", "programmatic")
    file = ["tasks.source=file", "tasks.file=/tmp/tasks.json", "reward.model=judge-model"]
    live = load_config(WebRLConfig, None, file)
    assert (live.env.subresource_policy, live.reward.kind) == ("public", "recipe")
    told = load_config(WebRLConfig, None, [*file, "env.subresource_policy=allowlist", "reward.kind=judge"])
    assert (told.env.subresource_policy, told.reward.kind) == ("allowlist", "judge")
    synth = load_config(WebRLConfig, None, [*file[:2], "tasks.file_format=synth"])
    assert synth.env.subresource_policy == "allowlist"
    with pytest.raises(ConfigError, match="cannot score a live-web tasks file"):
        load_config(WebRLConfig, None, [*file, "reward.kind=programmatic"])


def test_a_fixed_key_is_refused_whatever_its_value_type():
    """A dict value's leaves sit below the key (issue 54: it slipped through and was left out of
    the saved config.yaml)."""
    from webrl.config import ConfigError, load_config
    from webrl.run.config import WebRLConfig

    for value in ("{a.test: 127.0.0.1}", "{}"):
        with pytest.raises(ConfigError, match=r"config key 'env.network.resolver_overrides' \(from the command line\) "
                                              r"is not a run setting"):
            load_config(WebRLConfig, None, [f"env.network.resolver_overrides={value}"])
    # a mapping where a run key takes a list is named too (OmegaConf's own error names no key)
    with pytest.raises(ConfigError, match=r"config key 'env.network.local_sites' \(from the command line\) "
                                          r"expects tuple, got a mapping"):
        load_config(WebRLConfig, None, ["env.network.local_sites={a: b}"])


def test_settings_the_run_would_ignore_are_refused_and_webrl_sft_runs_its_stage(capsys, monkeypatch):
    import webrl.cli
    from webrl.cli import main
    from webrl.config import ConfigError, load_config
    from webrl.run.config import WebRLConfig

    with pytest.raises(ConfigError, match=r"trainer.eval_every=2 has no effect: tasks.eval_tasks=0"):
        load_config(WebRLConfig, None, ["tasks.eval_tasks=0", "trainer.eval_every=2"])
    for key in ("reward.judge=webjudge", "reward.max_tokens=64", "reward.model=m"):
        with pytest.raises(ConfigError, match=f"{key.split('=')[0]}=.* has no effect: reward.kind=programmatic"):
            load_config(WebRLConfig, None, [key])
    assert main(["train", "sft.action_weight=2.0"]) == 2
    assert "sft.action_weight=2.0 has no effect: trainer.stages=['rl'] runs no sft stage" in capsys.readouterr().err
    # `webrl sft` runs only the sft stage (trainer.stages=[sft]): its sft keys are used, not refused
    seen = []
    monkeypatch.setattr(webrl.cli, "sft_main", seen.append)
    assert main(["sft", "sft.lr=0.01", "sft.action_weight=2.0"]) == 0
    assert (seen[0].trainer.stages, seen[0].sft.lr, seen[0].sft.action_weight) == (["sft"], 0.01, 2.0)


def test_the_defaults_task_kind_and_sampled_evaluation_go_with_the_default_tasks():
    """tasks.kinds=[tab_button] is the default's kind on its own site and levels: a layer that
    sets the tasks' source, sites or levels (and not kinds) gets every kind instead of a refusal
    (tab_button is no kind of shop); the sampled evaluation is off with an endpoint (refused
    there) and on other task sources, unless set."""
    def load(*overrides, preset=None):
        return load_config(WebRLConfig, preset, list(overrides))

    assert load().tasks.kinds == ["tab_button"]
    assert load("tasks.sites=[shop]").tasks.kinds == []
    assert load("tasks.eval_levels=[0]").tasks.kinds == []
    assert load("tasks.source=miniwob").tasks.kinds == []
    assert load("tasks.train_levels=[0,1]", "tasks.eval_levels=[0,1]", "tasks.kinds=[tab_button]").tasks.kinds == ["tab_button"]
    assert load(preset="smoke").tasks.kinds == [] and load(preset="smoke").tasks.train_levels == [0]
    with pytest.raises(ConfigError, match="tasks.kinds: none of"):  # set, it is checked
        load("tasks.sites=[shop]", "tasks.kinds=[tab_button]")
    assert load("eval.endpoint=http://127.0.0.1:9/v1").eval.samples_per_task == 0
    assert load("tasks.source=miniwob").eval.samples_per_task == 0
    assert load("tasks.eval_tasks=0").eval.samples_per_task == 0  # nothing to sample: not a refusal
    assert load("tasks.source=miniwob", "eval.samples_per_task=2").eval.samples_per_task == 2
    with pytest.raises(ConfigError, match="samples_per_task needs the checkpoint's own sampler"):
        load("eval.endpoint=http://127.0.0.1:9/v1", "eval.samples_per_task=4")
