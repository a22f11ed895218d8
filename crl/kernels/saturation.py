"""The critical number of negatives m*(n), its bootstrap interval and the law m* ~ coef * n^a.

docs/theory/m-star.md section 3, the "np" rule, on a lower-is-better curve (excess AUC,
1 - accuracy) measured per seed at grid values m_1 < ... < m_K:
    plateau   = mean of the curve at the `plateau_points` largest m
    threshold = plateau + delta * |plateau|        (= (1 + delta) * plateau when plateau > 0)
    m*        = the smallest m after which the curve stays <= threshold, log-linear interpolation
A plateau <= 0 (a noisy excess metric whose floor is indistinguishable from zero) keeps the margin
delta * |plateau| above it, so the threshold is continuous in the plateau and never below it.
Bootstraps resample seeds whole (paired across m, section 1); the exponent is refitted in every
replicate (section 3). Pure numpy in float64; randomness only through `np.random.default_rng(seed)`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["MStar", "MStarLaw", "critical_m", "critical_m_ci", "m_star_law", "sensitivity"]


@dataclass(frozen=True)
class MStar:
    """m* of the seed-mean curve and its percentile bootstrap interval (nan for a single seed).

    Shape:
        replicates: (B,) the m* of each bootstrap replicate; (0,) for a single seed.
    """

    value: float
    lo: float
    hi: float
    replicates: np.ndarray


@dataclass(frozen=True)
class MStarLaw:
    """m*(n) ~ coef * n^exponent: OLS of log m* on log n, percentile CI refitted per replicate.

    Shape:
        n_values: (J,); per_n: J entries, in the order of n_values.
    """

    n_values: np.ndarray
    per_n: list[MStar]
    exponent: float
    exponent_lo: float
    exponent_hi: float
    coef: float


def _real(name: str, value: object, upper: float, expected: str) -> float:
    number = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, bool
    )
    if not (number and 0 < value < upper):
        raise ValueError(f"{name}={value!r}: expected {expected}")
    return float(value)


def _count(name: str, value: object, low: int) -> int:
    if not (isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= low):
        raise ValueError(f"{name}={value!r}: expected an integer >= {low}")
    return int(value)


def _grid(name: str, m_values: object, plateau_points: int) -> np.ndarray:
    m = np.asarray(m_values, dtype=np.float64)
    if m.ndim != 1:
        raise ValueError(f"{name} has shape {m.shape}: expected (K,)")
    if not (np.all(np.isfinite(m)) and np.all(m >= 1) and np.all(np.diff(m) > 0)):
        raise ValueError(f"{name}={m.tolist()}: expected finite values >= 1, strictly increasing")
    _enough(name, m.size, plateau_points)
    return m


def _enough(name: str, k: int, plateau_points: int) -> None:
    if k < plateau_points + 1:
        raise ValueError(
            f"{name} has {k} usable points: expected at least plateau_points + 1 = "
            f"{plateau_points + 1} (the plateau and one point before it)"
        )


def _critical_rows(
    log_m: np.ndarray, curves: np.ndarray, valid: np.ndarray, delta: float, plateau_points: int
) -> np.ndarray:
    """m* of every row of `curves` by the np rule, skipping the entries where `valid` is False.

    A row whose last valid entry exceeds the threshold has not settled on the grid: its m* is
    censored at that entry's m (a lower bound). Rows with < plateau_points + 1 valid entries: nan.

    Shape:
        log_m: (K,); curves, valid: (B, K) -> (B,).
    """
    rows, k = curves.shape
    c = np.where(valid, curves, 0.0)  # (B, K)
    from_right = np.cumsum(valid[:, ::-1], axis=1)[:, ::-1]  # (B, K): valid entries at >= j
    tail = valid & (from_right <= plateau_points)  # (B, K): the plateau's entries
    plateau = np.where(tail, c, 0.0).sum(axis=1) / plateau_points  # (B,)
    threshold = plateau + delta * np.abs(plateau)  # (B,)
    exceed = valid & (c > threshold[:, None])  # (B, K)
    last = k - 1 - np.argmax(exceed[:, ::-1], axis=1)  # (B,): the last exceedance, if any
    index = np.where(valid, np.arange(k), k)  # (B, K)
    following = np.minimum.accumulate(index[:, ::-1], axis=1)[:, ::-1]  # (B, K): next valid >= j
    following = np.concatenate([following, np.full((rows, 1), k)], axis=1)  # (B, K + 1)
    row = np.arange(rows)
    nxt = following[row, last + 1]  # (B,): first valid entry after the last exceedance
    settled = nxt < k
    nxt = np.minimum(nxt, k - 1)
    above, below = c[row, last], c[row, nxt]  # above > threshold >= below where settled
    frac = np.where(settled, (above - threshold) / np.where(settled, above - below, 1.0), 0.0)
    log_star = log_m[last] + frac * (log_m[nxt] - log_m[last])  # (B,)
    log_star = np.where(exceed.any(axis=1), log_star, log_m[np.minimum(following[:, 0], k - 1)])
    return np.where(from_right[:, 0] > plateau_points, np.exp(log_star), math.nan)


def critical_m(m_values: object, curve: object, delta: float, plateau_points: int = 2) -> float:
    """m* of one lower-is-better curve by the np rule (module docstring, docs/theory/m-star.md
    section 3).

    With k the last index where curve[k] > threshold, m* is where the line through
    (log m_k, curve[k]) and (log m_{k+1}, curve[k+1]) meets the threshold; m_values[0] when no
    point exceeds it; m_values[-1] (censored, a lower bound) when the last point exceeds it.

    Shape:
        m_values: (K,) strictly increasing, >= 1, K >= plateau_points + 1; curve: (K,) finite.
    """
    p = _count("plateau_points", plateau_points, 1)
    delta = _real("delta", delta, math.inf, "a finite number > 0")
    m = _grid("m_values", m_values, p)
    y = np.asarray(curve, dtype=np.float64)
    if y.shape != m.shape:
        raise ValueError(f"curve has shape {y.shape}: expected {m.shape}, that of m_values")
    if not np.all(np.isfinite(y)):
        raise ValueError(f"curve={y.tolist()}: expected finite values")
    valid = np.ones((1, m.size), dtype=bool)
    return float(_critical_rows(np.log(m), y[None], valid, delta, p)[0])


def _prepare(
    name: str, m_values: object, per_seed: object, p: int
) -> tuple[np.ndarray, np.ndarray]:
    """log m and per_seed with the columns that have no finite entry dropped."""
    m = _grid(f"{name}m_values", m_values, p)
    x = np.asarray(per_seed, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] != m.size:
        raise ValueError(f"{name}per_seed has shape {x.shape}: expected (S, {m.size}), S >= 1")
    if np.any(np.isinf(x)):
        raise ValueError(f"{name}per_seed has infinite entries: expected finite values or nan")
    keep = np.isfinite(x).any(axis=0)  # (K,)
    _enough(f"{name}per_seed", int(keep.sum()), p)
    return np.log(m[keep]), x[:, keep]


def _draw(
    log_m: np.ndarray, per_seed: np.ndarray, delta: float, p: int, b: int, rng: np.random.Generator
) -> tuple[float, np.ndarray]:
    """The seed-mean m* and the (B,) replicate m* (empty for a single seed).

    Row 0 of `weights` is the sample itself, rows 1.. count how often each seed was drawn.
    """
    s = per_seed.shape[0]
    finite = np.isfinite(per_seed).astype(np.float64)  # (S, K)
    weights = np.ones((1, s))  # (1 + B, S) once the replicates are drawn
    if s > 1:
        weights = np.concatenate([weights, rng.multinomial(s, np.full(s, 1.0 / s), size=b)])
    counts = weights @ finite  # (1 + B, K)
    means = (weights @ np.where(finite > 0, per_seed, 0.0)) / np.maximum(counts, 1.0)  # (1 + B, K)
    m_star = _critical_rows(log_m, means, counts > 0, delta, p)  # (1 + B,)
    return float(m_star[0]), m_star[1:]


def _interval(values: np.ndarray, confidence: float) -> tuple[float, float]:
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return math.nan, math.nan
    lo, hi = np.quantile(finite, [(1 - confidence) / 2, (1 + confidence) / 2])
    return float(lo), float(hi)


def _options(
    delta: object, replicates: object, confidence: object, plateau_points: object
) -> tuple[float, int, float, int]:
    return (
        _real("delta", delta, math.inf, "a finite number > 0"),
        _count("replicates", replicates, 1),
        _real("confidence", confidence, 1.0, "a number in (0, 1)"),
        _count("plateau_points", plateau_points, 1),
    )


def critical_m_ci(
    m_values: object,
    per_seed: object,
    delta: float,
    replicates: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    plateau_points: int = 2,
) -> MStar:
    """m* of the seed-mean curve with a percentile bootstrap interval over seeds.

    Each replicate draws S rows with replacement (whole curves, paired across m) and applies
    critical_m to the column means. NaN marks a missing cell: a column's mean is over the finite
    entries of the drawn rows; a column with no finite entry at all is dropped before anything
    else; a replicate drawing no finite entry of a column skips that grid point, and a replicate
    left with < plateau_points + 1 points has m* nan and is left out of the percentiles.
    A single seed (S = 1) gives value from its curve and lo = hi = nan: no sampling variability.

    Shape:
        m_values: (K,); per_seed: (S, K) finite or nan -> replicates (B,), (0,) if S = 1.
    """
    delta, replicates, confidence, p = _options(delta, replicates, confidence, plateau_points)
    log_m, x = _prepare("", m_values, per_seed, p)
    value, reps = _draw(log_m, x, delta, p, replicates, np.random.default_rng(seed))
    return MStar(value, *_interval(reps, confidence), reps)


def _ols(log_n: np.ndarray, log_m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Slope and intercept of each row regressed on log_n. Shape: (J,), (B, J) -> (B,), (B,)."""
    centred = log_n - log_n.mean()  # (J,)
    slope = (log_m @ centred) / (centred @ centred)
    return slope, log_m.mean(axis=1) - slope * log_n.mean()


