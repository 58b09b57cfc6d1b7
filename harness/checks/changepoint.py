"""Change-point detection for nightly metric histories (one value per nightly run, in run order).

The question a nightly history asks is "did this metric *step*, and at which run?"; the answer
must mark the first run of the new regime, and must mark nothing on a series that is only noise
or is constant.  :func:`detect` answers it with **E-Divisive means** (Matteson & James 2014,
"A nonparametric approach for multiple change point analysis of multivariate data"), the method
MongoDB's signal-processing CI uses on its performance histories, driven by binary segmentation.

Why E-Divisive
--------------
* **Distribution-free.**  The statistic is an energy distance between the two sides of a split;
  it assumes no normality (latency percentiles are skewed and heavy-tailed) and reacts to a
  shift in location *and* to other distribution changes (e.g. a bimodal regime appearing).
* **Honest significance for a scanned split.**  The split point is chosen as the argmax of the
  statistic over *every* admissible position, and the permutation test compares that maximum
  with the maxima of shuffled copies of the same segment.  A per-split t-test evaluated at the
  best-looking split would ignore that scan and report far too many changes on pure noise.

Why a practical threshold as well
---------------------------------
With enough runs, a permutation test detects shifts that are real but irrelevant (a P99 that
moved 1 % after a driver update).  A change is therefore marked only when it is statistically
significant (``p < alpha``) **and** the medians of the two sides differ by at least ``min_rel``
relatively (``|median(after)/median(before) - 1| >= min_rel``), or by at least ``min_abs``
absolutely when ``min_abs`` is given (either threshold passing is enough; pass
``min_rel=None`` to use the absolute threshold alone).  When ``median(before) == 0`` the relative
threshold passes iff ``median(after) != 0``.

One exception: a step between two runs of *exactly constant* values (deterministic counts such
as ops per step, ``1402 x4, 1404 x4``) is marked whatever its size.  The threshold exists to
ignore small shifts of noisy metrics; a noise-free count that moves at all is the signal
(``+0.14 %`` here), and would otherwise never be reported with the default ``min_rel``.

Algorithm
---------
For a segment ``x[a:b]`` of length ``m`` and a split ``k`` with at least ``min_size`` points on
each side (``X = x[a:a+k]``, ``Y = x[a+k:b]``)::

    Q(k) = k*(m-k)/m * (2*mean|X-Y| - mean|X-X'| - mean|Y-Y'|)

where the within-group means are over all ordered pairs ``i != j`` (a one-point group has
within-distance 0).  All ``Q(k)`` come from one pairwise distance matrix and prefix sums.
The segment's candidate is ``k* = argmax Q`` (first one on ties) and its significance is

    p = (1 + #{T_perm >= T_obs}) / (1 + permutations)

with ``T = max_k Q(k)`` on ``permutations`` shuffles of the segment, drawn from a
``numpy.random.Generator`` seeded with ``(seed, a, b)`` (so each segment's verdict depends only
on ``seed`` and its position, not on the order segments are visited).  ``>=`` uses a tolerance
of ``1e-12 + 1e-9*|T_obs|``, because shuffles that only reorder each side give the very same
statistic up to rounding and must count as ties.

1. Binary segmentation: segments wait in a queue ordered by their ``max Q``; the best one is
   tested; if ``p < alpha`` it is split at ``k*`` and both halves are queued, otherwise it stays
   whole.  Splitting continues on significant splits whether or not they are large enough to
   *mark*: a small real shift in the middle of a long history must not hide a large shift in the
   last two runs.  Constant segments (all values equal) have ``Q = 0`` and are never split.
2. Marking: each significant split is judged on the medians of the segments between it and its
   neighbouring splits.  While some split fails the practical threshold, the weakest failing one
   is dropped (its two neighbours merge) and the medians are recomputed; then, while more than
   ``max_changes`` remain, the one found last is dropped the same way.  So
   every reported change passes the threshold on the ``before``/``after`` it reports.

Small segments, and why there are two exact rules
-------------------------------------------------
The smallest p-value a permutation test can give for a perfectly separated split of ``m`` points
into ``k`` and ``m-k`` is ``2 / C(m, k)`` (the observed order and its mirror image, together with
every reshuffle inside each side, attain the maximum): ``2/70 = 0.029`` for ``n = 8`` split 4/4,
``2/56 = 0.036`` for 3/5, and ``2/20 = 0.1`` for ``n = 6`` split 3/3.  Two consequences:

1. A Monte-Carlo estimate with 199 shuffles scatters around ``0.033`` for the ``n = 8``, 4/4 case
   and is ``>= alpha = 0.05`` for about one seed in seven (measured).  So a segment with
   ``m! <= max(permutations, 40320)`` (``m <= 8`` by default) uses the **exact** permutation
   distribution over all ``m!`` orderings, ``p = #{T_perm >= T_obs} / m!`` (``2/70`` for a clean
   4/4 split); the verdict is then seed-independent (milliseconds of numpy).
2. A segment that is exactly constant on each side of ``k*`` with different values has no noise
   at all: the change is certain and is reported with ``p = 0`` (``method`` says so), even where
   the permutation test could not reach ``alpha`` (``n = 6`` split 3/3, ``n = 4`` split 2/2).
   ``min_size`` equal values on each side are still required.  Caveat: a coarse, quantized metric
   (a failure count that is usually 0) that happens to read ``0, 0, 0, 1, 1`` is treated the same.
   For ``n < 8`` with noise, or a 2/6 split of 8 runs, no change can be significant at 0.05.

Inputs and outputs
------------------
* NaN (and +-inf) values are dropped before the analysis (a failed nightly run is not a
  measurement), but every reported ``index`` is the position in the *original* series: the first
  finite run of the new regime (NaNs just before it are not attributed to either regime).
* Fewer than ``2*min_size`` finite points give ``[]``.
* ``before``/``after`` are the medians of the runs between the change and its neighbouring
  reported changes (or the series ends); ``rel_change = after/before - 1`` (``+-inf`` when
  ``before == 0 != after``, ``nan`` when both are 0).  ``p_value`` and ``method`` are those of the
  test that found the split.
* Results are sorted by ``index`` and are deterministic for a given ``seed``.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["ChangePoint", "detect", "energy_statistic"]

# Segments with m! orderings at most this many (m <= 8) use the exact permutation distribution.
_EXACT_MAX_ORDERINGS = 40_320
# Permuted distance matrices are processed in chunks of about this many elements.
_CHUNK_ELEMS = 2_000_000
_METHOD = "E-Divisive means"


@dataclass(frozen=True)
class ChangePoint:
    """One marked change; ``index`` is the first run of the new regime (0-based, original)."""

    index: int
    before: float
    after: float
    rel_change: float
    p_value: float
    method: str


# ---- the energy statistic -------------------------------------------------------------------


def _q_from_distances(d: np.ndarray, min_size: int) -> np.ndarray:
    """``Q(k)``, ``k = min_size .. m-min_size``, from distance matrices ``d`` of shape (..., m, m).

    Returns shape (..., m - 2*min_size + 1).  Prefix sums: with ``a_i = sum_{j<i} d[i, j]`` and row
    sums ``r_i``, the within-left total over ordered pairs is ``WL(k) = 2*sum_{i<k} a_i``, the
    cross total is ``B(k) = sum_{i<k} r_i - WL(k)`` and the within-right total is
    ``WR(k) = total - WL(k) - 2*B(k)``.
    """
    m = d.shape[-1]
    lower = np.tril(np.ones((m, m), dtype=bool), -1)
    a = np.where(lower, d, 0.0).sum(axis=-1)
    r = d.sum(axis=-1)
    ca = np.cumsum(a, axis=-1)
    cr = np.cumsum(r, axis=-1)
    total = cr[..., -1:]
    k = np.arange(min_size, m - min_size + 1)
    wl = 2.0 * ca[..., k - 1]
    between = cr[..., k - 1] - wl
    wr = total - wl - 2.0 * between
    kl = k.astype(float)
    kr = (m - k).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_l = np.where(kl > 1, wl / (kl * (kl - 1)), 0.0)
        mean_r = np.where(kr > 1, wr / (kr * (kr - 1)), 0.0)
    mean_b = between / (kl * kr)
    return (kl * kr / m) * (2.0 * mean_b - mean_l - mean_r)


def energy_statistic(values: Sequence[float], min_size: int = 2) -> np.ndarray:
    """``Q(k)`` for every split ``k = min_size .. m-min_size`` of ``values`` (no NaN handling).

    Element ``i`` of the result is the split with ``k = min_size + i`` points on the left.
    """
    x = np.asarray(values, dtype=float)
    if x.ndim != 1:
        raise ValueError(f"values must be 1-D, got shape {x.shape}")
    if x.size < 2 * min_size:
        return np.empty(0)
    return _q_from_distances(np.abs(x[:, None] - x[None, :]), min_size)


# ---- one segment ------------------------------------------------------------------------------


@dataclass
class _Candidate:
    a: int       # segment start (compressed positions)
    b: int       # segment end (exclusive)
    k: int       # split: first point of the right side is a + k
    q: float     # Q(k), the segment's max


def _candidate(x: np.ndarray, a: int, b: int, min_size: int) -> _Candidate | None:
    seg = x[a:b]
    if seg.size < 2 * min_size or np.ptp(seg) == 0.0:
        return None  # too short to split, or constant: Q == 0 everywhere
    q = energy_statistic(seg, min_size)
    i = int(np.argmax(q))
    if not q[i] > 0.0:
        return None
    return _Candidate(a, b, min_size + i, float(q[i]))


def _max_q_of_orderings(d: np.ndarray, orders: np.ndarray, min_size: int) -> np.ndarray:
    """``max_k Q(k)`` of the segment reordered by each row of ``orders`` (shape (R, m))."""
    m = d.shape[0]
    out = np.empty(orders.shape[0])
    step = max(1, _CHUNK_ELEMS // (m * m))
    for s in range(0, orders.shape[0], step):
        p = orders[s : s + step]
        dp = d[p[:, :, None], p[:, None, :]]
        out[s : s + step] = _q_from_distances(dp, min_size).max(axis=-1)
    return out


@functools.lru_cache(maxsize=None)
def _all_orderings(m: int) -> np.ndarray:
    orders = np.array(list(itertools.permutations(range(m))), dtype=np.intp).reshape(-1, m)
    orders.flags.writeable = False
    return orders


def _p_value(x: np.ndarray, c: _Candidate, min_size: int, permutations: int,
             seed: int) -> tuple[float, str]:
    seg = x[c.a : c.b]
    m = seg.size
    left, right = seg[: c.k], seg[c.k :]
    if _noise_free_step(left, right):
        return 0.0, f"{_METHOD}, two exactly constant segments (change certain, p=0)"
    d = np.abs(seg[:, None] - seg[None, :])
    tol = 1e-12 + 1e-9 * abs(c.q)
    n_orderings = math.factorial(m)
    if n_orderings <= max(permutations, _EXACT_MAX_ORDERINGS):
        orders = _all_orderings(m)
        t = _max_q_of_orderings(d, orders, min_size)
        hits = int(np.count_nonzero(t >= c.q - tol))  # the identity ordering is one of them
        return hits / n_orderings, f"{_METHOD}, exact permutation test ({n_orderings} orderings)"
    rng = np.random.default_rng([seed, c.a, c.b])
    orders = rng.permuted(np.tile(np.arange(m), (permutations, 1)), axis=1)
    t = _max_q_of_orderings(d, orders, min_size)
    hits = int(np.count_nonzero(t >= c.q - tol))
    return (1 + hits) / (1 + permutations), f"{_METHOD}, permutation test ({permutations})"


# ---- practical threshold ------------------------------------------------------------------------


def _rel_change(before: float, after: float) -> float:
    if before != 0.0:
        return after / before - 1.0
    if after == 0.0:
        return math.nan
    return math.copysign(math.inf, after)


def _practical(before: float, after: float, min_rel: float | None, min_abs: float | None) -> bool:
    if min_rel is not None:
        if before == 0.0:
            if after != 0.0:
                return True
        elif abs(after / before - 1.0) >= min_rel:
            return True
    return min_abs is not None and abs(after - before) >= min_abs


def _noise_free_step(left: np.ndarray, right: np.ndarray) -> bool:
    return np.ptp(left) == 0.0 and np.ptp(right) == 0.0 and left[0] != right[0]


# ---- public entry point -------------------------------------------------------------------------


def detect(
    values: Sequence[float],
    alpha: float = 0.05,
    min_rel: float | None = 0.05,
    min_abs: float | None = None,
    min_size: int = 2,
    permutations: int = 199,
    max_changes: int = 5,
    seed: int = 0,
) -> list[ChangePoint]:
    """Mark the runs where a nightly metric history stepped (see the module docstring).

    ``values``: one value per run, in run order; NaN/inf entries are skipped but indices refer to
    the original positions.  A change is marked when E-Divisive's permutation ``p < alpha`` and
    the medians of the two sides pass ``min_rel`` (relative) or ``min_abs`` (absolute, if given;
    ``min_rel=None`` uses the absolute threshold alone); a step between two exactly constant runs
    is exempt from those thresholds.  Returns at most ``max_changes`` :class:`ChangePoint`, sorted
    by ``index``.
    """
    if not 0.0 < alpha <= 1.0:
        raise ValueError(f"alpha must be in (0, 1], got {alpha}")
    if min_rel is None and min_abs is None:
        raise ValueError("at least one of min_rel and min_abs must be given")
    if (min_rel is not None and min_rel < 0) or (min_abs is not None and min_abs < 0):
        raise ValueError("min_rel and min_abs must be >= 0")
    if int(min_size) != min_size or min_size < 1:
        raise ValueError(f"min_size must be an integer >= 1, got {min_size}")
    if int(permutations) != permutations or permutations < 1:
        raise ValueError(f"permutations must be an integer >= 1, got {permutations}")
    if int(max_changes) != max_changes or max_changes < 0:
        raise ValueError(f"max_changes must be an integer >= 0, got {max_changes}")
    min_size, permutations, max_changes = int(min_size), int(permutations), int(max_changes)

    if hasattr(values, "to_numpy"):  # pandas Series (nullable dtypes included)
        raw = values.to_numpy(dtype=float, na_value=np.nan)
    else:
        raw = np.asarray(values, dtype=float)
    if raw.ndim != 1:
        raise ValueError(f"values must be 1-D, got shape {raw.shape}")
    keep = np.flatnonzero(np.isfinite(raw))
    x = raw[keep]
    n = x.size
    if n < 2 * min_size or max_changes == 0:
        return []

    # 1. Binary segmentation: every statistically significant split, best segment (largest Q)
    #    first.  The heap key breaks ties by position, so the visiting order is deterministic.
    heap: list[tuple[float, int, _Candidate]] = []

    def push(a: int, b: int) -> None:
        c = _candidate(x, a, b, min_size)
        if c is not None:
            heapq.heappush(heap, (-c.q, c.a, c))

    push(0, n)
    found: dict[int, tuple[int, float, str]] = {}  # split -> (discovery rank, p, method)
    while heap:
        _, _, c = heapq.heappop(heap)
        p, method = _p_value(x, c, min_size, permutations, seed)
        if not p < alpha:
            continue  # no significant change in this segment: it stays whole
        split = c.a + c.k
        found[split] = (len(found), p, method)
        push(c.a, split)
        push(split, c.b)

    # 2. Practical threshold and max_changes, on the medians between neighbouring splits.  Drop
    #    the weakest split that fails the threshold (or, once none fails, the latest-found one
    #    while there are more than max_changes) and recompute the neighbours, until stable.
    splits = sorted(found)
    while True:
        bounds = [0, *splits, n]
        sides = [(x[bounds[i - 1] : bounds[i]], x[bounds[i] : bounds[i + 1]])
                 for i in range(1, len(bounds) - 1)]
        meds = [(float(np.median(lft)), float(np.median(rgt))) for lft, rgt in sides]
        failing = [
            i for i, ((bf, af), (lft, rgt)) in enumerate(zip(meds, sides))
            if not (_noise_free_step(lft, rgt) or _practical(bf, af, min_rel, min_abs))
        ]
        if failing:
            def weakness(i: int) -> tuple[float, float]:
                bf, af = meds[i]
                rel = abs(af / bf - 1.0) if bf != 0.0 else math.inf
                return (rel, abs(af - bf)) if min_rel is not None else (abs(af - bf), rel)

            del splits[min(failing, key=weakness)]
        elif len(splits) > max_changes:
            splits.remove(max(splits, key=lambda s_: found[s_][0]))
        else:
            break

    return [
        ChangePoint(
            index=int(keep[s_]),
            before=bf,
            after=af,
            rel_change=_rel_change(bf, af),
            p_value=found[s_][1],
            method=found[s_][2],
        )
        for s_, (bf, af) in zip(splits, meds)
    ]
