"""`load_offline`'s contract: specs, format guessing, options, points, and the SFT prompt path."""
import json

import pytest

from tests.datasets import png
from webrl.actions import Action
from webrl.datasets import FORMATS, load_offline, parse_spec
from webrl.datasets.common import to_pixels


def _gui360_file(tmp_path, name="train.jsonl"):
    (tmp_path / "shots").mkdir(exist_ok=True)
    rows = []
    for i, (fn, args) in enumerate([("click", {"coordinate": [50, 40]}), ("type", {"keys": "mug"}),
                                    ("click", {"coordinate": [10, 20]})]):
        (tmp_path / "shots" / f"{i}.png").write_bytes(png(200, 100, (i * 60, 20, 20)))
        rows.append({"execution_id": "e1", "request": "Buy a blue mug", "step_id": i,
                     "step": {"screenshot_clean": f"shots/{i}.png", "thought": f"step {i}",
                              "action": {"action_type": "GUI", "function": fn, "args": args}}})
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_specs_and_formats(tmp_path):
    assert FORMATS == ("gui360", "mind2web", "openwebrl", "sharegpt")
    assert parse_spec("gui360:/data/x.jsonl") == ("gui360", tmp_path.__class__("/data/x.jsonl"))
    assert parse_spec("/data/x.jsonl")[0] is None
    with pytest.raises(ValueError, match="unknown dataset format 'guiact'.*allowed: gui360, mind2web, openwebrl, sharegpt"):
        load_offline("guiact:/data/x.jsonl")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_offline(f"gui360:{tmp_path / 'nope.jsonl'}")
    odd = tmp_path / "odd.jsonl"
    odd.write_text('{"foo": 1}\n')
    with pytest.raises(ValueError, match="cannot tell the dataset format .* FORMAT:PATH"):
        load_offline(str(odd))


def test_folder_spec_reads_every_file_and_options_are_checked(tmp_path):
    _gui360_file(tmp_path, "a.jsonl")
    _gui360_file(tmp_path, "b.jsonl")
    result = load_offline(f"gui360:{tmp_path}")
    assert len(result.trajectories) == 2 and [f.rsplit("/", 1)[1] for f in result.report.files] == ["a.jsonl", "b.jsonl"]
    assert result.report.summary()["formats"]["gui360"]["mapped"] == 6
    with pytest.raises(ValueError, match=r"option\(s\) \['colour'\] not taken .*allowed: \['point_space', 'image_root'\]"):
        load_offline(f"gui360:{tmp_path}", colour=1)
    with pytest.raises(ValueError, match="point_space must be one of"):
        load_offline(f"gui360:{tmp_path}", point_space="inches")


def test_points_are_rescaled_to_the_stored_screenshot():
    assert to_pixels([500, 250], "normalized_1000", (200, 100)) == (100, 25)
    assert to_pixels([100, 50], "pixels", (200, 100), source_size=(400, 200)) == (50, 25)  # another resolution
    assert to_pixels([30, 40], "pixels", (200, 100)) == (30, 40)
    with pytest.raises(ValueError, match="outside the 200x100 screenshot"):
        to_pixels([250, 40], "pixels", (200, 100))
    with pytest.raises(ValueError, match="outside 0..1000"):
        to_pixels([1001, 0], "normalized_1000", (200, 100))


def _artifact(fmt, tmp_path):
    from tests.datasets.test_gui360 import write_raw
    from tests.datasets.test_mind2web import write_task_json
    from tests.datasets.test_openwebrl import write_released, write_sharegpt

    return {"gui360": write_raw, "mind2web": write_task_json, "openwebrl": write_released,
            "sharegpt": write_sharegpt}[fmt](tmp_path)


