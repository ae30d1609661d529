"""The documentation: README.md and docs/*.md build as a site and every command they show is checked.

- `mkdocs build --strict` (mkdocs.yml at the root, the dev extra installs mkdocs) fails on any warning:
  a broken link between pages, a page missing from the nav.
- Every command line of a ```bash / ```sh / ```console block is checked by what it is:
  cheap `webrl` commands (`config`, `plan`, `--help`) run in process and must exit 0, and a
  console block's documented output must appear in what they print; `webrl train|sft|eval` lines
  resolve their preset and key=value overrides through `webrl config ...` (so a renamed key fails
  here), other `webrl <cmd>` lines' keys must be in `webrl <cmd> --keys` (flags in its --help), and
  `python <script>` lines' flags must be in the script and their overrides resolve against the
  training config; the expensive ones (`bash run.sh`, `ray ...`, `pip install`, SGLang, scripts)
  are mapped in EXPENSIVE to the tests that exercise that path,
  and that test must still be collected. A line nothing here knows fails.
- Config keys named inline (`learner.objective=ppo`, `policy.cascade.*`) must exist in the live schema.
"""
from __future__ import annotations

import contextlib
import io
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^ *```(\w*)[^\n]*\n(.*?)^ *```", re.M | re.S)
SHELL_LANGS = {"bash", "sh", "console"}

EXPENSIVE: dict[str, list[str]] = {
    # command prefix (after env assignments) -> tests that exercise what it does
    "bash run.sh example": [
        "tests/test_config.py::test_every_entry_point_resolves_the_one_embedded_default",
        "tests/test_trainer.py::test_smoke_run_as_a_ray_job_checkpoints_resumes_and_writes_the_viewer",
    ],
    "bash run.sh setup": ["tests/test_packaging.py::test_wheel_ships_templates_prompts_and_scripts"],
    "bash run.sh test": ["tests/test_docs.py::test_every_command_block_is_checked"],  # part of the suite it runs
    "ray start": ["tests/test_trainer.py::test_smoke_run_as_a_ray_job_checkpoints_resumes_and_writes_the_viewer"],
    "ray job submit": ["tests/test_trainer.py::test_smoke_run_as_a_ray_job_checkpoints_resumes_and_writes_the_viewer"],
    "python examples/train_online_mind2web.py": [
        "tests/test_rehearsal.py::test_the_4b_preset_places_trains_checkpoints_and_resumes_on_two_nodes",
        "tests/test_trainer.py::test_smoke_run_as_a_ray_job_checkpoints_resumes_and_writes_the_viewer",
    ],
    "python examples/custom_site.py": ["tests/examples/test_custom_site.py::test_example_trains_on_the_registered_site"],
    "python benchmarks/learning_curve.py": [
        "tests/benchmarks/test_learning_curve.py::test_from_json_rewrites_the_table_and_plot_without_running"],
    "python benchmarks/learning.py": ["tests/benchmarks/test_learning.py::test_table_plot_and_from_json",
                                      "tests/benchmarks/test_learning.py::test_recipe_resolves_with_the_run_keys_last"],
    "python -m sglang.launch_server": [
        "tests/engines/test_launcher.py::test_launch_commands_by_hand",
        "tests/engines/test_sglang_source.py",
    ],
    "python -m playwright install": ["tests/envs/test_browser.py"],
    "pip install": ["tests/test_packaging.py::test_wheel_ships_templates_prompts_and_scripts"],
}
PLUMBING = {"mkdir", "cat", "cp", "cd", "export", "openssl"}
"""Shell plumbing between documented commands (files, variables, a random key): nothing of webrl's to check."""
RUN_IN_PROCESS = {"config", "plan"}
PLACEHOLDER_PATH = re.compile(r"no \S+ there|does not exist|[Nn]o such file|not found")
"""Errors about a file a documented placeholder path names (only what it names is then unchecked)."""
NOT_KEYS = {"model.layers.*"}
"""Inline code that looks like a config key but is something else (checkpoint tensor names)."""


def command_lines(text: str) -> list[tuple[str, str, list[str]]]:
    """(language, command line, documented output lines) for every shell block of a page;
    backslash continuations joined, console blocks' `$ ` lines with the lines under them."""
    out = []
    for lang, body in FENCE.findall(text):
        if lang not in SHELL_LANGS:
            continue
        body = re.sub(r"\\\n\s*", " ", body)
        lines = body.splitlines()
        if lang == "console":
            for i, line in enumerate(lines):
                if line.startswith("$ "):
                    following = []
                    for nxt in lines[i + 1:]:
                        if nxt.startswith("$ "):
                            break
                        following.append(nxt)
                    out.append((lang, line[2:], [f for f in following if f.strip()]))
        else:
            out.extend((lang, line, []) for line in lines if line.strip() and not line.lstrip().startswith("#"))
    return out


def all_commands() -> list[tuple[str, str, list[str]]]:
    return [(p.relative_to(ROOT).as_posix(), line, output) for p in PAGES
            for _, line, output in command_lines(p.read_text())]