def m_star_law(
    n_values: object,
    curves: Sequence[tuple[object, object]],
    delta: float,
    replicates: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    plateau_points: int = 2,
) -> MStarLaw:
    """critical_m_ci for every n and the exponent a of m* ~ coef * n^a (docs/theory/m-star.md
    section 3).

    Each n has its own grid and seeds, resampled independently within a replicate (different n
    are independent experiments), all from one Generator: per_n[0] equals critical_m_ci with the
    same seed. Replicate b's exponent is the OLS slope of its J values of log m*; replicates with
    a nan m* are left out. Exponent, interval and coef are nan with fewer than 2 distinct n; the
    interval is nan too when some n has a single seed (its variability would be missing).

    Shape:
        n_values: (J,) > 0; curves: J pairs (m_values (K_j,), per_seed (S_j, K_j)).
    """
    delta, replicates, confidence, p = _options(delta, replicates, confidence, plateau_points)
    n = np.asarray(n_values, dtype=np.float64)
    if n.ndim != 1 or n.size != len(curves) or n.size == 0:
        raise ValueError(f"n_values has shape {n.shape}: expected (J,), J = len(curves) >= 1")
    if not (np.all(np.isfinite(n)) and np.all(n > 0)):
        raise ValueError(f"n_values={n.tolist()}: expected finite values > 0")
    rng = np.random.default_rng(seed)
    values, reps = [], []
    for j, (m_values, per_seed) in enumerate(curves):
        log_m, x = _prepare(f"curves[{j}] ", m_values, per_seed, p)
        value, rep = _draw(log_m, x, delta, p, replicates, rng)
        values.append(value)
        reps.append(rep)
    per_n = [MStar(v, *_interval(r, confidence), r) for v, r in zip(values, reps, strict=True)]
    exponent = lo = hi = coef = math.nan
    if np.unique(n).size >= 2:
        slope, intercept = _ols(np.log(n), np.log(np.array(values))[None])
        exponent, coef = float(slope[0]), float(np.exp(intercept[0]))
        if all(r.size for r in reps):
            lo, hi = _interval(_ols(np.log(n), np.log(np.stack(reps, axis=1)))[0], confidence)
    return MStarLaw(n, per_n, exponent, lo, hi, coef)


def sensitivity(
    n_values: object,
    curves: Sequence[tuple[object, object]],
    deltas: Sequence[float] = (0.1, 0.25, 0.5),
    **kw: object,
) -> list[MStarLaw]:
    """m_star_law for each delta, in order; the same seed, so every delta sees the same draws."""
    return [m_star_law(n_values, curves, delta, **kw) for delta in deltas]
