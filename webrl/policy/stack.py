"""The policy wrapper stack named in the run config, and the one builder every inference worker uses.

    policy:
      wrappers: [skills, loci, cascade]   # outermost first:
                                          # SkillGuidedPolicy(LociPolicy(CascadePolicy(GeneratorPolicy)))
      cascade: {heads_dir: heads/, threshold: 0.5}
      loci: {max_rounds: 2}
      skills: {library_dir: skills/, max_skills: 3}

Only one order works: the cascade reads the generator's prefill (it needs a `GeneratorPolicy`
directly inside it), and LOCI wraps any policy (see webrl/policy/loci/policy.py), so `loci` comes
before `cascade`. Guided skills (webrl/policy/skills/guided.py) only edit the request's observation
text, so they wrap anything and come first: LOCI then sees the same request the model does.
`build_policy(generator, config)` wraps the generator innermost first; the generator stays the
object whose weights the learner syncs (`GeneratorEngine.load_weights`).

A setting that would do nothing is a config error: wrapper settings changed while that wrapper is
not in the stack, a cascade without heads, guided skills without a library holding a skill.
`CascadeConfig` lives here rather than in cascade.py so that `webrl.policy` and the run config
import without torch (so does `SkillsConfig`, which webrl/policy/skills/guided.py holds).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from webrl.config import ConfigError
from webrl.policy.loci.policy import LociConfig
from webrl.policy.skills.guided import SkillsConfig
from webrl.envs.skills import REPORT_FILE
from webrl.config import fixed

WRAPPERS = ("skills", "loci", "cascade")
"""Policy wrappers by name, in the only order they stack (outermost first)."""
CONFIDENCE_MODES = ("product", "min")
HEAD_TURN_MODES = ("generator_logprobs", "exclude")
HEADS_CONFIG_FILE = "heads_config.json"  # written by webrl.policy.cascade.heads.save_heads


@dataclass
class CascadeConfig:
    """When the heads decide and how their turns are recorded (webrl.policy.cascade.policy)."""

    threshold: float = 0.9
    """Heads decide when confidence >= threshold; 1.0 = never (generator only), 0.0 = always."""
    confidence: str = fixed("product", "the cascade's confidence is the product of its heads' probabilities")
    """"product" or "min" of the chosen kind / target / value probabilities."""
    head_turns: str = "generator_logprobs"
    """Head-decided turns in the PG batch: "generator_logprobs" or "exclude" (see webrl/policy/cascade/policy.py)."""
    max_text_tokens: int = fixed(64, "a WRITE slot gets at most 64 generated tokens")
    """Cap on tokens the generator writes for a WRITE slot."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"CascadeConfig.threshold must be in [0, 1], got {self.threshold}")
        if self.confidence not in CONFIDENCE_MODES:
            raise ValueError(f"CascadeConfig.confidence must be one of {CONFIDENCE_MODES}, got {self.confidence!r}")
        if self.head_turns not in HEAD_TURN_MODES:
            raise ValueError(f"CascadeConfig.head_turns must be one of {HEAD_TURN_MODES}, got {self.head_turns!r}")
        if self.max_text_tokens < 1:
            raise ValueError(f"CascadeConfig.max_text_tokens must be >= 1, got {self.max_text_tokens}")


@dataclass
class CascadeWrapperConfig(CascadeConfig):
    """The cascade's settings plus the heads it loads."""

    heads_dir: str = ""
    """Heads folder written by `webrl heads-train` (holds heads_config.json); required when
    `cascade` is in policy.wrappers. The heads stay fixed: only the generator's weights sync."""


