"""Action-aware SFT in `webrl sft`: action / coordinate masks from the real tokenizer of the
shipped checkpoint for each action format, the reasoning/direct mix, the weights the sft
objective applies, and `sft.data` wiring (webrl.datasets faked where it does not exist yet)."""
import sys
import types

import pytest
import torch

from tests.policy.helpers import observation, policy
from webrl.actions import Action
from webrl.algos import SFTConfig
from webrl.algos.objectives import full_batch_scale
from webrl.config import ConfigError, load_config
from webrl.learner.samples import LearnerSample, collate
from webrl.policy import Decision, sft_samples_from_trajectory
from webrl.policy.computer_use import ComputerUseFormat
from webrl.policy.formats import PointerFormat, SetOfMarkFormat
from webrl.policy.sft import _target, response_masks
from webrl.recipes.sft import TurnSource, epoch_samples, offline_trajectories, pass_size
from webrl.run.config import WebRLConfig
from webrl.types import Trajectory, Turn

SHIPPED = "webrl:tiny-webagent-pointer"


@pytest.fixture(scope="module")
def pointer_policy():
    return policy(SHIPPED, action_format="pointer", prompt_version="brief", think=False)


def _marked(pol, text, response_ids=()):
    ids, offsets, span_text = _target(pol, text, list(response_ids))
    action, coordinate = response_masks(offsets, span_text)
    tokens = pol.tokenizer.convert_ids_to_tokens(ids)
    return tokens, [t for t, a in zip(tokens, action) if a], [t for t, c in zip(tokens, coordinate) if c]


def test_pointer_action_marks_the_element_token_as_the_coordinate(pointer_policy):
    text = PointerFormat().render(Action.type_text("red 5 scarf", 12))
    assert text == '<tool_call>type(<e12>, "red 5 scarf")</tool_call>'
    tokens, action, coordinate = _marked(pointer_policy, text)
    assert action == tokens  # the whole response is the tool call; it ends in </tool_call>: no stop token added
    assert coordinate == ["<e12>"]  # the element token; the 5 inside the typed text is not a coordinate


def test_set_of_mark_and_computer_use_coordinates(pointer_policy):
    som = SetOfMarkFormat().render(Action.click(12))
    _, _, coordinate = _marked(pointer_policy, som)
    assert "".join(coordinate) == "12"  # `"element": 12`: the digits only, not the JSON keys
    cu = '<tool_call>{"name": "computer_use", "arguments": {"action": "left_click", "coordinate": [512, 300]}}</tool_call>'
    tokens, action, coordinate = _marked(pointer_policy, "<think>go to 7</think>" + cu)
    assert coordinate == ["5", "1", "2", "3", "0", "0"]  # byte-level digits; the 7 in the reasoning is not
    assert action[0] == "<tool_call>" and "go" not in action and "<think>" not in action


def test_a_stop_token_appended_to_a_bare_action_is_outside_the_action(pointer_policy):
    tokens, action, coordinate = _marked(pointer_policy, "click(<e3>)")  # no tool-call block: all text is the action
    assert tokens[-1] == "<|im_end|>" and action == tokens[:-1] and coordinate == ["<e3>"]


@pytest.mark.parametrize("text", ["<think>the mug is 3</think><tool_call>click(<e3>)</tool_call>", "click(<e3>)"])
def test_sampled_response_ids_give_the_same_masks_as_tokenised_text(pointer_policy, text):
    ids, offsets, _ = _target(pointer_policy, text, [])
    tokens, action, coordinate = _marked(pointer_policy, text)
    assert coordinate == ["<e3>"] and "<|im_end|>" not in action
    assert _marked(pointer_policy, text, ids) == (tokens, action, coordinate)  # offsets from decoded prefixes


def _reasoning_trajectory():
    obs = observation(0)
    text = "<think>The mug is element 0.</think>" + PointerFormat().render(Action.click(0))
    return Trajectory("t", goal=obs.goal, turns=[Decision(Action.click(0), text, images=[obs.screenshot]).to_turn(obs)])


def test_reasoning_turn_yields_its_direct_variant_with_the_same_prompt(pointer_policy):
    traj = _reasoning_trajectory()
    only, = sft_samples_from_trajectory(traj, pointer_policy)
    with_reasoning, direct = sft_samples_from_trajectory(traj, pointer_policy, direct=True)
    assert only.response_ids == with_reasoning.response_ids and only.variant == "reasoning"
    assert direct.variant == "direct" and direct.prompt_ids == with_reasoning.prompt_ids
    assert pointer_policy.tokenizer.decode(direct.response_ids) == "<tool_call>click(<e0>)</tool_call>"
    assert all(direct.action_mask) and sum(direct.coordinate_mask) == 1
    assert sum(with_reasoning.action_mask) == len(direct.response_ids)  # reasoning tokens weigh 1
    obs = observation(0)
    oracle = Turn(images=[obs.screenshot], action=Action.click(1), observation=obs.to_record(), decided_by="oracle")
    plain = sft_samples_from_trajectory(Trajectory("d", goal=obs.goal, turns=[oracle]), pointer_policy, direct=True)
    assert [s.variant for s in plain] == ["plain"]  # oracle demonstrations have no reasoning: used once


def _source(k, reasoning):
    sample = LearnerSample([1], [10 + k])
    return TurnSource(0, sample, LearnerSample([1], [100 + k]) if reasoning else None)