def _strip_env(words: list[str]) -> list[str]:
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        words = words[1:]
    return words


def _expensive(words: list[str]) -> list[str] | None:
    program = ["python" if i == 0 and re.search(r"(^|/)python3?$", w) else w for i, w in enumerate(words)]
    joined = " ".join(program)
    for prefix, nodes in EXPENSIVE.items():
        if joined == prefix or joined.startswith(prefix + " "):
            return nodes
    return None


def _run_webrl(args: list[str]) -> tuple[int, str]:
    from webrl.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        try:
            code = main(args)
        except SystemExit as e:  # argparse's --help
            code = e.code or 0
    return int(code), buf.getvalue()


TRAIN_COMMANDS = {"train", "sft", "eval"}
"""Commands on the training config: their settings resolve exactly as `webrl config` resolves them."""


def _resolve_webrl(args: list[str]) -> None:
    """Check `webrl <cmd> ...` through the command line itself: a training command's preset and
    overrides must resolve (`webrl config ...` exits 0); another command's keys must be among
    `webrl <cmd> --keys`, or, for a command with its own flags, its flags in `webrl <cmd> --help`."""
    name, rest = args[0], args[1:]
    if rest and "=" not in rest[0] and not rest[0].startswith("-"):
        rest = rest[1:]  # the positional (CKPT, RUN_DIR, ...): a placeholder here
    if name in TRAIN_COMMANDS:
        code, printed = _run_webrl(["config", *rest])
        if code != 0 and not PLACEHOLDER_PATH.search(printed):
            raise AssertionError(f"`webrl {name}` settings do not resolve (`webrl config` exited {code}):\n{printed[-2000:]}")
        return
    code, listed = _run_webrl([name, "--keys"])
    keys = {line.split(" (", 1)[0] for line in listed.splitlines() if line and not line[0].isspace()}
    given = [a.split("=", 1)[0].lstrip("-").replace("-", "_") if a.startswith("--") else a.split("=", 1)[0]
             for a in rest if "=" in a or a.startswith("--")]
    if code == 0 and keys and all(k.startswith("--") for k in keys):  # a command with its own --flags
        unknown = [a.split("=", 1)[0] for a in rest if a.startswith("--") and a.split("=", 1)[0] not in keys]
        assert not unknown, f"`webrl {name}` has no option(s) {unknown} (its options: {sorted(keys)})"
        return
    if code == 0 and keys:
        unknown = [k for k in given if k not in keys and k != "config"]
        assert not unknown, f"`webrl {name}` has no key(s) {unknown} (its keys: {sorted(keys)})"
        return
    code, usage = _run_webrl([name, "--help"])  # a command with its own --flags
    assert code == 0, f"`webrl {name} --help` exited {code}: {usage[-1000:]}"
    missing = [a.split("=", 1)[0] for a in rest if a.startswith("--") and a.split("=", 1)[0] not in usage]
    assert not missing, f"`webrl {name}` has no option(s) {missing}"


def _resolve_script(words: list[str]) -> None:
    """`python SCRIPT [--flag ...] [--config P] key=value ...`: the flags exist in the script and the
    preset and overrides resolve against the training config."""
    from webrl.config import load_config
    from webrl.run.config import WebRLConfig

    script = ROOT / words[1]
    assert script.is_file(), f"{words[1]} does not exist"
    source = script.read_text()
    preset, overrides, i = None, [], 2
    while i < len(words):
        w = words[i]
        if w.startswith("--"):
            flag = w.split("=", 1)[0]
            assert f'"{flag}"' in source, f"{words[1]} has no {flag} option"
            if flag == "--config":
                preset = w.split("=", 1)[1] if "=" in w else words[i + 1]
        elif "=" in w and re.match(r"^[a-z_][\w.]*=", w):
            overrides.append(w)
        i += 1
    load_config(WebRLConfig, preset, overrides)


def _pins() -> dict[str, str]:
    pins = {}
    for text in ((ROOT / "constraints.txt").read_text(), (ROOT / "run.sh").read_text()):
        for name, ver in re.findall(r"([A-Za-z0-9_.-]+)==([\w.]+)", text):
            pins[name.lower().replace("_", "-")] = ver
    return pins


def check_command(line: str, output: list[str]) -> list[str]:
    """Check one command line; returns the test node ids it relies on (expensive commands)."""
    nodes: list[str] = []
    for part in re.split(r"\s&&\s", line):
        words = _strip_env(shlex.split(part, comments=True))
        if not words or words[0] in PLUMBING:
            continue
        if words[0] == "webrl":
            args = words[1:]
            if not args or "--help" in args or "-h" in args or args[0] in RUN_IN_PROCESS:
                code, printed = _run_webrl(args or ["--help"])
                if output:  # a console block: the documented output, whatever the exit code
                    for expected in output:
                        assert expected.strip() in printed, f"`{line}` no longer prints {expected!r}:\n{printed}"
                else:
                    assert code == 0, f"`{line}` exited {code}:\n{printed[-2000:]}"
            else:
                _resolve_webrl(args)
            continue
        expensive = _expensive(words)
        assert expensive is not None, f"no test covers `{part}`: add it to EXPENSIVE or PLUMBING in tests/test_docs.py"
        nodes.extend(expensive)
        if words[0] == "pip":
            pins = _pins()
            for name, ver in re.findall(r"([A-Za-z0-9_.-]+)==([\w.]+)", part):
                assert pins.get(name.lower().replace("_", "-")) == ver, f"`{part}` pins {name}=={ver}, the project {pins.get(name.lower())}"
        elif words[0] == "ray" and "--" in words:
            nodes.extend(check_command(shlex.join(words[words.index("--") + 1:]), []))
        elif re.search(r"(^|/)python3?$", words[0]) and words[1] != "-m":
            _resolve_script(words)
    return nodes


