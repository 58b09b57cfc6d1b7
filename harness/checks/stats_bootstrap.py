"""Bootstrap confidence intervals of a percentile's relative change: two independent samples,
and the wave bootstrap that resamples whole ABBA waves.

Why apart from stats.py: the bootstraps are the gate's fallback where a rank test has too
few waves, and the largest family; stats.py keeps the closed-form and rank methods. The
conventions are stats.py's (the method in each name and result; deterministic, seeded
resampling with numpy.random.default_rng).
"""

from __future__ import annotations

import numpy as np

from .stats import (
    _NAN,
    ArrayLike,
    Interval,
    _as_1d_float,
    _check_level,
    _check_n_boot,
    _check_q,
)

# Bootstrap replicates are drawn in chunks of about this many elements, so that large
# samples (10^5 latencies x 2000 replicates) do not allocate gigabytes at once.
_BOOT_CHUNK_ELEMS = 4_000_000


def _bootstrap_percentiles(
    x: np.ndarray, qf: float, n_boot: int, rng: np.random.Generator
) -> np.ndarray:
    """``n_boot`` percentile-of-resample replicates of ``x`` (chunked to bound memory)."""
    n = x.size
    out = np.empty(n_boot)
    rows = max(1, _BOOT_CHUNK_ELEMS // max(n, 1))
    for start in range(0, n_boot, rows):
        stop = min(n_boot, start + rows)
        idx = rng.integers(0, n, size=(stop - start, n))
        out[start:stop] = np.percentile(x[idx], qf, axis=1)
    return out


def _percentile_interval(reps: np.ndarray, level: float) -> tuple[float, float]:
    """Percentile-bootstrap bounds: the (1-level)/2 and (1+level)/2 quantiles of the replicates.

    NaN replicates (undefined, e.g. 0/0) are dropped. With infinite replicates, linear
    interpolation could give inf - inf = NaN, so the bounds then snap outward to the nearest
    replicate ('lower'/'higher'), which is the conservative choice.
    """
    reps = reps[~np.isnan(reps)]
    if reps.size == 0:
        return _NAN, _NAN
    a, b = 50.0 * (1.0 - level), 50.0 * (1.0 + level)
    if np.isinf(reps).any():
        return (float(np.percentile(reps, a, method="lower")),
                float(np.percentile(reps, b, method="higher")))
    lo, hi = np.percentile(reps, [a, b])
    return float(lo), float(hi)


def _relative_change(cand_p: np.ndarray | float, base_p: np.ndarray | float) -> np.ndarray:
    """cand/base - 1, with base == 0 giving +-inf (cand != 0) or NaN (cand == 0, undefined)."""
    c = np.asarray(cand_p, dtype=float)
    b = np.asarray(base_p, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = c / b - 1.0
    zero = b == 0
    r = np.where(zero & (c == 0), np.nan, r)
    r = np.where(zero & (c > 0), np.inf, r)
    r = np.where(zero & (c < 0), -np.inf, r)
    return r


def ratio_percentile_ci_bootstrap(
    base: ArrayLike,
    cand: ArrayLike,
    q: float,
    level: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
) -> Interval:
    """Percentile-bootstrap CI for the relative change percentile(cand)/percentile(base) - 1.

    Relative change is what a regression threshold ("p99 may not grow > 5%") is stated in.
    Groups are resampled independently. A zero base percentile makes the change undefined:
    +-inf when the candidate's is non-zero, NaN when both are zero; NaN replicates are
    dropped and infinite ones widen the interval to inf.
    """
    qf, lf, nb = _check_q(q), _check_level(level), _check_n_boot(n_boot)
    method = "percentile-bootstrap (unpaired relative change)"
    xb = _as_1d_float(base, "base")
    xc = _as_1d_float(cand, "cand")
    if xb.size == 0 or xc.size == 0:
        return Interval(_NAN, _NAN, _NAN, lf, method)
    rng = np.random.default_rng(seed)
    cand_reps = _bootstrap_percentiles(xc, qf, nb, rng)   # cand first: same draws as before
    base_reps = _bootstrap_percentiles(xb, qf, nb, rng)
    lo, hi = _percentile_interval(_relative_change(cand_reps, base_reps), lf)
    est = float(_relative_change(np.percentile(xc, qf), np.percentile(xb, qf)))
    return Interval(est, lo, hi, lf, method)


def ratio_percentile_ci_wave_bootstrap(
    base_waves: list[ArrayLike],
    cand_waves: list[ArrayLike],
    q: float,
    level: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
) -> Interval:
    """Cluster-bootstrap CI for percentile(cand)/percentile(base) - 1 over paired waves.

    Why not resample requests: the requests of one ABBA wave share that wave's machine state
    (a host-bound wave's speed moves as a whole: docs/detection-power.md, "Noise anatomy"),
    so they are not independent
    and a request bootstrap gives intervals far too narrow. Here whole waves are the unit:
    each replicate draws wave indices with replacement, the same indices for both sides (the
    pairing keeps the blocking), pools each side's samples from those waves and takes the
    ratio of their percentiles. `base_waves[i]` and `cand_waves[i]` are wave i's samples.
    """
    qf, lf, nb = _check_q(q), _check_level(level), _check_n_boot(n_boot)
    if len(base_waves) != len(cand_waves):
        raise ValueError(f"base and cand need the same waves, got {len(base_waves)} and "
                         f"{len(cand_waves)}")
    method = "wave-cluster bootstrap (paired waves resampled whole; relative change)"
    xb = [_as_1d_float(w, "base wave") for w in base_waves]
    xc = [_as_1d_float(w, "cand wave") for w in cand_waves]
    if not xb or sum(w.size for w in xb) == 0 or sum(w.size for w in xc) == 0:
        return Interval(_NAN, _NAN, _NAN, lf, method)
    rng = np.random.default_rng(seed)
    k = len(xb)
    reps = np.empty(nb)
    for r in range(nb):
        idx = rng.integers(0, k, size=k)
        b = np.concatenate([xb[i] for i in idx])
        c = np.concatenate([xc[i] for i in idx])
        reps[r] = (_relative_change(np.percentile(c, qf), np.percentile(b, qf))
                   if b.size and c.size else _NAN)
    lo, hi = _percentile_interval(reps, lf)
    est = float(_relative_change(np.percentile(np.concatenate(xc), qf),
                                 np.percentile(np.concatenate(xb), qf)))
    return Interval(est, lo, hi, lf, method)