def test_mix_uses_plain_turns_once_and_a_fraction_of_reasoning_turns_twice():
    pool = [_source(0, False), _source(1, False), _source(2, False), _source(3, True), _source(4, True)]
    assert pass_size(pool, 0.5) == 3 + 2 + 1 and pass_size(pool, 0.0) == 5 and pass_size(pool, 1.0) == 7
    for epoch in range(4):
        ids = sorted(s.response_ids[0] for s in epoch_samples(pool, 0.5, seed=0, epoch=epoch))
        # every plain and reasoning turn once, plus one of the two direct variants (103 or 104)
        assert ids[:5] == [10, 11, 12, 13, 14] and len(ids) == 6 and ids[5] in (103, 104)
    picks = {sorted(s.response_ids[0] for s in epoch_samples(pool, 0.5, seed=0, epoch=e))[5] for e in range(8)}
    assert picks == {103, 104}  # the direct share is drawn afresh each pass
    assert [s.response_ids[0] for s in epoch_samples(pool[:3], 1.0, seed=0, epoch=0)] == [10, 11, 12]


def test_masks_reach_the_sft_weights(pointer_policy):
    ids, offsets, text = _target(pointer_policy, "<think>ok</think><tool_call>click(<e3>)</tool_call>", [])
    action, coordinate = response_masks(offsets, text)
    sample = LearnerSample([1, 2], ids, action_mask=action, coordinate_mask=coordinate)
    batch, extras = collate([sample], pad_id=0)
    scale = full_batch_scale(batch, SFTConfig(action_weight=2.0, coordinate_factor=2.0), extras)
    # tokens: <think> o k </think> (w 1 each), <tool_call> click ( ) </tool_call> (w 2), <e3> (w 2 * 2)
    assert len(ids) == 10 and float(scale.normalizer) == 4 * 1 + 5 * 2 + 4
    uniform = full_batch_scale(batch, SFTConfig(action_weight=1.0, coordinate_factor=1.0), extras)
    assert float(uniform.normalizer) == 10  # the shipped default: plain token mean


def test_action_weights_are_accepted_and_direct_fraction_needs_reasoning_data():
    sft = "trainer.stages=[sft,rl]"  # without an SFT stage every sft.* key is refused
    cfg = load_config(WebRLConfig, None, [sft, "sft.action_weight=2.0", "sft.coordinate_factor=2.0"])
    assert cfg.sft.action_weight == 2.0
    assert load_config(WebRLConfig, None, [sft, "sft.direct_fraction=1.0", "sft.demos_dir=/tmp/x"])
    with pytest.raises(ConfigError, match="sft.direct_fraction=1.0 has no effect"):
        load_config(WebRLConfig, None, [sft, "sft.direct_fraction=1.0"])


class _Report:
    def summary(self):
        return {"steps": 3, "skipped": 1}


@pytest.fixture
def fake_datasets(monkeypatch):
    """A stand-in `webrl.datasets` with two formats (the real readers are tested in tests/datasets)."""
    module = types.ModuleType("webrl.datasets")
    module.FORMATS = ("gui360", "mind2web")
    module.builders = []

    def load_offline(spec, builder=None):
        module.builders.append(builder)
        fmt, _, path = spec.rpartition(":")
        if fmt not in module.FORMATS:
            raise ValueError(f"unknown format {fmt!r}")
        return types.SimpleNamespace(trajectories=[Trajectory(path)], report=_Report())

    module.load_offline = load_offline
    monkeypatch.setitem(sys.modules, "webrl.datasets", module)
    return module


def test_sft_data_loads_each_spec_and_logs_its_report(fake_datasets):
    logged = []
    out = offline_trajectories(["gui360:/d/a.jsonl", "mind2web:/d/b"], logged.append, builder="the policy's builder")
    assert [t.task_id for t in out] == ["/d/a.jsonl", "/d/b"]
    assert fake_datasets.builders == ["the policy's builder"] * 2  # responses re-rendered in the policy's format
    assert logged[0] == {"stage": "sft_dataset", "spec": "gui360:/d/a.jsonl", "trajectories": 1, "steps": 3,
                         "skipped": 1}
    with pytest.raises(ConfigError, match=r"sft.data\[1\]='nope:/d/c': unknown format 'nope'"):
        offline_trajectories(["gui360:/d/a", "nope:/d/c"], logged.append)


def test_sft_data_unknown_format_fails_at_config_time(fake_datasets):
    sft = "trainer.stages=[sft,rl]"
    cfg = load_config(WebRLConfig, None, [sft, "sft.data=[gui360:/d/a.jsonl, /d/plain.json]"])
    assert cfg.sft.data == ["gui360:/d/a.jsonl", "/d/plain.json"]
    with pytest.raises(ConfigError, match=r"sft.data\[0\]='gui361:/d/a': unknown format 'gui361'; allowed: "):
        load_config(WebRLConfig, None, [sft, "sft.data=[gui361:/d/a]"])
    with pytest.raises(ConfigError, match=r"sft.data\[0\] must be a non-empty"):
        load_config(WebRLConfig, None, [sft, "sft.data=['']"])


@pytest.mark.slow
def test_sft_data_through_the_real_readers_answers_in_the_policys_format(tmp_path, pointer_policy):
    """sft.data with the real webrl.datasets: an OpenWebRL file's tool calls become pointer-format
    targets for the pointer policy (not the converter's compact text), and every SFT sample parses
    back to its turn's action."""
    from tests.datasets.test_openwebrl import write_released

    path = write_released(tmp_path)
    logged = []
    trajs = offline_trajectories([f"openwebrl:{path}"], logged.append, builder=pointer_policy.builder)
    assert logged[0]["stage"] == "sft_dataset" and logged[0]["skipped"]  # call_user is reported, not mapped
    samples = [s for t in trajs for s in sft_samples_from_trajectory(t, pointer_policy)]
    assert samples
    fmt = pointer_policy.builder.format
    for traj in trajs:
        for turn in traj.turns:
            if turn.response_text:
                assert turn.response_text.startswith("<tool_call>") and "<think>" not in turn.response_text
                assert fmt.parse(turn.response_text, None) == turn.action
