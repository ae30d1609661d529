"""The `webrl` command line, and the only reader of `sys.argv`.

`COMMANDS` is the one table of subcommands: each entry carries its summary, its positional
argument, its most-used keys, an example and where its config schema and entry live, imported only
when the command runs or prints its help, so `webrl --help` is instant and lists exactly what
exists. `webrl COMMAND --help` prints the command's usage with each listed key's type, default and
doc read from the live schema. Config-driven commands share one mechanism: `--config
PRESET_OR_YAML` plus `key=value` overrides, checked against the command's config dataclass
(`webrl COMMAND --keys` lists every key); heads-train reads its own `--flags`.
"""
from __future__ import annotations

import argparse
import difflib
import importlib
import json
import os
import sys
import textwrap
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from webrl.config import ConfigError, dashed_overrides, describe, list_presets, load_config, to_yaml  # noqa: E402


def _resolve(dotted: str):
    module, _, name = dotted.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class Positional:
    """A bare first argument: `name` in the usage, the config key `key` it sets."""

    name: str
    key: str
    meaning: str


@dataclass(frozen=True)
class Command:
    """One subcommand: what it does, how it is called, the keys people set most, an example.

    Config-driven (the default): `schema` is its config dataclass, built from `--config
    PRESET_OR_YAML` plus `key=value` overrides and handed to `main(config) -> exit code`. With
    `flags=True` the command reads `--flag value` arguments that are no config keys: `schema`
    names a function returning its `argparse.ArgumentParser`, `main` takes the argument list and
    `keys` are flags."""

    summary: str
    schema: str
    """"module:Class" of the config dataclass ("module:function" returning the parser with flags=True)."""
    main: str
    """"module:function" taking the config (the argument list with flags=True)."""
    example: str
    """One command line as a user types it (`--help` prints it; tests/test_cli_help.py loads it)."""
    keys: tuple[str, ...] = ()
    """The most-used keys, in the order `--help` shows them with their type, default and doc from
    the live schema (tests/test_cli_help.py checks that each exists there)."""
    positional: Optional[Positional] = None
    load: Optional[str] = None
    """"module:function(preset, overrides)" building the config; None = `load_config(schema, ...)`."""
    flags: bool = False
    returns_exit_code: bool = True
    """flags=True: whether `main`'s return value is the exit code (heads-train returns its metrics)."""


_TRAIN_SCHEMA = "webrl.run.config:WebRLConfig"
_CHECKPOINT = Positional("CKPT", "model.path", "checkpoint folder, Hugging Face folder or webrl:NAME to evaluate")

