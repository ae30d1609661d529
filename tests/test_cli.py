"""The CLI: one config mechanism for every subcommand, errors that name the key."""
import pytest

from webrl.cli import COMMANDS, _dashed_overrides, main


def test_dashed_and_key_value_forms_are_the_same_overrides():
    assert _dashed_overrides(["--n", "400", "--out=/tmp/d", "--split", "test"]) == ["n=400", "out=/tmp/d", "split=test"]
    assert _dashed_overrides(["--resume"]) == ["resume=true"]


def test_every_command_lists_documented_keys(capsys):
    for name in COMMANDS:
        assert main([name, "--keys"]) == 0
        out = capsys.readouterr().out
        assert out.strip(), name


def test_typo_in_a_subcommand_key_names_it(capsys):
    assert main(["demos", "--nn", "3"]) == 2
    err = capsys.readouterr().err
    assert "'nn'" in err and "n" in err


def test_config_shows_overrides(capsys):
    assert main(["config", "--config", "smoke", "trainer.iterations=7"]) == 0
    assert "iterations: 7" in capsys.readouterr().out


@pytest.mark.browser
@pytest.mark.slow
def test_demos_command_records_oracle_episodes(tmp_path, capsys):
    out = tmp_path / "demos"
    assert main(["demos", "--n", "2", "--out", str(out), "--levels", "[0]", "--sites", "[widgets]",
                 "--viewport", "640x480"]) == 0
    assert "saved 2 of 2" in capsys.readouterr().out
    assert len((out / "demos.jsonl").read_text().splitlines()) == 2
