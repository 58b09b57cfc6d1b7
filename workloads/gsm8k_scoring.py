"""GSM8K answer extraction and scoring, with the semantics of lm-eval's `gsm8k` task (v3).

Two filters, each followed by take-first, then exact match after the same normalisation:
- strict-match:     regex `#### (\\-?[0-9\\.\\,]+)`, first match;
- flexible-extract: regex `(-?[$0-9.,]{2,})|(-?[0-9]+)`, LAST match (group_select -1);
- exact_match: drop `,`, `$`, everything up to `#### `, a trailing `.`; ignore case.
No match gives lm-eval's fallback "[invalid]", which never equals a reference.

`score_all(..., scorer="lm-eval")` gets the same per-sample results from lm-eval's own filter
and metric code instead (workloads/lm_eval_gsm8k.py); tests/test_lm_eval.py holds the two equal.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from .lm_eval_gsm8k import score_responses

FALLBACK = "[invalid]"
PROMPT = "Question: {question}\nAnswer:"
STOP = ("Question:", "</s>", "<|im_end|>")
SCORERS = ("mrbench", "lm-eval")

_STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
_FLEXIBLE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
_IGNORE = [re.compile(p) for p in (",", r"\$", r"(?s).*#### ", r"\.$")]


def _regex_filter(text: str, pattern: re.Pattern, group_select: int) -> str:
    matches = pattern.findall(text)
    if not matches:
        return FALLBACK
    m = matches[group_select]
    if isinstance(m, tuple):                      # alternation: keep the group that matched
        m = next((g for g in m if g), "")
        if not m:
            return FALLBACK
    return m.strip()


def extract_strict(text: str) -> str:
    return _regex_filter(text, _STRICT, 0)


def extract_flexible(text: str) -> str:
    return _regex_filter(text, _FLEXIBLE, -1)


def normalize(text: str) -> str:
    for p in _IGNORE:
        text = p.sub("", text)
    return text.lower()


def exact_match(prediction: str, reference: str) -> bool:
    return normalize(prediction) == normalize(reference)


@dataclass(frozen=True)
class Score:
    strict: bool
    flexible: bool
    strict_answer: str
    flexible_answer: str


def score(response: str, reference_answer: str) -> Score:
    """reference_answer: the dataset's full `answer` field (ends with '#### N')."""
    s, f = extract_strict(response), extract_flexible(response)
    return Score(exact_match(s, reference_answer), exact_match(f, reference_answer), s, f)


def score_all(responses: Sequence[str], references: Sequence[str], scorer: str = "mrbench",
              questions: Sequence[str] | None = None) -> list[Score]:
    """One Score per (response, reference answer): scorer "mrbench" is `score` above,
    "lm-eval" runs lm-eval's filters and exact_match (needs lm-eval; questions optional)."""
    if len(responses) != len(references):
        raise ValueError(f"{len(responses)} responses but {len(references)} references")
    if scorer == "mrbench":
        return [score(r, a) for r, a in zip(responses, references)]
    if scorer == "lm-eval":
        return [Score(*r) for r in score_responses(responses, references, questions)]
    raise ValueError(f"unknown scorer {scorer!r}; known: {', '.join(SCORERS)}")
