"""The pure parts of benchmarks/sft_alternatives.py: element spans in prompt ids, pointer scores
(shape, masking, values by hand), the held-out accuracies, and the batched greedy decode against
`GeneratorPolicy` (the project's decode path)."""
import io
import math

import pytest
import torch

from tests.benchmarks.helpers import load_benchmark

from webrl.actions import ACTION_KINDS, parse_compact
from webrl.types import Image, Trajectory, Turn



@pytest.fixture(scope="module")
def alt():
    return load_benchmark("sft_alternatives")


def _png(colour) -> Image:
    from PIL import Image as PILImage

    buf = io.BytesIO()
    PILImage.new("RGB", (140, 112), colour).save(buf, format="PNG")
    return Image(buf.getvalue(), "png")


def _turn(lines: list[tuple[int, str, str]], action: str, extra_ids=(), colour="white") -> Turn:
    text = "\n".join(f'[{i}] {role} "{name}"' for i, role, name in lines)
    elements = [{"id": i, "bbox": [0, 0, 10, 10], "role": role, "name": name} for i, role, name in lines]
    elements += [{"id": i, "bbox": [0, 0, 1, 1], "role": "link", "name": "unlisted"} for i in extra_ids]
    # response_text as webrl/recipes/demos.py records it: the bare env grammar (the policy renders
    # oracle turns in its own format instead)
    return Turn(images=[_png(colour)], action=parse_compact(action), response_text=action, decided_by="oracle",
                observation={"url": "http://127.0.0.1:1/widgets/", "title": "Form", "elements_text": text,
                             "step": 0, "screenshot_size": [140, 112], "elements": elements})


@pytest.fixture(scope="module")
def policy(tiny_qwen25vl_path):
    from webrl.models import load_model
    from webrl.policy import GeneratorConfig, GeneratorPolicy, PromptConfig, SamplingConfig

    model, processor = load_model(tiny_qwen25vl_path)
    # history_elements: the past turn's list (same ids, other names) is in the prompt too, so
    # the spans must come from the current list.
    prompt = PromptConfig(action_format="compact", prompt_version="brief", think=False, num_screenshots=1,
                          max_pixels=12544, history_elements=True)
    return GeneratorPolicy(model, processor, GeneratorConfig(prompt, SamplingConfig(greedy=True, max_new_tokens=16)))


@pytest.fixture(scope="module")
def trajectory():
    first = _turn([(3, "textbox", "Old name"), (7, "button", "Old save")], 'type(3, "ann")')
    second = _turn([(3, "textbox", "Email"), (7, "link", "Help"), (12, "button", "Save changes")], "click(12)",
                   extra_ids=(5,), colour="grey")
    third = _turn([(3, "textbox", "Email")], "click(99)")
    return Trajectory("widgets/l0/test/form/1", goal='Type "ann" and save.', turns=[first, second, third])


def test_element_spans_cover_the_current_lines(alt, policy, trajectory):
    examples = alt.examples_from_trajectories([trajectory], policy)
    assert len(examples) == 3
    second = examples[1]
    decoded = [policy.tokenizer.decode([second.prompt_ids[p] for p in pos]).strip()
               for pos in second.element_positions]
    # id 5 is in observation["elements"] but not in the element list text: not listed, dropped
    assert decoded == ['[3] textbox "Email"', '[7] link "Help"', '[12] button "Save changes"']
    last_header = max(i for i in range(len(second.prompt_ids))
                      if policy.tokenizer.decode(second.prompt_ids[i:i + 3]).startswith("Elements"))
    assert min(second.element_positions[0]) > last_header  # not the past turn's "[3] textbox "Old name""
    assert second.target == 2 and second.kind == ACTION_KINDS.index("click")  # index of id 12, not the id
    assert examples[0].target == 0 and examples[0].kind == ACTION_KINDS.index("type")
    assert examples[2].target == -1  # click(99): the element is not listed
    # an oracle turn's target is its action in the policy's format, ending in a stop token
    assert policy.tokenizer.decode(second.response_ids) == "<tool_call>click(12)</tool_call>"
    assert second.response_ids[-1] in policy.stop_ids
    # one 140x112 screenshot at max 12544 px -> 112x84 -> (4*3) merged tokens
    assert tuple(second.grid.tolist()[0]) == (1, 6, 8)


