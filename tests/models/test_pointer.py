"""Element pointer (webrl.models.pointer): line keys, the pointer action format, generation with
the KV cache vs the learner's full forward, save/load, and the errors of a bad setup."""
import json

import pytest
import torch

from tests.policy.helpers import PIXELS, observation
from webrl.actions import Action, ParseError
from webrl.learner.model import PolicyModule
from webrl.models import load_model, tiny_model
from webrl.models.pointer import NEG, line_keys
from webrl.policy import Decision, GeneratorConfig, GeneratorPolicy, PolicyRequest, PromptConfig, SamplingConfig
from webrl.policy.formats import PointerFormat

FAMILIES = ["qwen2.5-vl", "qwen3-vl"]
NL, E0 = 1, 10  # token ids in the hand-built sequences: 1 is a newline, 10.. are <e0>..


def test_line_keys_average_each_listed_line_and_ignore_element_tokens_elsewhere():
    # ids:  0 [NL <e0> 5 6 NL <e1> 7 NL] 8 ( <e1> )      positions 0..12
    ids = torch.tensor([[0, NL, E0, 5, 6, NL, E0 + 1, 7, NL, 8, 3, E0 + 1, 4]])
    hidden = torch.arange(13, dtype=torch.float32).view(1, 13, 1).repeat(1, 1, 2)  # h_t = (t, t)
    newline = torch.zeros(20, dtype=torch.bool)
    newline[NL] = True
    keys, listed = line_keys(hidden, ids, first=E0, count=3, newline=newline)
    # line 0 spans positions 2..4 -> mean 3; line 1 spans 6..7 -> mean 6.5; <e1> at 11 follows
    # "(" (not a newline): an action in the text, not a line; <e2> is not listed
    assert keys[0, 0].tolist() == [3.0, 3.0] and keys[0, 1].tolist() == [6.5, 6.5]
    assert listed.tolist() == [[True, True, False]] and keys[0, 2].tolist() == [0.0, 0.0]
    # with a prompt mask ending before position 6 (a response from there on), line 1 is no line
    prompt = torch.arange(13)[None] < 6
    keys, listed = line_keys(hidden, ids, first=E0, count=3, newline=newline, prompt_mask=prompt)
    assert listed.tolist() == [[True, False, False]] and keys[0, 0].tolist() == [3.0, 3.0]


def test_line_keys_take_the_last_list_when_an_id_is_listed_twice():
    ids = torch.tensor([[NL, E0, 5, NL, 6, NL, E0, 7, 8]])  # an old list, then the current one
    hidden = torch.arange(9, dtype=torch.float32).view(1, 9, 1)
    newline = torch.zeros(20, dtype=torch.bool)
    newline[NL] = True
    keys, listed = line_keys(hidden, ids, first=E0, count=2, newline=newline)
    assert keys[0, 0].item() == (6 + 7 + 8) / 3 and listed.tolist() == [[True, False]]


def test_pointer_format_renders_lists_and_actions_with_element_tokens_and_parses_them_back():
    fmt = PointerFormat()
    assert fmt.render_elements('[0] link "Blog"\n[12] textbox "Search"\n[130] button "Far"') == \
        '<e0> link "Blog"\n<e12> textbox "Search"\n[130] button "Far"'
    for action, text in [(Action.click(3), "<tool_call>click(<e3>)</tool_call>"),
                         (Action.type_text("red mug", 5), '<tool_call>type(<e5>, "red mug")</tool_call>'),
                         (Action.stop(), "<tool_call>stop()</tool_call>")]:
        assert fmt.render(action) == text
        assert fmt.parse(text) == action
    assert fmt.parse("<tool_call>click(7)</tool_call>") == Action.click(7)  # digits still parse
    assert isinstance(fmt.parse("<tool_call>click(<e>)</tool_call>"), ParseError)
    assert isinstance(fmt.parse("click(<e3>)"), ParseError)  # no tool call


@pytest.fixture(scope="module")
def pointer_paths(tmp_path_factory):
    return {f: tiny_model(f, out_dir=tmp_path_factory.mktemp(f"ptr-{f}"), seed=1, element_tokens=16, vocab_size=1024)
            for f in FAMILIES}


def _policy(path, **sampling):
    model, processor = load_model(path)
    cfg = GeneratorConfig(prompt=PromptConfig(action_format="pointer", prompt_version="brief", think=False, **PIXELS),
                          sampling=SamplingConfig(**{"max_new_tokens": 12, **sampling}))
    return GeneratorPolicy(model, processor, cfg)


def _requests(fmt):
    first = observation(0, elements_text='[0] link "Blue mug"\n[1] textbox "Search"\n[2] button "Go"')
    turn = PolicyRequest(first)
    past = [Decision(Action.click(2), fmt.render(Action.click(2)), images=[first.screenshot]).to_turn(first)]
    later = observation(1, elements_text='[0] button "Back"\n[3] link "Checkout"', size=(200, 320))
    return [turn, PolicyRequest(later, past)]


