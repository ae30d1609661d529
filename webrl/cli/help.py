"""What `webrl` prints about itself: the overview (`webrl --help`), each command's help (its
usage, positional argument, most-used keys with type, default and doc read from the live schema,
options and example), the key listing (`--keys`) and one key explained (`--explain KEY`: its
type, default and doc, whether it is a fixed setting or an old key, and the cross-section rules
of `webrl.run.rules` that mention it)."""
from __future__ import annotations

import argparse
import difflib
import textwrap
from typing import Any

from webrl.cli.commands import COMMANDS, TRAIN_SCHEMA, resolve
from webrl.config import ConfigError, config_keys, describe, fixed_keys, moved_reason


def schema_rows(name: str) -> dict[str, tuple[str, Any, str]]:
    """Every key of `name`'s live schema -> (type, default, doc): its config dataclass's leaves
    (`webrl.config.describe`), or a flags command's `--flags` read from its parser."""
    cmd = COMMANDS[name]
    schema = resolve(cmd.schema)
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
        return resolve(cmd.schema)().format_usage().strip()
    arg = f" [{cmd.positional.name}]" if cmd.positional else ""
    if not cmd.preset_files:
        return f"usage: webrl {name}{arg} [--keys] [--explain KEY] [KEY=VALUE | --KEY VALUE ...]"
    return f"usage: webrl {name}{arg} [--config PRESET_OR_YAML] [--keys] [--explain KEY] [--presets] [KEY=VALUE | --KEY VALUE ...]"


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
        options = [("--config PRESET_OR_YAML", f"a preset name or YAML file (webrl {name} --presets lists the presets)"),
                   ("--keys", "list every key with its type, default and documentation"),
                   ("--explain KEY", "one key (or section): type, default, doc and the rules relating it to other keys"),
                   ("--presets", "list the shipped presets"), ("-h, --help", "show this help")]
        if not cmd.preset_files:
            options = [o for o in options if o[0].split()[0] not in ("--config", "--presets")]
        lines += ["", "options:"] + [f"  {flag:<{_COLUMN}}{text}" for flag, text in options]
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


def explain(name: str, key: str) -> str:
    """`webrl NAME --explain KEY`: KEY's type, default and doc (every key under it when KEY is a
    section), what it is when it is no run key (a fixed setting, an old key), and for the training
    schema the rules that relate it to other keys. An unknown key raises naming the closest ones."""
    schema = resolve(COMMANDS[name].schema)
    rows = {key_: (tp, default, doc) for key_, tp, default, doc in describe(schema)}
    fixed, moved = fixed_keys(schema).get(key), moved_reason(key)
    shown = [k for k in rows if k == key or k.startswith(key + ".")]
    lines: list[str] = []
    if fixed:
        lines.append(f"{key}: not a run setting: {fixed}")
    elif moved and not shown:
        lines.append(f"{key}: gone: {moved}")
    elif not shown:
        close = difflib.get_close_matches(key, list(config_keys(schema)), n=3, cutoff=0.5)
        raise ConfigError(f"unknown config key {key!r} for webrl {name}" + (f"; closest: {', '.join(close)}" if close
                                                                           else f" (webrl {name} --keys lists them)"))
    for k in shown:
        tp, default, doc = rows[k]
        lines += [key_line(k, tp, default), *_wrap(doc, "    ")]
    if COMMANDS[name].schema == TRAIN_SCHEMA:
        from webrl.run.rules import rules_for

        rules = rules_for(key)
        if shown or rules:
            lines += ["", f"rules ({len(rules)}, webrl.run.rules):" if rules else "rules: none relate it to other keys"]
        for r in rules:
            lines += textwrap.wrap(f"- {', '.join(r.keys)}: {r.why}", width=100, initial_indent="  ",
                                   subsequent_indent="    ")
    return "\n".join(lines)
