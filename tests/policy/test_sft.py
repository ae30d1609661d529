"""SFT samples: rollout-time and SFT renders are token-identical; demos; ShareGPT loader; overfit check."""
import json

import pytest
import torch

from tests.policy.helpers import observation, policy, screenshot
from webrl.actions import Action
from webrl.policy import PolicyRequest, SamplingConfig, load_sharegpt, sft_samples_from_trajectory
from webrl.types import Trajectory, Turn, load_trajectories, save_trajectories


@pytest.mark.parametrize("family", ["qwen2.5-vl", "qwen3-vl"])
def test_rollout_and_sft_prompts_are_token_identical(family, tiny_model_paths, tmp_path):
    pol = policy(tiny_model_paths[family], sampling=SamplingConfig(temperature=1.0, max_new_tokens=6),
                 num_screenshots=2, context_mode="last_n_reasoning", reasoning_turns=1)
    turns = []
    for t in range(3):  # a 3-step rollout without a browser
        obs = observation(t)
        decision = pol.act([PolicyRequest(obs, list(turns))])[0]
        turns.append(decision.to_turn(obs, policy_version=0))
    traj = Trajectory("task-1", goal=observation(0).goal, turns=turns, reward=1.0)
    save_trajectories(tmp_path / "t.jsonl", [traj])  # through JSON and image files, as stored
    (loaded,) = load_trajectories(tmp_path / "t.jsonl")
    samples = sft_samples_from_trajectory(loaded, pol)
    assert len(samples) == 3
    for turn, sample in zip(turns, samples):
        assert sample.prompt_ids == turn.prompt_ids
        assert sample.response_ids == turn.response_ids
        assert [im.data for im in sample.images] == [im.data for im in turn.images]


def test_oracle_demo_turns_render_their_action(tiny_qwen3vl_path):
    pol = policy(tiny_qwen3vl_path)
    obs = observation(0)
    demo = Turn(images=[obs.screenshot], action=Action.click(1), observation=obs.to_record(), decided_by="oracle")
    (sample,) = sft_samples_from_trajectory(Trajectory("demo", goal=obs.goal, turns=[demo]), pol)
    target = pol.builder.format.render(Action.click(1))
    assert pol.tokenizer.decode(sample.response_ids) == target  # ends in </tool_call>: no <|im_end|> added
    assert sample.prompt_ids == pol.prompt_ids(pol.builder.render(PolicyRequest(obs)))


@pytest.mark.parametrize("fmt", ["som", "compact"])
def test_recorded_oracle_turns_train_and_show_the_policy_format(tiny_qwen25vl_path, fmt):
    """`run_oracle_episode` stores the env grammar (`click(1)`) as response_text; the SFT target
    and the history must still be in the policy's format, which its parser accepts (a model
    trained on bare `click(1)` would fail to parse every rollout turn)."""
    pol = policy(tiny_qwen25vl_path, action_format=fmt)
    first, second = observation(0), observation(1)
    turns = [Turn(images=[o.screenshot], action=a, response_text=a.to_compact(), observation=o.to_record(),
                  decided_by="oracle") for o, a in ((first, Action.click(1)), (second, Action.stop()))]
    samples = sft_samples_from_trajectory(Trajectory("demo", goal=first.goal, turns=turns), pol)
    for sample, turn in zip(samples, turns):
        text = pol.tokenizer.decode(sample.response_ids)
        assert text == pol.builder.format.render(turn.action) != turn.response_text
        assert pol.builder.format.parse(text) == turn.action
    history = pol.builder.render(PolicyRequest(second, turns[:1])).text
    assert pol.builder.format.render(Action.click(1)) in history


def test_sharegpt_loader(tiny_qwen25vl_path, tmp_path):
    pol = policy(tiny_qwen25vl_path)
    (tmp_path / "a.png").write_bytes(screenshot(320, 200).data)
    (tmp_path / "b.png").write_bytes(screenshot(200, 320).data)
    records = [
        {"messages": [{"role": "system", "content": "S"},
                      {"role": "user", "content": "<image>Open the cart"},
                      {"role": "assistant", "content": "<tool_call>click(3)</tool_call>"},
                      {"role": "tool", "content": "ok"},
                      {"role": "user", "content": "<image>now?"},
                      {"role": "assistant", "content": "done"}],
         "images": ["a.png", "b.png"]},
        {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]},
    ]
    (tmp_path / "data.json").write_text(json.dumps(records))
    samples = load_sharegpt(tmp_path / "data.json", pol)
    assert len(samples) == 3
    pad = pol.processor.image_token_id
    # each 320x200 / 200x320 image is 60 visual tokens at these pixel bounds (see test_prompt)
    assert [s.prompt_ids.count(pad) for s in samples] == [60, 120, 0]
    im_end = pol.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert samples[0].response_ids[-1] != im_end and samples[1].response_ids[-1] == im_end
    assert pol.tokenizer.decode(samples[2].prompt_ids) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    records[0]["images"] = ["a.png"]
    (tmp_path / "bad.json").write_text(json.dumps(records))
    with pytest.raises(ValueError, match=r"bad.json\[0\].*more <image> tags than images"):
        load_sharegpt(tmp_path / "bad.json", pol)


@pytest.mark.slow
def test_sft_on_a_demo_then_greedy_act_reproduces_it_and_stops(tiny_qwen25vl_path):
    """End to end: demo -> SFT sample -> a few optimiser steps -> act() emits the demo's call."""
    pol = policy(tiny_qwen25vl_path, sampling=SamplingConfig(greedy=True, max_new_tokens=20), think=False,
                 action_format="compact")  # the shortest system prompt: this test trains, keep it cheap
    obs = observation(0)
    action = Action.type_text("blue mug", 1)
    demo = Turn(images=[obs.screenshot], action=action, observation=obs.to_record())
    (sample,) = sft_samples_from_trajectory(Trajectory("demo", goal=obs.goal, turns=[demo]), pol)
    enc = pol.encode([pol.builder.render(PolicyRequest(obs))])
    P, R = len(sample.prompt_ids), len(sample.response_ids)
    ids = torch.tensor([sample.prompt_ids + sample.response_ids])  # (1, P + R)
    labels = ids.clone()
    labels[0, :P] = -100  # loss on the response only
    mm = torch.cat([enc["mm_token_type_ids"], torch.zeros(1, R, dtype=torch.long)], 1)
    model = pol.model
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(40):
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids), pixel_values=enc["pixel_values"],
                    image_grid_thw=enc["image_grid_thw"], mm_token_type_ids=mm, labels=labels)
        if torch.equal(out.logits[0, P - 1:P + R - 1].argmax(-1), ids[0, P:]):
            break  # teacher-forced argmax already reproduces the target: greedy decoding will too
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    model.eval()
    (decision,) = pol.act([PolicyRequest(obs)])
    assert decision.parsed == action, decision.response_text
    assert decision.stats.finish_reason == "stop" and decision.response_text.endswith("</tool_call>")
    assert decision.response_ids == sample.response_ids
