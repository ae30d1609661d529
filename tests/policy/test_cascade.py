"""Cascade policy over the generator backend: thresholds 1.0 / 0.0, head-turn records equal to uncached
forwards, the deferral reusing the heads' prefill (the backend itself: tests/policy/test_backend.py)."""
import pytest
import torch

from tests.policy.helpers import policy, screenshot
from webrl.actions import Action
from webrl.policy.cascade.policy import CascadeConfig, CascadePolicy
from webrl.policy.generator import SamplingConfig
from webrl.policy.cascade.features import prefill
from webrl.policy.types import MarkedObservation, SoMElement
from webrl.policy.cascade.heads import DecisionHeads, HeadsConfig
from webrl.policy.cascade.synthetic import make_steps
from webrl.policy.types import PolicyRequest

PIXELS = dict(min_pixels=1024, max_pixels=48 * 28 * 28)


def _policy(path, new_tokens=8):
    return policy(path, sampling=SamplingConfig(greedy=True, max_new_tokens=new_tokens),
                  action_format="som", think=False, **PIXELS)


def _uncached_logits(pol, prompt, ids):
    """(len(ids) + 1, V) logits predicting each of ids and the next token, from one full forward."""
    batch = pol.encode([prompt])
    P = batch["input_ids"].shape[1]
    full = torch.cat([batch["input_ids"], torch.tensor([ids], dtype=torch.long)], dim=1)
    extra = {k: batch[k] for k in ("pixel_values", "image_grid_thw")}
    mm = torch.cat([batch["mm_token_type_ids"], torch.zeros(1, len(ids), dtype=batch["mm_token_type_ids"].dtype)], 1)
    with torch.no_grad():
        out = pol.model(input_ids=full, attention_mask=torch.ones_like(full), mm_token_type_ids=mm,
                        use_cache=False, **extra)
    return out.logits[0, P - 1:].float()


def _uncached_greedy(pol, prompt, n):
    ids = []
    for _ in range(n):
        nxt = int(_uncached_logits(pol, prompt, ids)[-1].argmax())
        ids.append(nxt)
        if nxt in pol.stop_ids:
            break
    return ids


@pytest.fixture(scope="module")
def requests():
    return [s.request for s in make_steps(3, seed=5)]


@pytest.mark.parametrize("family", ["qwen2.5-vl", "qwen3-vl"])
def test_threshold_one_reproduces_the_generator(tiny_model_paths, requests, family):
    pol = _policy(tiny_model_paths[family])
    heads = DecisionHeads(pol.model.config.text_config.hidden_size, HeadsConfig())
    cascade = CascadePolicy(pol, heads, CascadeConfig(threshold=1.0))
    expected = pol.act(requests[:2])
    got = cascade.act(requests[:2])
    for e, g in zip(expected, got):
        assert g.decided_by == "generator" and g.generated_tokens == len(e.response_ids)
        assert g.response_ids == e.response_ids and g.response_text == e.response_text
        assert g.prompt_ids == e.prompt_ids and g.parsed == e.parsed
        assert torch.allclose(torch.tensor(g.logprobs), torch.tensor(e.logprobs), atol=1e-4)
        # the deferral decoded from the heads' prefill: every prompt token but the last was reused
        assert g.stats.cached_tokens == len(g.prompt_ids) - 1 and e.stats.cached_tokens == 0


def test_query_prefix_is_dropped_before_the_generator_decodes(tiny_qwen25vl_path, requests):
    """Heads that read their query after `<tool_call>` but are never confident enough: the prefix
    was fed through the cache, and the generator's decisions are still exactly its own."""
    pol = _policy(tiny_qwen25vl_path)
    heads = DecisionHeads(pol.model.config.text_config.hidden_size, HeadsConfig(query_prefix="<tool_call>"))
    cascade = CascadePolicy(pol, heads, CascadeConfig(threshold=0.9999))  # untrained: confidence << 1
    expected, got = pol.act(requests[:2]), cascade.act(requests[:2])
    for e, g in zip(expected, got):
        assert g.decided_by == "generator" and g.confidence < 0.9999
        assert g.response_ids == e.response_ids and g.parsed == e.parsed
        assert torch.allclose(torch.tensor(g.logprobs), torch.tensor(e.logprobs), atol=1e-4)


