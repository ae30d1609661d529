"""Shipped checkpoints (`webrl:<name>`): resolution, prompt-settings check."""
import json

import pytest

from webrl.models import shipped
from webrl.policy.prompt import PromptConfig
from webrl.policy.trained_prompt import check_prompt_matches, trained_prompt


def test_unknown_shipped_name_lists_the_shipped_ones(tmp_path, monkeypatch):
    (tmp_path / "tiny-x").mkdir()
    (tmp_path / "tiny-x" / "config.json").write_text("{}")
    monkeypatch.setattr(shipped, "ASSETS", tmp_path)
    assert shipped.resolve_shipped("webrl:tiny-x") == str(tmp_path / "tiny-x")
    assert shipped.resolve_shipped("/some/folder") == "/some/folder"  # not an alias: unchanged
    with pytest.raises(FileNotFoundError, match=r"no shipped checkpoint 'webrl:tiny-y'; shipped: webrl:tiny-x"):
        shipped.resolve_shipped("webrl:tiny-y")


def test_prompt_settings_mismatch_names_each_key(tmp_path):
    (tmp_path / "webrl_prompt.json").write_text(json.dumps({"action_format": "compact", "think": False,
                                                            "max_pixels": 12544, "from_a_later_version": 1}))
    assert trained_prompt(str(tmp_path)) == {"action_format": "compact", "think": False, "max_pixels": 12544}
    assert shipped.read_trained_prompt(str(tmp_path))["from_a_later_version"] == 1  # plain data, as written
    check_prompt_matches(str(tmp_path), PromptConfig(action_format="compact", think=False, max_pixels=12544))
    with pytest.raises(ValueError) as e:
        check_prompt_matches(str(tmp_path), PromptConfig(action_format="som", think=False))
    assert "generator.prompt.action_format='som' (trained with 'compact')" in str(e.value)
    assert "generator.prompt.max_pixels=1003520 (trained with 12544)" in str(e.value)
    assert "think" not in str(e.value)
    check_prompt_matches(str(tmp_path / "none"), PromptConfig())  # no file: nothing to check


def test_trained_prompt_record_round_trips_through_a_checkpoint_folder(tmp_path):
    (tmp_path / "hf").mkdir()
    shipped.write_trained_prompt(tmp_path, {"action_format": "pointer", "max_pixels": 12544})
    assert trained_prompt(str(tmp_path / "hf")) == {"action_format": "pointer", "max_pixels": 12544}


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.browser
@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", shipped.shipped_names())
def test_shipped_checkpoint_meets_its_model_card(name, tmp_path, monkeypatch):
    """`webrl eval` of each shipped checkpoint, offline, on the fixed held-out sample its model
    card reports (`webrl_card.json`'s `test_sample`: config overrides, environment variables,
    and the success and valid-action rate measured with them), in the prompt format it was trained with
    (`webrl_prompt.json`). With the sandbox shown at a fixed origin the prompts are identical
    between runs, and with `run.deterministic=true` (one request per forward pass) greedy decoding
    repeats the card's figures whatever the two env slots' timing; the margins (one
    task, 5 points of valid actions) absorb a flipped argmax between CPU builds."""
    import os

    from webrl.config import load_config
    from webrl.models.shipped import ASSETS, resolve_shipped
    from webrl.run.config import WebRLConfig
    from webrl.run.trainer import Trainer
    from webrl.types import load_trajectories

    assert os.environ.get("HF_HUB_OFFLINE") == "1"  # set by tests/conftest.py: no hub access
    folder = resolve_shipped(f"webrl:{name}")
    card = json.loads((ASSETS / name / "webrl_card.json").read_text())
    sample = card["test_sample"]
    assert f"success {sample['success']:.3f}" in (ASSETS / name / "MODEL_CARD.md").read_text()
    prompt = [f"generator.prompt.{k}={v}" for k, v in trained_prompt(folder).items()]
    for key, value in sample["env"].items():  # the env workers (Ray actors) inherit it
        monkeypatch.setenv(key, value)
    config = load_config(WebRLConfig, "default", [*prompt, *sample["overrides"], f"run.run_dir={tmp_path / 'eval'}",
                                                  f"model.path={folder}"])
    summary = Trainer(config).run_eval()
    assert summary.tasks == sample["tasks"] and summary.dropped == 0
    assert summary.success >= sample["success"] - sample["margin_tasks"] / sample["tasks"], (summary, sample)
    (log,) = (tmp_path / "eval" / "trajectories").glob("*.jsonl")
    turns = [t for traj in load_trajectories(log) for t in traj.turns]
    valid = sum(t.parse_error is None for t in turns) / len(turns)
    # a random-init model of the same size parses ~0% of its responses
    assert valid >= sample["valid_action_rate"] - sample["margin_valid_action_rate"], valid
