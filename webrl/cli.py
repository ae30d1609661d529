"""The `webrl` command line.

Every subcommand that takes settings shares one mechanism: `--config PRESET_OR_YAML` plus
`key=value` overrides, checked against that subcommand's config dataclass (`webrl <cmd>
--keys` lists them with their documentation). Subcommands are registered in `COMMANDS` and
import their modules only when run, so `webrl --help` is instant and lists exactly what exists.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from dataclasses import dataclass
from typing import Callable, Optional

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from webrl.config import ConfigError, describe, list_presets, load_config, to_yaml  # noqa: E402


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


COMMANDS: dict[str, Command] = {
    "config": Command("show the resolved training config, its presets or its documented keys",
                      "webrl.train_config:WebRLConfig", "webrl.cli:show_config"),
    "serve": Command("serve a local Qwen-VL checkpoint over an OpenAI-compatible /v1/chat/completions API",
                     "webrl.serve.app:ServeConfig", "webrl.serve.app:serve_main", positional="model_path"),
    "view": Command("write the static HTML trajectory viewer of a run folder",
                    "webrl.cli:ViewConfig", "webrl.cli:view_main", positional="run_dir"),
    "judge-agreement": Command("run a judge over trajectories with known outcomes; print agreement and confusion",
                               "webrl.reward.main:JudgeAgreementConfig", "webrl.reward.main:judge_agreement_main",
                               positional="trajectories"),
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
        p.add_argument("args", nargs="*", metavar="key=value",
                       help=f"config overrides{f'; a bare first argument sets {cmd.positional}' if cmd.positional else ''}")
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
    overrides = list(args.args)
    if cmd.positional and overrides and "=" not in overrides[0]:
        overrides[0] = f"{cmd.positional}={overrides[0]}"
    config = load_config(schema, args.config, overrides)
    main: Callable = _resolve(cmd.main)
    return int(main(config) or 0)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    try:
        return run_command(args.command, args)
    except ConfigError as e:
        print(f"webrl {args.command}: config error: {e}", file=sys.stderr)
        return 2
    except (FileNotFoundError, ValueError) as e:  # bad input: say what, no traceback
        if os.environ.get("WEBRL_DEBUG"):
            raise
        print(f"webrl {args.command}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
