"""The run-order diagnostic of a blocked latency check (latency._order_note): a cost of
running second in a wave is estimated, and the AB/BA pairs remove it."""
import math
import re
from types import SimpleNamespace

import numpy as np

from mrbench.harness.checks.latency import _order_note


def _cand(n_waves: int) -> SimpleNamespace:
    # ABBA as execute.wave_order runs it: the candidate first in even waves
    return SimpleNamespace(steps=[dict(wave=w, wave_pos=w % 2) for w in range(n_waves)])


def test_an_order_effect_is_estimated_and_the_pairs_remove_it() -> None:
    rng = np.random.default_rng(0)
    waves = list(range(16))
    second = np.array([1.0 if w % 2 else -1.0 for w in waves])
    logr = math.log(1.10) * second + rng.normal(0, 0.005, 16)    # no true difference
    note = _order_note(_cand(16), "steps", waves, logr, level=0.90)
    order = float(re.search(r"second in a wave ([+-][\d.]+)%", note).group(1))
    assert 8 < order < 12
    lo, hi = (float(x) for x in re.search(r"\[([+-][\d.]+)%, ([+-][\d.]+)%\]", note).groups())
    assert lo < 0 < hi and hi - lo < 2          # the pairs' CI is tight around no change
    assert "over 8 AB/BA pairs" in note


def test_no_note_without_positions_or_without_both_orders() -> None:
    logr = np.zeros(8)
    old = SimpleNamespace(steps=[dict(wave=w) for w in range(8)])         # older results
    assert _order_note(old, "steps", list(range(8)), logr, 0.9) == ""
    nan = SimpleNamespace(steps=[dict(wave=w, wave_pos=float("nan")) for w in range(8)])
    assert _order_note(nan, "steps", list(range(8)), logr, 0.9) == ""
    same = SimpleNamespace(steps=[dict(wave=w, wave_pos=0) for w in range(8)])
    assert _order_note(same, "steps", list(range(8)), logr, 0.9) == ""
