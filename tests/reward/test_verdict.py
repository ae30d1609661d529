"""Strict verdict parsing: adversarial replies must never read as success."""
import pytest

from webrl.reward.verdict import parse_key_points, parse_score, parse_verdict

# Each of these contains the word "success" somewhere, yet none is a success verdict.
NEVER_SUCCESS = [
    "NOT SUCCESS",
    "Verdict: NOT SUCCESS",
    "verdict: not success",
    "Verdict: nOt SuCcEsS",
    "**Verdict:** **NOT SUCCESS**",
    'Status: "failure"',
    "Status: 'failure'",
    "status: FAILURE",
    "The agent claims success, but the cart is empty.\nVerdict: NOT SUCCESS",
    "This would have been a SUCCESS if the filter had been applied.",  # no verdict line
    "I think this is a success.",
    "SUCCESS is not achieved here.",
    "Success criteria: price under 10 euros.\nThe price was 12.",
    "Verdict: SUCCESS\nVerdict: NOT SUCCESS",  # conflicting verdicts
    "Verdict: NOT SUCCESS\nVerdict: SUCCESS",
    'Status: "success"\nStatus: "failure"',
    "Verdict: SUCCESS, although the filter was missing",  # value is not exactly a verdict word
    "Verdict: partial success",
    "Verdict: success?  Hard to say; not success overall",
    "<think>Looks like SUCCESS.\nVerdict: SUCCESS</think>\nVerdict: NOT SUCCESS",  # draft in thinking
    "<think>Verdict: SUCCESS</think>",  # only a draft, no final verdict
    "Result: SUCCESS\nNOT A SUCCESS",  # 'Result' is not a verdict label; last line is not bare
    "",
    "   \n  ",
    "unsuccessful",
    "The task was unsuccessful.\nSuccess: no",
    "Status: success\nStatus: the page never loaded",  # an invalid verdict line voids the reply
    "Verdict: SUCCESS\nOn reflection:\nNOT SUCCESS",  # a bare final verdict that disagrees
    "Status: \"success\"\nFAILURE",
]


@pytest.mark.parametrize("reply", NEVER_SUCCESS)
def test_adversarial_replies_are_never_success(reply):
    assert parse_verdict(reply) is not True


@pytest.mark.parametrize("reply, expected", [
    ("The filter was applied and the mug is 8 euros.\nVerdict: SUCCESS", True),
    ("Verdict: NOT SUCCESS", False),
    ("Verdict: Success", True),
    ("**Verdict**: SUCCESS.", True),
    ('Status: "success"', True),
    ('Reasoning...\nStatus: "failure"', False),
    ("Everything checks out.\n\nSUCCESS\n", True),  # bare last line
    ("Nothing was found.\nNOT SUCCESS", False),
    ("Verdict: SUCCESS\nVerdict: success", True),  # repeated but consistent
    ("<think>maybe NOT SUCCESS</think>\nVerdict: SUCCESS", True),
    ("final verdict: failed", False),
    ("I think this is a success.", None),
    ("Verdict: SUCCESS\nVerdict: NOT SUCCESS", None),
    ("Verdict: partial success", None),
])
def test_verdicts_read_exactly(reply, expected):
    assert parse_verdict(reply) is expected


def test_non_string_is_unreadable():
    assert parse_verdict(None) is None and parse_score(None) is None and parse_key_points(None) is None


@pytest.mark.parametrize("reply, expected", [
    ("The filter panel is visible.\nScore: 4", 4),
    ("**Score**: 5/5", 5),
    ("score: 1", 1),
    ("Score: 7", None),              # out of range
    ("Score: 0", None),
    ("Score: 3\nScore: 5", None),    # disagreeing scores
    ("Score: 3\nScore: 3", 3),
    ("I would give it a score of 4", None),  # no score line
    ("Score: 4 because it shows the cart", None),
    ("<think>Score: 5</think>\nScore: 2", 2),
])
def test_scores(reply, expected):
    assert parse_score(reply) == expected


def test_key_points():
    assert parse_key_points("Sure.\nKey Points:\n1. blue mug\n2. under 10 euros") == "1. blue mug\n2. under 10 euros"
    assert parse_key_points("**Key Points**:\n1. x") == "1. x"
    assert parse_key_points("1. only a list") == "1. only a list"
    assert parse_key_points("<think>hmm</think>  ") is None
