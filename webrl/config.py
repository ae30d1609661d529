"""Structured configs: one dataclass per component, YAML presets, `key=value` overrides.

Every component declares its own small dataclass (a docstring string under each field,
validation in `__post_init__`) next to its code; `webrl.run.config.WebRLConfig` only
composes them. A run's
config is built in three layers, later ones winning::

    dataclass defaults  <-  preset YAML (webrl/configs/<name>.yaml or a path)  <-  key=value overrides

Mistakes fail early with a `ConfigError` naming the key: an unknown key lists the closest valid
keys, a wrong type names the expected type, a bad preset lists the available presets.

omegaconf is imported where a config is loaded or written, not with this module: component
configs in the lower layers (webrl.algos, webrl.kernels) mark their fixed settings with `fixed`
and must import where only torch is installed (benchmarks/gpu_check.py on a bare GPU machine).
"""
from __future__ import annotations

import ast
import dataclasses
import difflib
import inspect
import sys
import textwrap
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence, TypeVar

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
"""Hosts a server webrl starts may bind without a key; any other address (127.0.0.3 included)
is beyond loopback and needs one."""


PRESET_DIR = Path(__file__).parent / "configs"
TRACKERS = ("wandb", "mlflow")
"""The experiment trackers `run.trackers` accepts (webrl.run.trackers implements them)."""
T = TypeVar("T")


class ConfigError(ValueError):
    """A configuration mistake: the message names the key and what would be valid."""


class ResourceError(RuntimeError):
    """The run asks for resources the cluster cannot give, or a wait for Ray ran out of time."""


def wait_for(refs: Any, timeout_s: float, what: str) -> Any:
    """`ray.get(refs)` that fails after `timeout_s` naming `what` it was waiting for."""
    import ray
    from ray.exceptions import GetTimeoutError

    try:
        return ray.get(refs, timeout=timeout_s)
    except GetTimeoutError:
        raise ResourceError(f"timed out after {timeout_s:g} s waiting for {what} (resources.startup_timeout_s); "
                            "the cluster may lack the resources (see the resource table printed at start-up), "
                            "or start-up is slow (loading a model, launching a browser)") from None


# ---------------------------------------------------------------------------------------------
# component configs owned by this module
# ---------------------------------------------------------------------------------------------
@dataclass
class RunConfig:
    name: str = "webrl"
    """Run name; the run folder is `<output_dir>/<name>-<timestamp>` unless `run_dir` is set."""
    output_dir: str = "runs"
    """Parent folder of run folders (checkpoints, metrics, trajectories, viewer pages)."""
    run_dir: str = ""
    """Exact run folder; empty = derived from output_dir and name."""
    seed: int = 0
    """Seed for task sampling, model init, rollout sampling (every sampled token is drawn from a
    generator seeded from this seed, the group, the member and the turn: `webrl.policy.seeds`) and
    torch/numpy RNGs."""
    resume: bool = False
    """Continue from the last checkpoint in run_dir."""
    deterministic: bool = False
    """Forward passes whose numerics do not depend on which requests share a batch, so one seed
    on one machine gives the same trajectories, updates and tables (sync mode): in process, one
    request per forward (`inference.max_batch_size` becomes 1); a launched SGLang server gets
    `--enable-deterministic-inference` (`webrl serve` already runs one row per forward). Costs
    the in-process engine its batching (`docs/reproducibility.md`)."""
    trackers: list[str] = dataclasses.field(default_factory=list)
    """Experiment trackers beside metrics.jsonl and TensorBoard, offline, inside the run folder,
    each "NAME" or "NAME:PROJECT" (NAME: wandb | mlflow; PROJECT: the W&B project or MLflow
    experiment, default "webrl"; `webrl.run.trackers`); [] = none."""

    def __post_init__(self) -> None:
        if not self.name or "/" in self.name:
            raise ConfigError(f"run.name must be a non-empty name without '/', got {self.name!r}")
        self.trackers = list(self.trackers)
        names = [str(t).partition(":")[0] for t in self.trackers]
        bad = [t for t, n in zip(self.trackers, names) if n not in TRACKERS or str(t).endswith(":")]
        if bad or len(set(names)) != len(names):
            raise ConfigError(f"run.trackers entries must be distinct, each NAME or NAME:PROJECT with NAME among "
                              f"{list(TRACKERS)} and a non-empty PROJECT, got {self.trackers}")

    def tracker_projects(self) -> dict[str, str]:
        """run.trackers as tracker name -> project (W&B) or experiment (MLflow)."""
        return {name: project or "webrl" for name, _, project in (str(t).partition(":") for t in self.trackers)}