def test_pooling_matrix_and_pointer_scores_by_hand(alt):
    pool, mask = alt.pooling_matrix([[[0], [1, 2]], [[0, 1]]], length=5)
    assert pool.shape == (2, 2, 5) and mask.tolist() == [[True, True], [True, False]]
    assert pool[0, 1].tolist() == [0.0, 0.5, 0.5, 0.0, 0.0]
    hidden = torch.tensor([[[1., 0.], [0., 1.], [1., 1.], [2., 0.], [9., 9.]],
                           [[1., 1.], [3., 1.], [0., 5.], [1., 0.], [9., 9.]]])  # (B=2, T=5, H=2)
    query = torch.tensor([3, 2])
    # W = I. Row 0: q = (2, 0); e0 = (1, 0), e1 = mean((0,1), (1,1)) = (0.5, 1); scores (2, 1) / sqrt 2.
    # Row 1: q = (0, 5); e0 = mean((1,1), (3,1)) = (2, 1); score 5 / sqrt 2; slot 1 masked.
    s = alt.pointer_scores(hidden, pool, mask, query, torch.eye(2))
    assert s.shape == (2, 2)
    assert torch.allclose(s[0], torch.tensor([2.0, 1.0]) / math.sqrt(2))
    assert s[1, 0].item() == pytest.approx(5 / math.sqrt(2)) and s[1, 1].item() == float("-inf")
    # W = [[0, 0], [1, 0]]: W q = (0, q0). Row 0: (0, 2) -> scores (0, 2) / sqrt 2 (W^T would give 0, 0).
    w = torch.tensor([[0., 0.], [1., 0.]])
    s = alt.pointer_scores(hidden, pool, mask, query, w)
    assert torch.allclose(s[0], torch.tensor([0.0, 2.0]) / math.sqrt(2))
    # a position in no span and not the query (the pad at t = 4) changes nothing
    other = hidden.clone()
    other[:, 4] = -7.0
    assert torch.equal(alt.pointer_scores(other, pool, mask, query, w), s)


def test_decode_metrics_and_chance_by_hand(alt):
    def ex(action, target, listed):
        return alt.StepExample([1], [2], [[0]] * listed, target, ACTION_KINDS.index(parse_compact(action).kind),
                               parse_compact(action))

    examples = [ex("click(3)", 0, 3), ex('type(5, "abc")', 1, 2), ex("click(7)", 2, 4), ex("stop()", -1, 5)]
    texts = ["click(3)", 'type(5, "abd")', "garbage", "<tool_call>stop()</tool_call>"]
    m = alt.decode_metrics(texts, examples)
    assert m["exact_action"] == pytest.approx(2 / 4)  # click(3) and stop()
    assert m["element_acc"] == pytest.approx(2 / 3)  # 3 and 5 right, the parse error wrong
    assert m["kind_acc"] == pytest.approx(2 / 3)
    assert m["kind_acc_all"] == pytest.approx(3 / 4)
    assert alt.chance_level(examples) == pytest.approx((1 / 3 + 1 / 2 + 1 / 4) / 3)  # = 13/36
    assert math.isnan(alt.accuracy([], []))
    with pytest.raises(ValueError, match="Variant.head"):
        alt.Variant("x", head="coords")


def test_batched_greedy_decode_matches_generator_policy(alt, policy, trajectory):
    from webrl.policy import Observation, PolicyRequest

    examples = alt.examples_from_trajectories([trajectory], policy)
    requests = [PolicyRequest(Observation.from_turn(t, trajectory.goal), trajectory.turns[:i])
                for i, t in enumerate(trajectory.turns)]
    expected = [d.response_text for d in policy.act(requests)]
    assert alt.greedy_texts(policy, examples) == expected


def test_one_training_step_per_head(alt, tiny_qwen25vl_path, trajectory):
    from webrl.models import load_model
    from webrl.policy import GeneratorConfig, GeneratorPolicy, PromptConfig

    model, processor = load_model(tiny_qwen25vl_path)  # a fresh copy: training changes the weights
    pol = GeneratorPolicy(model, processor, GeneratorConfig(PromptConfig(
        action_format="compact", prompt_version="brief", think=False, max_pixels=12544)))
    examples = alt.examples_from_trajectories([trajectory], pol)
    for variant, heads in ((alt.VARIANTS["digits"], None), (alt.VARIANTS["pointer"], alt.PointerHeads(128))):
        before = [p.detach().clone() for p in model.parameters()]
        fit = alt.train(variant, pol, heads, examples, [2, 0, 1], seconds=600, batch_size=2, max_steps=1)
        assert fit["steps"] == 1 and fit["samples_seen"] == 2 and math.isfinite(fit["final_loss"])
        assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
        row = alt.evaluate(variant, pol, heads, examples)
        assert 0.0 <= row["kind_acc_all"] <= 1.0
        assert set(alt.COLUMNS) - {"variant", "samples_seen", "tokens_per_s", "median_prompt_tokens", "final_loss",
                                   "chance_element", "test_element_steps", "load_start", "load_end"} <= set(row)