@pytest.fixture(scope="module")
def pointer_policy():
    from webrl.models import load_model
    from webrl.policy import GeneratorPolicy
    from webrl.run.config import default_generator

    model, processor = load_model("webrl:tiny-webagent-pointer")
    return GeneratorPolicy(model, processor, default_generator())


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_renders_for_the_shipped_policy(fmt, tmp_path, pointer_policy):
    """Each format's artifact, converted for the shipped prompt (pointer format, no reasoning),
    gives non-empty SFT samples whose targets are the policy's own calls."""
    from webrl.policy import sft_samples_from_trajectory
    from webrl.policy.formats import make_format

    result = load_offline(f"{fmt}:{_artifact(fmt, tmp_path)}", builder=pointer_policy.builder)
    traj = next(t for t in result.trajectories if t.turns)
    samples = sft_samples_from_trajectory(traj, pointer_policy)
    assert len(samples) == len(traj.turns) and all(s.prompt_ids and s.response_ids for s in samples)
    targets = [pointer_policy.tokenizer.decode(s.response_ids) for s in samples]
    assert [make_format("pointer").parse(t) for t in targets] == [t.action for t in traj.turns]
    assert not any("<think>" in t for t in targets)
    if fmt == "mind2web":  # Set-of-Mark ids become the pointer's element tokens, in the list and the call
        assert targets[0] == '<tool_call>type(<e1>, "Oslo")</tool_call>'
        assert '<e1> input "Search flights"' in pointer_policy.tokenizer.decode(samples[0].prompt_ids)


@pytest.mark.slow
def test_converted_trajectory_renders_through_the_rollout_prompt_path(tmp_path, pointer_policy):
    from webrl.policy import PolicyRequest, sft_samples_from_trajectory
    from webrl.policy.types import Observation

    policy = pointer_policy
    (raw,) = load_offline(f"gui360:{_gui360_file(tmp_path)}").trajectories
    result = load_offline(f"gui360:{_gui360_file(tmp_path)}", builder=policy.builder)
    (traj,) = result.trajectories
    assert result.report.unrenderable == 0
    # the shipped prompt is pointer format without reasoning: the targets are its calls only
    assert [t.response_text for t in traj.turns] == [
        "<tool_call>click_at(50, 40)</tool_call>", '<tool_call>type(text="mug", clear=false)</tool_call>',
        "<tool_call>click_at(10, 20)</tool_call>"]
    assert raw.turns[0].response_text.startswith("<think>\nstep 0\n</think>")  # kept without a builder
    samples = sft_samples_from_trajectory(traj, policy)
    assert len(samples) == 3 and all(s.prompt_ids and s.response_ids for s in samples)
    tok = policy.tokenizer
    assert [tok.decode(s.response_ids) for s in samples] == [t.response_text for t in traj.turns]
    # the SFT prompt of turn 2 is the one a rollout renders at that step (same builder, same history)
    request = PolicyRequest(Observation.from_turn(traj.turns[2], traj.goal), traj.turns[:2])
    assert samples[2].prompt_ids == policy.prompt_ids(policy.builder.render(request))
    assert "Task: Buy a blue mug" in tok.decode(samples[2].prompt_ids)
    assert samples[2].images[-1] == traj.turns[2].images[0]


def test_element_actions_not_expressible_in_computer_use_are_counted(tmp_path):
    from webrl.policy.prompt import PromptBuilder, PromptConfig

    (tmp_path / "s.png").write_bytes(png(200, 100))
    rows = [{"messages": [{"role": "user", "content": "<image>Go"}, {"role": "assistant", "content":
             '<tool_call>{"name": "browser", "arguments": {"action": "click", "element": 4}}</tool_call>'}],
             "images": ["s.png"]}]
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(rows))
    builder = PromptBuilder(PromptConfig(action_format="computer_use"), "qwen3-vl")
    result = load_offline(f"sharegpt:{path}", builder=builder)
    assert result.trajectories[0].turns[0].action == Action.click(4)
    assert result.trajectories[0].turns[0].response_text == "" and result.report.unrenderable == 1
    assert result.report.summary()["unrenderable"] == 1