MODEL_FAMILIES = ("qwen2.5-vl", "qwen3-vl")


@dataclass
class ModelConfig:
    path: str = ""
    """Local checkpoint folder or hub id; empty = build a tiny random-init model (`tiny`)."""
    family: str = "qwen2.5-vl"
    """Model family for a tiny model and for coordinate conventions: qwen2.5-vl | qwen3-vl."""
    dtype: str = "float32"
    """Parameter dtype: float32 | bfloat16 | float16."""
    tiny_hidden: int = 128
    """Hidden size of a tiny model."""
    tiny_layers: int = 2
    """Decoder layers of a tiny model."""
    tiny_vocab: int = 1024
    """Vocabulary size (upper bound) of a tiny model's locally trained tokenizer."""
    tiny_corpus: str = "default"
    """Tokenizer corpus of a tiny model: default (generic web-agent text) or sandbox (adds the
    sandbox sites' train-split goals and the compact prompts: ~15% fewer tokens on a sandbox page)."""
    tiny_element_tokens: int = 0
    """Element tokens `<e0>`.. and an element pointer in a tiny model (needed by
    generator.prompt.action_format=pointer; 128 covers sandbox pages); 0 = none."""

    def __post_init__(self) -> None:
        if self.family not in MODEL_FAMILIES:
            raise ConfigError(f"model.family must be one of {MODEL_FAMILIES}, got {self.family!r}")
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise ConfigError(f"model.dtype must be float32 | bfloat16 | float16, got {self.dtype!r}")
        if self.tiny_hidden <= 0 or self.tiny_layers <= 0 or self.tiny_vocab < 300:
            raise ConfigError("model.tiny_hidden and model.tiny_layers must be positive and model.tiny_vocab >= 300")
        if not 0 <= self.tiny_element_tokens <= self.tiny_vocab // 2:
            raise ConfigError(f"model.tiny_element_tokens must be in [0, model.tiny_vocab / 2], got {self.tiny_element_tokens}")
        if self.tiny_corpus not in ("default", "sandbox"):
            raise ConfigError(f"model.tiny_corpus must be one of ('default', 'sandbox'), got {self.tiny_corpus!r}")


# ---------------------------------------------------------------------------------------------
# loading
# ---------------------------------------------------------------------------------------------
def list_presets() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def _preset_path(preset: str | Path) -> Path:
    p = Path(preset)
    if p.suffix in (".yaml", ".yml") and p.exists():
        return p
    named = PRESET_DIR / f"{preset}.yaml"
    if named.exists():
        return named
    close = difflib.get_close_matches(str(preset), list_presets(), n=3)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise ConfigError(f"unknown preset {str(preset)!r}: not a YAML file and not one of "
                      f"{', '.join(list_presets()) or '(none)'}.{hint}")


def fixed(default: Any, why: str) -> Any:
    """A component setting that is not a run key: code that builds the component (a benchmark, a
    test) may pass it; a run uses `default`, and a preset or override that sets it fails with
    `why`. For the settings no run needs to change (numerical epsilons, retry caps, geometry
    constants), so the run's surface stays small without taking the knob from library code."""
    if isinstance(default, (list, dict, set)):  # a mutable default: each instance gets its own copy
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata={"fixed": why})
    return dataclasses.field(default=default, metadata={"fixed": why})


def is_fixed(f: dataclasses.Field) -> bool:
    return "fixed" in f.metadata


def fixed_keys(schema: type, prefix: str = "") -> dict[str, str]:
    """Every fixed setting under `schema` as its dotted run key -> the refusal text."""
    out: dict[str, str] = {}
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        key, tp = f"{prefix}{f.name}", hints[f.name]
        if is_fixed(f):
            value = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            out[key] = f"fixed at {value!r} in runs ({f.metadata['fixed']}); only code that builds {schema.__name__} sets it"
        elif dataclasses.is_dataclass(tp):
            out.update(fixed_keys(tp, key + "."))
    return out


