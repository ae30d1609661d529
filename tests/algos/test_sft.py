"""Action-aware SFT pieces: token weights, action / coordinate spans, reasoning mix sampler."""
import pytest
import torch

from webrl.algos import (ReasoningMixSampler, action_char_spans, action_token_weights, spans_to_token_mask,
                         strip_reasoning)


def test_action_token_weights():
    loss_mask = torch.tensor([[0, 1, 1, 1, 1]])
    action = torch.tensor([[0, 0, 1, 1, 0]], dtype=torch.bool)
    coordinate = torch.tensor([[0, 0, 0, 1, 1]], dtype=torch.bool)
    w = action_token_weights(loss_mask, action, coordinate, action_weight=2.0, coordinate_factor=3.0)
    # prompt 0; reasoning 1; action 2; coordinates 2 * 3 = 6 (also where action_mask misses one)
    assert w.tolist() == [[0.0, 1.0, 2.0, 6.0, 6.0]]
    assert action_token_weights(loss_mask).tolist() == [[0.0, 1.0, 1.0, 1.0, 1.0]]


def test_action_spans_in_tool_call():
    text = '<think>click 3 things</think><tool_call>{"name": "computer_use", "arguments": ' \
           '{"action": "left_click", "coordinate": [512, 30]}}</tool_call>'
    actions, coords = action_char_spans(text)
    assert [text[s:e] for s, e in actions] == [text[text.index("<tool_call>"):]]
    # the "3" in the reasoning is not an action coordinate
    assert [text[s:e] for s, e in coords] == ["512", "30"]


def test_action_spans_compact_grammar_skip_string_literals():
    text = '<think>type it</think>\ntype(5, "5 apples for $3")'
    actions, coords = action_char_spans(text)
    assert [text[s:e] for s, e in actions] == ['type(5, "5 apples for $3")']
    assert [text[s:e] for s, e in coords] == ["5"]
    bare = "click(12)"
    assert action_char_spans(bare) == ([(0, 9)], [(6, 8)])


def test_answer_block_gui_libra_format():
    text = '<thinking>a</thinking><answer>{"action_type": "Click", "value": "None", "point_2d": [10, 20]}</answer>'
    actions, coords = action_char_spans(text)
    assert text[actions[0][0]:actions[0][1]].startswith("<answer>")
    assert [text[s:e] for s, e in coords] == ["10", "20"]


def test_spans_to_token_mask_overlap():
    # tokens cover chars [0,3) [3,6) [6,9) [9,10); span [4, 9) overlaps tokens 1 and 2
    offsets = [(0, 3), (3, 6), (6, 9), (9, 10)]
    assert spans_to_token_mask(offsets, [(4, 9)]).tolist() == [False, True, True, False]
    assert spans_to_token_mask(offsets, []).tolist() == [False] * 4


def test_strip_reasoning():
    assert strip_reasoning("<think>why\nbecause</think>\nclick(3)") == "click(3)"
    assert strip_reasoning("<thinking>x</thinking><answer>a</answer>") == "<answer>a</answer>"
    assert strip_reasoning("click(3)") == "click(3)"


def test_reasoning_mix_sampler_one_to_one_and_seeded():
    sampler = ReasoningMixSampler(10, seed=1)
    order = list(sampler)
    assert len(order) == len(sampler) == 20
    # 1:1: every source once with reasoning and once direct
    assert sorted(order) == sorted([(i, True) for i in range(10)] + [(i, False) for i in range(10)])
    assert list(ReasoningMixSampler(10, seed=1)) == order
    sampler.set_epoch(1)
    assert list(sampler) != order
    half = list(ReasoningMixSampler(10, direct_fraction=0.5, seed=0))
    assert sum(1 for _, r in half if r) == 10 and sum(1 for _, r in half if not r) == 5
    assert list(ReasoningMixSampler(0)) == []
    with pytest.raises(ValueError, match="direct_fraction"):
        ReasoningMixSampler(3, direct_fraction=1.5)
