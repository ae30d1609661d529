"""`WebEnvConfig`: the env's config, one section per component (browser, observation, safety,
recording); `EnvWorkerConfig`: the run config's flat `env` section, which builds it.

Each section is the component's own dataclass, so a component receives only its section.
`WebEnvConfig.from_dict` builds one from plain nested dicts (YAML / OmegaConf / Ray
`env_config`), naming any unknown key.

One setting crosses sections: `safety.network.resolver_overrides` is also handed to Chromium as
`--host-resolver-rules` (appended to `browser.extra_args`), so the network guard and the
browser resolve those names alike.

The run config's `env.*` keys are flat (`env.viewport`, `env.network.public_stand_ins`), not
`env.env.<section>.<name>`: `EnvWorkerConfig` carries the settings a user sets and
`web_env_config()` places each in its section; the rest are constants of their modules. The
old keys are registered with `webrl.config.moved_keys`, so each fails naming its replacement.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, Union

from webrl.config import fixed
from webrl.envs.browser import BrowserConfig
from webrl.envs.network import NetworkPolicyConfig, chromium_resolver_rules
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


PNG_COMPRESS_LEVEL = 1
"""zlib level of the screenshot PNG a worker returns (1: fast; 6: a bit smaller, several times slower)."""
AUTO_THREADS = 4
"""Browsers a worker starts for `threads=0` when it has more slots: past a few, the browsers
compete for the cores (2-core measurements: 4 browsers for 4 slots 1.5-1.7x one, 190 MB each)."""


@dataclass
class EnvWorkerConfig:
    """One worker process (the run config's `env` section): how many env slots on how many
    browsers, and the settings of every slot's env.

    Flat: each setting below is one field of the slots' `WebEnvConfig` (`web_env_config()` builds
    it; the section classes hold the documentation in full and the checks). The settings no user
    sets (readiness waits, probe intervals, tab and dialog caps, cache sizes) are constants of their
    modules (`webrl.envs.readiness`, `safety`, `network`, `browser`, `watchdog`, `observation`)."""

    num_slots: int = 4
    """Environments hosted on the worker."""
    threads: int = 0
    """Browser groups, each one thread + one Chromium; slot i runs in group i % threads, so up to
    `threads` slots step at the same time. 0..num_slots; 0 = one browser per slot, at most
    AUTO_THREADS (4); 1 = one browser, calls inline. Each further group costs one Chromium
    (about 190 MB); the main job's 4 slots on 4 browsers collect 1.5-1.7x the env steps/s of one
    (benchmarks/results/collection_2026-12-04)."""
    executable_path: str = BrowserConfig.executable_path
    """Chromium binary; "" = $WEBRL_CHROMIUM, else Playwright's own browser, else /usr/bin/chromium."""
    headless: bool = BrowserConfig.headless
    """Run Chromium without a window (the only mode tested)."""
    viewport: str = BrowserConfig.viewport
    """"openwebrl" (1280x1000, the OpenWebRL recipe), "cpu" (800x600), "small" (640x480) or "WxH"."""
    connect_url: str = BrowserConfig.connect_url
    """Drive a browser running elsewhere instead of launching one: "" = launch here;
    "ws://host:port/path" = a Playwright browser server; "http://host:port" = a Chromium DevTools
    endpoint (`BrowserConfig.connect_url`, `webrl.envs.remote_browser`)."""
    connect_api_key_env: str = BrowserConfig.connect_api_key_env
    """Environment variable (on the workers' machines) holding the key of a `webrl browser-server`
    beyond loopback, sent as `Authorization: Bearer <key>` when set; the key never goes in a config."""
    load_timeout_s: float = BrowserConfig.load_timeout_s
    """Cap for one navigation (goto / back / forward) to reach DOMContentLoaded."""
    step_timeout_s: float = SafetyConfig.step_timeout_s
    """Hard limit for one env step (action + readiness + observation)."""
    episode_timeout_s: float = SafetyConfig.episode_timeout_s
    """Env time (inside reset/step) after which the episode is truncated."""
    dialog_policy: str = fixed(SafetyConfig.dialog_policy, "a dialog's default answer lets the page go on; `WebEnvConfig` takes dismiss")
    """"accept" (a prompt gets its default text) or "dismiss" every dialog."""
    subresource_policy: str = SafetyConfig.subresource_policy
    """"allowlist" (every request stays on the task's domains), "any" (only navigations are
    checked) or "public" (live web: subresources may reach public hosts only; `webrl.envs.network`)."""
    network: NetworkPolicyConfig = field(default_factory=NetworkPolicyConfig)
    """Internal address ranges and name resolution of the "public" policy."""
    discovery: str = ObservationConfig.discovery
    """Element discovery: "full" (also listener / handler / cursor widgets, shadow roots) or
    "selectors" (the selector-only lists the shipped checkpoints were trained on)."""
    recording: RecordingConfig = field(default_factory=RecordingConfig)
    """Record each episode's traffic to a HAR file, or replay episodes from them (off by default)."""
    max_steps: int = fixed(WebEnvConfig.max_steps, "a run's turn limit is rollout.max_turns")
    """Truncate episodes after this many steps; 0 = each task's own `spec.max_steps`."""
    skills_dir: str = WebEnvConfig.skills_dir
    """A skill library folder the agent may call with `skill(name, args)` ("" = no skills;
    `WebEnvConfig.skills_dir`)."""
    tools: str = WebEnvConfig.tools
    """Tools the agent may call with `tool(name, args)`: "" = none, "task" = each task's own, or
    the path of a JSON tools file (`WebEnvConfig.tools`)."""

    def __post_init__(self) -> None:
        if self.connect_api_key_env != BrowserConfig.connect_api_key_env and not self.connect_url:
            raise ValueError(f"EnvWorkerConfig.connect_api_key_env (env.connect_api_key_env="
                             f"{self.connect_api_key_env!r}) only acts with env.connect_url (a remote browser "
                             f"server); set env.connect_url or leave the key at its default")
        if not isinstance(self.num_slots, int) or not 1 <= self.num_slots <= 256:
            raise ValueError(f"EnvWorkerConfig.num_slots (env.num_slots) must be in 1..256, got {self.num_slots!r}")
        if not isinstance(self.threads, int) or not 0 <= self.threads <= self.num_slots:
            raise ValueError(f"EnvWorkerConfig.threads (env.threads) must be an integer in 0..num_slots "
                             f"= 0..{self.num_slots} (0: one browser per slot, at most {AUTO_THREADS}), "
                             f"got {self.threads!r}")
        for name, cls in (("network", NetworkPolicyConfig), ("recording", RecordingConfig)):
            if isinstance(getattr(self, name), Mapping):
                setattr(self, name, cls(**dict(getattr(self, name))))
        self.web_env_config()  # the sections check every setting

    @property
    def browser_groups(self) -> int:
        """How many browsers (and browser threads) the worker runs: `threads`, or for 0 one per
        slot up to AUTO_THREADS."""
        return self.threads or min(self.num_slots, AUTO_THREADS)

    def web_env_config(self) -> WebEnvConfig:
        """The `WebEnvConfig` of every slot (a fresh one per call)."""
        return WebEnvConfig(
            browser=BrowserConfig(executable_path=self.executable_path, headless=self.headless, viewport=self.viewport,
                                  connect_url=self.connect_url, connect_api_key_env=self.connect_api_key_env,
                                  load_timeout_s=self.load_timeout_s),
            observation=ObservationConfig(discovery=self.discovery),
            safety=SafetyConfig(step_timeout_s=self.step_timeout_s, episode_timeout_s=self.episode_timeout_s,
                                dialog_policy=self.dialog_policy, subresource_policy=self.subresource_policy,
                                network=dataclasses.replace(self.network)),
            recording=dataclasses.replace(self.recording), max_steps=self.max_steps, skills_dir=self.skills_dir,
            tools=self.tools)


