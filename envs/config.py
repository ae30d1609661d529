"""`WebEnvConfig`: the env's config, one section per component (browser, observation, safety,
recording).

Each section is the component's own dataclass, so a component receives only its section.
`WebEnvConfig.from_dict` builds one from plain nested dicts (YAML / OmegaConf / Ray
`env_config`), naming any unknown key.

One setting crosses sections: `safety.network.resolver_overrides` is also handed to Chromium as
`--host-resolver-rules` (appended to `browser.extra_args`), so the network guard and the
browser resolve those names alike.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, Union

from webrl.envs.browser import BrowserConfig
from webrl.envs.network import chromium_resolver_rules
from webrl.envs.observation import ObservationConfig
from webrl.envs.recording import RecordingConfig
from webrl.envs.safety import SafetyConfig

_SECTIONS = {"browser": BrowserConfig, "observation": ObservationConfig, "safety": SafetyConfig,
             "recording": RecordingConfig}


@dataclass
class WebEnvConfig:
    """Settings of one `WebEnv` (and of every slot of an `EnvWorker`)."""

    browser: BrowserConfig = field(default_factory=BrowserConfig)
    """Chromium executable, viewport, readiness waits."""
    observation: ObservationConfig = field(default_factory=ObservationConfig)
    """Set-of-Mark drawing and element limits."""
    safety: SafetyConfig = field(default_factory=SafetyConfig)
    """Time limits, domain policy, dialogs, tabs."""
    recording: RecordingConfig = field(default_factory=RecordingConfig)
    """Record each episode's traffic to a HAR file, or replay episodes from them (off by default)."""
    max_steps: int = 0
    """Truncate episodes after this many steps; 0 = each task's own `spec.max_steps`."""
    skills_dir: str = ""
    """A skill library folder (`webrl.skills.SkillLibrary`, one `<name>.json` per skill) the agent
    may call with `skill(name, args)` (grounded mode, `webrl.envs.skill_run`); the observation's
    "skills" text lists those applying to the page. "" = no skills. The env loads it at
    construction (a bad file raises SkillFileError); every Ray worker must see the same path."""
    tools: str = ""
    """Tools the agent may call with `tool(name, args)` as one step (`webrl.envs.tools`): "" = none
    (the observation's "tools" text is "" and prompts are as without tools); "task" = the tools
    each task declares (a `tools()` hook, or the sandbox site's `TOOLS`); any other value = the
    path of a JSON tools file `{"tools": [...]}` used for every task (loaded at construction; a
    bad file raises ToolFileError)."""

    def __post_init__(self) -> None:
        for name, cls in _SECTIONS.items():
            value = getattr(self, name)
            if isinstance(value, Mapping):
                setattr(self, name, _build(cls, value, f"WebEnvConfig.{name}"))
            elif not isinstance(value, cls):
                raise TypeError(f"WebEnvConfig.{name} must be a {cls.__name__} or a dict, got {type(value).__name__}")
        rules = chromium_resolver_rules(self.safety.network.resolver_overrides)
        given = [a for a in self.browser.extra_args if a.startswith("--host-resolver-rules=")]
        if rules and given and given != [rules]:
            raise ValueError(f"WebEnvConfig.browser.extra_args has {given} but "
                             f"safety.network.resolver_overrides needs {rules!r}: set only the overrides")
        if rules and not given:
            self.browser.extra_args = (*self.browser.extra_args, rules)
        if not isinstance(self.max_steps, int) or self.max_steps < 0:
            raise ValueError(f"WebEnvConfig.max_steps must be an int >= 0, got {self.max_steps!r}")
        if not isinstance(self.skills_dir, str):
            raise ValueError(f"WebEnvConfig.skills_dir must be a folder path string ('' = no skills), "
                             f"got {self.skills_dir!r}")
        if not isinstance(self.tools, str):
            raise ValueError(f"WebEnvConfig.tools must be '' (no tools), 'task' (each task's own tools) or "
                             f"the path of a JSON tools file, got {self.tools!r}")

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "WebEnvConfig":
        return _build(cls, values, "WebEnvConfig")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _build(cls: type, values: Mapping[str, Any], where: str) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown}; allowed: {sorted(names)}")
    return cls(**dict(values))


def as_config(config: Union["WebEnvConfig", Mapping[str, Any], None]) -> WebEnvConfig:
    """Accept a WebEnvConfig, a nested dict, or None (defaults)."""
    if config is None:
        return WebEnvConfig()
    if isinstance(config, WebEnvConfig):
        return config
    if isinstance(config, Mapping):
        return WebEnvConfig.from_dict(config)
    raise TypeError(f"config must be a WebEnvConfig or a dict, got {type(config).__name__}")