def config_keys(schema: type, prefix: str = "") -> dict[str, Any]:
    """Every dotted run key of a config dataclass mapped to its declared type (fixed settings,
    `fixed`, are not run keys)."""
    out: dict[str, Any] = {}
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        key, tp = f"{prefix}{f.name}", hints[f.name]
        if is_fixed(f):
            continue
        if dataclasses.is_dataclass(tp):
            out.update(config_keys(tp, key + "."))
        else:
            out[key] = tp
    return out


MOVED_KEYS: dict[str, str] = {}
"""Keys a user's config may still carry from before the surface was halved: old dotted key (or a
`prefix.*` for a whole section) -> what replaced it ("renamed to X", "removed: fixed at V because
..."). Filled by the components with `moved_keys`; an old key fails naming its replacement."""


def moved_keys(table: dict[str, str]) -> None:
    """Register old keys -> their replacement text (see MOVED_KEYS); called by each config module."""
    MOVED_KEYS.update(table)


def moved_reason(full_key: str) -> Optional[str]:
    if full_key in MOVED_KEYS:
        return MOVED_KEYS[full_key]
    parts = full_key.split(".")
    for i in range(len(parts) - 1, 0, -1):
        hit = MOVED_KEYS.get(".".join(parts[:i]) + ".*")
        if hit:
            return hit
    return None


def _leaf_keys(node: Any, prefix: str = "") -> list[str]:
    if isinstance(node, dict):
        return [k for key, v in node.items() for k in _leaf_keys(v, f"{prefix}{key}.")] or [prefix[:-1]]
    return [prefix[:-1]]


def _refuse_moved(layer: Any, keys: dict[str, Any], source: str, fixed_settings: dict[str, str]) -> None:
    """An old key in a preset or on the command line fails naming what replaced it; a fixed
    setting fails naming the value runs use."""
    from omegaconf import OmegaConf  # at use: see the module docstring

    for key in _leaf_keys(OmegaConf.to_container(layer)):
        fixed_key = next((k for k in fixed_settings if key == k or key.startswith(k + ".")), None)
        if fixed_key:  # a dict value's leaves sit below the fixed key itself
            raise ConfigError(f"config key {fixed_key!r} (from {source}) is not a run setting: "
                              f"{fixed_settings[fixed_key]}")
        if key not in keys and not any(k.startswith(key + ".") for k in keys):
            moved = moved_reason(key)
            if moved:
                raise ConfigError(f"config key {key!r} (from {source}) is gone: {moved}")


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _explain(exc: Exception, schema: type, source: str, given: Sequence[str] = ()) -> ConfigError:
    """The ConfigError for an OmegaConf merge error; `given`: the layer's dotted keys (OmegaConf
    names an unknown section alone, "lerner", where the user wrote "lerner.objective")."""
    from omegaconf.errors import ConfigKeyError  # at use: see the module docstring

    keys = config_keys(schema)
    full_key = getattr(exc, "full_key", None) or ""
    if full_key and full_key not in keys:
        full_key = next((k for k in given if k.startswith(full_key + ".")), full_key)
    if isinstance(exc, ConfigKeyError) or full_key not in keys:
        moved = moved_reason(full_key)
        if moved:
            return ConfigError(f"config key {full_key!r} (from {source}) is gone: {moved}")
        lookup = full_key
        parent = lookup.rsplit(".", 1)[0] + "." if "." in lookup else ""
        if parent and not any(k.startswith(parent) for k in keys):  # a misspelt section: find it first
            lookup = _respelt_section(lookup, keys)
            parent = lookup.rsplit(".", 1)[0] + "."
        siblings = [k for k in keys if k.startswith(parent)] or list(keys)
        close = difflib.get_close_matches(lookup, siblings, n=3, cutoff=0.5)
        hint = f" Closest valid keys: {', '.join(close)}." if close else (
            f" Valid keys here: {', '.join(sorted(siblings)[:12])}.")
        return ConfigError(f"unknown config key {full_key!r} (from {source}).{hint}")
    expected = _type_name(keys[full_key])
    return ConfigError(f"config key {full_key!r} (from {source}) expects {expected}: {exc.msg}")


