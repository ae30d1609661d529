"""`webrl COMMAND --help`: every command in `webrl.cli.COMMANDS` explains itself from the live schema.

The listed keys are data in the command table; these tests check each against the schema the
command really loads (`webrl.config.describe` of its config dataclass, or its parser's flags), so
a renamed or removed key fails here instead of leaving a stale help text.
"""
import argparse
import importlib

import pytest

from webrl.cli import COMMANDS, dashed_overrides, main
from webrl.config import describe


def _resolve(dotted):
    module, _, name = dotted.partition(":")
    return getattr(importlib.import_module(module), name)


def live_keys(name):
    """The keys `name` accepts, read from its schema directly (not through webrl.cli's helpers)."""
    cmd = COMMANDS[name]
    schema = _resolve(cmd.schema)
    if cmd.flags:
        parser = schema()
        assert isinstance(parser, argparse.ArgumentParser)
        return {o for action in parser._actions for o in action.option_strings}
    return {key for key, _, _, _ in describe(schema)}


def help_text(name, capsys, flag="--help"):
    assert main([name, flag]) == 0, name
    captured = capsys.readouterr()
    assert captured.err == "", name
    return captured.out


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_command_prints_its_own_help(name, capsys):
    cmd = COMMANDS[name]
    out = help_text(name, capsys)
    assert out.startswith("usage:") and f"webrl {name}" in out.splitlines()[0]
    assert cmd.example in out and cmd.example.startswith(f"webrl {name}")
    if cmd.positional:
        assert cmd.positional.name in out.splitlines()[0] and cmd.positional.meaning in out
    assert cmd.keys, f"{name} lists no keys"
    keys = live_keys(name)
    for key in cmd.keys:
        assert key in keys, f"{name}: listed key {key!r} is not in the live schema (renamed or removed?)"
        assert f"  {key} (" in out, f"{name}: {key!r} is not shown with its type and default"
    assert "not in the live schema" not in out
    assert help_text(name, capsys, "-h") == out


def test_help_shows_type_default_and_doc_from_the_schema(capsys):
    out = help_text("demos", capsys)
    assert "  n (int, default 400)\n      Oracle episodes to run; failed ones are counted, not saved." in out
    out = help_text("heads-train", capsys)
    assert "  --generator (str, required)\n      generator checkpoint folder (stays frozen)" in out
    assert "  --epochs (int, default 60)" in out


@pytest.mark.parametrize("name", [n for n, c in COMMANDS.items() if not c.flags])
def test_every_example_names_only_live_keys(name):
    cmd = COMMANDS[name]
    words = cmd.example.split()[2:]
    if "--config" in words:
        i = words.index("--config")
        words = words[:i] + words[i + 2:]
    keys = live_keys(name)
    for override in dashed_overrides(words, cmd.positional.key if cmd.positional else None):
        assert override.split("=", 1)[0] in keys, f"{name}: example sets {override!r}"


def test_heads_train_example_parses():
    cmd = COMMANDS["heads-train"]
    args = _resolve(cmd.schema)().parse_args(cmd.example.split()[2:])
    assert args.generator == "webrl:tiny-webagent-pointer" and args.data == ["demos/train"]


def test_help_texts_differ_between_commands(capsys):
    texts = {name: help_text(name, capsys) for name in COMMANDS}
    assert texts["view"] != texts["eval"]
    assert len(set(texts.values())) == len(texts)  # none is a shared generic usage


def test_plan_help_exits_zero(capsys):
    out = help_text("plan", capsys)
    assert "plan.gpu_memory_gb (float, default 80.0)" in out and "unknown config key" not in out


def test_top_level_help_lists_every_command(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert f"\n  {name} " in out, name
    assert main([]) == 2  # no command: the same listing, as an error
    assert "heads-train" in capsys.readouterr().out


def test_an_unknown_command_names_the_closest(capsys):
    assert main(["evl"]) == 2
    assert "did you mean eval?" in capsys.readouterr().err


def test_top_level_help_imports_no_command_module():
    import subprocess
    import sys

    modules = sorted({dotted.partition(":")[0] for cmd in COMMANDS.values() for dotted in (cmd.schema, cmd.main)
                      if not dotted.startswith("webrl.cli:")})
    code = (f"import sys; from webrl.cli import main; main(['--help']); "
            f"print([m for m in {modules!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert len(modules) > 5 and out.stdout.strip().splitlines()[-1] == "[]"


FILE_NAME = (".json", ".jsonl", ".yaml", ".txt", ".html")


@pytest.mark.parametrize("name", [n for n in COMMANDS if not COMMANDS[n].flags])
def test_every_key_a_help_text_names_exists(name, capsys):
    """A dotted name in a command's help (summary, keys, docs, example) is a key of that command's
    schema or of the run config it points the user to (`webrl browser-server` names the workers'
    env.connect_url); file names (demos.jsonl) are not keys."""
    import re

    run_keys = live_keys("train")
    named = set(re.findall(r"(?<![\w/.:\-])([a-z_]+(?:\.[a-z_0-9]+)+)(?=[=\s,;)]|$)", help_text(name, capsys)))
    named = {k for k in named if not k.endswith(FILE_NAME)}  # commands with flat keys name none
    unknown = sorted(k for k in named if k not in live_keys(name) | run_keys)
    assert unknown == [], (name, unknown)


def test_browser_server_tells_workers_the_run_key(capsys):
    assert "env.connect_url" in help_text("browser-server", capsys) and "env.connect_url" in live_keys("train")
    assert "browser.connect_url" not in help_text("browser-server", capsys)


@pytest.mark.parametrize("name", ["view", "sites", "serve", "browser-server"])
def test_commands_without_presets_offer_no_config_or_presets(name, capsys):
    text = help_text(name, capsys)
    assert "--config" not in text and "--presets" not in text and "--keys" in text
    assert main([name, "--presets"]) == 2  # not an option here: read as the unknown key `presets`
    assert "unknown config key 'presets'" in capsys.readouterr().err


def test_a_misspelt_section_suggests_the_right_section(capsys):
    assert main(["config", "lerner.objective=ppo"]) == 2
    err = capsys.readouterr().err
    assert "unknown config key 'lerner.objective'" in err and "Closest valid keys: learner.objective" in err
