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

import random
import re
from dataclasses import dataclass
from functools import lru_cache
from math import gcd
from typing import Iterable, Sequence

__all__ = [
    "GenConfig", "Problem", "generate", "to_jsonl_records", "final_answer",
    "TRAIN_SEEDS", "HELD_OUT_SEEDS", "check_split", "NAMES", "TEMPLATE_IDS", "MAX_CHARS",
]

TRAIN_SEEDS: tuple[int, ...] = tuple(range(0, 1000))
"""Seeds whose streams are used to train the bundled model; never evaluate on them."""

HELD_OUT_SEEDS: tuple[int, ...] = tuple(range(1_000_000, 1_000_100))
"""Seeds reserved for evaluation; no training run may draw from them."""

OPERATIONS = ("+", "-", "*", "/")


@dataclass(frozen=True)
class GenConfig:
    """Knobs that change difficulty; validated so a bad value fails loudly, not silently.

    Factors and divisors have their own small caps (mostly <= 12, see _DEFAULT_CAPS), so
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
# People. Names are plain ASCII so the char-level tokenizer never meets an unknown char.

_SHE = ("Mia", "Emma", "Olivia", "Ava", "Sofia", "Isabella", "Lucy", "Grace", "Chloe",
        "Zoe", "Hannah", "Nora", "Leah", "Maya", "Aisha", "Priya", "Mei", "Fatima", "Rosa",
        "Nadia", "Ines", "Yuki")
_HE = ("Liam", "Noah", "Ethan", "Lucas", "Mason", "Leo", "Omar", "Diego", "Ravi", "Kenji",
       "Samuel", "Daniel", "Felix", "Hugo", "Arjun", "Mateo", "Jamal", "Ivan", "Tom", "Ben",
       "Carlos", "Wei")
_THEY = ("Alex", "Sam", "Jordan", "Riley", "Casey", "Taylor", "Morgan", "Jamie", "Avery",
         "Robin")
NAMES: tuple[str, ...] = _SHE + _HE + _THEY

_PRONOUNS = {
    "she": dict(He="She", he="she", His="Her", his="her", him="her",
                s="s", es="es", has="has", does="does"),
    "he": dict(He="He", he="he", His="His", his="his", him="him",
               s="s", es="es", has="has", does="does"),
    "they": dict(He="They", he="they", His="Their", his="their", him="them",
                 s="", es="", has="have", does="do"),
}
_RELATIVES = ("brother", "sister", "cousin", "friend", "neighbor", "uncle", "aunt",
              "classmate")
_GIFTS = ("a book", "a kite", "a scarf", "a board game", "a lamp", "a backpack",
          "a puzzle", "a hat", "a plant", "an umbrella", "a toy robot", "a water bottle")
_TOYS = ("comic books", "toy cars", "puzzles", "kites", "yo-yos", "card games",
         "stuffed animals", "paint sets")

# ---------------------------------------------------------------------------------------
# Templates: data, not code. A template is a state machine over "what the running number
# means" (apples on hand, boxes filled, dollars earned, ...). Events move between states
# and carry their question phrasings and one answer line per arithmetic step.
#
# Event kinds and their arithmetic (r = running value, a/b/x/y = numbers stated in the
# question). Starts create the first running value; the others transform it.
#   GIVEN a            (0 steps)            S_ADD a+b    S_SUB a-b    S_MUL a*b    S_DIV a/b
#   ADD r+x   SUB r-x   RSUB x-r   MUL r*x   DIV r/x                                (1 step)
#   ADD_MUL  t=x*y, r+t      SUB_MUL  t=x*y, r-t                                  (2 steps)
#   TIMES_TOTAL t=r*x, r+t   MORE_TOTAL t=r+x, r+t   FEWER_TOTAL t=r-x, r+t       (2 steps)

_KIND_OPS: dict[str, tuple[str, ...]] = {
    "GIVEN": (), "S_ADD": ("+",), "S_SUB": ("-",), "S_MUL": ("*",), "S_DIV": ("/",),
    "ADD": ("+",), "SUB": ("-",), "RSUB": ("-",), "MUL": ("*",), "DIV": ("/",),
    "ADD_MUL": ("*", "+"), "SUB_MUL": ("*", "-"),
    "TIMES_TOTAL": ("*", "+"), "MORE_TOTAL": ("+", "+"), "FEWER_TOTAL": ("-", "+"),
}
# Numbers each kind states in the question, in placeholder order.
_KIND_SLOTS: dict[str, tuple[str, ...]] = {
    "GIVEN": ("a",), "S_ADD": ("a", "b"), "S_SUB": ("a", "b"), "S_MUL": ("a", "b"),
    "S_DIV": ("a", "b"), "ADD": ("x",), "SUB": ("x",), "RSUB": ("x",), "MUL": ("x",),
    "DIV": ("x",), "ADD_MUL": ("x", "y"), "SUB_MUL": ("x", "y"), "TIMES_TOTAL": ("x",),
    "MORE_TOTAL": ("x",), "FEWER_TOTAL": ("x",),
}
# Default caps on stated numbers (None = max_operand). Factors and divisors stay small so
# that the multiplications a tiny model must do are mostly 1-2 digit by 1 digit.
_SMALL = 12
_DEFAULT_CAPS: dict[str, tuple[int | None, ...]] = {
    "GIVEN": (None,), "S_ADD": (None, None), "S_SUB": (None, None), "S_MUL": (_SMALL, 30),
    "S_DIV": (None, _SMALL), "ADD": (None,), "SUB": (None,), "RSUB": (None,),
    "MUL": (_SMALL,), "DIV": (_SMALL,), "ADD_MUL": (_SMALL, 30), "SUB_MUL": (_SMALL, 30),
    "TIMES_TOTAL": (6,), "MORE_TOTAL": (None,), "FEWER_TOTAL": (None,),
}


@dataclass(frozen=True)
class _Event:
    kind: str
    src: tuple[str, ...]          # states it may follow; () for a start
    dst: str
    q: tuple[str, ...]            # alternative question phrasings
    a: tuple[str, ...]            # one answer line per arithmetic step
    caps: tuple[int | None, ...]
    fin: tuple[str, ...]          # final questions to prefer when this event is last

    @property
    def ops(self) -> tuple[str, ...]:
        return _KIND_OPS[self.kind]

    @property
    def steps(self) -> int:
        return len(self.ops)


@dataclass(frozen=True)
class _Template:
    id: str
    items: tuple[tuple[str, str], ...]            # (singular, plural) for {item}/{items}
    starts: tuple[_Event, ...]
    events: tuple[_Event, ...]
    finals: tuple[tuple[str, tuple[str, ...]], ...]   # state -> final questions
    slots: tuple[tuple[str, tuple[str, ...]], ...] = ()   # extra {slot} choices

    def final_questions(self, state: str) -> tuple[str, ...]:
        return dict(self.finals).get(state, ())


def _tup(v: str | Sequence[str]) -> tuple[str, ...]:
    return (v,) if isinstance(v, str) else tuple(v)


def _S(kind: str, dst: str, q: str | Sequence[str], a: str | Sequence[str] = (),
       caps: tuple[int | None, ...] | None = None) -> _Event:
    return _Event(kind, (), dst, _tup(q), _tup(a), caps or _DEFAULT_CAPS[kind], ())


def _E(kind: str, src: str | Sequence[str], dst: str, q: str | Sequence[str],
       a: str | Sequence[str], caps: tuple[int | None, ...] | None = None,
       fin: str | Sequence[str] = ()) -> _Event:
    return _Event(kind, _tup(src), dst, _tup(q), _tup(a), caps or _DEFAULT_CAPS[kind],
                  _tup(fin))


def _vs(src: str | Sequence[str], unit: str, verb: str = "has", did: str = "has",
        did_pl: str = "have", dst: str = "tog") -> list[_Event]:
    """Comparisons with a relative; each costs two steps and ends in a 'together' total."""
    return [
        _E("TIMES_TOTAL", src, dst,
           f"{{His}} {{rel}} {verb} {{x}} times as many {unit} as {{he}} {{does}}.",
           (f"{{His}} {{rel}} {did} {{e}} {unit}.", f"Together they {did_pl} {{e}} {unit}.")),
        _E("MORE_TOTAL", src, dst,
           f"{{His}} {{rel}} {verb} {{x}} more {unit} than {{he}} {{does}}.",
           (f"{{His}} {{rel}} {did} {{e}} {unit}.", f"Together they {did_pl} {{e}} {unit}.")),
        _E("FEWER_TOTAL", src, dst,
           f"{{His}} {{rel}} {verb} {{x}} fewer {unit} than {{he}} {{does}}.",
           (f"{{His}} {{rel}} {did} {{e}} {unit}.", f"Together they {did_pl} {{e}} {unit}.")),
    ]


def _vs_finals(unit: str, base: str = "have", dst: str = "tog") -> dict[str, tuple[str, ...]]:
    """Final questions for the state `_vs` ends in; base is the verb's plain form."""
    return {dst: (f"How many {unit} do {{name}} and {{his}} {{rel}} {base} together?",
                  f"How many {unit} do they {base} in all?")}


def _vs_money(src: str | Sequence[str], dst: str = "tog") -> list[_Event]:
    """Money comparisons with a relative (amounts shown with $)."""
    return [
        _E("TIMES_TOTAL", src, dst, "{His} {rel} has {x} times as much money as {he} {does}.",
           ("{His} {rel} has {m}.", "Together they have {m}."), caps=(4,)),
        _E("MORE_TOTAL", src, dst, "{His} {rel} has ${x} more than {he} {does}.",
           ("{His} {rel} has {m}.", "Together they have {m}.")),
        _E("FEWER_TOTAL", src, dst, "{His} {rel} has ${x} less than {he} {does}.",
           ("{His} {rel} has {m}.", "Together they have {m}.")),
    ]