@pytest.mark.parametrize("family", FAMILIES)
def test_sampled_logprobs_through_the_cache_equal_the_learners_full_forward(family, pointer_paths):
    """Generation computes the list's keys once (prefill) and reuses them at every decode step;
    the learner recomputes everything from prompt + response in one pass: same log-probs."""
    pol = _policy(pointer_paths[family], temperature=1.0)
    spec = pol.model.config.webrl_pointer
    element_ids = set(range(spec["first_token_id"], spec["first_token_id"] + spec["count"]))
    # an untrained pointer gives element tokens little mass; raise b so that they are sampled
    with torch.no_grad():
        pol.model.element_pointer.bias.fill_(12.0)
    reqs = _requests(pol.builder.format)
    torch.manual_seed(0)
    decisions = pol.act(reqs)
    module = PolicyModule(pol.model)
    sampled = []
    for req, d in zip(reqs, decisions):
        enc = pol.encode([pol.builder.render(req)])
        P, R = len(d.prompt_ids), len(d.response_ids)
        ids = torch.tensor([d.prompt_ids + d.response_ids])
        loss_mask = torch.zeros_like(ids)
        loss_mask[0, P:] = 1
        with torch.no_grad():
            lp, ent, _ = module(ids, torch.ones_like(ids), loss_mask, enc["pixel_values"], enc["image_grid_thw"], 1.0)
        assert torch.allclose(lp[0, P:], torch.tensor(d.logprobs), atol=1e-4), (lp[0, P:].tolist(), d.logprobs)
        assert torch.isfinite(ent).all()
        sampled += [t for t in d.response_ids if t in element_ids]
    assert sampled, "the raised bias should make element tokens likely"
    listed = {0, 1, 2} | {0, 3}
    assert {t - spec["first_token_id"] for t in sampled} <= listed


@pytest.mark.parametrize("family", FAMILIES)
def test_unlisted_elements_get_no_mass_and_listed_ones_follow_their_lines(family, pointer_paths):
    pol = _policy(pointer_paths[family])
    first = pol.model.config.webrl_pointer["first_token_id"]
    req = _requests(pol.builder.format)[0]  # lists <e0>, <e1>, <e2>
    enc = pol.encode([pol.builder.render(req)])
    with torch.no_grad():
        logits = pol.model(**enc).logits[0, -1]  # (V,) next-token logits after the prompt
        assert (logits[first + 3:first + 16] == NEG).all() and (logits[first:first + 3] > NEG).all()
        # the score of <e1> reads line 1: changing only that line's name changes only its score
        other = observation(0, elements_text='[0] link "Blue mug"\n[1] textbox "Query words"\n[2] button "Go"')
        enc2 = pol.encode([pol.builder.render(PolicyRequest(other))])
        logits2 = pol.model(**enc2).logits[0, -1]
    assert logits2[first + 1] != logits[first + 1]


def test_pointer_weights_survive_save_and_load_and_a_checkpoint_without_them_is_refused(pointer_paths, tmp_path):
    model, processor = load_model(pointer_paths["qwen2.5-vl"])
    with torch.no_grad():
        model.element_pointer.proj.weight.mul_(-2.0)
        model.element_pointer.bias.fill_(0.5)
    model.save_pretrained(tmp_path / "saved")
    processor.save_pretrained(tmp_path / "saved")
    again, _ = load_model(tmp_path / "saved")
    assert torch.equal(again.element_pointer.proj.weight, model.element_pointer.proj.weight)
    assert again.element_pointer.bias.item() == 0.5
    # the same weights without the pointer's tensors: refused, naming what is missing
    from safetensors.torch import load_file, save_file

    (tmp_path / "broken").mkdir()
    for f in (tmp_path / "saved").iterdir():
        if f.suffix == ".safetensors":
            save_file({k: v for k, v in load_file(f).items() if not k.startswith("element_pointer.")},
                      tmp_path / "broken" / f.name, metadata={"format": "pt"})
        else:
            (tmp_path / "broken" / f.name).write_bytes(f.read_bytes())
    with pytest.raises(ValueError, match="element_pointer.bias.*corrupt"):
        load_model(tmp_path / "broken")
    assert json.loads((tmp_path / "broken" / "config.json").read_text())["webrl_pointer"]["count"] == 16


def test_pointer_format_needs_a_pointer_model(tiny_qwen25vl_path):
    model, processor = load_model(tiny_qwen25vl_path)
    with pytest.raises(ValueError, match="action_format='pointer' needs a model with an element pointer"):
        GeneratorPolicy(model, processor, GeneratorConfig(prompt=PromptConfig(action_format="pointer",
                                                                               prompt_version="brief")))


def test_a_response_loss_on_an_element_token_trains_the_pointer(pointer_paths):
    """SFT and GRPO reach W and b through the learner's log-probs of `<e_k>` tokens."""
    pol = _policy(pointer_paths["qwen2.5-vl"])
    req = _requests(pol.builder.format)[0]
    enc = pol.encode([pol.builder.render(req)])
    target = pol.tokenizer("<tool_call>click(<e2>)</tool_call>", add_special_tokens=False)["input_ids"]
    P = enc["input_ids"].shape[1]
    ids = torch.cat([enc["input_ids"], torch.tensor([target])], 1)
    loss_mask = torch.zeros_like(ids)
    loss_mask[0, P:] = 1
    module = PolicyModule(pol.model)
    lp, _, _ = module(ids, torch.ones_like(ids), loss_mask, enc["pixel_values"], enc["image_grid_thw"], 1.0)
    (-lp.sum()).backward()
    pointer = pol.model.element_pointer
    assert pointer.proj.weight.grad.abs().sum() > 0 and pointer.bias.grad.abs().sum() > 0


def test_config_rejects_too_many_element_tokens():
    from webrl.config import ConfigError, ModelConfig

    with pytest.raises(ConfigError, match="model.tiny_element_tokens"):
        ModelConfig(tiny_vocab=1024, tiny_element_tokens=600)