COMMANDS: dict[str, Command] = {
    "train": Command(
        "run the main job: evaluate, (SFT,) GRPO iterations, evaluate (Trainer.fit); without --config the "
        "embedded default (GRPO from webrl:tiny-webagent-pointer)", _TRAIN_SCHEMA, "webrl.cli:train_main",
        "webrl train --config smoke trainer.iterations=2",
        keys=("model.path", "run.run_dir", "tasks.source", "tasks.sites", "trainer.iterations", "rollout.group_size",
              "learner.optim.lr", "resources.num_env_workers")),
    "sft": Command(
        "run only the SFT stage (oracle demos or sft.demos_dir) and save its checkpoint", _TRAIN_SCHEMA,
        "webrl.cli:sft_main", "webrl sft --config tiny_webagent_pointer_sft sft.demos_dir=runs/demos",
        keys=("model.path", "sft.demos_dir", "sft.demos", "sft.epochs", "sft.batch_size", "sft.lr", "run.run_dir")),
    "eval": Command(
        "evaluate a checkpoint (model.path, or the first argument) or an OpenAI-compatible endpoint (eval.endpoint) "
        "on a task suite; prints success per site and level, writes Online-Mind2Web result folders", _TRAIN_SCHEMA,
        "webrl.cli:eval_main", "webrl eval webrl:tiny-webagent-pointer tasks.eval_tasks=48 rollout.max_turns=4",
        keys=("model.path", "eval.endpoint", "tasks.source", "tasks.eval_tasks", "tasks.eval_split",
              "eval.samples_per_task", "run.run_dir"), positional=_CHECKPOINT),
    "config": Command(
        "show the resolved training config, its presets or its documented keys", _TRAIN_SCHEMA,
        "webrl.cli:show_config", "webrl config --config smoke trainer.iterations=7",
        keys=("model.path", "trainer.stages", "run.output_dir")),
    "plan": Command(
        "print a run's placement and per-GPU memory plan (weights, gradients, optimizer, activations, KV cache) "
        "against a described cluster; exit 1 when it does not fit", "webrl.run.plan_report:PlanCommandConfig",
        "webrl.run.plan_report:plan_main",
        "webrl plan --config online_mind2web_qwen3vl_4b plan.model=qwen3-vl-4b plan.gpus_per_node=8 "
        "plan.gpu_memory_gb=80",
        keys=("plan.model", "plan.nodes", "plan.gpus_per_node", "plan.gpu_memory_gb", "plan.cluster",
              "plan.prompt_tokens", "resources.learner_ranks", "learner.zero_stage"),
        load="webrl.run.plan_report:load_plan_config"),
    "serve": Command(
        "serve a local Qwen-VL checkpoint over an OpenAI-compatible /v1/chat/completions API",
        "webrl.serve.app:ServeConfig", "webrl.serve.app:serve_main", "webrl serve webrl:tiny-webagent-pointer port=8000",
        keys=("model_path", "port", "host", "dtype", "device", "served_model_name"),
        positional=Positional("CKPT", "model_path", "checkpoint folder of a Qwen2.5-VL / Qwen3-VL model")),
    "view": Command(
        "write the static HTML trajectory viewer of a run folder", "webrl.cli:ViewConfig", "webrl.cli:view_main",
        "webrl view runs/smoke-20260101-120000", keys=("run_dir",),
        positional=Positional("RUN_DIR", "run_dir", "run folder holding trajectories/trajectories.jsonl")),
    "sites": Command(
        "serve the sandbox websites on 127.0.0.1 for a person to browse", "webrl.cli:SitesConfig",
        "webrl.cli:sites_main", "webrl sites port=8765", keys=("port",)),
    "demos": Command(
        "record oracle demonstrations on sandbox tasks (successful episodes only)", "webrl.cli:DemosConfig",
        "webrl.cli:demos_main", "webrl demos n=200 out=runs/demos levels=[0,1] sites=[widgets] viewport=640x480",
        keys=("n", "out", "sites", "levels", "split", "viewport", "seed")),
    "resim": Command(
        "write Dyna-Mind ReSim traces (search trees from real sandbox interactions) as SFT demonstrations for "
        "sft.demos_dir", "webrl.recipes.data_commands:ResimCommandConfig", "webrl.recipes.data_commands:resim_main",
        "webrl resim n=32 out=runs/resim sites=[widgets]",
        keys=("n", "out", "sites", "levels", "resim.branching", "resim.depth")),
    "segments": Command(
        "write credit-assignment SFT demonstrations (successes and the productive segments of failed trajectories) "
        "from a run's trajectory log", "webrl.recipes.data_commands:SegmentCommandConfig",
        "webrl.recipes.data_commands:segments_main", "webrl segments runs/smoke out=runs/segments",
        keys=("source", "out", "segments.min_segment_turns", "segments.include_successes"),
        positional=Positional("SOURCE", "source", "a run folder or a trajectories .jsonl file")),
    "skills": Command(
        "mine, abstract and validate WebXSkill skills from successful trajectories into a skill library "
        "(env.skills_dir for grounded mode, policy.skills.library_dir for guided mode)",
        "webrl.skills.commands:SkillsCommandConfig", "webrl.skills.commands:skills_main",
        "webrl skills extract source=runs/demos out=skills", keys=("action", "source", "out", "min_support", "validate"),
        positional=Positional("ACTION", "action", "what to do: extract (mine, abstract, validate; write the library)")),
    "synth": Command(
        "synthesize tasks (tasks.jsonl) and SFT demonstrations (demos.jsonl) for a site by categorised exploration "
        "(SynthAgent)", "webrl.synth.commands:SynthCommandConfig", "webrl.synth.commands:synth_main",
        "webrl synth --start-url http://127.0.0.1:8765/shop/ out=data/synth",
        keys=("start_url", "out", "n_tasks", "max_pages", "endpoint")),
    "sparse-search": Command(
        "search per-head MMInference sparse-prefill patterns on calibration prompts and write sparse_patterns.json "
        "beside the checkpoint (generator.sparse_prefill=auto reads it)",
        "webrl.policy.sparse_attention:SparseSearchConfig", "webrl.policy.sparse_attention:search_main",
        "webrl sparse-search runs/sft/hf config.budget=0.25", keys=("checkpoint", "out", "config.budget", "min_recall"),
        positional=Positional("CKPT", "checkpoint", "model folder to search patterns for")),
    "judge-agreement": Command(
        "run a judge over trajectories with known outcomes; print agreement and confusion",
        "webrl.reward.main:JudgeAgreementConfig", "webrl.reward.main:judge_agreement_main",
        "webrl judge-agreement runs/smoke/trajectories/trajectories.jsonl reward.kind=judge "
        "reward.base_url=http://127.0.0.1:8000/v1",
        keys=("trajectories", "reward.kind", "reward.judge", "reward.base_url", "reward.model", "output"),
        positional=Positional("TRAJECTORIES", "trajectories", "trajectories with checker outcomes (a JSONL file)")),
    "browser-server": Command(
        "run a Playwright browser server (Chromium with webrl's flags) that env workers join with env.connect_url",
        "webrl.envs.remote_browser:BrowserServerConfig", "webrl.envs.remote_browser:main",
        "webrl browser-server port=3000", keys=("host", "port", "ws_path", "executable_path")),
    "heads-train": Command(
        "train decision heads on logged steps with the generator frozen",
        "webrl.policy.cascade.train:heads_train_parser", "webrl.policy.cascade.train:heads_train_main",
        "webrl heads-train --generator webrl:tiny-webagent-pointer --data demos/train --target-features text",
        keys=("--generator", "--data", "--out", "--synthetic", "--epochs", "--target-features"),
        flags=True, returns_exit_code=False),
}