_MONEY_TOG = {"tog": ("How much money do {name} and {his} {rel} have together?",
                      "How much money do they have in all?")}


def _build_templates() -> tuple[_Template, ...]:
    T: list[_Template] = []

    def add(id: str, items: Sequence[tuple[str, str]], starts: Sequence[_Event],
            events: Sequence[_Event], finals: dict[str, Sequence[str]],
            slots: dict[str, Sequence[str]] | None = None) -> None:
        T.append(_Template(id, tuple(items), tuple(starts), tuple(events),
                           tuple((k, _tup(v)) for k, v in finals.items()),
                           tuple((k, tuple(v)) for k, v in (slots or {}).items())))

    left_items = "How many {items} does {name} have left?"

    # 1. Picking fruit ---------------------------------------------------------------
    add("orchard",
        [("apple", "apples"), ("pear", "pears"), ("peach", "peaches"), ("plum", "plums"),
         ("orange", "oranges"), ("lemon", "lemons"), ("mango", "mangoes"),
         ("apricot", "apricots"), ("cherry", "cherries"), ("lime", "limes")],
        [_S("GIVEN", "n0", ["{name} picks {a} {items} at the orchard.",
                            "{name} has a basket of {a} {items}."]),
         _S("S_ADD", "n0",
            ["{name} picks {a} {items} in the morning and {b} in the afternoon.",
             "In the afternoon {name} picks {b} {items}. In the morning {he} picked {a}."],
            "{He} picked {e} {items} in all."),
         _S("S_MUL", "n0", ["{name} fills {a} baskets with {items}. Each basket holds {b} {items}.",
                            "Each basket holds {b} {items}, and {name} fills {a} baskets."],
            "{He} picked {e} {items}.")],
        [_E("MUL", "n0", "n", "{He} pick{s} that many every day for {x} days.",
            "{He} picked {e} {items} in those days."),
         _E("ADD", ("n0", "n"), "n", ["{He} then pick{s} {x} more {items}.",
                                      "{friend} gives {him} {x} more {items}."],
            "Now {he} {has} {e} {items}."),
         _E("SUB", ("n0", "n"), "n", ["{He} eat{s} {x} of the {items}.",
                                      "{x} of the {items} are bruised, so {he} throw{s} them away.",
                                      "{He} give{s} {x} {items} to {friend}."],
            "{He} {has} {e} {items} left.", fin=left_items),
         _E("SUB_MUL", ("n0", "n"), "n", "{He} give{s} {x} {items} to each of {his} {y} neighbors.",
            ("{He} gave away {e} {items}.", "{He} {has} {e} {items} left."),
            caps=(6, 8), fin=left_items),
         _E("DIV", ("n0", "n"), "bags",
            ["{He} pack{s} the {items} into bags of {x}.",
             "{He} put{s} {x} {items} in each bag until none are left."],
            "{He} filled {e} bags."),
         _E("DIV", ("n0", "n"), "each", "{He} share{s} the {items} equally among {x} friends.",
            "Each friend gets {e} {items}."),
         _E("MUL", "bags", "cash", ["{He} sell{s} each bag for ${x}.", "Each bag sells for ${x}."],
            "{He} made {m}.", caps=(9,)),
         _E("SUB", "cash", "cashleft", "{He} spend{s} ${x} of it on lunch.",
            "{He} {has} {m} left."),
         *_vs(("n0", "n"), "{items}")],
        {"n0": ["How many {items} does {name} have?", "How many {items} does {name} pick in all?"],
         "n": ["How many {items} does {name} have now?"],
         "bags": ["How many bags does {name} fill?"],
         "each": ["How many {items} does each friend get?"],
         "cash": ["How much money does {name} make?"],
         "cashleft": ["How much money does {name} have left?"],
         **_vs_finals("{items}")})

    # 2. Baking --------------------------------------------------------------------------
    add("bakery",
        [("cookie", "cookies"), ("muffin", "muffins"), ("cupcake", "cupcakes"),
         ("brownie", "brownies"), ("bagel", "bagels"), ("scone", "scones"),
         ("pretzel", "pretzels"), ("donut", "donuts"), ("tart", "tarts"), ("roll", "rolls")],
        [_S("GIVEN", "n0", ["{name} bakes {a} {items} for the school fair.",
                            "{name} has {a} {items} on a tray."]),
         _S("S_MUL", "n0", ["{name} bakes {a} trays of {items}. Each tray holds {b} {items}.",
                            "A tray holds {b} {items}, and {name} bakes {a} full trays."],
            "{He} baked {e} {items}."),
         _S("S_ADD", "n0", ["{name} bakes {a} {items} on Saturday and {b} on Sunday.",
                            "On Sunday {name} bakes {b} {items}. On Saturday {he} baked {a}."],
            "{He} baked {e} {items} over the weekend.")],
        [_E("MUL", "n0", "n", "{He} bake{s} the same amount every week for {x} weeks.",
            "{He} baked {e} {items} in those weeks."),
         _E("ADD", ("n0", "n"), "n", ["{friend} brings {x} more {items}.",
                                      "{He} bake{s} another batch of {x} {items}."],
            "There are now {e} {items}."),
         _E("SUB", ("n0", "n"), "n", ["{He} sell{s} {x} of the {items}.",
                                      "{His} family eats {x} of the {items}."],
            "{He} {has} {e} {items} left.", fin=left_items),
         _E("SUB_MUL", ("n0", "n"), "n", "{He} give{s} {x} {items} to each of {y} neighbors.",
            ("{He} gave away {e} {items}.", "{He} {has} {e} {items} left."), caps=(6, 8),
            fin=left_items),
         _E("DIV", ("n0", "n"), "boxes",
            ["{He} pack{s} the {items} in boxes of {x}.",
             "Each box holds {x} {items}, and {he} box{es} all of them."],
            "{He} filled {e} boxes."),
         _E("DIV", ("n0", "n"), "each", "{He} share{s} the {items} equally among {x} classmates.",
            "Each classmate gets {e} {items}."),
         _E("MUL", "boxes", "cash", ["{He} sell{s} each box for ${x}.",
                                     "Every box sells for ${x}."],
            "{He} made {m}."),
         _E("SUB", "cash", "cashleft", "{He} spend{s} ${x} on supplies.", "{He} {has} {m} left."),
         *_vs(("n0", "n"), "{items}")],
        {"n0": ["How many {items} does {name} bake?"],
         "n": ["How many {items} does {name} have now?", "How many {items} are there now?"],
         "boxes": ["How many boxes does {name} fill?"],
         "each": ["How many {items} does each classmate get?"],
         "cash": ["How much money does {name} make?"],
         "cashleft": ["How much money does {name} have left?"],
         **_vs_finals("{items}")})

    # 3. Savings -------------------------------------------------------------------------
    money_now = ["How much money does {name} have now?", "How much money does {name} have in all?"]
    add("piggy_bank", [("dollar", "dollars")],
        [_S("GIVEN", "m0", ["{name} has ${a} in {his} piggy bank.", "{name} has saved ${a}."]),
         _S("S_ADD", "m0", ["{name} gets ${a} for {his} birthday and earns ${b} doing chores.",
                            "{name} earns ${b} doing chores and gets ${a} for {his} birthday."],
            "{He} {has} {m}."),
         _S("S_MUL", "m0", ["{name} saves ${a} every week for {b} weeks.",
                            "For {b} weeks, {name} saves ${a} each week."],
            "{He} saved {m}.", caps=(30, _SMALL))],
        [_E("ADD", ("m0", "m"), "m", ["{His} grandmother gives {him} ${x}.",
                                      "{He} find{s} ${x} in an old coat."],
            "Now {he} {has} {m}."),
         _E("SUB", ("m0", "m"), "m", ["{He} spend{s} ${x} on {gift}.",
                                      "{He} buy{s} {gift} for ${x}."],
            "{He} {has} {m} left.", fin="How much money does {name} have left?"),
         _E("MUL", "m0", "m", "By the end of the year {his} savings grow to {x} times that amount.",
            "{He} then {has} {m}.", caps=(4,)),
         _E("SUB_MUL", ("m0", "m"), "m", "{He} buy{s} {x} {toys} that cost ${y} each.",
            ("The {toys} cost {m}.", "{He} {has} {m} left."), caps=(6, 15),
            fin="How much money does {name} have left?"),
         _E("ADD_MUL", ("m0", "m"), "m",
            "{He} also earn{s} ${x} an hour for {y} hours of babysitting.",
            ("{He} earned {m} babysitting.", "Now {he} {has} {m}."), caps=(15, 8)),
         _E("DIV", ("m0", "m"), "each", "{He} split{s} the money equally among {x} charities.",
            "Each charity gets {m}."),
         *_vs_money(("m0", "m"))],
        {"m0": money_now, "m": money_now,
         "each": ["How much money does each charity get?"], **_MONEY_TOG},
        slots={"gift": _GIFTS, "toys": _TOYS})

    # 4. Pages read ------------------------------------------------------------------------
    add("reading_log", [("page", "pages")],
        [_S("GIVEN", "p0", ["{name} reads {a} pages of a novel on Monday.",
                            "On Monday {name} reads {a} pages of {his} book."]),
         _S("S_ADD", "p0", ["{name} reads {a} pages on Monday and {b} pages on Tuesday.",
                            "On Tuesday {name} reads {b} pages. On Monday {he} read {a} pages."],
            "{He} read {e} pages in all."),
         _S("S_MUL", "p0", ["{name} reads {a} pages every day for {b} days.",
                            "For {b} days, {name} reads {a} pages a day."],
            "{He} read {e} pages.", caps=(40, _SMALL))],
        [_E("ADD", ("p0", "p"), "p", ["On Wednesday {he} read{s} {x} more pages.",
                                      "Over the weekend {he} read{s} another {x} pages.",
                                      "Later {he} read{s} {x} more pages."],
            "{He} {has} read {e} pages in all."),
         _E("SUB", ("p0", "p"), "text", "{x} of those pages are full-page pictures.",
            "{He} read {e} pages of text."),
         _E("MUL", "p0", "rel", "{His} {rel} reads {x} times as many pages as {he} {does}.",
            "{His} {rel} read {e} pages."),
         _E("DIV", ("p0", "p"), "chap", "Each chapter of the book is {x} pages long.",
            "{He} read {e} chapters."),
         *_vs(("p0", "p"), "pages", "reads", "read", "read")],
        {"p0": ["How many pages does {name} read?"],
         "p": ["How many pages does {name} read in all?",
               "How many pages has {name} read altogether?"],
         "text": ["How many pages of text does {name} read?"],
         "rel": ["How many pages does {name}'s {rel} read?"],
         "chap": ["How many chapters does {name} read?"],
         **_vs_finals("pages", "read")})

    # 5. Pages left in a book ----------------------------------------------------------------
    add("book_left", [("page", "pages")],
        [_S("GIVEN", "book", ["{name}'s new book has {a} pages.",
                              "{name} borrows a book with {a} pages from the library."]),
         _S("S_MUL", "book",
            ["{name}'s book has {a} chapters, and each chapter is {b} pages long.",
             "Each chapter of {name}'s book is {b} pages long, and there are {a} chapters."],
            "The book has {e} pages.", caps=(20, 30)),
         _S("S_ADD", "book", "{name}'s book has {a} pages of story and {b} pages of notes.",
            "The book has {e} pages.")],
        [_E("ADD", "book", "book", ["The new edition adds {x} more pages.",
                                    "An extra chapter adds {x} pages.",
                                    "A new preface adds {x} pages."],
            "The book now has {e} pages."),
         _E("SUB", ("book", "left"), "left",
            ["{He} read{s} {x} pages on Monday.",
             "{He} read{s} {x} pages on the bus.",
             "Over the weekend {he} read{s} {x} pages.", "Then {he} read{s} {x} pages."],
            "{He} {has} {e} pages left to read."),
         _E("SUB_MUL", ("book", "left"), "left", "{He} read{s} {x} pages a day for {y} days.",
            ("{He} read {e} pages.", "{He} {has} {e} pages left to read."), caps=(30, 7)),
         _E("DIV", "left", "daily",
            "{He} want{s} to read the rest in {x} days, the same number of pages each day.",
            "{He} must read {e} pages a day."),
         _E("MUL", "book", "series", "The series has {x} books of the same length.",
            "The series has {e} pages.", caps=(8,))],
        {"book": ["How many pages does the book have?"],
         "left": ["How many pages does {name} still have to read?", "How many pages are left?"],
         "daily": ["How many pages does {name} need to read each day?"],
         "series": ["How many pages are in the whole series?"]})

    # 6. Distance driven ---------------------------------------------------------------------
    add("road_trip", [("mile", "miles")],
        [_S("GIVEN", "d0", ["{name} drives {a} {dist} to visit {his} {rel}.",
                            "The drive to {name}'s office is {a} {dist}."]),
         _S("S_ADD", "d0", ["{name} drives {a} {dist} on Monday and {b} {dist} on Tuesday.",
                            "On Tuesday {name} drives {b} {dist}, after {a} {dist} on Monday."],
            "{He} drove {e} {dist}."),
         _S("S_MUL", "d0", ["{name} drives at {a} {dist} per hour for {b} hours.",
                            "{name} drives for {b} hours at {a} {dist} per hour."],
            "{He} drove {e} {dist}.", caps=(60, 8)),
         _S("GIVEN", "trip", ["{name} plans a road trip of {a} {dist}.",
                              "{name}'s road trip is {a} {dist} long."])],
        [_E("MUL", "d0", "d", "{He} make{s} the same drive {x} times this month.",
            "{He} drove {e} {dist} this month.", caps=(10,)),
         _E("ADD", ("d0", "d"), "d", ["{He} then drive{s} {x} more {dist} to a lake.",
                                      "A detour adds {x} {dist} to the drive.",
                                      "Later {he} drive{s} another {x} {dist}."],
            "{He} drove {e} {dist} in all."),
         _E("DIV", ("d0", "d"), "part", "{He} split{s} the driving into {x} equal parts.",
            "Each part is {e} {dist}."),
         _E("DIV", "d0", "hours", "{He} drive{s} at {x} {dist} per hour the whole way.",
            "{He} drove for {e} hours.", caps=(60,)),
         _E("ADD", "trip", "trip", ["A stop at a lake adds {x} {dist} to the trip.",
                                    "A detour makes the trip {x} {dist} longer.",
                                    "{He} add{s} a side trip of {x} {dist}."],
            "The trip is now {e} {dist}."),
         _E("SUB", ("trip", "left"), "left", ["{He} drive{s} {x} {dist} on the first day.",
                                              "By noon {he} {has} driven {x} {dist}.",
                                              "Then {he} drive{s} {x} {dist}.",
                                              "{He} drive{s} {x} {dist} after lunch."],
            "{He} {has} {e} {dist} left to drive."),
         _E("SUB_MUL", ("trip", "left"), "left", "{He} drive{s} {x} {dist} a day for {y} days.",
            ("{He} drove {e} {dist}.", "{He} {has} {e} {dist} left."), caps=(60, 5)),
         *_vs(("d0", "d"), "{dist}", "drives", "drove", "drove")],
        {"d0": ["How many {dist} does {name} drive?"],
         "d": ["How many {dist} does {name} drive in total?", "How far does {name} drive in all?"],
         "part": ["How long is each part of the drive?"],
         "hours": ["How many hours does {name} drive?"],
         "trip": ["How long is the road trip now?"],
         "left": ["How many {dist} does {name} have left to drive?"],
         **_vs_finals("{dist}", "drive")},
        slots={"dist": ("miles", "kilometers")})

    # 7. Farm animals ---------------------------------------------------------------------------
    add("farm",
        [("chicken", "chickens"), ("cow", "cows"), ("goat", "goats"), ("duck", "ducks"),
         ("pig", "pigs"), ("horse", "horses"), ("rabbit", "rabbits"), ("sheep", "sheep"),
         ("goose", "geese"), ("llama", "llamas")],
        [_S("GIVEN", "n0", ["{name} has {a} {items} on {his} farm.",
                            "There are {a} {items} on {name}'s farm."]),
         _S("S_ADD", "mix", ["{name} has {a} {items} and {b} {items2} on {his} farm.",
                             "On {name}'s farm there are {b} {items2} and {a} {items}."],
            "{He} {has} {e} animals."),
         _S("S_MUL", "n0", ["{name} has {a} barns, and each barn holds {b} {items}.",
                            "Each of {name}'s {a} barns holds {b} {items}."],
            "{He} {has} {e} {items}.")],
        [_E("ADD", ("n0", "n"), "n", ["{He} buy{s} {x} more {items} at the market.",
                                      "{x} baby {items} are born in the spring.",
                                      "{friend} gives {him} {x} more {items}."],
            "Now {he} {has} {e} {items}."),
         _E("SUB", ("n0", "n"), "n", ["{He} sell{s} {x} of the {items}.",
                                      "{He} give{s} {x} {items} to {friend}."],
            "{He} {has} {e} {items} left.", fin=left_items),
         _E("ADD", "mix", "mix", ["{He} then buy{s} {x} more animals.",
                                  "{x} baby animals are born.",
                                  "{friend} sells {him} {x} more animals."],
            "{He} now {has} {e} animals."),
         _E("SUB", "mix", "mix", ["{x} of the animals are sold at the fair.",
                                  "{He} give{s} {x} animals to {friend}.",
                                  "{x} of the animals run away."],
            "{He} {has} {e} animals left."),
         _E("DIV", ("n0", "n", "mix"), "pen",
            "{He} put{s} the animals into {x} pens, the same number in each.",
            "Each pen has {e} animals."),
         _E("MUL", ("n0", "n"), "feed", "Each {item} eats {x} pounds of hay a day.",
            "The {items} eat {e} pounds of hay a day.", caps=(10,)),
         _E("MUL", "feed", "stock", "{name} buys hay for {x} days at a time.",
            "{He} buys {e} pounds of hay at a time.", caps=(10,)),
         *_vs(("n0", "n"), "{items}")],
        {"n0": ["How many {items} does {name} have?"],
         "n": ["How many {items} does {name} have now?", "How many {items} are on the farm now?"],
         "mix": ["How many animals does {name} have?", "How many animals are on the farm?"],
         "pen": ["How many animals are in each pen?"],
         "feed": ["How many pounds of hay do the {items} eat each day?"],
         "stock": ["How many pounds of hay does {name} buy at a time?"],
         **_vs_finals("{items}")})

    # 8. Classroom supplies --------------------------------------------------------------------
    add("classroom",
        [("pencil", "pencils"), ("marker", "markers"), ("crayon", "crayons"),
         ("eraser", "erasers"), ("notebook", "notebooks"), ("folder", "folders"),
         ("ruler", "rulers"), ("glue stick", "glue sticks"), ("paintbrush", "paintbrushes"),
         ("sticky note", "sticky notes")],
        [_S("GIVEN", "n0", ["{name} has {a} {items} for {his} class.",
                            "The art room has {a} {items}, and {name} is in charge of them."]),
         _S("S_MUL", "n0",
            ["{name} buys {a} packs of {items} for {his} class. Each pack has {b} {items}.",
             "Packs of {items} hold {b} each, and {name} buys {a} packs for {his} class."],
            "{He} bought {e} {items}."),
         _S("S_ADD", "n0",
            "{name} collects {a} {items} from the art room and {b} from the music room.",
            "{He} collected {e} {items}.")],
        [_E("ADD", ("n0", "n"), "n", ["{He} find{s} {x} more {items} in the closet.",
                                      "The school sends {x} more {items}."],
            "{He} now {has} {e} {items}."),
         _E("SUB", ("n0", "n"), "n", ["{He} throw{s} away {x} old {items}.",
                                      "{He} lend{s} {x} {items} to another teacher."],
            "{He} {has} {e} {items} left.", fin=left_items),
         _E("SUB_MUL", ("n0", "n"), "n", "{He} give{s} {x} {items} to each of {y} students.",
            ("{He} gave out {e} {items}.", "{He} {has} {e} {items} left."), caps=(5, 25),
            fin=left_items),
         _E("DIV", ("n0", "n"), "each", "{He} hand{s} out all the {items} equally to {x} students.",
            "Each student gets {e} {items}."),
         _E("DIV", ("n0", "n"), "cups", "{He} sort{s} the {items} into cups of {x}.",
            "{He} filled {e} cups."),
         _E("MUL", "n0", "school", "Each of the {x} classes in the school gets the same number.",
            "The school gets {e} {items}.", caps=(10,))],
        {"n0": ["How many {items} does {name} have?"],
         "n": ["How many {items} does {name} have now?"],
         "each": ["How many {items} does each student get?"],
         "cups": ["How many cups does {name} fill?"],
         "school": ["How many {items} does the whole school get?"]})

    # 9. Sharing sweets equally ------------------------------------------------------------
    add("candy_share",
        [("candy", "candies"), ("chocolate", "chocolates"), ("lollipop", "lollipops"),
         ("mint", "mints"), ("caramel", "caramels"), ("jelly bean", "jelly beans"),
         ("gumdrop", "gumdrops"), ("marshmallow", "marshmallows"), ("toffee", "toffees"),
         ("gummy worm", "gummy worms")],
        [_S("S_DIV", "each", ["{name} has {a} {items} and shares them equally among {b} friends.",
                              "{name} shares {a} {items} equally among {b} friends."],
            "Each friend gets {e} {items}."),
         _S("GIVEN", "n0", ["{name} has a bag of {a} {items}.", "{name} buys {a} {items}."]),
         _S("S_ADD", "n0", "{name} buys {a} {items}, and {friend} gives {him} {b} more.",
            "{He} {has} {e} {items}.")],
        [_E("ADD", ("n0", "n"), "n", ["{He} find{s} {x} more {items} in {his} pocket.",
                                      "{His} {rel} gives {him} {x} more.",
                                      "{He} buy{s} {x} more {items}."],
            "{He} {has} {e} {items} now."),
         _E("SUB", ("n0", "n"), "n", ["{He} eat{s} {x} of the {items}.",
                                      "{He} give{s} {x} {items} to {friend}."],
            "{He} {has} {e} {items} left.", fin=left_items),
         _E("DIV", ("n0", "n"), "each", "{He} share{s} them equally among {x} friends.",
            "Each friend gets {e} {items}."),
         _E("SUB", ("each", "each2"), "each2", ["Each friend eats {x} of them right away.",
                                                "Each friend then drops {x} of them.",
                                                "Each friend gives {x} of them away."],
            "Each friend has {e} {items} left.",
            fin="How many {items} does each friend have left?"),
         _E("ADD", ("each", "each2"), "each2", ["Then {friend} gives each friend {x} more {items}.",
                                                "Each friend then wins {x} more {items}.",
                                                "Each friend also buys {x} more {items}."],
            "Each friend now has {e} {items}."),
         *_vs(("n0", "n"), "{items}")],
        {"n0": ["How many {items} does {name} have?"],
         "n": ["How many {items} does {name} have now?"],
         "each": ["How many {items} does each friend get?"],
         "each2": ["How many {items} does each friend have now?"],
         **_vs_finals("{items}")})

    # 10. Hourly wages ----------------------------------------------------------------------------
    add("wages", [("dollar", "dollars")],
        [_S("GIVEN", "hour", ["{name} earns ${a} an hour at {his} job.",
                              "{name} is paid ${a} for every hour {he} work{s}."], caps=(30,)),
         _S("S_MUL", "day", ["{name} earns ${a} an hour and works {b} hours a day.",
                             "{name} works {b} hours a day and earns ${a} an hour."],
            "{He} earn{s} {m} a day.", caps=(30, 10))],
        [_E("MUL", "hour", "day", "{He} work{s} {x} hours a day.", "{He} earn{s} {m} a day.",
            caps=(10,)),
         _E("MUL", "day", "week", "{He} work{s} {x} days a week.", "{He} earn{s} {m} a week.",
            caps=(7,)),
         _E("MUL", "week", "total", "{He} work{s} like this for {x} weeks.",
            "{He} earn{s} {m} in those weeks."),
         _E("MUL", "total", "rel", "{His} {rel} earns {x} times as much in the same time.",
            "{His} {rel} earns {m}.", caps=(4,)),
         _E("ADD", ("day", "week", "total"), "bonus", "{He} also get{s} a bonus of ${x}.",
            "{He} earn{s} {m} in all."),
         _E("SUB", "week", "saved", "Each week {he} spend{s} ${x} on bus fare.",
            "{He} save{s} {m} each week."),
         _E("MUL", "saved", "saved_total", "{He} save{s} like this for {x} weeks.",
            "{He} saved {m}."),
         _E("SUB", "total", "left", "{He} spend{s} ${x} on {gift}.", "{He} {has} {m} left."),
         _E("DIV", ("day", "week"), "jar", "{He} split{s} {his} pay equally among {x} jars.",
            "Each jar gets {m}.")],
        {"day": ["How much does {name} earn in a day?"],
         "week": ["How much does {name} earn in a week?"],
         "total": ["How much money does {name} earn in total?"],
         "rel": ["How much does {name}'s {rel} earn?"],
         "bonus": ["How much does {name} earn in all?"],
         "saved": ["How much does {name} save each week?"],
         "saved_total": ["How much does {name} save in total?"],
         "left": ["How much money does {name} have left?"],
         "jar": ["How much money goes into each jar?"]},
        slots={"gift": _GIFTS})

    # 11. Garden ---------------------------------------------------------------------------------
    add("garden",
        [("tulip", "tulips"), ("rose", "roses"), ("daisy", "daisies"),
         ("sunflower", "sunflowers"), ("tomato plant", "tomato plants"),
         ("pepper plant", "pepper plants"), ("lily", "lilies"), ("marigold", "marigolds"),
         ("pansy", "pansies"), ("cabbage", "cabbages")],
        [_S("GIVEN", "n0", ["{name} plants {a} {items} in {his} garden.",
                            "There are {a} {items} in {name}'s garden."]),
         _S("S_MUL", "n0", ["{name} plants {a} rows of {items} with {b} in each row.",
                            "{name} plants {b} {items} in each of {a} rows."],
            "{He} planted {e} {items}.", caps=(_SMALL, 20)),
         _S("S_ADD", "n0", "{name} plants {a} {items} in the front yard and {b} in the backyard.",
            "{He} planted {e} {items}.")],
        [_E("ADD", ("n0", "n"), "n", ["{He} plant{s} {x} more {items} the next day.",
                                      "{friend} gives {him} {x} more {items} to plant.",
                                      "{He} plant{s} another {x} {items} later."],
            "Now there are {e} {items}."),
         _E("SUB", ("n0", "n"), "n", ["Rabbits eat {x} of the {items}.",
                                      "{x} of the {items} do not survive the frost.",
                                      "{He} give{s} {x} of the {items} to {friend}."],
            "There are {e} {items} left.", fin="How many {items} are left in the garden?"),
         _E("MUL", "n0", "next", "The next year {he} plant{s} {x} times as many {items}.",
            "Next year {he} plant{s} {e} {items}.", caps=(5,)),
         _E("DIV", ("n0", "n"), "row", "{He} move{s} them into {x} equal rows.",
            "Each row has {e} {items}."),
         *_vs(("n0", "n"), "{items}")],
        {"n0": ["How many {items} does {name} plant?", "How many {items} are in the garden?"],
         "n": ["How many {items} are in the garden now?"],
         "next": ["How many {items} does {name} plant the next year?"],
         "row": ["How many {items} are in each row?"],
         **_vs_finals("{items}")})

    # 12. Library shelves: the running value is the number of items on the shelves ---------
    on_shelves = "How many {items} are on the shelves now?"
    add("library",
        [("book", "books"), ("magazine", "magazines"), ("comic", "comics"),
         ("cookbook", "cookbooks"), ("atlas", "atlases"), ("novel", "novels"),
         ("storybook", "storybooks"), ("poem book", "poem books"), ("map", "maps"),
         ("DVD", "DVDs")],
        [_S("GIVEN", "n0", ["{name} counts {a} {items} on the library shelves.",
                            "The library where {name} works has {a} {items} on its shelves."]),
         _S("S_MUL", "n0", ["{name} fills {a} library shelves with {b} {items} each.",
                            "{name} puts {b} {items} on each of {a} library shelves."],
            "There are {e} {items} on the shelves."),
         _S("S_ADD", "n0", "{name} shelves {a} {items} in the morning and {b} in the afternoon.",
            "{He} shelved {e} {items}.")],
        [_E("ADD", ("n0", "n"), "n", ["{x} {items} are returned.",
                                      "{name} shelves {x} more {items}.",
                                      "The library gets {x} new {items}."],
            "There are {e} {items} on the shelves now."),
         _E("SUB", ("n0", "n"), "n", ["{x} {items} are checked out.",
                                      "{name} removes {x} old {items}.",
                                      "Visitors borrow {x} {items}."],
            "There are {e} {items} left on the shelves."),
         _E("DIV", ("n0", "n"), "boxes", "{name} packs all of them into boxes of {x}.",
            "{He} filled {e} boxes."),
         _E("DIV", ("n0", "n"), "shelf",
            "{name} moves them to {x} shelves, the same number on each.",
            "Each shelf has {e} {items}."),
         _E("MUL", "n0", "town", "The town has {x} libraries of the same size.",
            "The libraries have {e} {items} in all.", caps=(8,)),
         _E("TIMES_TOTAL", ("n0", "n"), "tog", "The city library has {x} times as many {items}.",
            ("The city library has {e} {items}.", "Both libraries have {e} {items} together.")),
         _E("MORE_TOTAL", ("n0", "n"), "tog", "The city library has {x} more {items}.",
            ("The city library has {e} {items}.", "Both libraries have {e} {items} together."))],
        {"n0": ["How many {items} are on the shelves?"],
         "n": [on_shelves, "How many {items} are on the shelves at the end?"],
         "boxes": ["How many boxes does {name} fill?"],
         "shelf": ["How many {items} go on each shelf?"],
         "town": ["How many {items} are in all the libraries?"],
         "tog": ["How many {items} do both libraries have together?"]})

    # 13. Party supplies -----------------------------------------------------------------------
    add("party",
        [("balloon", "balloons"), ("party hat", "party hats"), ("paper cup", "paper cups"),
         ("plate", "plates"), ("napkin", "napkins"), ("candle", "candles"),
         ("streamer", "streamers"), ("gift bag", "gift bags"), ("whistle", "whistles"),
         ("party favor", "party favors")],
        [_S("GIVEN", "n0", "{name} has {a} {items} for {his} {rel}'s birthday party."),
         _S("S_MUL", "n0",
            ["{name} buys {a} packs of {items} for a party. Each pack has {b} {items}.",
                            "For a party, {name} buys {a} packs of {items} with {b} in each pack."],
            "{He} bought {e} {items}."),
         _S("S_ADD", "n0", "{name} buys {a} {items} for a party, and {friend} brings {b} more.",
            "They have {e} {items}.")],
        [_E("ADD", ("n0", "n"), "n", ["At the store {he} pick{s} up {x} more {items}.",
                                      "{friend} brings {x} more {items}."],
            "Now there are {e} {items}."),
         _E("SUB", ("n0", "n"), "n", ["{x} of the {items} get torn.",
                                      "{x} of them are lost before the party starts."],
            "There are {e} {items} left.", fin="How many {items} are left for the party?"),
         _E("SUB_MUL", ("n0", "n"), "n", "Each of the {x} guests takes {y} {items} home.",
            ("The guests took {e} {items}.", "There are {e} {items} left."), caps=(10, 4),
            fin="How many {items} are left after the party?"),
         _E("DIV", ("n0", "n"), "table",
            "{He} put{s} the same number of {items} on each of {x} tables.",
            "Each table gets {e} {items}."),
         _E("DIV", ("n0", "n"), "guest", "The {items} are shared equally among {x} guests.",
            "Each guest gets {e} {items}.")],
        {"n0": ["How many {items} are there for the party?"],
         "n": ["How many {items} are there now?"],
         "table": ["How many {items} go on each table?"],
         "guest": ["How many {items} does each guest get?"]})

    # 14. Points in games ----------------------------------------------------------------------
    add("game_points", [("point", "points")],
        [_S("GIVEN", "p0", "{name} scores {a} points in a {game}."),
         _S("S_ADD", "p0",
            ["{name} scores {a} points in the first {game} and {b} in the second.",
             "In the second {game} {name} scores {b} points, after {a} in the first."],
            "{He} scored {e} points."),
         _S("S_MUL", "p0", ["{name} scores {a} points in each of {b} {game}s.",
                            "{name} plays {b} {game}s and scores {a} points in each."],
            "{He} scored {e} points.", caps=(40, 8))],
        [_E("ADD_MUL", ("p0", "p"), "p", "{He} also earn{s} {x} bonus stars worth {y} points each.",
            ("The bonus stars are worth {e} points.", "{He} scored {e} points in total."),
            caps=(8, 10)),
         _E("ADD", ("p0", "p"), "p", ["{He} get{s} {x} extra points for a perfect round.",
                                      "A bonus round adds {x} points."],
            "{He} scored {e} points in total."),
         _E("SUB", ("p0", "p"), "p", ["{He} lose{s} {x} points for a penalty.",
                                      "A wrong answer costs {him} {x} points."],
            "{He} ended with {e} points.", fin="How many points does {name} end with?"),
         _E("MUL", "p0", "rel", "{His} {rel} scores {x} times as many points.",
            "{His} {rel} scored {e} points.", caps=(5,)),
         _E("DIV", "p0", "round", "The points came equally from {x} rounds.",
            "{He} scored {e} points each round."),
         *_vs(("p0", "p"), "points", "scores", "scored", "scored")],
        {"p0": ["How many points does {name} score?"],
         "p": ["How many points does {name} have in the end?"],
         "rel": ["How many points does {name}'s {rel} score?"],
         "round": ["How many points does {name} score in each round?"],
         **_vs_finals("points", "score")},
        slots={"game": ("basketball game", "video game", "quiz game", "board game")})

    # 15. Collections --------------------------------------------------------------------------
    add("collection",
        [("sticker", "stickers"), ("stamp", "stamps"), ("trading card", "trading cards"),
         ("marble", "marbles"), ("seashell", "seashells"), ("button", "buttons"),
         ("postcard", "postcards"), ("badge", "badges"), ("keychain", "keychains"),
         ("rock", "rocks")],
        [_S("GIVEN", "n0", ["{name} has {a} {items} in {his} collection.",
                            "{name} collects {items} and has {a} so far."]),
         _S("S_ADD", "n0", "{name} has {a} {items} and gets {b} more for {his} birthday.",
            "{He} {has} {e} {items}."),
         _S("S_SUB", "n", "{name} had {a} {items} but lost {b} of them on a trip.",
            "{He} {has} {e} {items} left.")],
        [_E("ADD", ("n0", "n"), "n", ["{He} win{s} {x} {items} at a fair.",
                                      "{friend} gives {him} {x} {items}."],
            "{He} now {has} {e} {items}."),
         _E("SUB", ("n0", "n"), "n", ["{He} trade{s} away {x} {items}.",
                                      "{He} give{s} {x} {items} to {his} {rel}."],
            "{He} {has} {e} {items} left.", fin=left_items),
         _E("ADD_MUL", ("n0", "n"), "n", "{He} buy{s} {x} packs with {y} {items} in each pack.",
            ("The packs had {e} {items}.", "{He} now {has} {e} {items}."), caps=(6, 10)),
         _E("MUL", "n0", "n", "Over the summer {his} collection grows to {x} times its size.",
            "{He} then {has} {e} {items}.", caps=(4,)),
         _E("DIV", ("n0", "n"), "pages", "{He} put{s} {x} {items} on each page of an album.",
            "{He} filled {e} pages."),
         *_vs(("n0", "n"), "{items}")],
        {"n0": ["How many {items} does {name} have?"],
         "n": ["How many {items} does {name} have now?"],
         "pages": ["How many pages does {name} fill?"],
         **_vs_finals("{items}")})

    # 16. Grocery shopping ---------------------------------------------------------------------
    add("grocery",
        [("melon", "melons"), ("pineapple", "pineapples"), ("loaf of bread", "loaves of bread"),
         ("box of cereal", "boxes of cereal"), ("jar of honey", "jars of honey"),
         ("bag of rice", "bags of rice"), ("carton of milk", "cartons of milk"),
         ("avocado", "avocados"), ("cabbage", "cabbages"), ("bottle of juice", "bottles of juice")],
        [_S("S_MUL", "cost0", ["{name} buys {a} {items} that cost ${b} each.",
                               "{Items} cost ${b} each. {name} buys {a} of them."],
            "The {items} cost {m}.", caps=(10, 15)),
         _S("S_ADD", "cost0", "{name} spends ${a} on {items} and ${b} on {items2}.",
            "{He} spent {m}.")],
        [_E("ADD", ("cost0", "cost"), "cost", ["{He} also pay{s} ${x} for a new basket.",
                                               "The delivery fee is ${x}.",
                                               "{He} also buy{s} a card for ${x}."],
            "{He} spent {m} in all."),
         _E("ADD_MUL", ("cost0", "cost"), "cost", "{He} also buy{s} {x} {items2} for ${y} each.",
            ("The {items2} cost {m}.", "{He} spent {m} in all."), caps=(10, 15)),
         _E("MUL", "cost0", "weeks", "{He} buy{s} the same groceries every week for {x} weeks.",
            "{He} spent {m} in those weeks.", caps=(8,)),
         _E("SUB", ("cost0", "cost"), "paid", "{He} use{s} a coupon for ${x} off.",
            "{He} paid {m}."),
         _E("RSUB", ("cost0", "cost", "paid"), "change", "{He} pay{s} with a ${x} bill.",
            "{He} got {m} in change."),
         _E("DIV", ("cost0", "cost", "paid"), "each",
            "{He} and {his} roommates split the bill equally, {x} people in all.",
            "Each person pays {m}.")],
        {"cost0": ["How much does {name} spend?"],
         "cost": ["How much money does {name} spend in total?"],
         "weeks": ["How much does {name} spend over those weeks?"],
         "paid": ["How much does {name} pay?"],
         "change": ["How much change does {name} get?"],
         "each": ["How much does each person pay?"]})

    # 17. Feeding pets -------------------------------------------------------------------------
    add("pet_food",
        [("dog", "dogs"), ("cat", "cats"), ("rabbit", "rabbits"), ("parrot", "parrots"),
         ("hamster", "hamsters"), ("turtle", "turtles"), ("puppy", "puppies"), ("kitten",
                                                                                "kittens")],
        [_S("GIVEN", "day", "{name}'s {item} eats {a} {food} a day.", caps=(30,)),
         _S("S_ADD", "day",
            "{name} feeds {his} {item} {a} {food} in the morning and {b} in the evening.",
            "The {item} eats {e} {food} a day.", caps=(20, 20)),
         _S("S_MUL", "day", ["{name} has {a} {items}. Each of them eats {b} {food} a day.",
                             "Each of {name}'s {a} {items} eats {b} {food} a day."],
            "The {items} eat {e} {food} a day.", caps=(6, 20))],
        [_E("MUL", "day", "total",
            "{name} is away for {x} days and leaves enough food for that time.",
            "{He} left {e} {food}.", caps=(10,)),
         _E("DIV", ("total", "need"), "bags", "The food comes in bags of {x} {food}.",
            "{He} needs {e} bags."),
         _E("SUB", "total", "need", "{He} already {has} {x} {food} at home.",
            "{He} still needs {e} {food}."),
         _E("DIV", "day", "meal", "{He} split{s} the daily food into {x} equal meals.",
            "Each meal is {e} {food}."),
         _E("ADD", "day", "day2", "{He} also give{s} {x} {food} of treats each day.",
            "That is {e} {food} a day in all.")],
        {"day": ["How many {food} of food does {name} give each day?"],
         "day2": ["How many {food} does {name} give each day in all?"],
         "total": ["How many {food} of food does {name} leave?"],
         "need": ["How many more {food} does {name} need?"],
         "bags": ["How many bags of food does {name} need?"],
         "meal": ["How many {food} are in each meal?"]},
        slots={"food": ("cups", "scoops", "ounces")})

    # 18. Lemonade stand -----------------------------------------------------------------------
    add("lemonade", [("cup", "cups")],
        [_S("GIVEN", "cups0", "{name} sells {a} cups of lemonade at {his} stand."),
         _S("S_ADD", "cups0",
            ["{name} sells {a} cups of lemonade on Saturday and {b} on Sunday.",
             "On Sunday {name} sells {b} cups of lemonade, after {a} on Saturday."],
            "{He} sold {e} cups."),
         _S("S_MUL", "cups0", "{name} sells {a} cups of lemonade an hour for {b} hours.",
            "{He} sold {e} cups.", caps=(20, 8))],
        [_E("ADD", ("cups0", "cups"), "cups", ["{friend} buys {x} more cups at the end of the day.",
                                               "A team buys {x} more cups.",
                                               "Later {he} sell{s} another {x} cups."],
            "{He} sold {e} cups in all."),
         _E("SUB", ("cups0", "cups"), "paid", "{x} of the cups are given away for free.",
            "{He} got paid for {e} cups."),
         _E("MUL", ("cups0", "cups", "paid"), "money", ["Each cup costs ${x}.",
                                                        "{He} charge{s} ${x} a cup."],
            "{He} made {m}.", caps=(5,)),
         _E("DIV", ("cups0", "cups"), "pitchers", "Each pitcher fills {x} cups.",
            "{He} used {e} pitchers."),
         _E("SUB", "money", "profit", "{He} spent ${x} on lemons and sugar.",
            "{His} profit is {m}."),
         _E("ADD", "money", "money", ["{friend} also gives {him} a ${x} tip.",
                                      "{He} also get{s} ${x} in tips.",
                                      "{His} {rel} adds ${x} to it."], "{He} {has} {m} in all."),
         _E("DIV", ("money", "profit"), "each",
            "{He} share{s} the money equally with {his} helpers, {x} people in all.",
            "Each person gets {m}.")],
        {"cups0": ["How many cups does {name} sell?"],
         "cups": ["How many cups of lemonade does {name} sell in all?"],
         "paid": ["How many cups does {name} get paid for?"],
         "money": ["How much money does {name} make?"],
         "pitchers": ["How many pitchers of lemonade does {name} use?"],
         "profit": ["How much profit does {name} make?"],
         "each": ["How much money does each person get?"]})

    # 19. Bus passengers -----------------------------------------------------------------------
    on_bus = ["How many passengers are on the bus now?",
              "How many people are on the bus at the end?"]
    add("bus", [("passenger", "passengers")],
        [_S("GIVEN", "p", ["{name} drives a bus that leaves the station with {a} passengers.",
                           "A bus driven by {name} starts its route with {a} passengers."]),
         _S("S_ADD", "p",
            "{name}'s bus starts with {a} passengers, and {b} more get on at the first stop.",
            "The bus had {e} passengers."),
         _S("S_MUL", "seats", ["{name}'s bus has {a} rows of seats with {b} seats in each row.",
                               "Each row on {name}'s bus has {b} seats, and there are {a} rows."],
            "The bus has {e} seats.", caps=(15, 5))],
        [_E("ADD", "p", "p", ["At the next stop, {x} people get on.",
                              "{x} more passengers board at the school."],
            "There are {e} passengers on the bus."),
         _E("SUB", "p", "p", ["At the next stop, {x} people get off.",
                              "{x} passengers get off at the park."],
            "There are {e} passengers left on the bus."),
         _E("ADD_MUL", "p", "p", "At each of the next {x} stops, {y} people get on.",
            ("In all, {e} people got on.", "There are {e} passengers on the bus."), caps=(4, 6)),
         _E("SUB_MUL", "p", "p", "At each of the next {x} stops, {y} people get off.",
            ("In all, {e} people got off.", "There are {e} passengers left on the bus."), caps=(4,
                                                                                                6)),
         _E("DIV", "p", "group", "At the zoo the passengers split into {x} equal groups.",
            "Each group has {e} passengers."),
         _E("SUB", "seats", "empty", "{x} passengers get on and each takes a seat.",
            "There are {e} empty seats."),
         _E("MUL", "seats", "fleet", "The company has {x} buses with the same seats.",
            "The buses have {e} seats.", caps=(9,))],
        {"p": on_bus,
         "group": ["How many passengers are in each group?"],
         "seats": ["How many seats does the bus have?"],
         "empty": ["How many seats are still empty?"],
         "fleet": ["How many seats do all the buses have?"]})

    # 20. Fundraiser ---------------------------------------------------------------------------
    add("fundraiser", [("ticket", "tickets")],
        [_S("GIVEN", "tix", ["{name} sells {a} raffle tickets for {his} school.",
                             "For the school raffle, {name} sells {a} tickets."]),
         _S("S_ADD", "tix", "{name} sells {a} raffle tickets on Friday and {b} on Saturday.",
            "{He} sold {e} tickets."),
         _S("S_MUL", "money0", ["{name} sells {a} raffle tickets at ${b} each.",
                                "Raffle tickets cost ${b} each, and {name} sells {a} of them."],
            "{He} raised {m}.", caps=(None, 10))],
        [_E("ADD", "tix", "tix", ["{friend} helps and sells {x} more tickets.",
                                  "{He} sell{s} {x} more tickets at the door.",
                                  "Later {he} sell{s} another {x} tickets."],
            "In all, {e} tickets are sold."),
         _E("MUL", "tix", "money0", "Each ticket costs ${x}.", "The tickets raised {m}.",
            caps=(10,)),
         _E("ADD", ("money0", "money"), "money", ["A local shop donates ${x}.",
                                                  "Parents give ${x} more.",
                                                  "A bake sale adds ${x}."],
            "The fundraiser has {m}."),
         _E("ADD_MUL", ("money0", "money"), "money", "{He} also sell{s} {x} cookies for ${y} each.",
            ("The cookies raised {m}.", "The fundraiser has {m}."), caps=(20, 3)),
         _E("SUB", ("money0", "money"), "left", "The prizes cost ${x}.", "The school keeps {m}."),
         _E("DIV", ("money0", "money", "left"), "each",
            "The money is split equally among {x} clubs.",
            "Each club gets {m}.")],
        {"tix": ["How many tickets are sold?"],
         "money0": ["How much money does {name} raise?"],
         "money": ["How much money does the fundraiser raise in all?"],
         "left": ["How much money does the school keep?"],
         "each": ["How much money does each club get?"]})

    # 21. Running ------------------------------------------------------------------------------
    add("running", [("meter", "meters")],
        [_S("S_MUL", "m0", ["{name} runs {a} laps around a track. Each lap is {b} meters.",
                            "A lap around the track is {b} meters, and {name} runs {a} laps."],
            "{He} ran {e} meters.", caps=(_SMALL, None)),
         _S("S_ADD", "m0", "{name} runs {a} meters before breakfast and {b} meters after school.",
            "{He} ran {e} meters."),
         _S("GIVEN", "goal", "{name} wants to run {a} meters today.")],
        [_E("MUL", "m0", "m", "{He} run{s} that far every day for {x} days.",
            "{He} ran {e} meters in those days.", caps=(7,)),
         _E("ADD", ("m0", "m"), "walk", "Then {he} walk{s} {x} meters to cool down.",
            "{He} covered {e} meters in all."),
         _E("DIV", ("m0", "m"), "min", "{He} run{s} {x} meters every minute.",
            "{He} ran for {e} minutes.", caps=(None,)),
         _E("SUB", ("goal", "left"), "left", ["{He} run{s} {x} meters before lunch.",
                                              "In the morning {he} run{s} {x} meters.",
                                              "Later {he} run{s} {x} meters.",
                                              "After lunch {he} run{s} {x} meters."],
            "{He} {has} {e} meters left to run."),
         *_vs(("m0", "m"), "meters", "runs", "ran", "ran")],
        {"m0": ["How many meters does {name} run?"],
         "m": ["How many meters does {name} run in total?"],
         "walk": ["How many meters does {name} cover in total?"],
         "min": ["For how many minutes does {name} run?"],
         "goal": ["How many meters does {name} want to run?"],
         "left": ["How many more meters does {name} need to run?"],
         **_vs_finals("meters", "run")})

    # 22. Fishing ------------------------------------------------------------------------------
    add("fishing",
        [("fish", "fish"), ("trout", "trout"), ("crab", "crabs"), ("clam", "clams"),
         ("shrimp", "shrimp"), ("mussel", "mussels"), ("catfish", "catfish"), ("perch", "perch")],
        [_S("GIVEN", "n0", "{name} catches {a} {items} at the lake."),
         _S("S_ADD", "n0", ["{name} catches {a} {items} in the morning and {b} in the afternoon.",
                            "In the afternoon {name} catches {b} {items}, after {a} that morning."],
            "{He} caught {e} {items}."),
         _S("S_MUL", "n0",
            "{name} goes fishing {a} times this month and catches {b} {items} each time.",
            "{He} caught {e} {items}.", caps=(8, 15))],
        [_E("SUB", ("n0", "n"), "n", ["{He} let{s} {x} small {items} go.",
                                      "{x} of the {items} slip away.",
                                      "{He} give{s} {x} {items} to {friend}."],
            "{He} kept {e} {items}.", fin="How many {items} does {name} keep?"),
         _E("ADD", ("n0", "n"), "n", ["{He} catch{es} {x} more {items} before sunset.",
                                      "Later {he} catch{es} another {x} {items}.",
                                      "{friend} gives {him} {x} more {items}."],
            "{He} {has} {e} {items}."),
         _E("DIV", ("n0", "n"), "family", "{He} share{s} the {items} equally among {x} families.",
            "Each family gets {e} {items}."),
         _E("DIV", ("n0", "n"), "bucket", "{He} put{s} {x} {items} in each bucket.",
            "{He} filled {e} buckets."),
         *_vs(("n0", "n"), "{items}")],
        {"n0": ["How many {items} does {name} catch?"],
         "n": ["How many {items} does {name} have now?"],
         "family": ["How many {items} does each family get?"],
         "bucket": ["How many buckets does {name} fill?"],
         **_vs_finals("{items}")})

    # 23. Beads and crafts ---------------------------------------------------------------------
    add("beads",
        [("bracelet", "bracelets"), ("necklace", "necklaces"), ("keychain", "keychains"),
         ("anklet", "anklets"), ("headband", "headbands"), ("ring", "rings")],
        [_S("S_MUL", "beads",
            ["{name} makes {a} {items}. Each {item} uses {b} beads.",
             "Each {item} {name} makes uses {b} beads, and {he} make{s} {a} of them."],
            "{He} used {e} beads.", caps=(10, 30)),
         _S("GIVEN", "stock", ["{name} has {a} beads.", "{name} buys a jar of {a} beads."])],
        [_E("ADD", "beads", "beads", ["{He} also use{s} {x} beads to fix an old {item}.",
                                      "A gift box uses {x} more beads.",
                                      "{He} use{s} another {x} beads on a gift."],
            "{He} used {e} beads in all."),
         _E("DIV", "beads", "bags", "Beads come in bags of {x}.", "{He} needed {e} bags of beads."),
         _E("ADD", "stock", "stock", ["{He} buy{s} a bag of {x} more beads.",
                                      "{friend} gives {him} {x} beads.",
                                      "{He} find{s} {x} more beads at home."],
            "{He} now {has} {e} beads."),
         _E("SUB", ("stock", "left"), "left", ["{He} use{s} {x} beads to make a {item}.",
                                               "{He} lose{s} {x} beads.",
                                               "{He} give{s} {x} beads to {friend}."],
            "{He} {has} {e} beads left."),
         _E("SUB_MUL", ("stock", "left"), "left", "{He} make{s} {x} {items} with {y} beads each.",
            ("The {items} used {e} beads.", "{He} {has} {e} beads left."), caps=(6, 12)),
         _E("DIV", "left", "made", "{He} use{s} the rest to make {items} with {x} beads each.",
            "{He} can make {e} {items}.")],
        {"beads": ["How many beads does {name} use?"],
         "bags": ["How many bags of beads does {name} need?"],
         "stock": ["How many beads does {name} have?"],
         "left": ["How many beads does {name} have left?"],
         "made": ["How many {items} can {name} make with the rest?"]})

    # 24. Screen time --------------------------------------------------------------------------
    add("screen_time", [("minute", "minutes")],
        [_S("S_MUL", "t0",
            ["{name} watches {a} episodes of a show that are {b} minutes each.",
             "Each episode of {name}'s show is {b} minutes, and {he} watch{es} {a}."],
            "{He} watched {e} minutes.", caps=(10, 60)),
         _S("S_ADD", "t0", "{name} watches a movie of {a} minutes and a show of {b} minutes.",
            "{He} watched for {e} minutes."),
         _S("GIVEN", "t0", "{name} watches cartoons for {a} minutes.")],
        [_E("ADD", ("t0", "t"), "t", ["{He} also watch{es} a cartoon of {x} minutes.",
                                      "Later {he} watch{es} {x} more minutes.",
                                      "Then {he} watch{es} a clip of {x} minutes."],
            "{He} watched {e} minutes in all."),
         _E("SUB", ("t0", "t"), "actual", "{He} skip{s} {x} minutes of ads.",
            "{He} actually watched {e} minutes."),
         _E("MUL", "t0", "t", "{He} watch{es} that much every day for {x} days.",
            "In all {he} watched {e} minutes.", caps=(7,)),
         _E("DIV", ("t0", "t"), "evening", "{He} spread{s} it equally over {x} evenings.",
            "{He} watched {e} minutes an evening.")],
        {"t0": ["How many minutes does {name} spend watching?"],
         "t": ["How many minutes does {name} watch in all?"],
         "actual": ["How many minutes does {name} actually watch?"],
         "evening": ["How many minutes does {name} watch each evening?"]})

    # 25. Pizza slices -------------------------------------------------------------------------
    add("pizza", [("slice", "slices")],
        [_S("S_MUL", "s0",
            ["{name} orders {a} pizzas. Each pizza is cut into {b} slices.",
             "{name}'s pizzas are each cut into {b} slices, and {he} order{s} {a} of them."],
            "There are {e} slices.", caps=(10, _SMALL)),
         _S("GIVEN", "s0", "{name} has {a} slices of pizza for a party."),
         _S("S_ADD", "s0", "{name} orders a pizza with {a} slices and another with {b} slices.",
            "There are {e} slices.", caps=(16, 16))],
        [_E("SUB", ("s0", "s"), "s", ["The guests eat {x} slices.",
                                      "{name} and {friend} eat {x} slices."],
            "There are {e} slices left.", fin="How many slices are left?"),
         _E("ADD", ("s0", "s"), "s", ["{friend} arrives with {x} more slices.",
                                      "The shop sends {x} extra slices."],
            "Now there are {e} slices."),
         _E("DIV", ("s0", "s"), "each", "The slices are shared equally among {x} friends.",
            "Each friend gets {e} slices."),
         _E("SUB_MUL", ("s0", "s"), "s", "Each of the {x} kids eats {y} slices.",
            ("The kids ate {e} slices.", "There are {e} slices left."), caps=(8, 4),
            fin="How many slices are left?")],
        {"s0": ["How many slices of pizza are there?"],
         "s": ["How many slices of pizza are there now?"],
         "each": ["How many slices does each friend get?"]})

    # 26. Parking lot --------------------------------------------------------------------------
    add("parking", [("space", "spaces")],
        [_S("S_MUL", "spaces",
            ["{name} manages a parking lot with {a} rows of {b} spaces each.",
             "The parking lot {name} manages has {b} spaces in each of {a} rows."],
            "The lot has {e} spaces."),
         _S("GIVEN", "spaces", "{name} manages a parking lot with {a} spaces.")],
        [_E("ADD", "spaces", "spaces",
            ["{He} paint{s} {x} new spaces.",
             "The lot gains {x} new spaces.", "Later {x} more spaces are added."],
            "The lot now has {e} spaces."),
         _E("ADD_MUL", "spaces", "spaces", "{He} add{s} {x} more rows with {y} spaces each.",
            ("The new rows have {e} spaces.", "The lot now has {e} spaces."), caps=(6, 20)),
         _E("SUB", ("spaces", "empty"), "empty", ["{x} cars park in the lot.",
                                                  "By noon {x} cars are parked in the lot.",
                                                  "Then {x} cars park there.",
                                                  "Later {x} cars arrive and park."],
            "There are {e} empty spaces."),
         _E("DIV", "spaces", "section", "The spaces are split into {x} equal sections.",
            "Each section has {e} spaces."),
         _E("MUL", "spaces", "money", "Parking costs ${x} a day, and every space is taken.",
            "The lot earns {m} a day.", caps=(9,)),
         _E("MUL", "money", "money_days", "The lot is full like this for {x} days.",
            "The lot earns {m} in those days.", caps=(7,))],
        {"spaces": ["How many spaces does the lot have?"],
         "empty": ["How many spaces are still empty?"],
         "section": ["How many spaces are in each section?"],
         "money": ["How much money does the lot make in a day?"],
         "money_days": ["How much money does the lot make over those days?"]})

    # 27. Eggs ---------------------------------------------------------------------------------
    add("eggs", [("egg", "eggs")],
        [_S("GIVEN", "day", "{name}'s hens lay {a} eggs a day."),
         _S("S_ADD", "day", "{name}'s brown hens lay {a} eggs a day and {his} white hens lay {b}.",
            "The hens lay {e} eggs a day."),
         _S("S_MUL", "eggs", ["{name} has {a} hens, and each hen lays {b} eggs a week.",
                              "Each of {name}'s {a} hens lays {b} eggs a week."],
            "The hens lay {e} eggs a week.", caps=(20, 7))],
        [_E("MUL", "day", "eggs", "{name} collects eggs for {x} days.",
            "{He} collected {e} eggs.", caps=(10,)),
         _E("SUB", ("eggs", "eggs2"), "eggs2", ["{He} use{s} {x} eggs to bake a cake.",
                                                "{He} sell{s} {x} eggs to {friend}.",
                                                "{x} of the eggs break."],
            "{He} {has} {e} eggs left."),
         _E("ADD", ("eggs", "eggs2"), "eggs2", ["{His} {rel} gives {him} {x} more eggs.",
                                                "{He} find{s} {x} more eggs in the barn.",
                                                "{friend} brings {him} {x} more eggs."],
            "{He} now {has} {e} eggs."),
         _E("DIV", ("eggs", "eggs2"), "cartons", "{He} pack{s} the eggs into cartons of {x}.",
            "{He} filled {e} cartons."),
         _E("MUL", "cartons", "money", "{He} sell{s} each carton for ${x}.",
            "{He} made {m}.", caps=(6,))],
        {"day": ["How many eggs do the hens lay each day?"],
         "eggs": ["How many eggs does {name} collect?", "How many eggs does {name} get?"],
         "eggs2": ["How many eggs does {name} have now?"],
         "cartons": ["How many cartons does {name} fill?"],
         "money": ["How much money does {name} make from the eggs?"]})

    # 28. Homework time ------------------------------------------------------------------------
    add("homework", [("minute", "minutes")],
        [_S("S_ADD", "h0", ["{name} does math for {a} minutes and reads for {b} minutes.",
                            "{name} reads for {b} minutes after doing math for {a} minutes."],
            "{He} studied for {e} minutes."),
         _S("S_MUL", "h0", "{name} has {a} pages of homework, and each page takes {b} minutes.",
            "The homework takes {e} minutes.", caps=(10, 20)),
         _S("GIVEN", "h0", "{name} studies for {a} minutes after school.")],
        [_E("MUL", "h0", "h", "{He} follow{s} the same plan for {x} school days.",
            "In all {he} studied {e} minutes.", caps=(6,)),
         _E("ADD", ("h0", "h"), "h", ["Then {he} spend{s} {x} minutes on science.",
                                      "{He} also practice{s} spelling for {x} minutes.",
                                      "Later {he} spend{s} {x} minutes on history."],
            "{He} worked {e} minutes in all."),
         _E("SUB", ("h0", "h"), "actual", "Breaks take up {x} of those minutes.",
            "{He} actually worked {e} minutes."),
         _E("DIV", ("h0", "h"), "subject", "{He} split{s} the time equally among {x} subjects.",
            "{He} spent {e} minutes on each subject.")],
        {"h0": ["How many minutes does {name} spend on homework?"],
         "h": ["How many minutes does {name} spend on schoolwork in all?"],
         "actual": ["How many minutes does {name} actually work?"],
         "subject": ["How many minutes does {name} spend on each subject?"]})

    # 29. Water tank ---------------------------------------------------------------------------
    add("water_tank", [("liter", "liters")],
        [_S("GIVEN", "w0", ["{name}'s water tank holds {a} liters of water.",
                            "There are {a} liters of water in {name}'s tank."]),
         _S("S_MUL", "w0",
            "{name} fills a tank with {a} buckets of water. Each bucket holds {b} liters.",
            "The tank has {e} liters of water.", caps=(_SMALL, 20)),
         _S("S_ADD", "w0",
            "{name} pours {a} liters of water into a tank, and rain adds {b} liters.",
            "The tank has {e} liters.")],
        [_E("ADD", ("w0", "w"), "w",
            ["A storm adds {x} more liters.",
             "{name} pours in {x} more liters.", "Rain adds another {x} liters."],
            "The tank now has {e} liters."),
         _E("SUB", ("w0", "w"), "w", ["{name} uses {x} liters to water the garden.",
                                      "{x} liters leak out.",
                                      "{He} fill{s} a pool with {x} liters of it."],
            "There are {e} liters left.", fin="How many liters of water are left?"),
         _E("DIV", ("w0", "w"), "can", "{He} pour{s} the water equally into {x} watering cans.",
            "Each can holds {e} liters."),
         _E("MUL", "w0", "nb", "{name}'s neighbor has {x} full tanks of the same size.",
            "The neighbor has {e} liters.", caps=(6,))],
        {"w0": ["How many liters of water are there?"],
         "w": ["How many liters of water are in the tank now?"],
         "can": ["How many liters go into each watering can?"],
         "nb": ["How many liters of water does the neighbor have?"]})

    # 30. Toy factory: a chain of packings, so division-only problems can be 4 steps long ----
    add("toy_factory",
        [("toy car", "toy cars"), ("teddy bear", "teddy bears"), ("puzzle", "puzzles"),
         ("doll", "dolls"), ("ball", "balls"), ("robot", "robots"), ("kite", "kites"),
         ("yo-yo", "yo-yos"), ("jump rope", "jump ropes"), ("toy train", "toy trains")],
        [_S("GIVEN", "t0", ["{name} runs a toy factory that makes {a} {items} a day.",
                            "A toy factory where {name} works makes {a} {items} a day."]),
         _S("S_MUL", "t0",
            ["{name}'s factory has {a} machines, and each machine makes {b} {items} a day.",
             "Each of the {a} machines in {name}'s factory makes {b} {items} a day."],
            "The factory makes {e} {items} a day."),
         _S("S_ADD", "t0",
            "{name}'s factory makes {a} {items} on the day shift and {b} on the night shift.",
            "The factory makes {e} {items} a day.")],
        [_E("MUL", "t0", "t", "The factory runs like this for {x} days.",
            "It made {e} {items} in those days.", caps=(7,)),
         _E("ADD", ("t0", "t"), "t", ["An extra shift makes {x} more {items}.",
                                      "A new machine adds {x} more {items}.",
                                      "Workers make {x} extra {items}."],
            "There are {e} {items} in all."),
         _E("SUB", ("t0", "t"), "t", ["{x} of the {items} fail the safety check.",
                                      "{x} of the {items} are broken.",
                                      "{x} of the {items} are missing parts."],
            "There are {e} good {items}.", fin="How many good {items} are there?"),
         _E("DIV", ("t0", "t"), "box", "{name} packs the {items} into boxes of {x}.",
            "{He} filled {e} boxes."),
         _E("DIV", "box", "carton", "The boxes go into cartons that hold {x} boxes each.",
            "That fills {e} cartons."),
         _E("DIV", "carton", "crate", "The cartons are stacked into crates of {x}.",
            "That fills {e} crates."),
         _E("DIV", "crate", "truck", "The crates are split equally among {x} trucks.",
            "Each truck carries {e} crates."),
         _E("MUL", "box", "money", "Each box sells for ${x}.", "The boxes sell for {m}.",
            caps=(20,))],
        {"t0": ["How many {items} does the factory make each day?"],
         "t": ["How many {items} are there in all?"],
         "box": ["How many boxes does {name} fill?"],
         "carton": ["How many cartons are filled?"],
         "crate": ["How many crates are filled?"],
         "truck": ["How many crates does each truck carry?"],
         "money": ["How much money do the boxes sell for?"]})

    return tuple(T)


