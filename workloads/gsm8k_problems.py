"""Deterministic grade-school arithmetic word problems in GSM8K's exact format.

Why generated problems: mrbench's bundled default model is a tiny char-level Llama that
must answer GSM8K-*format* problems well enough (>= 0.90 greedy) for accuracy regressions
in a runner to show up. Real GSM8K is far beyond such a model, so we train and evaluate it
on problems from this module, which keeps two properties on purpose:

* the answer is perfectly regular: one line per arithmetic step, each with a calculator
  annotation ``a op b = <<a op b=r>>r``, then ``#### N``; every operand is a number stated
  in the question or an earlier result, so the answer can be *derived*, never guessed;
* the question varies a lot (30 scenarios, 54 names with he/she/they, many nouns,
  several phrasings per fact, facts in either order), so the model has to read it.

The templates are data, in ``data/gsm8k_templates.yaml`` next to this module (its header
describes the format); they are loaded and checked at import, so a malformed file fails
loudly there, and editing the file changes the problems of every seed.

How a problem is made: pick the number of steps, pick a template (a small state machine
of story events, each one or two arithmetic steps), plan a walk through it with exactly
that many steps using only the allowed operations, then choose numbers. Numbers are chosen
forward, except that every division's divisor is picked *before* the number it divides,
and the step producing that number is constructed to be a multiple of it, so divisions are
exact by construction. A candidate is rejected (and redrawn from the same RNG stream) if a
result repeats a stated number or an earlier result, which rules out no-op steps such as
"x*3 then /3" and keeps every operand unambiguous, or if question + answer is longer than
MAX_CHARS, which keeps every problem inside the tiny model's context.

Everything is driven by ``random.Random`` seeded from the caller's seed (no global RNG,
no set iteration), so a (seed, n, config) triple always gives the same problems.
"""
from __future__ import annotations

import argparse
import json
import random
import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from math import gcd
from typing import Iterable, Sequence

from .gsm8k_templates import (
    KIND_SLOTS,
    NAMES,
    PRONOUNS,
    RELATIVES,
    TEMPLATES,
    Event,
    pronoun,
)

__all__ = [
    "GenConfig", "Problem", "generate", "to_jsonl_records", "final_answer",
    "TRAIN_SEEDS", "HELD_OUT_SEEDS", "check_split", "MAX_CHARS",
]

TRAIN_SEEDS: tuple[int, ...] = tuple(range(0, 1000))
"""Seeds whose streams are used to train the bundled model; never evaluate on them."""

HELD_OUT_SEEDS: tuple[int, ...] = tuple(range(1_000_000, 1_000_100))
"""Seeds reserved for evaluation; no training run may draw from them."""

OPERATIONS = ("+", "-", "*", "/")


@dataclass(frozen=True)
class GenConfig:
    """Knobs that change difficulty; validated so a bad value fails loudly, not silently.

    Factors and divisors have their own small caps (mostly <= 12, see gsm8k_templates.DEFAULT_CAPS), so
    max_operand mainly bounds the numbers that are added, subtracted or started from.
    Tight combinations may be impossible (4 steps of only "/" need a stated dividend of at
    least 48, and are only found reliably with max_operand >= 100); generate() raises
    ValueError for them rather than loosening the config silently.
    """

    min_steps: int = 1            # reasoning steps (arithmetic operations), 1..4
    max_steps: int = 4
    max_operand: int = 100        # largest number stated in a question
    max_result: int = 10_000      # every intermediate and final result in [0, max_result]
    operations: tuple[str, ...] = ("+", "-", "*", "/")   # "/" only with exact integer results

    def __post_init__(self) -> None:
        if not 1 <= self.min_steps <= self.max_steps <= 4:
            raise ValueError(f"need 1 <= min_steps <= max_steps <= 4, got "
                             f"{self.min_steps}..{self.max_steps}")
        if self.max_operand < 10:
            raise ValueError(f"max_operand must be >= 10, got {self.max_operand}")
        if self.max_result < self.max_operand:
            raise ValueError("max_result must be >= max_operand")
        ops = tuple(self.operations)
        if not ops or any(op not in OPERATIONS for op in ops) or len(set(ops)) != len(ops):
            raise ValueError(f"operations must be distinct items of {OPERATIONS}, got {ops}")