def _register_moved_keys() -> None:
    """The run config's env keys before they were flattened and cut: each names its replacement."""
    from webrl.config import moved_keys
    from webrl.envs import browser, network, observation, readiness, safety, watchdog

    renamed = {f"env.env.{section}.{name}": f"env.{name}" for section, names in (
        ("browser", ("executable_path", "headless", "viewport", "connect_url", "load_timeout_s")),
        ("observation", ("discovery",)),
        ("safety", ("step_timeout_s", "episode_timeout_s", "subresource_policy")))
        for name in names}
    renamed.update({f"env.env.safety.network.{name}": f"env.network.{name}"
                    for name in ("internal_networks", "public_stand_ins")})
    renamed.update({f"env.env.recording.{name}": f"env.recording.{name}" for name in ("mode", "dir")})
    renamed.update({f"env.env.{name}": f"env.{name}" for name in ("skills_dir", "tools")})
    moved = {old: f"renamed to {new}" for old, new in renamed.items()}
    moved["env.env.safety.dialog_policy"] = "removed: dialogs are accepted (their default answer) in runs"
    moved["env.env.safety.network.resolver_overrides"] = ("removed from the run config: runs resolve names through "
                                                          "DNS; code sets NetworkPolicyConfig.resolver_overrides")
    moved["env.env.max_steps"] = "removed: a run's turn limit is rollout.max_turns"

    def fixed(value: float, unit: str, module: Any, constant: str) -> str:
        return f"removed: fixed at {value:g}{unit} ({module.__name__}.{constant})"

    moved.update({
        "env.env.browser.launch_timeout_s": fixed(browser.LAUNCH_TIMEOUT_S, " s", browser, "LAUNCH_TIMEOUT_S"),
        "env.env.browser.connect_timeout_s": fixed(browser.CONNECT_TIMEOUT_S, " s", browser, "CONNECT_TIMEOUT_S"),
        "env.env.browser.ready_timeout_s": fixed(readiness.READY_TIMEOUT_S, " s", readiness, "READY_TIMEOUT_S"),
        "env.env.browser.network_quiet_cap_s": fixed(readiness.NETWORK_QUIET_CAP_S, " s", readiness,
                                                     "NETWORK_QUIET_CAP_S"),
        "env.env.browser.dom_quiet_ms": fixed(readiness.DOM_QUIET_MS, " ms", readiness, "DOM_QUIET_MS"),
        "env.env.browser.responsive_probe_s": fixed(readiness.RESPONSIVE_PROBE_S, " s", readiness,
                                                    "RESPONSIVE_PROBE_S"),
        "env.env.browser.popup_wait_s": fixed(readiness.POPUP_WAIT_S, " s", readiness, "POPUP_WAIT_S"),
        "env.env.browser.navigation_grace_s": fixed(readiness.NAVIGATION_GRACE_S, " s", readiness,
                                                    "NAVIGATION_GRACE_S"),
        "env.env.browser.extra_args": "removed from the run config: Chromium flags go in BrowserConfig.extra_args "
                                      "(Python: EnvWorker(env_config=...)); NetworkPolicyConfig.resolver_overrides adds "
                                      "--host-resolver-rules itself",
        "env.env.browser.reuse_context": "removed: each slot's context is always kept and scrubbed between episodes "
                                         "(Python: WebEnv(reuse_context=False))",
        "env.env.observation.som_overlay": "removed: Set-of-Mark boxes are always drawn on obs['screenshot']; "
                                           "rollout.screenshot=raw shows the policy the screenshot without them",
        "env.env.observation.max_elements": fixed(observation.MAX_ELEMENTS, "", observation, "MAX_ELEMENTS"),
        "env.env.observation.max_name_chars": fixed(observation.MAX_NAME_CHARS, "", observation, "MAX_NAME_CHARS"),
        "env.env.observation.list_offscreen": "removed: elements outside the viewport are always listed "
                                              "(marked offscreen)",
        "env.env.safety.watchdog_grace_s": fixed(watchdog.WATCHDOG_GRACE_S, " s", watchdog, "WATCHDOG_GRACE_S"),
        "env.env.safety.action_timeout_s": fixed(safety.ACTION_TIMEOUT_S, " s", safety, "ACTION_TIMEOUT_S"),
        "env.env.safety.max_tabs": fixed(safety.MAX_TABS, "", safety, "MAX_TABS"),
        "env.env.safety.max_dialogs_per_step": fixed(safety.MAX_DIALOGS_PER_STEP, "", safety, "MAX_DIALOGS_PER_STEP"),
        "env.env.safety.check_redirects": "removed: redirects of top-level documents are always checked",
        "env.env.safety.redirect_check_timeout_s": fixed(safety.REDIRECT_CHECK_TIMEOUT_S, " s", safety,
                                                         "REDIRECT_CHECK_TIMEOUT_S"),
        "env.env.safety.network.dns_cache_size": fixed(network.DNS_CACHE_SIZE, "", network, "DNS_CACHE_SIZE"),
        "env.env.safety.network.max_redirects": fixed(network.MAX_REDIRECTS, "", network, "MAX_REDIRECTS"),
        "env.png_compress_level": f"removed: fixed at {PNG_COMPRESS_LEVEL} (webrl.envs.config.PNG_COMPRESS_LEVEL)",
        "env.include_raw_screenshot": "removed: workers return info['raw_screenshot_png'] when rollout.screenshot=raw",
        "env.env.*": "flattened: env.env.<section>.<name> is now env.<name> (env.network.*, env.recording.*); "
                     "`webrl config --keys` lists them",
    })
    moved_keys(moved)


_register_moved_keys()