_TEMPLATES = _build_templates()
TEMPLATE_IDS: tuple[str, ...] = tuple(t.id for t in _TEMPLATES)

# ---------------------------------------------------------------------------------------
# Planning: which events, in which order, with exactly n steps and only allowed ops.


def _ops_ok(ev: _Event, ops: tuple[str, ...]) -> bool:
    return all(op in ops for op in ev.ops)


@lru_cache(maxsize=None)
def _feasible(ti: int, state: str, k: int, ops: tuple[str, ...]) -> bool:
    """Can template ti, standing in `state`, finish with exactly k more steps?"""
    t = _TEMPLATES[ti]
    if k == 0:
        return bool(t.final_questions(state))
    return any(state in e.src and _ops_ok(e, ops) and e.steps <= k
               and _feasible(ti, e.dst, k - e.steps, ops) for e in t.events)


def _starts(ti: int, n: int, ops: tuple[str, ...]) -> list[_Event]:
    return [s for s in _TEMPLATES[ti].starts if _ops_ok(s, ops) and s.steps <= n
            and _feasible(ti, s.dst, n - s.steps, ops)]


@lru_cache(maxsize=None)
def _candidates(n: int, ops: tuple[str, ...]) -> tuple[int, ...]:
    return tuple(ti for ti in range(len(_TEMPLATES)) if _starts(ti, n, ops))