@dataclass
class ViewConfig:
    run_dir: str = ""
    """Run folder holding trajectories/trajectories.jsonl."""


def view_main(config: ViewConfig) -> int:
    from webrl.rollout.viewer import view_run

    if not config.run_dir:
        raise ConfigError("view needs a run folder: webrl view RUN_DIR")
    print(view_run(config.run_dir))
    return 0


@dataclass
class SitesConfig:
    port: int = 8765
    """Port on 127.0.0.1; 0 = any free port."""


def sites_main(config: SitesConfig) -> int:
    from webrl.envs.sites.cli import serve_sites

    serve_sites(config)
    return 0


@dataclass
class DemosConfig:
    n: int = 400
    """Oracle episodes to run; failed ones are counted, not saved."""
    out: str = "demos"
    """Output folder: demos.jsonl + images/ + summary.json."""
    seed: int = 0
    """Seed of the task draws."""
    levels: list[int] = field(default_factory=lambda: [0, 1, 2])
    """Difficulty levels to draw from."""
    sites: list[str] = field(default_factory=lambda: ["shop", "travel", "wiki", "widgets"])
    """Sites to draw from."""
    split: str = "train"
    """train | test."""
    viewport: str = "openwebrl"
    """Browser viewport preset or WxH."""


def demos_main(config: DemosConfig) -> int:
    from webrl.recipes.demos import record_demos

    summary = record_demos(config.n, config.out, seed=config.seed, levels=config.levels, sites=config.sites,
                           split=config.split, viewport=config.viewport)
    print(f"saved {summary['saved']} of {summary['episodes']} oracle episodes to {summary['path']} "
          f"({len(summary['failed'])} failed, {len(summary['dropped'])} dropped)")
    return 0


def train_main(config) -> int:
    from webrl.run.trainer import Trainer

    Trainer(config).fit()
    return 0


def sft_main(config) -> int:
    from webrl.run.trainer import Trainer

    Trainer(config).run_sft()
    return 0


