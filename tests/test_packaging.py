"""The package installs as webrl.* only, lists every subpackage, and the CLI starts offline."""
import configparser
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAPPING = {"webrl": "webrl", "webrl.envs": "envs", "webrl.algos": "algos", "webrl.kernels": "kernels"}


def _declared_packages() -> set[str]:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    return {p.strip() for p in cfg["options"]["packages"].split() if p.strip()}


def _packages_on_disk() -> set[str]:
    found = set()
    for pkg, folder in MAPPING.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            if pkg == "webrl" and rel.parts[:1] in {("envs",), ("algos",), ("kernels",)}:
                continue
            found.add(".".join((pkg, *rel.parts)))
    return found


def test_setup_cfg_lists_every_package_folder():
    # setup.cfg lists packages by hand (package_dir mapping); a folder missing there would be
    # silently left out of wheels.
    assert _packages_on_disk() == _declared_packages()


def test_cli_help_lists_subcommands_offline():
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-m", "webrl.cli", "--help"], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    from webrl.cli import COMMANDS

    for name in COMMANDS:
        assert name in out.stdout


def test_cli_config_error_names_the_key():
    out = subprocess.run([sys.executable, "-m", "webrl.cli", "config", "run.sed=1"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2 and "run.sed" in out.stderr and "run.seed" in out.stderr


@pytest.mark.slow
def test_wheel_has_no_top_level_envs_algos_kernels(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path), str(ROOT)], check=True, timeout=300)
    (wheel,) = tmp_path.glob("webrl-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names}
    assert not top & {"envs", "algos", "kernels"}, top
    for pkg in _declared_packages():
        assert pkg.replace(".", "/") + "/__init__.py" in names, pkg
    assert "webrl/configs/default.yaml" in names


@pytest.mark.slow
def test_wheel_ships_templates_prompts_and_scripts(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path), str(ROOT)], check=True, timeout=300)
    (wheel,) = tmp_path.glob("webrl-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {p.relative_to(ROOT) for folder in ("envs", "webrl")
                for p in (ROOT / folder).rglob("*")
                if p.is_file() and p.suffix in {".html", ".txt", ".yaml", ".js", ".css"}
                and "__pycache__" not in p.parts}
    for rel in expected:
        installed = ("webrl/" + str(rel)) if rel.parts[0] == "envs" else str(rel)
        assert installed in names, f"{rel} is not in the wheel"