def test_every_command_block_is_checked():
    commands = all_commands()
    assert len(commands) > 10, "the command-block extraction found almost nothing"
    failures, nodes = [], set()
    for page, line, output in commands:
        try:
            nodes.update(check_command(line, output))
        except Exception as e:  # report every stale command at once
            failures.append(f"{page}: `{line}`\n    {type(e).__name__}: {e}")
    assert not failures, "documented commands that no longer work:\n" + "\n".join(failures)
    unused = {prefix for prefix, ns in EXPENSIVE.items() if not set(ns) & nodes}
    assert not unused, f"EXPENSIVE entries no documented command uses: {sorted(unused)}"
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           *sorted(nodes)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    collected = proc.stdout.splitlines()
    missing = [n for n in sorted(nodes) if not any(c == n or c.startswith((n + "[", n + "::")) for c in collected)]
    assert not missing, f"tests the docs rely on are not collected: {missing}\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"


def test_extraction_by_hand():
    text = ("```bash\nwebrl train a.b=1 \\\n    c=2   # comment\n# only a comment\n```\n"
            "```python\nwebrl nothing\n```\n"
            "```console\n$ webrl config x=1\nerror line\n$ webrl config --presets\n```\n")
    assert command_lines(text) == [("bash", "webrl train a.b=1  c=2   # comment", []),
                                   ("console", "webrl config x=1", ["error line"]),
                                   ("console", "webrl config --presets", [])]


def test_a_stale_key_or_an_unknown_command_fails():
    with pytest.raises(AssertionError, match="learner.no_such_key"):
        check_command("webrl train learner.no_such_key=1", [])
    with pytest.raises(AssertionError, match="no_such_key"):
        check_command("webrl demos no_such_key=1", [])
    with pytest.raises(AssertionError, match="--no-such-flag"):
        check_command("webrl heads-train --no-such-flag 1", [])
    with pytest.raises(AssertionError, match="no test covers"):
        check_command("make everything", [])
    with pytest.raises(AssertionError, match="no longer prints"):
        check_command("webrl config --presets", ["a preset nobody shipped"])


INLINE = re.compile(r"`([^`\n]+)`")


def inline_keys(text: str, sections: set[str]) -> set[str]:
    """Dotted names in inline code that start with a top-level config section (`rollout.mode=async`
    gives rollout.mode); file names (`run.sh`) are not keys."""
    text = FENCE.sub("", text)
    keys = set()
    for span in INLINE.findall(text):
        for m in re.finditer(r"(?<![\w./:-])([a-z_]+(?:\.[a-z0-9_]+)+(?:\.\*)?)(?![\w/(-])", span):
            key = m.group(1)
            if key.split(".")[0] in sections and not re.search(r"\.(sh|py|md|json|jsonl|yaml|html|txt)$", key):
                keys.add(key)
    return keys - NOT_KEYS


def test_inline_config_keys_exist():
    import dataclasses

    from webrl.config import moved_reason, config_keys
    from webrl.run.config import WebRLConfig

    keys = config_keys(WebRLConfig)
    sections = {f.name for f in dataclasses.fields(WebRLConfig)}
    bad = []
    for page in PAGES:
        for key in sorted(inline_keys(page.read_text(), sections)):
            prefix = key[:-1] if key.endswith(".*") else key + "."
            if key not in keys and not any(k.startswith(prefix) for k in keys):
                moved = moved_reason(key)
                bad.append(f"{page.relative_to(ROOT)}: {key}" + (f" ({moved})" if moved else ""))
    assert not bad, "config keys the docs name that the schema does not have:\n" + "\n".join(bad)


def test_inline_key_extraction_by_hand():
    text = "`rollout.mode=async` and `policy.cascade.*`, not `run.sh` or `webrl.run.config` or `x.y`\n"
    assert inline_keys(text, {"rollout", "policy", "run"}) == {"rollout.mode", "policy.cascade.*"}


def test_mkdocs_builds_without_warnings(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                           "--site-dir", str(tmp_path / "site")], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in (ROOT / "docs").glob("*.md"):
        assert page.name in nav, f"docs/{page.name} is not in the mkdocs.yml nav"
        assert (tmp_path / "site" / page.stem / "index.html").exists() or page.stem == "index"