def eval_main(config) -> int:
    from webrl.run.trainer import Trainer

    if not config.model.path and not config.eval.endpoint:
        print("webrl eval: neither model.path nor eval.endpoint is set; evaluating a tiny random-init model",
              file=sys.stderr)
    Trainer(config).run_eval()
    return 0


def show_config(config) -> int:
    print(to_yaml(config), end="")
    return 0


def with_trained_prompt(config, schema, preset, overrides: list[str]):
    """`config` with the prompt settings model.path was trained with (its `webrl_prompt.json`)
    in every `generator.prompt` key the command line does not set: a checkpoint reads only the
    prompt it learned (a preset's or a default's other value gave 0% success with a warning).
    Keys given as `generator.prompt.KEY=...` win (the trainer still warns about them)."""
    from webrl.evaluation.summary import resolve_checkpoint
    from webrl.policy.trained_prompt import trained_prompt

    path = config.model.path
    if not path:
        return config
    try:
        wanted = trained_prompt(resolve_checkpoint(path))
    except (FileNotFoundError, ValueError, OSError):
        return config  # the trainer reports a bad path with its own error
    given = {o.split("=", 1)[0] for o in overrides}
    prompt = config.generator.prompt
    adopt = [f"generator.prompt.{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in sorted(wanted.items())
             if f"generator.prompt.{k}" not in given and getattr(prompt, k) != v]
    if not adopt:
        return config
    print(f"webrl: {path} was trained with {' '.join(adopt)}: using them", file=sys.stderr)
    return load_config(schema, preset, [*adopt, *overrides])


def schema_rows(name: str) -> dict[str, tuple[str, Any, str]]:
    """Every key of `name`'s live schema -> (type, default, doc): its config dataclass's leaves
    (`webrl.config.describe`), or a flags command's `--flags` read from its parser."""
    cmd = COMMANDS[name]
    schema = _resolve(cmd.schema)
    if not cmd.flags:
        return {key: (tp, default, doc) for key, tp, default, doc in describe(schema)}
    rows = {}
    for action in schema()._actions:
        long = [o for o in action.option_strings if o.startswith("--")]
        if not long or action.default == argparse.SUPPRESS:
            continue
        tp = getattr(action.type, "__name__", "str") + (" list" if action.nargs in ("*", "+") else "")
        rows[long[0]] = (tp, REQUIRED if action.required else action.default, action.help or "")
    return rows


REQUIRED = object()
"""The default of a flag that must be given."""


def key_line(key: str, tp: str, default: Any) -> str:
    return f"{key} ({tp}, required)" if default is REQUIRED else f"{key} ({tp}, default {default!r})"


def command_usage(name: str) -> str:
    cmd = COMMANDS[name]
    if cmd.flags:
        return _resolve(cmd.schema)().format_usage().strip()
    arg = f" [{cmd.positional.name}]" if cmd.positional else ""
    return f"usage: webrl {name}{arg} [--config PRESET_OR_YAML] [--keys] [--presets] [KEY=VALUE | --KEY VALUE ...]"


def command_help(name: str) -> str:
    """`webrl NAME --help`: usage, summary, positional arguments, the most-used keys with their
    type, default and doc from the live schema, the options and the example."""
    cmd = COMMANDS[name]
    rows = schema_rows(name)
    lines = [command_usage(name), "", *_wrap(cmd.summary, "")]
    if cmd.positional:
        p = cmd.positional
        lines += ["", "arguments:", f"  {p.name:<{_COLUMN}}{p.meaning} (sets {p.key})"]
    every = "every flag: webrl {} --keys" if cmd.flags else "every key: webrl {} --keys"
    lines += ["", f"most-used {'flags' if cmd.flags else 'keys'} ({every.format(name)}):"]
    for key in cmd.keys:
        if key not in rows:
            lines.append(f"  {key}  (not in the live schema: renamed or removed?)")
            continue
        tp, default, doc = rows[key]
        lines.append(f"  {key_line(key, tp, default)}")
        lines += _wrap(doc, "      ")
    if not cmd.flags:
        lines += ["", "options:"] + [f"  {flag:<{_COLUMN}}{text}" for flag, text in (
            ("--config PRESET_OR_YAML", f"a preset name or YAML file (webrl {name} --presets lists the presets)"),
            ("--keys", "list every key with its type, default and documentation"),
            ("--presets", "list the shipped presets"), ("-h, --help", "show this help"))]
        lines += ["", "settings: key=value or --key value"
                  + (f"; a bare first argument sets {cmd.positional.key}" if cmd.positional else "")]
    lines += ["", "example:", f"  {cmd.example}"]
    return "\n".join(lines)


