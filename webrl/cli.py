"""The `webrl` command line. Every subcommand shares one config mechanism:
`--config PRESET_OR_YAML` plus `key=value` overrides (see `webrl config`).

Subcommands are registered in `COMMANDS`; `webrl --help` lists exactly the ones that exist.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Callable

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from webrl.config import ConfigError, WebRLConfig, describe, list_presets, load_config, to_yaml  # noqa: E402


def _add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default=None, help="preset name (see `webrl config --presets`) or a YAML path")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides, e.g. run.seed=3")


def _load(args: argparse.Namespace) -> WebRLConfig:
    return load_config(WebRLConfig, args.config, args.overrides)


# ---------------------------------------------------------------------------------------------
def cmd_config(args: argparse.Namespace) -> int:
    """Show the resolved config, the available presets, or every key with its documentation."""
    if args.presets:
        print("\n".join(list_presets()))
    elif args.keys:
        for key, tp, default, doc in describe(WebRLConfig):
            print(f"{key} ({tp}, default {default!r})\n    {doc}")
    else:
        print(to_yaml(_load(args)), end="")
    return 0


def _config_parser(p: argparse.ArgumentParser) -> None:
    _add_config_args(p)
    p.add_argument("--presets", action="store_true", help="list the shipped presets")
    p.add_argument("--keys", action="store_true", help="list every config key with its documentation")


# name -> (help, add_arguments, run)
COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]] = {
    "config": ("show the resolved config, presets or documented keys", _config_parser, cmd_config),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="webrl", description="Online multi-turn RL for visual web agents.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (help_text, add_args, run) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        add_args(p)
        p.set_defaults(_run=run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except ConfigError as e:
        print(f"webrl {args.command}: config error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