def test_query_prefix_state_and_reuse_by_a_heads_decision(tiny_qwen25vl_path, requests):
    """The query is the hidden state after prompt + `<tool_call>` (as one uncached forward computes
    it), and a heads decision starting with the prefix records the generator's log-probs of the
    whole action, prefix tokens included."""
    pol = _policy(tiny_qwen25vl_path)
    pre = prefill(pol, requests[0], query_prefix="<tool_call>")
    assert len(pre.prefix_ids) == 1 and pol.tokenizer.decode(pre.prefix_ids) == "<tool_call>"
    batch = pol.encode([pre.prompt])
    full = torch.cat([batch["input_ids"], torch.tensor([pre.prefix_ids])], 1)
    mm = torch.cat([batch["mm_token_type_ids"], torch.zeros(1, 1, dtype=batch["mm_token_type_ids"].dtype)], 1)
    with torch.no_grad():
        out = pol.model(input_ids=full, attention_mask=torch.ones_like(full), mm_token_type_ids=mm, use_cache=False,
                        output_hidden_states=True, pixel_values=batch["pixel_values"],
                        image_grid_thw=batch["image_grid_thw"])
    assert torch.allclose(pre.query, out.hidden_states[-1][0, -1].float(), atol=1e-4)
    assert not torch.equal(pre.query, pre.hidden[len(pre.input_ids) - 1])  # not the prompt's last token

    heads = DecisionHeads(pol.model.config.text_config.hidden_size,
                          HeadsConfig(kinds=("click", "other"), query_prefix="<tool_call>"))
    d = CascadePolicy(pol, heads, CascadeConfig(threshold=0.0)).act(requests[:1])[0]
    assert d.decided_by == "heads" and d.response_ids[:1] == pre.prefix_ids
    ref = torch.log_softmax(_uncached_logits(pol, pre.prompt, d.response_ids)[:-1], -1)
    ref = ref.gather(-1, torch.tensor(d.response_ids).view(-1, 1)).flatten()
    assert torch.allclose(torch.tensor(d.logprobs), ref, atol=1e-4)


def test_threshold_zero_always_uses_the_heads(tiny_qwen25vl_path, requests):
    pol = _policy(tiny_qwen25vl_path)
    heads = DecisionHeads(pol.model.config.text_config.hidden_size, HeadsConfig())  # untrained
    got = CascadePolicy(pol, heads, CascadeConfig(threshold=0.0)).act(requests)
    for d in got:
        assert d.decided_by in ("heads", "heads+write")
        assert d.action is not None
        if d.decided_by == "heads":
            assert d.generated_tokens == 0 and d.action == d.proposal
        else:  # the heads fixed kind and element; only the text came from the generator
            assert (d.action.kind, d.action.element) == (d.proposal.kind, d.proposal.element)


def _force_kind(heads, kind):
    """Make the heads certain of `kind` (answer, or type without listed options: the WRITE slot)."""
    with torch.no_grad():
        heads.kind_mlp[-1].bias.fill_(-50.0)
        heads.kind_mlp[-1].bias[heads.config.kinds.index(kind)] = 50.0
    return heads


@pytest.mark.parametrize("query_prefix", ["", "<tool_call>"])
def test_write_decodes_text_from_the_same_cache(tiny_qwen25vl_path, requests, query_prefix):
    """A WRITE decision: forced action prefix + generated text; the recorded log-probs are the
    generator's, equal to an uncached teacher-forced forward over the whole response (also when
    the heads' query prefix is already in the cache)."""
    pol = _policy(tiny_qwen25vl_path)
    heads = _force_kind(DecisionHeads(pol.model.config.text_config.hidden_size, HeadsConfig(kinds=(
        "click", "answer", "other"), query_prefix=query_prefix)), "answer")
    cascade = CascadePolicy(pol, heads, CascadeConfig(threshold=0.5, max_text_tokens=5))
    d = cascade.act(requests[:1])[0]
    assert d.decided_by == "heads+write" and 1 <= d.generated_tokens <= 5
    prefix = '<tool_call>{"name": "browser", "arguments": {"action": "answer", "text": "'
    assert d.response_text.startswith(prefix)
    n_forced = len(d.response_ids) - d.generated_tokens
    assert pol.tokenizer.decode(d.response_ids[:n_forced]) == prefix
    pre = prefill(pol, requests[0])
    ref = torch.log_softmax(_uncached_logits(pol, pre.prompt, d.response_ids)[:-1], -1)
    ref = ref.gather(-1, torch.tensor(d.response_ids).view(-1, 1)).flatten()
    assert torch.allclose(torch.tensor(d.logprobs), ref, atol=1e-4)
    # the generated text is the generator's greedy continuation of prompt + prefix
    cont = _uncached_logits(pol, pre.prompt, d.response_ids[:n_forced])[-1].argmax()
    assert d.response_ids[n_forced] == int(cont)


def test_head_turns_exclude_records_no_loss_tokens(tiny_qwen25vl_path, requests):
    pol = _policy(tiny_qwen25vl_path)
    heads = DecisionHeads(pol.model.config.text_config.hidden_size, HeadsConfig())
    d = CascadePolicy(pol, heads, CascadeConfig(threshold=0.0, head_turns="exclude")).act(requests[:1])[0]
    assert d.response_ids == [] and d.logprobs == [] and d.response_text.startswith("<tool_call>")
    turn = d.to_turn(requests[0].observation)
    assert turn.decided_by == d.decided_by and turn.response_ids == []


def test_cascade_config_validation():
    with pytest.raises(ValueError, match="threshold"):
        CascadeConfig(threshold=1.5)
    with pytest.raises(ValueError, match="head_turns"):
        CascadeConfig(head_turns="keep")


