"""The generated GSM8K-format problems: determinism, exact arithmetic, derivability, variety.

The tiny default model is trained on these problems, so every invariant here is one the
model relies on: an answer line per step, a calculator annotation that is always right,
and operands that can always be found in the question or in an earlier line.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mrbench.workloads.gsm8k_problems import (
    HELD_OUT_SEEDS,
    MAX_CHARS,
    TRAIN_SEEDS,
    GenConfig,
    Problem,
    check_split,
    final_answer,
    generate,
    to_jsonl_records,
)
from mrbench.workloads.gsm8k_templates import (
    KIND_SLOTS,
    NAMES,
    TEMPLATE_IDS,
    TEMPLATES,
    TEMPLATES_FILE,
    load_templates,
)

_ANNOT = re.compile(r"(\d+)([+\-*/])(\d+) = \$?<<(\d+)([+\-*/])(\d+)=(-?\d+)>>(-?\d+)")
_NUMBER_WORDS = re.compile(
    r"\b(zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|"
    r"hundred|thousand|twice|double|triple|half|dozen|once)\b", re.IGNORECASE)


def _calc(left: int, op: str, right: int) -> int:
    """A four-function calculator; a division must be exact (GSM8K's are)."""
    if op == "+":
        return left + right
    if op == "-":
        return left - right
    if op == "*":
        return left * right
    assert right != 0 and left % right == 0, f"inexact division {left}/{right}"
    return left // right


def check_problem(p: Problem, cfg: GenConfig = GenConfig()) -> None:
    """Every invariant one problem must satisfy; raises AssertionError with the problem."""
    ctx = f"\n{p.question}\n{p.answer}"
    lines = p.answer.split("\n")
    assert len(lines) == p.steps + 1, ctx
    assert cfg.min_steps <= p.steps <= cfg.max_steps, ctx
    m = re.fullmatch(r"#### (\d+)", lines[-1])
    assert m and int(m.group(1)) == p.final == final_answer(p.answer), ctx

    stated = [int(v) for v in re.findall(r"\d+", p.question)]
    assert stated and all(2 <= v <= cfg.max_operand for v in stated), ctx
    assert "<<" not in p.question and not re.search(r"-\d", p.question), ctx
    assert not _NUMBER_WORDS.search(p.question), ctx
    assert p.question.endswith("?"), ctx

    results: list[int] = []
    exprs: list[str] = []
    used: set[int] = set()
    for line in lines[:-1]:
        found = _ANNOT.findall(line)
        assert len(found) == 1, f"one annotation per line: {line!r}{ctx}"
        vl, vop, vr, al, aop, ar, res, shown = found[0]
        assert (vl, vop, vr) == (al, aop, ar), f"visible expr != annotation{ctx}"
        assert res == shown, f"text after >> must equal the result{ctx}"
        left, right, value = int(al), int(ar), int(res)
        assert aop in cfg.operations, ctx
        assert _calc(left, aop, right) == value, f"wrong arithmetic {line!r}{ctx}"
        assert 0 <= value <= cfg.max_result, ctx
        for operand in (left, right):
            assert operand in stated or operand in results, f"underivable {operand}{ctx}"
            used.add(operand)
        assert value not in stated and value not in results, f"no-op or echo step{ctx}"
        # Only the expression's numbers appear in a reasoning line.
        assert sorted(map(int, re.findall(r"\d+", line))) == sorted(
            [left, right, left, right, value, value]), ctx
        exprs.append(f"{left}{aop}{right}")
        results.append(value)
    assert results[-1] == p.final, ctx
    assert len(set(exprs)) == len(exprs), ctx
    assert set(stated) <= used, f"a stated number is never used (distractor){ctx}"


# ---- determinism -------------------------------------------------------------------------

def test_same_seed_same_problems():
    assert generate(7, 40) == generate(7, 40)


def test_stream_prefix_property():
    long = generate(11, 60)
    assert generate(11, 25) == long[:25]
    assert [p.index for p in long] == list(range(60))
    assert all(p.seed == 11 for p in long)


def test_different_seeds_differ():
    a, b = generate(1, 50), generate(2, 50)
    assert sum(x.question != y.question for x, y in zip(a, b)) >= 48


def test_independent_of_hash_randomisation():
    """Same problems in fresh interpreters with different PYTHONHASHSEEDs (no set order)."""
    code = ("import hashlib; from mrbench.workloads.gsm8k_problems import generate; "
            "print(hashlib.sha256(repr(generate(5, 300)).encode()).hexdigest())")
    root = Path(__file__).resolve().parents[2]
    digests = {subprocess.run([sys.executable, "-c", code], cwd=root, check=True, text=True,
                              capture_output=True, env={**os.environ, "PYTHONHASHSEED": h}
                              ).stdout for h in ("1", "2")}
    assert len(digests) == 1


def test_operation_order_in_config_does_not_matter():
    assert generate(3, 20, GenConfig(operations=("/", "*", "-", "+"))) == generate(3, 20)


# ---- invariants on the default configuration ------------------------------------------------

@pytest.fixture(scope="module")
def problems() -> list[Problem]:
    return generate(0, 2000)


def test_every_problem_is_well_formed(problems):
    for p in problems + generate(HELD_OUT_SEEDS[0], 300):
        check_problem(p)


def test_steps_are_roughly_uniform(problems):
    counts = Counter(p.steps for p in problems)
    assert set(counts) == {1, 2, 3, 4}
    assert min(counts.values()) > 0.2 * len(problems)


def test_diversity(problems):
    templates = {p.template for p in problems}
    assert len(templates) >= 25 and templates <= set(TEMPLATE_IDS)
    name_re = re.compile(r"\b(" + "|".join(NAMES) + r")\b")
    names = {m for p in problems for m in name_re.findall(p.question)}
    assert len(names) >= 40
    assert len({p.question for p in problems}) > 0.99 * len(problems)
    assert len({p.question.split(" ", 1)[1][:25] for p in problems}) > 300   # openings vary


def test_every_template_is_used_and_fits_the_context(problems):
    assert {p.template for p in problems} == set(TEMPLATE_IDS)
    assert max(len(p.question) + len(p.answer) for p in problems) <= MAX_CHARS


def test_template_texts_are_well_formed():
    """Each phrasing states exactly its event's numbers, as placeholders; answer lines state
    none of their own (numbers there come only from the expression)."""
    for t in TEMPLATES:
        for ev in t.starts + t.events:
            want = set(KIND_SLOTS[ev.kind])
            assert len(ev.a) == ev.steps, (t.id, ev)
            for q in ev.q:
                fields = re.findall(r"{(\w+)}", q)
                assert sorted(f for f in fields if f in "abxy") == sorted(want), (t.id, q)
                assert not re.search(r"\d", re.sub(r"{\w+}", "", q)), (t.id, q)
                assert not _NUMBER_WORDS.search(q), (t.id, q)
            for line in ev.a:
                fields = set(re.findall(r"{(\w+)}", line))
                assert len(fields & {"e", "m"}) == 1 and not fields & set("abxy"), (t.id, line)


def _set(path: tuple, value: object):
    """Edit of the templates document: set (or, with value None, delete) one nested key."""
    def edit(doc: dict) -> None:
        *parents, last = path
        for key in parents:
            doc = doc[key]
        if value is None:
            del doc[last]
        else:
            doc[last] = value
    return edit


@pytest.mark.parametrize("edit, message", [
    (_set(("templates", 0, "events", 0, "kind"), "DOUBLE"), r"kind 'DOUBLE' is not one of"),
    (_set(("templates", 0, "starts", 0, "dst"), None), r"starts\[0\]: needs keys"),
    (_set(("templates", 0, "events", 3, "a"), "Only one line."), r"needs 2 answer line"),
    (_set(("templates", 0, "events", 0, "q"), "{He} pick{s} {y} more."), r"placeholder"),
    (_set(("templates", 0, "events", 0, "dst"), "nn"), r"states \['nn'\]"),
    (_set(("templates", 1, "id"), "orchard"), r"unique id"),
], ids=["unknown-kind", "missing-dst", "answer-lines", "placeholder", "state-typo", "dup-id"])
def test_malformed_templates_file_is_rejected(tmp_path, edit, message):
    """The YAML file is the source of truth; a broken edit must fail at load, naming where."""
    doc = yaml.safe_load(TEMPLATES_FILE.read_text(encoding="utf-8"))
    path = tmp_path / "templates.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    assert load_templates(path) == TEMPLATES           # the unedited copy loads the same
    edit(doc)
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    with pytest.raises(ValueError, match=message) as e:
        load_templates(path)
    assert "templates[" in str(e.value)


def test_pronouns_agree(problems):
    for p in problems:
        assert not re.search(r"\b(They|they) (has|does|is|was)\b", p.question + p.answer), p
        assert not re.search(r"\b(He|he|She|she) (have|do|are|were)\b", p.question + p.answer), p


def test_jsonl_records_match_gsm8k_shape(problems):
    recs = to_jsonl_records(problems[:5])
    assert [r["question"] for r in recs] == [p.question for p in problems[:5]]
    assert {"question", "answer"} <= set(recs[0])
    assert final_answer(recs[0]["answer"]) == problems[0].final


def test_final_answer_parsing():
    assert final_answer("a\nb\n#### 72") == 72
    assert final_answer("x\n#### 1,234") == 1234       # real GSM8K writes thousands this way
    with pytest.raises(ValueError):
        final_answer("no final line")


# ---- config knobs --------------------------------------------------------------------------

@pytest.mark.parametrize("cfg", [
    GenConfig(min_steps=2, max_steps=2),
    GenConfig(min_steps=3, max_steps=4),
    GenConfig(operations=("+",)),
    GenConfig(operations=("-",)),
    GenConfig(operations=("*",), max_result=2000),
    GenConfig(operations=("/",)),
    GenConfig(operations=("*", "/")),
    GenConfig(max_operand=20, max_result=200),
], ids=lambda c: f"{c.min_steps}-{c.max_steps}{''.join(c.operations)}-{c.max_operand}")
def test_config_is_respected(cfg):
    ps = generate(5, 150, cfg)
    for p in ps:
        check_problem(p, cfg)
    if cfg.min_steps == cfg.max_steps:
        assert {p.steps for p in ps} == {cfg.min_steps}


def test_single_operation_still_reaches_four_steps():
    for op in ("+", "-", "*", "/"):
        cfg = GenConfig(min_steps=4, max_steps=4, operations=(op,))
        for p in generate(9, 20, cfg):
            check_problem(p, cfg)


@pytest.mark.parametrize("bad", [
    dict(min_steps=0), dict(max_steps=5), dict(min_steps=3, max_steps=2), dict(operations=()),
    dict(operations=("%",)), dict(operations=("+", "+")), dict(max_operand=5),
    dict(max_operand=100, max_result=50)])
def test_bad_config_rejected(bad):
    with pytest.raises(ValueError):
        GenConfig(**bad)


# ---- property test ---------------------------------------------------------------------------

@st.composite
def configs(draw) -> GenConfig:
    lo = draw(st.integers(1, 4))
    hi = draw(st.integers(lo, 4))
    ops = draw(st.sets(st.sampled_from("+-*/"), min_size=1))
    max_operand = draw(st.integers(100, 1000))
    max_result = draw(st.integers(max(1000, max_operand), 100_000))
    return GenConfig(lo, hi, max_operand, max_result, tuple(o for o in "+-*/" if o in ops))


@settings(max_examples=60, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**40), cfg=configs())
def test_invariants_hold_for_any_seed_and_config(seed, cfg):
    ps = generate(seed, 4, cfg)
    assert ps == generate(seed, 4, cfg)
    for p in ps:
        check_problem(p, cfg)


# ---- train / evaluation split ----------------------------------------------------------------

def test_check_split():
    with pytest.raises(ValueError):
        check_split(TRAIN_SEEDS[0])
    with pytest.raises(ValueError):
        check_split(999)
    check_split(HELD_OUT_SEEDS[0])
    assert not set(TRAIN_SEEDS) & set(HELD_OUT_SEEDS)
