"""The story templates of the generated GSM8K-format problems (gsm8k_problems.py): the
names and pronouns the stories use, the event kinds and their arithmetic, and the loader
that reads and checks data/gsm8k_templates.yaml.

Why apart from the generator: the templates are data with a format of their own (the
file's header describes it); this module is that format's one reader, loaded and checked
at import so a malformed file fails loudly there, and editing the file changes the
problems of every seed. The generator plans walks through these state machines and picks
their numbers.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from string import Formatter

import yaml

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


def pronoun(i: int) -> str:
    """she, he or they: the pronoun set (PRONOUNS) of NAMES[i]."""
    return "she" if i < len(_SHE) else "he" if i < len(_SHE) + len(_HE) else "they"


PRONOUNS = {
    "she": dict(He="She", he="she", His="Her", his="her", him="her",
                s="s", es="es", has="has", does="does"),
    "he": dict(He="He", he="he", His="His", his="his", him="him",
               s="s", es="es", has="has", does="does"),
    "they": dict(He="They", he="they", His="Their", his="their", him="them",
                 s="", es="", has="have", does="do"),
}
RELATIVES = ("brother", "sister", "cousin", "friend", "neighbor", "uncle", "aunt",
              "classmate")

# ---------------------------------------------------------------------------------------
# Templates are data: data/gsm8k_templates.yaml (its header describes the format). A
# template is a state machine over "what the running number means" (apples on hand, boxes
# filled, dollars earned, ...). Events move between states and carry their question
# phrasings and one answer line per arithmetic step.
#
# Event kinds and their arithmetic (r = running value, a/b/x/y = numbers stated in the
# question). Starts create the first running value; the others transform it.
#   GIVEN a            (0 steps)            S_ADD a+b    S_SUB a-b    S_MUL a*b    S_DIV a/b
#   ADD r+x   SUB r-x   RSUB x-r   MUL r*x   DIV r/x                                (1 step)
#   ADD_MUL  t=x*y, r+t      SUB_MUL  t=x*y, r-t                                  (2 steps)
#   TIMES_TOTAL t=r*x, r+t   MORE_TOTAL t=r+x, r+t   FEWER_TOTAL t=r-x, r+t       (2 steps)
KIND_OPS: dict[str, tuple[str, ...]] = {
    "GIVEN": (), "S_ADD": ("+",), "S_SUB": ("-",), "S_MUL": ("*",), "S_DIV": ("/",),
    "ADD": ("+",), "SUB": ("-",), "RSUB": ("-",), "MUL": ("*",), "DIV": ("/",),
    "ADD_MUL": ("*", "+"), "SUB_MUL": ("*", "-"),
    "TIMES_TOTAL": ("*", "+"), "MORE_TOTAL": ("+", "+"), "FEWER_TOTAL": ("-", "+"),
}
# Numbers each kind states in the question, in placeholder order.
KIND_SLOTS: dict[str, tuple[str, ...]] = {
    "GIVEN": ("a",), "S_ADD": ("a", "b"), "S_SUB": ("a", "b"), "S_MUL": ("a", "b"),
    "S_DIV": ("a", "b"), "ADD": ("x",), "SUB": ("x",), "RSUB": ("x",), "MUL": ("x",),
    "DIV": ("x",), "ADD_MUL": ("x", "y"), "SUB_MUL": ("x", "y"), "TIMES_TOTAL": ("x",),
    "MORE_TOTAL": ("x",), "FEWER_TOTAL": ("x",),
}
# Default caps on stated numbers (None = max_operand). Factors and divisors stay small so
# that the multiplications a tiny model must do are mostly 1-2 digit by 1 digit.
_SMALL = 12
DEFAULT_CAPS: dict[str, tuple[int | None, ...]] = {
    "GIVEN": (None,), "S_ADD": (None, None), "S_SUB": (None, None), "S_MUL": (_SMALL, 30),
    "S_DIV": (None, _SMALL), "ADD": (None,), "SUB": (None,), "RSUB": (None,),
    "MUL": (_SMALL,), "DIV": (_SMALL,), "ADD_MUL": (_SMALL, 30), "SUB_MUL": (_SMALL, 30),
    "TIMES_TOTAL": (6,), "MORE_TOTAL": (None,), "FEWER_TOTAL": (None,),
}


@dataclass(frozen=True)
class Event:
    kind: str
    src: tuple[str, ...]          # states it may follow; () for a start
    dst: str
    q: tuple[str, ...]            # alternative question phrasings
    a: tuple[str, ...]            # one answer line per arithmetic step
    caps: tuple[int | None, ...]
    fin: tuple[str, ...]          # final questions to prefer when this event is last

    @property
    def ops(self) -> tuple[str, ...]:
        return KIND_OPS[self.kind]

    @property
    def steps(self) -> int:
        return len(self.ops)


@dataclass(frozen=True)
class Template:
    id: str
    items: tuple[tuple[str, str], ...]            # (singular, plural) for {item}/{items}
    starts: tuple[Event, ...]
    events: tuple[Event, ...]
    finals: tuple[tuple[str, tuple[str, ...]], ...]   # state -> final questions
    slots: tuple[tuple[str, tuple[str, ...]], ...] = ()   # extra {slot} choices

    def final_questions(self, state: str) -> tuple[str, ...]:
        return dict(self.finals).get(state, ())


TEMPLATES_FILE = Path(__file__).parent / "data" / "gsm8k_templates.yaml"
_START_KINDS = ("GIVEN", "S_ADD", "S_SUB", "S_MUL", "S_DIV")
_CTX = {*PRONOUNS["they"], "name", "friend", "rel", "item", "items", "Items", "item2", "items2"}


def _texts(v: object, where: str, fields: set[str] | None = None) -> tuple[str, ...]:
    """One string or a list of them; with `fields`, each may use only those placeholders."""
    t = (v,) if isinstance(v, str) else tuple(v) if isinstance(v, list) else ()
    if not t or not all(isinstance(s, str) and s for s in t):
        raise ValueError(f"{where}: expected a string or a list of strings, got {v!r}")
    for s in t if fields is not None else ():
        if bad := {f for _, f, _, _ in Formatter().parse(s) if f is not None} - fields:
            raise ValueError(f"{where}: unknown placeholder(s) {sorted(bad)} in {s!r}")
    return t


def _mapping(d: object, where: str, need: set[str], optional: set[str]) -> dict:
    if not isinstance(d, dict) or not need <= d.keys() <= need | optional:
        raise ValueError(f"{where}: needs keys {sorted(need)}, may have {sorted(optional)}; "
                         f"got {d!r}")
    return d


def _event(d: object, where: str, start: bool, ctx: set[str]) -> Event:
    d = _mapping(d, where, {"kind", "dst", "q"} if start else {"kind", "src", "dst", "q"},
                 {"a", "caps"} if start else {"a", "caps", "fin"})
    kind = d["kind"]
    if not isinstance(kind, str) or kind not in KIND_OPS or (kind in _START_KINDS) != start:
        raise ValueError(f"{where}: kind {kind!r} is not one of "
                         f"{[k for k in KIND_OPS if (k in _START_KINDS) == start]}")
    nums, steps = KIND_SLOTS[kind], len(KIND_OPS[kind])
    q = _texts(d["q"], f"{where}.q", ctx | set(nums))
    if any(sorted(f for _, f, _, _ in Formatter().parse(s) if f in nums) != sorted(nums)
           for s in q):
        raise ValueError(f"{where}.q: each phrasing of {kind} states each of {nums} once")
    a = _texts(d["a"], f"{where}.a", ctx | {"e", "m"}) if "a" in d else ()
    if len(a) != steps or not isinstance(d["dst"], str):
        raise ValueError(f"{where}: {kind} needs {steps} answer line(s) and a dst state name")
    caps = d.get("caps", list(DEFAULT_CAPS[kind]))
    if not (isinstance(caps, list) and len(caps) == len(nums)
            and all(c is None or type(c) is int and c >= 2 for c in caps)):
        raise ValueError(f"{where}.caps: need {len(nums)} of int >= 2 or null, got {caps!r}")
    return Event(kind, () if start else _texts(d["src"], f"{where}.src"), d["dst"], q, a,
                  tuple(caps), _texts(d["fin"], f"{where}.fin", ctx) if "fin" in d else ())


def load_templates(path: str | Path = TEMPLATES_FILE) -> tuple[Template, ...]:
    """Read and check a templates file; a ValueError names the bad entry."""
    doc = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    entries = _mapping(doc, str(path), {"templates"}, set())["templates"]
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"{path}: 'templates' must be a non-empty list")
    out: list[Template] = []
    for i, d in enumerate(entries):
        where = f"{path}: templates[{i}]"
        d = _mapping(d, where, {"id", "items", "starts", "events", "finals"}, {"slots"})
        where += f" ({d['id']})"
        slots, finals = d.get("slots", {}), d["finals"]
        if (not isinstance(d["id"], str) or d["id"] in {t.id for t in out}
                or not all(isinstance(d[k], list) and d[k] for k in ("items", "starts", "events"))
                or not (isinstance(finals, dict) and finals and isinstance(slots, dict))
                or not all(isinstance(k, str) for k in (*finals, *slots))):
            raise ValueError(f"{where}: needs a unique id, non-empty lists items, starts and "
                             f"events, and mappings finals (non-empty) and slots (optional)")
        slots = {k: _texts(v, f"{where}.slots.{k}") for k, v in slots.items()}
        ctx = _CTX | set(slots)
        items = tuple(_texts(p, f"{where}.items") for p in d["items"])
        if any(len(p) != 2 for p in items):
            raise ValueError(f"{where}.items: each item is a [singular, plural] pair")
        starts = tuple(_event(e, f"{where}.starts[{j}]", True, ctx)
                       for j, e in enumerate(d["starts"]))
        events = tuple(_event(e, f"{where}.events[{j}]", False, ctx)
                       for j, e in enumerate(d["events"]))
        reached = {e.dst for e in starts + events}
        if odd := reached ^ ({s for e in events for s in e.src} | set(finals)):
            raise ValueError(f"{where}: states {sorted(odd)} are never reached, or reached "
                             f"but neither left by an event nor given a final question")
        out.append(Template(d["id"], items, starts, events,
                             tuple((k, _texts(v, f"{where}.finals.{k}", ctx))
                                   for k, v in finals.items()), tuple(slots.items())))
    return tuple(out)


TEMPLATES = load_templates()
TEMPLATE_IDS: tuple[str, ...] = tuple(t.id for t in TEMPLATES)