def _respelt_section(full_key: str, keys: dict[str, Any]) -> str:
    """`full_key` with its leading section names replaced by the closest existing ones
    ("lerner.objective" -> "learner.objective"), so the key match looks in the right section."""
    parts, sections = full_key.split("."), []
    for part in parts[:-1]:
        prefix = ".".join(sections) + "." if sections else ""
        names = sorted({k[len(prefix):].split(".")[0] for k in keys if k.startswith(prefix) and "." in k[len(prefix):]})
        close = difflib.get_close_matches(part, names, n=1, cutoff=0.6)
        sections.append(close[0] if close and part not in names else part)
    return ".".join([*sections, parts[-1]])


def load_config(schema: type[T], preset: str | Path | None = None,
                overrides: Sequence[str] = ()) -> T:
    """Build a `schema` instance from defaults, an optional preset and `key=value` overrides."""
    from omegaconf import OmegaConf  # at use: see the module docstring
    from omegaconf.errors import OmegaConfBaseException

    cfg = OmegaConf.structured(schema)
    layers: list[tuple[str, Any]] = []
    if preset:
        path = _preset_path(preset)
        layers.append((f"preset {path.name}", OmegaConf.load(path)))
    bad = [o for o in overrides if "=" not in o]
    if bad:
        raise ConfigError(f"overrides must look like key=value, got {bad[0]!r}")
    if overrides:  # `key=` means the empty string (OmegaConf would read None)
        dotlist = [o + "''" if o.endswith("=") else o for o in overrides]
        layers.append(("the command line", OmegaConf.from_dotlist(dotlist)))
    keys, fixed_settings = config_keys(schema), fixed_keys(schema)
    for source, layer in layers:
        _refuse_moved(layer, keys, source, fixed_settings)
        try:
            cfg = OmegaConf.merge(cfg, layer)
        except OmegaConfBaseException as e:
            raise _explain(e, schema, source, _leaf_keys(OmegaConf.to_container(layer))) from None
        except TypeError:  # a dict where the key takes a list or a value (OmegaConf names no key)
            given = _leaf_keys(OmegaConf.to_container(layer))
            key = next((k for leaf in given for k in keys if leaf.startswith(k + ".")), "a key")
            raise ConfigError(f"config key {key!r} (from {source}) expects {_type_name(keys.get(key))}, "
                              f"got a mapping") from None
    _check_required(layers)
    switched_off = getattr(schema, "switched_off", None)
    if switched_off is not None and len(layers) > 1:  # a later layer's switch drops an earlier one's section
        layers, notes = _drop_switched_off(layers, switched_off(OmegaConf.to_container(cfg)))
        if notes:
            print("\n".join(f"webrl: {n}" for n in notes), file=sys.stderr)
            cfg = OmegaConf.merge(OmegaConf.structured(schema), *(layer for _, layer in layers))
    derive = getattr(schema, "derived_overrides", None)
    if derive is not None:  # defaults that follow from other keys, unless a layer set them
        explicit = {k for _, layer in layers for k in _leaf_keys(OmegaConf.to_container(layer))}
        derived = derive(OmegaConf.to_container(cfg), explicit)
        if derived:
            cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist(derived))
    try:
        obj = OmegaConf.to_object(cfg)
    except OmegaConfBaseException as e:
        raise _explain(e, schema, "the merged config") from None
    except (ValueError, TypeError) as e:  # a component's own validation (__post_init__)
        if isinstance(e, ConfigError):
            raise
        raise ConfigError(str(e)) from e
    return typing.cast(T, obj)