def _plan(ti: int, n: int, ops: tuple[str, ...], rng: random.Random) -> list[_Event]:
    """A random walk through template ti using exactly n steps."""
    t = _TEMPLATES[ti]
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


def _sample(ev: _Event, rng: random.Random, r: int | None, need: int, hi: int,
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


def _assign(plan: list[_Event], cfg: GenConfig, rng: random.Random
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


def _render(ti: int, plan: list[_Event], numbers: list[tuple[tuple[int, ...], list[_Step]]],
            rng: random.Random) -> tuple[str, str, int, int]:
    t = _TEMPLATES[ti]
    i = rng.randrange(len(NAMES))
    name = NAMES[i]
    pron = "she" if i < len(_SHE) else "he" if i < len(_SHE) + len(_HE) else "they"
    friend = rng.choice([n for n in NAMES if n != name])
    item, item2 = rng.sample(t.items, 2) if len(t.items) > 1 else (t.items[0], t.items[0])
    ctx = dict(_PRONOUNS[pron], name=name, friend=friend, rel=rng.choice(_RELATIVES),
               item=item[0], items=item[1], Items=item[1][0].upper() + item[1][1:],
               item2=item2[0], items2=item2[1])
    for slot, choices in t.slots:
        ctx[slot] = rng.choice(choices)

    sentences: list[str] = []
    lines: list[str] = []
    used: list[str] = []
    for ev, (nums, steps) in zip(plan, numbers):
        vals = dict(zip(_KIND_SLOTS[ev.kind], nums))
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
                return Problem(q, a, final, steps, seed, index, _TEMPLATES[ti].id)
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
    import argparse
    import json
    import sys

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
