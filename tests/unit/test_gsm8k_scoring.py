"""Extraction and scoring follow lm-eval's gsm8k filters (strict-match, flexible-extract)."""
import json
import random

import pytest

from mrbench.workloads.gsm8k_scoring import (
    FALLBACK,
    exact_match,
    extract_flexible,
    extract_strict,
    score,
)


@pytest.mark.parametrize("text,strict,flexible", [
    ("She has 3+4 = <<3+4=7>>7 apples.\n#### 7", "7", "7"),
    ("#### 1,234.", "1,234.", "1,234."),
    ("It costs $5 and then $12.50 total", FALLBACK, "$12.50"),
    ("#### -3 and later 9", "-3", "9"),
    ("no numbers here", FALLBACK, FALLBACK),
    ("#### 5\n#### 6", "5", "6"),
    ("answer 7", FALLBACK, "7"),                       # second alternative (single digit)
])
def test_extraction(text, strict, flexible):
    assert extract_strict(text) == strict
    assert extract_flexible(text) == flexible


def test_normalisation():
    assert exact_match("1,234.", "blah\n#### 1234")
    assert exact_match("$12", "#### 12")
    assert not exact_match(FALLBACK, "#### 12")
    assert not exact_match("12", "#### 13")


def test_real_gsm8k_references_score_themselves(data_dir):
    rows = [json.loads(x) for x in (data_dir / "gsm8k" / "test.jsonl").read_text().splitlines()]
    assert len(rows) == 1319
    rng = random.Random(0)
    for r in rows:
        ans = r["answer"]
        s = score(ans, ans)
        assert s.strict and s.flexible, ans
        final = ans.rsplit("#### ", 1)[1]
        wrong = ans[: -len(final)] + str(int(final.replace(",", "")) + rng.randint(1, 9))
        w = score(wrong, ans)
        assert not w.strict and not w.flexible
        assert not score(ans.rsplit("####", 1)[0], ans).strict      # no marker: strict fails
