"""The `webrl` command line, and the only reader of `sys.argv`.

`webrl.cli.commands.COMMANDS` is the one table of subcommands; `webrl.cli.help` renders what
the command line says about itself (`--help`, `--keys`, `--explain KEY`). Config-driven commands
share one mechanism: `--config PRESET_OR_YAML` plus `key=value` overrides, checked against the
command's config dataclass; heads-train reads its own `--flags`. This module holds the small
commands' entries (view, sites, demos, train, sft, eval, config) and the dispatch.
"""
from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
from dataclasses import dataclass, field
from typing import Callable, Optional

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from webrl.cli.commands import COMMANDS, TRAIN_SCHEMA, resolve  # noqa: E402
from webrl.cli.help import command_help, explain, key_line, overview, schema_rows  # noqa: E402
from webrl.config import ConfigError, describe, list_presets, load_config, to_yaml  # noqa: E402


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

    trainer = Trainer(config)
    trainer.fit()
    return _evaluations_exit_code("train", trainer.evaluation_failures)


def _evaluations_exit_code(command: str, failures: list[str]) -> int:
    """1 (with the reasons on stderr) when an evaluation scored too little (eval.max_dropped_share), else 0."""
    for failure in failures:
        print(f"webrl {command}: evaluation failed: {failure} (the drop reasons are listed above)", file=sys.stderr)
    return 1 if failures else 0


def sft_main(config) -> int:
    from webrl.run.trainer import Trainer

    Trainer(config).run_sft()
    return 0


def eval_main(config) -> int:
    from webrl.run.trainer import Trainer

    if not config.model.path and not config.eval.endpoint:
        print("webrl eval: neither model.path nor eval.endpoint is set; evaluating a tiny random-init model",
              file=sys.stderr)
    trainer = Trainer(config)
    trainer.run_eval()
    return _evaluations_exit_code("eval", trainer.evaluation_failures)


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


def dashed_overrides(extra: list[str], positional: Optional[str] = None) -> list[str]:
    """`--n 400 --out DIR` / `--out=DIR` / `n=400` -> ["n=400", "out=DIR"]; a bare first
    argument sets `positional` (e.g. `webrl view RUN_DIR`)."""
    out, i = [], 0
    while i < len(extra):
        item = extra[i]
        if not item.startswith("--"):
            if "=" in item:
                out.append(item)
            elif positional and i == 0:
                out.append(f"{positional}={item}")
            else:
                raise ConfigError(f"cannot read argument {item!r}; use key=value or --key value")
            i += 1
            continue
        key = item[2:].replace("-", "_")
        if "=" in key:
            out.append(key)
            i += 1
        elif i + 1 < len(extra) and not extra[i + 1].startswith("--"):
            out.append(f"{key}={extra[i + 1]}")
            i += 2
        else:
            out.append(f"{key}=true")
            i += 1
    return out


def run_command(name: str, argv: list[str]) -> int:
    """A config-driven command: `--presets`, `--keys`, `--explain KEY`, or build the config and run `main`."""
    cmd = COMMANDS[name]
    parser = argparse.ArgumentParser(prog=f"webrl {name}", add_help=False, allow_abbrev=False)
    if cmd.preset_files:
        parser.add_argument("--config", default=None)
        parser.add_argument("--presets", action="store_true")
    parser.add_argument("--keys", action="store_true")
    parser.add_argument("--explain", default=None, metavar="KEY")
    args, extra = parser.parse_known_args(argv)
    preset, presets = getattr(args, "config", None), getattr(args, "presets", False)
    overrides = [*cmd.implied, *dashed_overrides(extra, cmd.positional.key if cmd.positional else None)]
    if presets:
        print("\n".join(list_presets()))
        return 0
    schema = resolve(cmd.schema)
    if args.keys:
        for key, tp, default, doc in describe(schema):
            print(f"{key_line(key, tp, default)}\n    {doc}")
        return 0
    if args.explain:
        print(explain(name, args.explain))
        return 0
    config = resolve(cmd.load)(preset, overrides) if cmd.load else load_config(schema, preset, overrides)
    if cmd.schema == TRAIN_SCHEMA:
        config = with_trained_prompt(config, schema, preset, overrides)
    main: Callable = resolve(cmd.main)
    return int(main(config) or 0)


def run_flags_command(name: str, argv: list[str]) -> int:
    """A flags command: `--keys` lists its flags; otherwise its entry parses `argv` itself."""
    cmd = COMMANDS[name]
    if argv == ["--keys"]:
        for key, (tp, default, doc) in schema_rows(name).items():
            print(f"{key_line(key, tp, default)}\n    {doc}")
        return 0
    result = resolve(cmd.main)(argv)
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
