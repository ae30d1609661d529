"""The run config's `env` section (`EnvWorkerConfig`): flat keys, each landing in the slots'
`WebEnvConfig`, and every key it had before the flattening failing with its replacement."""
from __future__ import annotations

import dataclasses

import pytest

from webrl.config import MOVED_KEYS, ConfigError, config_keys, load_config
from webrl.envs import EnvWorkerConfig, WebEnvConfig
from webrl.run.config import WebRLConfig

WORKER_ONLY = ("num_slots", "threads")


def test_the_env_section_has_at_most_twenty_keys_and_no_env_env():
    keys = [k for k in config_keys(WebRLConfig) if k.startswith("env.")]
    assert len(keys) <= 20, keys
    assert not [k for k in keys if k.startswith("env.env.")]


def test_defaults_are_the_web_env_defaults():
    assert EnvWorkerConfig().web_env_config() == WebEnvConfig()


def _changed(value):
    """A valid non-default value for each kind of flat setting."""
    if isinstance(value, bool):
        return not value
    return value * 2 if isinstance(value, float) else value + 3


def test_every_flat_setting_reaches_the_web_env_config():
    """Set each field to something else (one at a time) and find it in WebEnvConfig: a field added
    to EnvWorkerConfig but not passed on fails here."""
    strings = {"executable_path": "/opt/chromium", "viewport": "small", "connect_url": "ws://127.0.0.1:9/x",
               "connect_api_key_env": "MY_BROWSER_KEY",
               "dialog_policy": "dismiss", "subresource_policy": "any", "discovery": "selectors",
               "skills_dir": "skills/", "tools": "task"}
    needs = {"connect_api_key_env": {"connect_url": strings["connect_url"]}}  # acts only with a remote browser
    for field in dataclasses.fields(EnvWorkerConfig):
        if field.name in WORKER_ONLY or field.name in ("network", "recording"):
            continue
        extra = needs.get(field.name, {})
        base = dataclasses.asdict(EnvWorkerConfig(**extra).web_env_config() if extra else WebEnvConfig())
        value = strings[field.name] if field.name in strings else _changed(getattr(EnvWorkerConfig(), field.name))
        config = EnvWorkerConfig(**extra, **{field.name: value})
        built = dataclasses.asdict(config.web_env_config())
        differences = [(section, key) for section, values in built.items() if isinstance(values, dict)
                       for key in values if values[key] != base[section][key]]
        differences += [(key,) for key, v in built.items() if not isinstance(v, dict) and v != base[key]]
        assert len(differences) == 1 and differences[0][-1] == field.name, (field.name, differences)
    config = EnvWorkerConfig(subresource_policy="public", network={"public_stand_ins": ["127.0.0.1/32"]},
                             recording={"mode": "record", "dir": "/tmp/hars"})
    built = config.web_env_config()
    assert built.safety.network.public_stand_ins == ("127.0.0.1/32",)
    assert (built.recording.mode, built.recording.dir) == ("record", "/tmp/hars")
    assert built.safety.network is not config.network  # each slot config is its own copy


def test_a_bad_flat_setting_fails_at_construction():
    with pytest.raises(ValueError, match="SafetyConfig.dialog_policy must be one of"):
        EnvWorkerConfig(dialog_policy="ignore")
    with pytest.raises(ValueError, match="threads .* must be an integer in 0..num_slots"):
        EnvWorkerConfig(num_slots=2, threads=3)


@pytest.mark.parametrize("override, new_key", [
    ("env.env.browser.headless=false", "env.headless"),
    ("env.env.browser.viewport=small", "env.viewport"),
    ("env.env.safety.step_timeout_s=40", "env.step_timeout_s"),
    ("env.env.safety.network.public_stand_ins=[127.0.0.1/32]", "env.network.public_stand_ins"),
    ("env.env.recording.mode=record", "env.recording.mode"),
    ("env.env.skills_dir=skills/", "env.skills_dir"),
    ("env.env.browser.popup_wait_s=2.0", "webrl.envs.readiness.POPUP_WAIT_S"),
    ("env.env.safety.max_tabs=3", "webrl.envs.safety.MAX_TABS"),
    ("env.png_compress_level=6", "webrl.envs.config.PNG_COMPRESS_LEVEL"),
    ("env.include_raw_screenshot=true", "rollout.screenshot=raw"),
    ("env.env.observation.not_a_key=1", "env.<name>"),  # the section's prefix entry
])
def test_old_env_keys_fail_naming_their_replacement(override, new_key):
    with pytest.raises(ConfigError) as raised:
        load_config(WebRLConfig, None, [override])
    message = str(raised.value)
    assert override.split("=")[0] in message and new_key in message, message


def test_renamed_targets_are_live_keys():
    """Every "renamed to X" entry names a key the schema has (a later rename fails here)."""
    keys = set(config_keys(WebRLConfig))
    targets = [text.removeprefix("renamed to ") for old, text in MOVED_KEYS.items()
               if old.startswith("env.") and text.startswith("renamed to ")]
    assert targets and not [t for t in targets if t not in keys]


def test_new_keys_load():
    config = load_config(WebRLConfig, None, ["env.headless=false", "env.viewport=small", "env.discovery=selectors",
                                             "env.subresource_policy=public",
                                             "env.network.public_stand_ins=[127.0.0.1/32]"])
    built = config.env.web_env_config()
    assert (built.browser.headless, built.browser.viewport, built.observation.discovery) == (False, "small",
                                                                                             "selectors")
    assert built.safety.network.public_stand_ins == ("127.0.0.1/32",)


def test_a_browser_key_variable_without_a_remote_browser_is_refused():
    from webrl.envs.config import EnvWorkerConfig

    with pytest.raises(ValueError, match=r"env.connect_api_key_env='MY_KEY'\) only acts with env.connect_url"):
        EnvWorkerConfig(connect_api_key_env="MY_KEY")
    assert EnvWorkerConfig(connect_api_key_env="MY_KEY", connect_url="ws://127.0.0.1:3000/x").connect_api_key_env == "MY_KEY"
