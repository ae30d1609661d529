"""Strict parsing of judge replies: binary verdicts, 1-5 screenshot scores, key points.

Why strict: the public OpenWebRL code searched the reply for "SUCCESS", so "NOT SUCCESS" and
"the agent did not reach success" both read as a success, and every such false positive is a
reward of 1 for a failed episode. Here a verdict is read only from a *verdict line* and only
when that line's whole value is one of the known words:

    Verdict: SUCCESS        Status: "success"       **Verdict**: NOT SUCCESS
    SUCCESS                 (a bare value, accepted only as the last non-empty line)

Rules, in order:
  1. `<think>...</think>` blocks are removed (a thinking judge's draft is not its verdict).
  2. Every line of the form `<label>: <value>` with label in VERDICT_LABELS is a verdict line;
     its value, stripped of markdown (`*`, `_`, backticks), quotes, brackets and final
     punctuation, must equal (case-insensitively) a word in SUCCESS_WORDS or FAILURE_WORDS,
     otherwise the line is invalid and the reply has no verdict.
  3. All verdict lines must agree; two different verdicts -> no verdict.
  4. The last non-empty line alone, stripped the same way, may be a bare value; it counts as
     one more verdict (so a bare "NOT SUCCESS" after "Verdict: SUCCESS" is a conflict).
  5. Anything else -> None ("unparseable"): the caller decides what that means (the judges
     drop the sample by default; see `JudgeConfig.on_unparseable`).

So "NOT SUCCESS", "Success" inside reasoning, `Status: "failure"`, "Verdict: success, mostly",
mixed case "nOt SuCcEsS" and conflicting verdicts can never read as success.
"""
from __future__ import annotations

import re
from typing import Optional

VERDICT_LABELS = ("verdict", "status", "final verdict", "final status")
SUCCESS_WORDS = ("success", "successful", "succeeded")
FAILURE_WORDS = ("not success", "not successful", "unsuccessful", "failure", "fail", "failed")

_THINK = re.compile(r"<think>.*?(</think>|$)", re.S | re.I)
_LINE = re.compile(r"^[\s>#*_`-]*([A-Za-z ]+?)[\s*_`]*[:：]\s*(.*?)\s*$")
_STRIP = " \t*_`'\"“”‘’()[]{}<>.!。,;"


def strip_thinking(text: str) -> str:
    """Remove `<think>...</think>` blocks (an unclosed one runs to the end of the text)."""
    return _THINK.sub("", text)


def _normalise_value(value: str) -> str:
    value = value.strip(_STRIP)
    value = re.sub(r"[\s*_`]+", " ", value).strip(_STRIP)
    return value.lower()


def _word_verdict(value: str) -> Optional[bool]:
    v = _normalise_value(value)
    if v in SUCCESS_WORDS:
        return True
    if v in FAILURE_WORDS:
        return False
    return None


def parse_verdict(text: str) -> Optional[bool]:
    """True = success, False = failure, None = no unambiguous verdict. Never raises.

    Examples (worked by hand against the rules in the module docstring):
      "The agent failed.\\nVerdict: NOT SUCCESS"   -> False
      "Verdict: SUCCESS"                           -> True
      "I think this is a success."                 -> None (no verdict line, last line not bare)
      'Status: "failure"'                          -> False
      "Verdict: SUCCESS\\nVerdict: NOT SUCCESS"     -> None (conflict)
    """
    if not isinstance(text, str):
        return None
    body = strip_thinking(text)
    verdicts: list[Optional[bool]] = []
    lines = [ln for ln in body.splitlines() if ln.strip()]
    for line in lines:
        m = _LINE.match(line)
        if m and m.group(1).strip().lower() in VERDICT_LABELS:
            verdicts.append(_word_verdict(m.group(2)))
    if lines:  # a bare verdict as the last line counts too (and must agree with labelled ones)
        bare = _word_verdict(lines[-1])
        if bare is not None:
            verdicts.append(bare)
    if not verdicts or any(v is None for v in verdicts) or len(set(verdicts)) != 1:
        return None
    return verdicts[0]


_SCORE_LINE = re.compile(r"^[\s>#*_`-]*score[\s*_`]*[:：]\s*[\s*_`]*([1-5])(?:\s*/\s*5)?[\s*_`.]*$",
                         re.I | re.M)


def parse_score(text: str) -> Optional[int]:
    """The 1-5 score of a `Score: N` line (or `Score: N/5`); None when absent, out of range or
    when several score lines disagree. Thinking blocks are ignored."""
    if not isinstance(text, str):
        return None
    found = {int(m.group(1)) for m in _SCORE_LINE.finditer(strip_thinking(text))}
    return found.pop() if len(found) == 1 else None


def parse_key_points(text: str) -> Optional[str]:
    """The key-point list of a key-point reply: the text after a `Key Points:` label (or the
    whole reply without one), thinking removed. None when nothing is left."""
    if not isinstance(text, str):
        return None
    body = strip_thinking(text)
    m = re.search(r"key[\s*_]*points[\s*_]*[:：]", body, re.I)
    if m:
        body = body[m.end():]
    body = body.strip()
    return body or None