def test_written_text_reads_the_json_string_the_generator_wrote():
    from webrl.policy.cascade.policy import written_text

    assert written_text('blue mug"}}</tool_call>') == "blue mug"  # up to the closing quote
    assert written_text(r'say \"hi\""}') == 'say "hi"'  # escaped quotes are part of the text
    assert written_text("two\nlines") == "two\nlines"  # a raw newline (invalid JSON) is kept, no error
    assert written_text(r"odd \q") == r"odd \q"  # an invalid escape: the raw text


# ---------------------------------------------------------------------------------------------
# coordinate formats (computer_use)
# ---------------------------------------------------------------------------------------------
def _computer_use_policy(path):
    """computer_use at the default screenshot bounds (56*56 .. 28*28*1280 pixels), as in test_stack.py."""
    return policy(path, sampling=SamplingConfig(greedy=True, max_new_tokens=8), action_format="computer_use",
                  think=False, min_pixels=56 * 56, max_pixels=28 * 28 * 1280)


def _one_box_request(role="button", name="Submit"):
    """A 640x480 page with element 7 at x=100, y=40, w=60, h=20 (centre (130, 50))."""
    obs = MarkedObservation(goal=f"Use the {name} {role}", url="http://127.0.0.1:8000/",
                            elements_text=f'[7] {role} "{name}"', screenshot=screenshot(640, 480),
                            elements=(SoMElement(7, (100.0, 40.0, 60.0, 20.0), role=role, name=name),))
    return PolicyRequest(obs, [])


@pytest.mark.parametrize("family, point", [("qwen2.5-vl", [131, 50]), ("qwen3-vl", [203, 104])])
def test_computer_use_heads_click_records_the_tokens_of_the_coordinate_call(tiny_model_paths, family, point):
    """The heads click element 7: the response is the click the generator would have had to write at
    the box centre (130, 50) in its family's coordinates (worked out in test_stack.py: Qwen2.5-VL
    resized 644x476 -> [131, 50]; Qwen3-VL 0-1000 -> [203, 104]), with the generator's log-probs."""
    pol = _computer_use_policy(tiny_model_paths[family])
    heads = _force_kind(DecisionHeads(pol.model.config.text_config.hidden_size,
                                      HeadsConfig(kinds=("click", "answer", "other"))), "click")
    request = _one_box_request()
    d = CascadePolicy(pol, heads, CascadeConfig(threshold=0.5)).act([request])[0]
    text = ('<tool_call>{"name": "computer_use", "arguments": {"action": "left_click", '
            f'"coordinate": {point}}}}}</tool_call>')
    assert d.decided_by == "heads" and d.generated_tokens == 0 and d.proposal == Action.click(7)
    assert d.response_text == text
    assert d.response_ids == pol.tokenizer(text, add_special_tokens=False)["input_ids"]
    pre = prefill(pol, request)
    assert d.action == pol.builder.format.parse(text, pre.prompt.geometry)  # executed = the text read back
    assert d.action.kind == "click_at" and abs(d.action.x - 130) < 1 and abs(d.action.y - 50) < 1
    ref = torch.log_softmax(_uncached_logits(pol, pre.prompt, d.response_ids)[:-1], -1)
    ref = ref.gather(-1, torch.tensor(d.response_ids).view(-1, 1)).flatten()
    assert torch.allclose(torch.tensor(d.logprobs), ref, atol=1e-4)


def test_computer_use_element_actions_without_coordinates_go_to_the_generator(tiny_qwen25vl_path):
    """"type into element 7" has no computer_use form: the generator decides, exactly as alone."""
    pol = _computer_use_policy(tiny_qwen25vl_path)
    heads = _force_kind(DecisionHeads(pol.model.config.text_config.hidden_size,
                                      HeadsConfig(kinds=("type", "answer", "other"))), "type")
    request = _one_box_request("textbox", "Search")
    d = CascadePolicy(pol, heads, CascadeConfig(threshold=0.5)).act([request])[0]
    (e,) = pol.act([request])
    assert d.decided_by == "generator" and d.proposal.kind == "type" and d.confidence > 0.5
    assert d.response_ids == e.response_ids and d.response_text == e.response_text and d.parsed == e.parsed


def test_computer_use_heads_answer_writes_into_the_coordinate_format_call(tiny_qwen25vl_path):
    pol = _computer_use_policy(tiny_qwen25vl_path)
    heads = _force_kind(DecisionHeads(pol.model.config.text_config.hidden_size,
                                      HeadsConfig(kinds=("click", "answer", "other"))), "answer")
    d = CascadePolicy(pol, heads, CascadeConfig(threshold=0.5, max_text_tokens=4)).act([_one_box_request()])[0]
    prefix = '<tool_call>{"name": "computer_use", "arguments": {"action": "answer", "text": "'
    assert d.decided_by == "heads+write" and d.response_text.startswith(prefix) and 1 <= d.generated_tokens <= 4
    n_forced = len(d.response_ids) - d.generated_tokens
    assert d.response_ids[:n_forced] == pol.tokenizer(prefix, add_special_tokens=False)["input_ids"]
    assert d.action is not None and d.action.kind == "answer"