@dataclass(frozen=True)
class Problem:
    """One generated problem; ``seed``/``index`` say exactly how to regenerate it."""

    question: str
    answer: str          # GSM8K format, ends with "#### N"
    final: int
    steps: int
    seed: int            # the seed of the generator call that produced it
    index: int           # position within that seed's stream
    template: str        # scenario id, for diversity accounting


# ---------------------------------------------------------------------------------------
# Planning: which events, in which order, with exactly n steps and only allowed ops.


def _ops_ok(ev: Event, ops: tuple[str, ...]) -> bool:
    return all(op in ops for op in ev.ops)


@lru_cache(maxsize=None)
def _feasible(ti: int, state: str, k: int, ops: tuple[str, ...]) -> bool:
    """Can template ti, standing in `state`, finish with exactly k more steps?"""
    t = TEMPLATES[ti]
    if k == 0:
        return bool(t.final_questions(state))
    return any(state in e.src and _ops_ok(e, ops) and e.steps <= k
               and _feasible(ti, e.dst, k - e.steps, ops) for e in t.events)


def _starts(ti: int, n: int, ops: tuple[str, ...]) -> list[Event]:
    return [s for s in TEMPLATES[ti].starts if _ops_ok(s, ops) and s.steps <= n
            and _feasible(ti, s.dst, n - s.steps, ops)]


@lru_cache(maxsize=None)
def _candidates(n: int, ops: tuple[str, ...]) -> tuple[int, ...]:
    return tuple(ti for ti in range(len(TEMPLATES)) if _starts(ti, n, ops))


def _plan(ti: int, n: int, ops: tuple[str, ...], rng: random.Random) -> list[Event]:
    """A random walk through template ti using exactly n steps."""
    t = TEMPLATES[ti]
    plan = [rng.choice(_starts(ti, n, ops))]
    k, state = n - plan[0].steps, plan[0].dst
    while k > 0:
        options = [e for e in t.events if state in e.src and _ops_ok(e, ops) and e.steps <= k
                   and _feasible(ti, e.dst, k - e.steps, ops)]
        # The same event twice in a row reads like padding; allow it only when forced.
        ev = rng.choice([e for e in options if e is not plan[-1]] or options)
        plan.append(ev)
        k, state = k - ev.steps, ev.dst
    return plan


# ---------------------------------------------------------------------------------------
# Numbers.

_Step = tuple[int, str, int, int]          # left, op, right, result