def overview() -> str:
    """`webrl --help`: every command with its summary (imports no command module)."""
    width = max(map(len, COMMANDS)) + 2
    lines = ["usage: webrl COMMAND [ARGS ...]", "", "Online multi-turn RL for visual web agents.", "",
             "commands (webrl COMMAND --help: its arguments, most-used keys and an example):"]
    for name, cmd in COMMANDS.items():
        wrapped = _wrap(cmd.summary, " " * (width + 2)) or [""]
        lines.append(f"  {name:<{width}}{wrapped[0].lstrip()}")
        lines += wrapped[1:]
    return "\n".join(lines)


_COLUMN = 26


def _wrap(text: str, indent: str) -> list[str]:
    return textwrap.wrap(text, width=100, initial_indent=indent, subsequent_indent=indent)


def run_command(name: str, argv: list[str]) -> int:
    """A config-driven command: `--presets`, `--keys`, or build the config and run `main`."""
    cmd = COMMANDS[name]
    parser = argparse.ArgumentParser(prog=f"webrl {name}", add_help=False, allow_abbrev=False)
    parser.add_argument("--config", default=None)
    parser.add_argument("--keys", action="store_true")
    parser.add_argument("--presets", action="store_true")
    args, extra = parser.parse_known_args(argv)
    overrides = dashed_overrides(extra, cmd.positional.key if cmd.positional else None)
    if args.presets:
        print("\n".join(list_presets()))
        return 0
    schema = _resolve(cmd.schema)
    if args.keys:
        for key, tp, default, doc in describe(schema):
            print(f"{key_line(key, tp, default)}\n    {doc}")
        return 0
    config = _resolve(cmd.load)(args.config, overrides) if cmd.load else load_config(schema, args.config, overrides)
    if cmd.schema == _TRAIN_SCHEMA:
        config = with_trained_prompt(config, schema, args.config, overrides)
    main: Callable = _resolve(cmd.main)
    return int(main(config) or 0)


def run_flags_command(name: str, argv: list[str]) -> int:
    """A flags command: `--keys` lists its flags; otherwise its entry parses `argv` itself."""
    cmd = COMMANDS[name]
    if argv == ["--keys"]:
        for key, (tp, default, doc) in schema_rows(name).items():
            print(f"{key_line(key, tp, default)}\n    {doc}")
        return 0
    result = _resolve(cmd.main)(argv)
    return int(result or 0) if cmd.returns_exit_code else 0


def main(argv: list[str] | None = None) -> int:
    """`webrl COMMAND ...`, the only reader of the command line: `--help` anywhere after a command
    prints that command's help; bad input is one line on stderr with exit code 2 (config) or 1."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(overview())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        close = difflib.get_close_matches(name, COMMANDS, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        print(f"webrl: unknown command {name!r}{hint} (webrl --help lists them)", file=sys.stderr)
        return 2
    if "-h" in rest or "--help" in rest:
        print(command_help(name))
        return 0
    run = run_flags_command if COMMANDS[name].flags else run_command
    return _reporting_errors(name, lambda: run(name, rest))


def _reporting_errors(command: str, run: Callable[[], Optional[int]]) -> int:
    """Exit code of `run()`; bad input becomes one line on stderr (2: config, 1: other), no traceback."""
    try:
        return int(run() or 0)
    except ConfigError as e:
        print(f"webrl {command}: config error: {e}", file=sys.stderr)
        return 2
    except (FileNotFoundError, ValueError) as e:
        if os.environ.get("WEBRL_DEBUG"):
            raise
        print(f"webrl {command}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
