"""The locally trained byte-level BPE tokenizer: digits, special tokens, chat template."""
from pathlib import Path

import pytest

import webrl
from webrl.models.corpus import default_corpus
from webrl.models.tokenizer import ADDED_TOKENS, SPECIAL_TOKENS, check_digits_split, train_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(default_corpus(0), vocab_size=600)


def test_digits_are_single_tokens(tokenizer):
    # "[1234] click(1234)" must give the digit tokens 1,2,3,4 twice, identical ids both times.
    pieces = tokenizer.tokenize("[1234] click(1234)")
    assert pieces.count("1") == pieces.count("2") == pieces.count("3") == pieces.count("4") == 2
    assert check_digits_split(tokenizer)
    ids = tokenizer("[17]")["input_ids"], tokenizer("click(17)")["input_ids"]
    one_seven = [tokenizer.convert_tokens_to_ids("1"), tokenizer.convert_tokens_to_ids("7")]
    assert ids[0][1:3] == one_seven and ids[1][-3:-1] == one_seven


def test_special_and_added_tokens_are_single_ids(tokenizer):
    for tok in SPECIAL_TOKENS + ADDED_TOKENS:
        ids = tokenizer(tok, add_special_tokens=False)["input_ids"]
        assert len(ids) == 1 and tokenizer.convert_ids_to_tokens(ids[0]) == tok
    assert len(tokenizer) <= 600
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"
    text = "<think>ok</think><tool_call>{}</tool_call><|im_end|>"
    # tool-call / think tags survive skip_special_tokens (as in Qwen); <|im_end|> does not
    assert tokenizer.decode(tokenizer(text)["input_ids"], skip_special_tokens=True) == \
        "<think>ok</think><tool_call>{}</tool_call>"


def test_every_string_round_trips(tokenizer):
    s = "Ünïcode ✓ 東京 tab\tnew\nline   spaces «quotes» 🙂"
    assert tokenizer.decode(tokenizer(s)["input_ids"]) == s


def test_chat_template_roles_and_images(tokenizer):
    msgs = [{"role": "system", "content": "SYS"},
            {"role": "user", "content": [{"type": "text", "text": "goal"}, {"type": "image"}]},
            {"role": "assistant", "content": "<think>a</think><tool_call>x</tool_call>"},
            {"role": "tool", "content": "Succeed"}]
    out = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert out == ("<|im_start|>system\nSYS<|im_end|>\n"
                   "<|im_start|>user\ngoal<|vision_start|><|image_pad|><|vision_end|><|im_end|>\n"
                   "<|im_start|>assistant\n<think>a</think><tool_call>x</tool_call><|im_end|>\n"
                   "<|im_start|>user\n<tool_response>\nSucceed\n</tool_response><|im_end|>\n"
                   "<|im_start|>assistant\n")
    no_system = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    assert no_system == ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                         "<|im_start|>user\nhi<|im_end|>\n")


def test_the_tiny_vocabulary_ignores_prompt_files_other_than_the_action_formats():
    """Adding LOCI's role prompts once changed every tiny tokenizer (and broke length-tuned tests)."""
    from webrl.models.corpus import CORPUS_PROMPTS, default_corpus

    lines = set(default_corpus(0, n_episodes=1))
    prompt_dir = Path(webrl.__file__).resolve().parent / "prompts"
    for other in sorted(set(p.name for p in prompt_dir.glob("*.txt")) - set(CORPUS_PROMPTS)):
        assert not set(filter(None, (prompt_dir / other).read_text().splitlines())) <= lines, other
    assert set(filter(None, (prompt_dir / "som_v1.txt").read_text().splitlines())) <= lines


def test_sandbox_corpus_holds_train_goals_only_and_shortens_prompts():
    from webrl.envs.sites.source import make_task
    from webrl.models.corpus import corpus_lines, default_corpus

    assert corpus_lines("default", 3) == default_corpus(3)
    with pytest.raises(ValueError, match="corpus must be one of"):
        corpus_lines("wiki")
    lines = corpus_lines("sandbox", 0)
    train_goal = make_task("widgets", 0, "train", 7, start_server=False).spec.goal  # seed 7 < 300 tasks drawn
    assert train_goal in lines
    # no test-split goal is in the corpus (held-out entity names get no merges of their own)
    test_goals = {make_task(site, 0, "test", i, start_server=False).spec.goal
                  for site in ("shop", "widgets") for i in range(20)}
    assert not test_goals & set(lines)
    # a level-0 widgets observation (train-split words) with the compact v1 system prompt
    prompt = ((Path(webrl.__file__).resolve().parent / "prompts" / "compact_v1.txt").read_text()
              + f"\nTask: {train_goal}\nURL: http://127.0.0.1:8000/widgets/\nTitle: Newsletter sign-up\nElements:\n"
              + '[0] label "Last name"\n[1] textbox "Last name"\n[2] button "Mark as read"\n'
              + '[3] checkbox "Beta features" checked\n[4] label "Beta features"')
    small = len(train_tokenizer(default_corpus(0), vocab_size=1024)(prompt)["input_ids"])
    big = len(train_tokenizer(lines, vocab_size=2048)(prompt)["input_ids"])
    assert big < 0.9 * small  # measured 362 vs 425 (0.85)
