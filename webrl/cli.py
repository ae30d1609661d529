"""The `webrl` command line.

Every subcommand that takes settings shares one mechanism: `--config PRESET_OR_YAML` plus
`key=value` overrides, checked against that subcommand's config dataclass (`webrl <cmd>
--keys` lists them with their documentation). Subcommands are registered in `COMMANDS` and
import their modules only when run, so `webrl --help` is instant and lists exactly what exists.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from dataclasses import dataclass, field
from typing import Callable, Optional

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from webrl.config import ConfigError, dashed_overrides, describe, list_presets, load_config, to_yaml  # noqa: E402


def _resolve(dotted: str):
    module, _, name = dotted.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class Command:
    """A config-driven subcommand: `main(config) -> exit code` with `schema` as its config."""

    help: str
    schema: str
    """"module:Class" of the config dataclass."""
    main: str
    """"module:function" taking the config instance."""
    positional: Optional[str] = None
    """Name of a config field that may also be given as the first positional argument."""


_TRAIN_SCHEMA = "webrl.run.config:WebRLConfig"

COMMANDS: dict[str, Command] = {
    "train": Command("run the main job: evaluate, (SFT,) GRPO iterations, evaluate (Trainer.fit); "
                     "without --config the embedded default (GRPO from webrl:tiny-webagent-pointer)",
                     _TRAIN_SCHEMA, "webrl.cli:train_main"),
    "sft": Command("run only the SFT stage (oracle demos or sft.demos_dir) and save its checkpoint",
                   _TRAIN_SCHEMA, "webrl.cli:sft_main"),
    "eval": Command("evaluate a checkpoint (model.path, or the first argument) or an OpenAI-compatible endpoint "
                    "(eval.endpoint) on a task suite; prints success per site and level, writes "
                    "Online-Mind2Web result folders", _TRAIN_SCHEMA, "webrl.cli:eval_main", positional="model.path"),
    "config": Command("show the resolved training config, its presets or its documented keys",
                      _TRAIN_SCHEMA, "webrl.cli:show_config"),
    "serve": Command("serve a local Qwen-VL checkpoint over an OpenAI-compatible /v1/chat/completions API",
                     "webrl.serve.app:ServeConfig", "webrl.serve.app:serve_main", positional="model_path"),
    "view": Command("write the static HTML trajectory viewer of a run folder",
                    "webrl.cli:ViewConfig", "webrl.cli:view_main", positional="run_dir"),
    "sites": Command("serve the sandbox websites on 127.0.0.1 for a person to browse",
                     "webrl.cli:SitesConfig", "webrl.cli:sites_main"),
    "demos": Command("record oracle demonstrations on sandbox tasks (successful episodes only)",
                     "webrl.cli:DemosConfig", "webrl.cli:demos_main"),
    "resim": Command("write Dyna-Mind ReSim traces (search trees from real sandbox interactions) as SFT "
                     "demonstrations for sft.demos_dir", "webrl.recipes.data_commands:ResimCommandConfig",
                     "webrl.recipes.data_commands:resim_main"),
    "segments": Command("write credit-assignment SFT demonstrations (successes and the productive segments of "
                        "failed trajectories) from a run's trajectory log", "webrl.recipes.data_commands:SegmentCommandConfig",
                        "webrl.recipes.data_commands:segments_main", positional="source"),
    "skills": Command("mine, abstract and validate WebXSkill skills from successful trajectories into a skill "
                      "library (env.env.skills_dir for grounded mode, policy.skills.library_dir for guided mode)",
                      "webrl.skills.commands:SkillsCommandConfig", "webrl.skills.commands:skills_main",
                      positional="action"),
    "synth": Command("synthesize tasks (tasks.jsonl) and SFT demonstrations (demos.jsonl) for a site by categorised "
                     "exploration (SynthAgent)", "webrl.synth.commands:SynthCommandConfig",
                     "webrl.synth.commands:synth_main"),
    "sparse-search": Command("search per-head MMInference sparse-prefill patterns on calibration prompts and write "
                             "sparse_patterns.json beside the checkpoint (generator.sparse_prefill=auto reads it)",
                             "webrl.policy.sparse_attention:SparseSearchConfig",
                             "webrl.policy.sparse_attention:search_main", positional="checkpoint"),
    "judge-agreement": Command("run a judge over trajectories with known outcomes; print agreement and confusion",
                               "webrl.reward.main:JudgeAgreementConfig", "webrl.reward.main:judge_agreement_main",
                               positional="trajectories"),
    "browser-server": Command("run a Playwright browser server (Chromium with webrl's flags) that env workers join "
                              "with env.env.browser.connect_url",
                              "webrl.envs.remote_browser:BrowserServerConfig", "webrl.envs.remote_browser:main"),
}

# Subcommands with their own argparse interface (their flags are not config keys).
ARGPARSE_COMMANDS: dict[str, tuple[str, str]] = {
    "plan": ("print a run's placement and per-GPU memory plan (weights, gradients, optimizer, activations, KV "
             "cache) against a described cluster; exit 1 when it does not fit (--config PRESET plan.gpus_per_node=8 ...)",
             "webrl.run.plan:plan_main"),
    "heads-train": ("train decision heads on logged steps with the generator frozen (--generator, --data)",
                    "webrl.policy.cascade.train:heads_train_main"),
}

EXIT_CODE_COMMANDS = {"plan"}
"""Of ARGPARSE_COMMANDS, those whose entry returns the process's exit code."""


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="webrl", description="Online multi-turn RL for visual web agents.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, cmd in COMMANDS.items():
        p = sub.add_parser(name, help=cmd.help, description=cmd.help)
        p.add_argument("--config", default=None, help="preset name or YAML path (see --presets)")
        p.add_argument("--keys", action="store_true", help="list every config key with its documentation")
        p.add_argument("--presets", action="store_true", help="list the shipped presets")
        p.epilog = ("settings: key=value or --key value (see --keys)"
                    + (f"; a bare first argument sets {cmd.positional}" if cmd.positional else ""))
    for name, (help_text, _) in ARGPARSE_COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def run_command(name: str, args: argparse.Namespace) -> int:
    cmd = COMMANDS[name]
    schema = _resolve(cmd.schema)
    if args.presets:
        print("\n".join(list_presets()))
        return 0
    if args.keys:
        for key, tp, default, doc in describe(schema):
            print(f"{key} ({tp}, default {default!r})\n    {doc}")
        return 0
    config = load_config(schema, args.config, args.args)
    if cmd.schema == _TRAIN_SCHEMA:
        config = with_trained_prompt(config, schema, args.config, args.args)
    main: Callable = _resolve(cmd.main)
    return int(main(config) or 0)


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




def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ARGPARSE_COMMANDS:
        entry = _resolve(ARGPARSE_COMMANDS[argv[0]][1])  # parses argv itself
        if argv[0] in EXIT_CODE_COMMANDS:
            return _reporting_errors(argv[0], lambda: entry(argv[1:]))
        return _reporting_errors(argv[0], lambda: entry(argv[1:]) and None)  # its return value is not an exit code
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.command:
        try:
            args.args = dashed_overrides(extra, COMMANDS[args.command].positional)
        except ConfigError as e:
            print(f"webrl {args.command}: config error: {e}", file=sys.stderr)
            return 2
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if not args.command:
        parser.print_help()
        return 2
    return _reporting_errors(args.command, lambda: run_command(args.command, args))


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