def _pick(rng: random.Random, lo: int, hi: int, mod: int = 1, rem: int = 0) -> int | None:
    """Uniform v in [lo, hi] with v % mod == rem, or None when there is none."""
    if hi < lo:
        return None
    first = lo + (rem - lo) % mod
    if first > hi:
        return None
    return first + mod * rng.randrange((hi - first) // mod + 1)


def _sample(ev: Event, rng: random.Random, r: int | None, need: int, hi: int,
            div: int | None, cfg: GenConfig) -> tuple[tuple[int, ...], list[_Step], int] | None:
    """Propose the stated numbers and steps of one event.

    need: the event's value must be a multiple of it (a division follows); hi: cap on the
    value, leaving room for later multiplications; div: the pre-picked divisor of a DIV.
    """
    caps = [cfg.max_operand if c is None else min(c, cfg.max_operand) for c in ev.caps]
    c1 = caps[0]
    c2 = caps[1] if len(caps) > 1 else c1
    lo = 2 * need
    k = ev.kind
    if k == "GIVEN":
        a = _pick(rng, lo, min(c1, hi), need)
        return None if a is None else ((a,), [], a)
    if k == "S_ADD":
        a = rng.randint(2, c1)
        b = _pick(rng, 2, min(c2, hi - a), need, -a % need)
        return None if b is None else ((a, b), [(a, "+", b, a + b)], a + b)
    if k == "S_SUB":
        a = rng.randint(min(lo + 2, c1), c1)
        b = _pick(rng, 2, min(c2, a - lo), need, a % need)
        return None if b is None else ((a, b), [(a, "-", b, a - b)], a - b)
    if k == "S_MUL":
        a = rng.randint(2, c1)
        b = _pick(rng, 2, min(c2, hi // a), need // gcd(a, need))
        return None if b is None else ((a, b), [(a, "*", b, a * b)], a * b)
    if k == "S_DIV":                 # pick quotient and divisor, derive the dividend
        b = rng.randint(2, c2)
        q = _pick(rng, max(lo, 2), min(hi, c1 // b), need)
        return None if q is None else ((q * b, b), [(q * b, "/", b, q)], q)
    assert r is not None
    if k == "ADD":
        x = _pick(rng, 2, min(c1, hi - r), need, -r % need)
        return None if x is None else ((x,), [(r, "+", x, r + x)], r + x)
    if k == "SUB":
        x = _pick(rng, 2, min(c1, r - lo), need, r % need)
        return None if x is None else ((x,), [(r, "-", x, r - x)], r - x)
    if k == "RSUB":
        x = _pick(rng, r + lo, min(c1, r + hi), need, r % need)
        return None if x is None else ((x,), [(x, "-", r, x - r)], x - r)
    if k == "MUL":
        x = _pick(rng, 2, min(c1, hi // r), need // gcd(r, need))
        return None if x is None else ((x,), [(r, "*", x, r * x)], r * x)
    if k == "DIV":
        assert div is not None and r % div == 0
        return (div,), [(r, "/", div, r // div)], r // div
    # Two-step events: plain rejection sampling; the caller checks `need` and bounds.
    if k in ("ADD_MUL", "SUB_MUL"):
        x, y = rng.randint(2, c1), rng.randint(2, c2)
        t = x * y
        v = r + t if k == "ADD_MUL" else r - t
        return (x, y), [(x, "*", y, t), (r, "+" if k == "ADD_MUL" else "-", t, v)], v
    if k == "TIMES_TOTAL":
        x = rng.randint(2, c1)
        return (x,), [(r, "*", x, r * x), (r, "+", r * x, r + r * x)], r + r * x
    if k == "MORE_TOTAL":
        x = _pick(rng, 2, c1, need, -2 * r % need)
        return None if x is None else ((x,), [(r, "+", x, r + x), (r, "+", r + x, 2 * r + x)],
                                       2 * r + x)
    if k == "FEWER_TOTAL":
        x = _pick(rng, 2, min(c1, r - 2), need, 2 * r % need)
        return None if x is None else ((x,), [(r, "-", x, r - x), (r, "+", r - x, 2 * r - x)],
                                       2 * r - x)
    raise AssertionError(k)


_GROWS = {"MUL": 2, "TIMES_TOTAL": 3}      # least factor by which an event grows the value
_TRIES_PER_EVENT = 25


def _assign(plan: list[Event], cfg: GenConfig, rng: random.Random
            ) -> list[tuple[tuple[int, ...], list[_Step]]] | None:
    """Numbers for every event of the plan, or None (the caller redraws)."""
    # Divisors first, backwards: a DIV's input must be a multiple of its divisor times
    # whatever the following divisions need; the event before it constructs that multiple.
    needs, divs, need = [1] * len(plan), [None] * len(plan), 1
    for i in range(len(plan) - 1, -1, -1):
        needs[i] = need
        if plan[i].kind == "DIV":
            cap = min(plan[i].caps[0] or cfg.max_operand, cfg.max_operand // (2 * need))
            if cap < 2:
                return None
            divs[i] = rng.randint(2, cap)
            need *= divs[i]
        else:
            need = 1
    # Caps that leave room for later growth, so late multiplications stay in range.
    his, room = [0] * len(plan), cfg.max_result
    for i in range(len(plan) - 1, -1, -1):
        his[i] = room
        room //= _GROWS.get(plan[i].kind, 1)

    out: list[tuple[tuple[int, ...], list[_Step]]] = []
    stated: list[int] = []
    results: list[int] = []
    r: int | None = None
    for i, ev in enumerate(plan):
        for _ in range(_TRIES_PER_EVENT):
            got = _sample(ev, rng, r, needs[i], his[i], divs[i], cfg)
            if got is not None and _fits(got, stated, results, needs[i], his[i], cfg):
                break
        else:
            return None
        nums, steps, r = got
        stated.extend(nums)
        results.extend(s[3] for s in steps)
        out.append((nums, steps))
    return out


def _fits(got: tuple[tuple[int, ...], list[_Step], int], stated: list[int], results: list[int],
          need: int, hi: int, cfg: GenConfig) -> bool:
    """Bounds, exactness, and 'every result is a new number' (no no-op or echo steps)."""
    nums, steps, value = got
    if any(not 2 <= v <= cfg.max_operand for v in nums) or any(v in results for v in nums):
        return False
    known = set(stated) | set(nums) | set(results)
    for left, op, right, res in steps:
        if not 2 <= res <= cfg.max_result or res in known:
            return False
        if op == "/" and left != res * right:
            return False
        known.add(res)
    return value % need == 0 and 2 * need <= value <= hi


# ---------------------------------------------------------------------------------------
# Rendering.


def _expr(step: _Step, money: bool) -> str:
    left, op, right, res = step
    e = f"{left}{op}{right}"
    return f"{e} = {'$' if money else ''}<<{e}={res}>>{res}"


def _render(ti: int, plan: list[Event], numbers: list[tuple[tuple[int, ...], list[_Step]]],
            rng: random.Random) -> tuple[str, str, int, int]:
    t = TEMPLATES[ti]
    i = rng.randrange(len(NAMES))
    name = NAMES[i]
    pron = pronoun(i)
    friend = rng.choice([n for n in NAMES if n != name])
    item, item2 = rng.sample(t.items, 2) if len(t.items) > 1 else (t.items[0], t.items[0])
    ctx = dict(PRONOUNS[pron], name=name, friend=friend, rel=rng.choice(RELATIVES),
               item=item[0], items=item[1], Items=item[1][0].upper() + item[1][1:],
               item2=item2[0], items2=item2[1])
    for slot, choices in t.slots:
        ctx[slot] = rng.choice(choices)

    sentences: list[str] = []
    lines: list[str] = []
    used: list[str] = []
    for ev, (nums, steps) in zip(plan, numbers):
        vals = dict(zip(KIND_SLOTS[ev.kind], nums))
        phrasing = rng.choice([q for q in ev.q if q not in used] or ev.q)   # vary repeats
        used.append(phrasing)
        sentences.append(phrasing.format(**ctx, **vals))
        for text, step in zip(ev.a, steps):
            lines.append(text.format(**ctx, **vals, e=_expr(step, False), m=_expr(step, True)))
    last = plan[-1]
    finals = last.fin or t.final_questions(last.dst)
    sentences.append(rng.choice(finals).format(**ctx))
    final = numbers[-1][1][-1][3]          # n >= 1, so the last event has a step
    lines.append(f"#### {final}")
    return " ".join(sentences), "\n".join(lines), final, len(lines) - 1


_MAX_ATTEMPTS = 5000
MAX_CHARS = 460
"""Cap on len(question) + len(answer). The bundled model is char-level with 512 positions,
and the lm-eval prompt adds about 20 characters; longer problems would be truncated."""


def _one(rng: random.Random, cfg: GenConfig, ops: tuple[str, ...], seed: int,
         index: int) -> Problem:
    n = rng.randint(cfg.min_steps, cfg.max_steps)
    cands = _candidates(n, ops)
    if not cands:
        raise ValueError(f"no template can make a {n}-step problem with operations {ops}")
    for _ in range(_MAX_ATTEMPTS):
        ti = rng.choice(cands)
        plan = _plan(ti, n, ops, rng)
        numbers = _assign(plan, cfg, rng)
        if numbers is not None:
            q, a, final, steps = _render(ti, plan, numbers, rng)
            if len(q) + len(a) <= MAX_CHARS:
                return Problem(q, a, final, steps, seed, index, TEMPLATES[ti].id)
    raise ValueError(f"could not build a {n}-step problem within {cfg}; loosen max_operand, "
                     f"max_result or operations")


def generate(seed: int, n: int, config: GenConfig = GenConfig()) -> list[Problem]:
    """n problems; the same (seed, n, config) always gives the same list, and the first n
    of a longer run equal a shorter run (a stream)."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    ops = tuple(op for op in OPERATIONS if op in config.operations)   # order-independent
    stream = random.Random(seed)
    # Each problem gets its own RNG seeded from the stream, so problem i depends only on
    # (seed, i, config), however many draws earlier problems needed.
    return [_one(random.Random(stream.getrandbits(64)), config, ops, seed, i) for i in range(n)]


def to_jsonl_records(problems: Iterable[Problem]) -> list[dict]:
    """GSM8K's jsonl shape ({"question", "answer"}), plus provenance keys for audits."""
    return [{"question": p.question, "answer": p.answer, "seed": p.seed, "index": p.index,
             "steps": p.steps, "template": p.template} for p in problems]


_FINAL = re.compile(r"^#### (-?[0-9][0-9,]*)\s*$", re.MULTILINE)


def final_answer(answer: str) -> int:
    """The integer after '#### ' (GSM8K's last line); commas, as real GSM8K has, allowed."""
    found = _FINAL.findall(answer)
    if not found:
        raise ValueError(f"no '#### N' line in answer: {answer[-60:]!r}")
    return int(found[-1].replace(",", ""))


def check_split(seed: int) -> None:
    """Refuse to evaluate on a training seed: scores there would measure memorisation."""
    if seed in TRAIN_SEEDS:
        raise ValueError(f"seed {seed} is a training seed (TRAIN_SEEDS = 0..{TRAIN_SEEDS[-1]}); "
                         f"evaluate on HELD_OUT_SEEDS instead")


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m mrbench.workloads.gsm8k_problems --write FILE [--seed S] [--limit N]`: write
    generated problems as GSM8K JSONL (question, answer, plus provenance keys), e.g. for
    lm-eval's `mrbench_gsm8k_local` task (`--metadata data_file=FILE`)."""

    ap = argparse.ArgumentParser(prog="python -m mrbench.workloads.gsm8k_problems",
                                 description="Write generated GSM8K-format problems as JSONL.")
    ap.add_argument("--write", required=True, metavar="FILE", help="output JSONL ('-' = stdout)")
    ap.add_argument("--seed", type=int, default=HELD_OUT_SEEDS[0],
                    help=f"generator seed; a held-out one (default {HELD_OUT_SEEDS[0]})")
    ap.add_argument("--limit", type=int, default=64, help="number of problems (default 64)")
    a = ap.parse_args(argv)
    if a.limit < 1:
        ap.error("--limit must be >= 1")
    try:
        check_split(a.seed)
    except ValueError as e:
        ap.error(f"--seed: {e}")
    lines = "".join(json.dumps(r) + "\n" for r in to_jsonl_records(generate(a.seed, a.limit)))
    if a.write == "-":
        sys.stdout.write(lines)
    else:
        with open(a.write, "w", encoding="utf-8") as f:
            f.write(lines)
        print(f"wrote {a.limit} problems (seed {a.seed}) to {a.write}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