def _drop_switched_off(layers: list[tuple[str, Any]], off: dict[str, str]) -> tuple[list[tuple[str, Any]], list[str]]:
    """Presets as overlays: for each section `off` names (section -> the key that switched it
    off), the keys an earlier layer set in it are dropped when a later layer set the switch, so
    switching the objective or the engine on a preset takes that one key. Returns the layers and
    one note per drop. A section the same layer both sets and switches off is kept (the rules
    refuse it: the layer contradicts itself)."""
    from omegaconf import OmegaConf  # at use: see the module docstring

    trees = [OmegaConf.to_container(layer) for _, layer in layers]
    notes = []
    for section, switch in off.items():
        setters = [i for i, tree in enumerate(trees) if switch in _leaf_keys(tree)]
        if not setters:
            continue
        last = setters[-1]
        for i in range(last):
            dropped = [k for k in _leaf_keys(trees[i]) if (k == section or k.startswith(section + ".")) and k != switch]
            for key in dropped:
                _delete(trees[i], key)
            if dropped:
                notes.append(f"{switch} (from {layers[last][0]}) switches off {section}: dropped what {layers[i][0]} "
                             f"set there ({', '.join(dropped)})")
    if not notes:
        return layers, []
    return [(source, OmegaConf.create(tree)) for (source, _), tree in zip(layers, trees)], notes


def _delete(tree: dict, dotted: str) -> None:
    """Remove a dotted leaf from a nested dict, and the sections it leaves empty."""
    head, _, rest = dotted.partition(".")
    if not rest:
        tree.pop(head, None)
        return
    _delete(tree[head], rest)
    if not tree[head]:
        tree.pop(head)


def _check_required(layers: list[tuple[str, Any]]) -> None:
    """A preset's `???` values are required keys: a later layer must set them (merging `???`
    keeps the default, so without this check the default would be used silently)."""
    from omegaconf import OmegaConf  # at use: see the module docstring

    for i, (source, layer) in enumerate(layers):
        required = sorted(OmegaConf.missing_keys(layer))
        unset = [k for k in required
                 if all(OmegaConf.select(later, k, default="???", throw_on_missing=False) == "???"
                        for _, later in layers[i + 1:])]
        if unset:
            raise ConfigError(f"required config key(s) not set: {', '.join(unset)} ({source} marks them ???; "
                              f"set each as key=value, see `webrl config --keys`)")


def to_yaml(config: Any) -> str:
    """The config's run keys as YAML (fixed settings left out, so the text loads back)."""
    from omegaconf import OmegaConf  # at use: see the module docstring

    return OmegaConf.to_yaml(OmegaConf.create(to_dict(config)))


def to_dict(config: Any) -> dict[str, Any]:
    """The config's run keys as a nested dict (fixed settings left out)."""
    from omegaconf import OmegaConf  # at use: see the module docstring

    out = typing.cast(dict, OmegaConf.to_container(OmegaConf.structured(config)))
    for key in fixed_keys(type(config)) if dataclasses.is_dataclass(config) else ():
        *parents, leaf = key.split(".")
        node = out
        for name in parents:
            node = node.get(name) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(leaf, None)
    return out


def field_docs(schema: type) -> dict[str, str]:
    """The docstring under each field of a config dataclass (inherited fields included), by name."""
    docs: dict[str, str] = {}
    for cls in reversed(schema.__mro__):
        if dataclasses.is_dataclass(cls):
            docs.update(_own_field_docs(cls))
    return docs


def _own_field_docs(schema: type) -> dict[str, str]:
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(schema)))
    except (OSError, TypeError):
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs: dict[str, str] = {}
    for node, nxt in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)):
            docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


def describe(schema: type, prefix: str = "", default: Any = None) -> list[tuple[str, str, Any, str]]:
    """(key, type, default, doc) for every leaf field, for `webrl config`. The defaults are the
    resolved ones: a section whose parent builds it with other values (the run's `reward`, say)
    reports the parent's, not its class's."""
    rows = []
    hints = typing.get_type_hints(schema)
    docs = field_docs(schema)
    default = schema() if default is None else default
    for f in dataclasses.fields(schema):
        tp = hints[f.name]
        if is_fixed(f):
            continue
        if dataclasses.is_dataclass(tp):
            rows.extend(describe(tp, f"{prefix}{f.name}.", getattr(default, f.name)))
        else:
            rows.append((f"{prefix}{f.name}", _type_name(tp), getattr(default, f.name), docs.get(f.name, "")))
    return rows