@dataclass
class PolicyConfig:
    """The policy wrappers around the generator, and each wrapper's settings."""

    wrappers: list[str] = field(default_factory=list)
    """Wrapper stack, outermost first, from ("skills", "loci", "cascade") in that order: [] = the
    generator alone, [cascade], [loci], [loci, cascade] (LOCI around the cascade around the
    generator), and any of these with "skills" in front (guided skill hints around the rest)."""
    cascade: CascadeWrapperConfig = field(default_factory=CascadeWrapperConfig)
    """Decision-heads cascade (threshold, confidence, head_turns, max_text_tokens, heads_dir);
    used only when "cascade" is in wrappers."""
    loci: LociConfig = field(default_factory=LociConfig)
    """LOCI Locator-Critic evidence search (rounds, boxes, crop sizes, role sources); used only
    when "loci" is in wrappers."""
    skills: SkillsConfig = field(default_factory=SkillsConfig)
    """Guided skills (library_dir, max_skills, max_chars); used only when "skills" is in wrappers."""

    def __post_init__(self) -> None:
        self.wrappers = list(self.wrappers)
        self._check_order()
        for name, section in (("cascade", self.cascade), ("loci", self.loci), ("skills", self.skills)):
            changed = _changed_fields(section)
            if name not in self.wrappers and changed:
                raise ConfigError(f"policy.{name}.{changed[0]} is set but {name!r} is not in policy.wrappers "
                                  f"{self.wrappers} (it would do nothing): add {name!r} to policy.wrappers "
                                  f"or leave policy.{name} at its defaults (changed: {', '.join(changed)})")
        if "cascade" in self.wrappers:
            self._check_heads_dir()
        if "skills" in self.wrappers:
            self._check_library_dir()

    def _check_order(self) -> None:
        unknown = [w for w in self.wrappers if w not in WRAPPERS]
        if unknown:
            raise ConfigError(f"policy.wrappers: unknown wrapper(s) {unknown}; allowed: {list(WRAPPERS)}")
        if len(set(self.wrappers)) != len(self.wrappers):
            raise ConfigError(f"policy.wrappers lists a wrapper twice: {self.wrappers}; allowed, each once: "
                              f"{list(WRAPPERS)}")
        if self.wrappers != [w for w in WRAPPERS if w in self.wrappers]:
            raise ConfigError(f"policy.wrappers must be outermost first in the order {list(WRAPPERS)} (skills "
                              f"wrap anything; LOCI wraps the cascade; the cascade needs the generator directly "
                              f"inside it), "
                              f"got {self.wrappers}")

    def _check_heads_dir(self) -> None:
        heads_dir = self.cascade.heads_dir
        if not heads_dir:
            raise ConfigError("policy.wrappers includes 'cascade' but policy.cascade.heads_dir is empty: set it to a "
                              "heads folder written by `webrl heads-train`")
        if not (Path(heads_dir) / HEADS_CONFIG_FILE).is_file():
            raise ConfigError(f"policy.cascade.heads_dir={heads_dir}: no {HEADS_CONFIG_FILE} there "
                              f"(write heads with `webrl heads-train`)")


    def _check_library_dir(self) -> None:
        library_dir = self.skills.library_dir
        if not library_dir:
            raise ConfigError("policy.wrappers includes 'skills' but policy.skills.library_dir is empty: set it to a "
                              "skill library folder written by `webrl skills extract` (or a skill graph JSON file)")
        path = Path(library_dir)
        if not (path.is_file() or (path.is_dir() and any(p.name != REPORT_FILE for p in path.glob("*.json")))):
            raise ConfigError(f"policy.skills.library_dir={library_dir}: no skill files there (it would show no "
                              f"skills); write a library with `webrl skills extract`")


def _changed_fields(section: Any) -> list[str]:
    """Names of the fields of a config dataclass that differ from its defaults."""
    default = type(section)()
    return [f.name for f in dataclasses.fields(section) if getattr(section, f.name) != getattr(default, f.name)]


# ---------------------------------------------------------------------------------------------
# the builder
# ---------------------------------------------------------------------------------------------
def _wrap_cascade(inner: Any, generator: Any, config: PolicyConfig) -> Any:
    from webrl.policy.cascade.policy import CascadePolicy
    from webrl.policy.cascade.heads import load_heads

    heads = load_heads(config.cascade.heads_dir)
    model_config = generator.model_config
    text_config = getattr(model_config, "text_config", model_config)
    if heads.hidden_size != text_config.hidden_size:
        raise ValueError(f"policy.cascade.heads_dir={config.cascade.heads_dir}: the heads read hidden size "
                         f"{heads.hidden_size}, the generator has {text_config.hidden_size} (heads of another model?)")
    layer, caps = heads.config.layer, generator.backend.capabilities
    if caps.hidden_layers != "any" and layer not in (-1, text_config.num_hidden_layers):
        raise ValueError(f"policy.cascade.heads_dir={config.cascade.heads_dir}: the heads read hidden_states[{layer}], "
                         f"but rollout.engine={caps.engine} returns {caps.hidden_layers}; train heads on layer -1 "
                         f"(`webrl heads-train --layer -1`) or sample in process (rollout.engine=transformers)")
    return CascadePolicy(inner, heads, config.cascade)


def _wrap_loci(inner: Any, generator: Any, config: PolicyConfig) -> Any:
    from webrl.policy.loci.roles import loci_policy

    loci, factor = config.loci, getattr(getattr(generator, "builder", None), "factor", 0)
    if not loci.factor and factor:  # the crops follow the model family's patch grid
        loci = dataclasses.replace(loci, factor=factor)
    return loci_policy(inner, loci, generator=generator)


def _wrap_skills(inner: Any, generator: Any, config: PolicyConfig) -> Any:
    from webrl.policy.skills.graph import SkillGraph
    from webrl.policy.skills.guided import SkillGuidedPolicy

    return SkillGuidedPolicy(inner, SkillGraph.load(config.skills.library_dir), config.skills)


WRAP: dict[str, Callable[[Any, Any, PolicyConfig], Any]] = {"cascade": _wrap_cascade, "loci": _wrap_loci,
                                                              "skills": _wrap_skills}
"""Wrapper name -> (inner policy, the generator, PolicyConfig) -> the wrapped policy."""


def build_policy(generator: Any, config: PolicyConfig) -> Any:
    """`generator` (a `GeneratorPolicy`) wrapped in `config.wrappers`, innermost first.

    [] -> generator; [cascade] -> CascadePolicy(generator); [loci] -> LociPolicy(generator);
    [loci, cascade] -> LociPolicy(CascadePolicy(generator)); [skills, ...] -> SkillGuidedPolicy(...).
    "policy" LOCI roles use the generator's model.
    """
    policy = generator
    for name in reversed(config.wrappers):
        policy = WRAP[name](policy, generator, config)
    return policy
