"""Certificates that read a risk off held-out or posterior samples, for losses scaled to [0, 1].

- `kl_bernoulli(q, p)`: kl(q || p) = q ln(q/p) + (1 - q) ln((1 - q)/(1 - p)), with 0 ln 0 = 0.
- `kl_inverse_upper(q, c)`: sup {p in [q, 1] : kl(q || p) <= c}, by bisection in float64 (kl(q||.)
  increases on [q, 1], so the set is an interval [q, p*]).
- `held_out_bound(mean, n, delta)`: the test-set bound of Langford (2005), for n i.i.d. losses
  in [0, 1] with mean `mean`: with probability >= 1 - delta, L <= kl^-1(mean, ln(1/delta) / n)
  (the Chernoff bound for the binomial tail, which holds for [0, 1]-valued losses by convexity,
  Maurer 2004).
- `empirical_bernstein_upper(mean, variance, n, delta)`: Maurer and Pontil (2009, Thm 4), the
  expectation of n i.i.d. [0, 1] samples bounded with their variance: tighter than the kl bound
  where the samples spread little next to their range.
- `held_out_upper(mean, variance, n, delta)`: the smaller of `held_out_bound` and
  `empirical_bernstein_upper`, each at delta / 2 (a union bound): the test-set certificate of
  crl's ladder.
- `scaled(values, low, width)` and `unscaled(value, low, width)`: a loss with range [low, low +
  width] to [0, 1] and back.
"""

from __future__ import annotations

import math

from crl.kernels import _validate

__all__ = [
    "empirical_bernstein_upper",
    "held_out_bound",
    "kl_bernoulli",
    "kl_inverse_upper",
    "scaled",
    "held_out_upper",
    "unscaled",
]

_BISECTIONS = 200  # halvings of [q, 1]: far below float64 resolution


def _xlogx_over(x: float, y: float) -> float:
    """x ln(x / y), 0 when x = 0; +inf when y = 0 < x."""
    if x == 0.0:
        return 0.0
    if y == 0.0:
        return math.inf
    return x * math.log(x / y)


def kl_bernoulli(q: float, p: float) -> float:
    """kl(q || p) between Bernoulli(q) and Bernoulli(p), q, p in [0, 1]."""
    for name, value in (("q", q), ("p", p)):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must lie in [0, 1], got {value!r}")
    return _xlogx_over(q, p) + _xlogx_over(1.0 - q, 1.0 - p)


def kl_inverse_upper(q: float, c: float) -> float:
    """The largest p in [q, 1] with kl(q || p) <= c (c >= 0), by bisection: the returned p is
    an upper end, never below the exact one by more than 2^-200."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must lie in [0, 1], got {q!r}")
    c = _validate.nonnegative("c", c)
    if kl_bernoulli(q, 1.0) <= c:
        return 1.0
    lo, hi = q, 1.0  # kl(q||lo) <= c < kl(q||hi)
    for _ in range(_BISECTIONS):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if kl_bernoulli(q, mid) <= c:
            lo = mid
        else:
            hi = mid
    return hi


def held_out_bound(mean: float, n: int, delta: float) -> float:
    """Langford's test-set bound on the risk of a fixed predictor from n i.i.d. [0, 1] losses."""
    n = _validate.at_least("n", n, 1)
    delta = _validate.open_unit("delta", delta)
    return kl_inverse_upper(min(max(mean, 0.0), 1.0), math.log(1.0 / delta) / n)


def empirical_bernstein_upper(mean: float, variance: float, n: int, delta: float) -> float:
    """Maurer and Pontil (2009, Thm 4): for `n` >= 2 i.i.d. samples in [0, 1] with mean
    `mean` and unbiased sample variance `variance`, with probability >= 1 - delta the
    expectation is at most mean + sqrt(2 variance ln(2/delta) / n) + 7 ln(2/delta) / (3 (n -
    1)), capped at 1."""
    n = _validate.at_least("n", n, 2)
    delta = _validate.open_unit("delta", delta)
    log_term = math.log(2.0 / delta)
    spread = math.sqrt(2.0 * max(variance, 0.0) * log_term / n)
    return min(1.0, mean + spread + 7.0 * log_term / (3.0 * (n - 1)))


def held_out_upper(mean: float, variance: float, n: int, delta: float) -> float:
    """The smaller of Langford's kl bound and the empirical Bernstein bound, each at level
    delta / 2, for n i.i.d. [0, 1] losses of a fixed predictor with mean `mean` and unbiased
    sample variance `variance` (n = 1: the kl bound at delta)."""
    if _validate.at_least("n", n, 1) == 1:
        return held_out_bound(mean, n, delta)
    half = _validate.open_unit("delta", delta) / 2
    return min(held_out_bound(mean, n, half), empirical_bernstein_upper(mean, variance, n, half))


def scaled(value: float, low: float, width: float) -> float:
    """(value - low) / width: a loss in [low, low + width] as a number in [0, 1]."""
    return (value - low) / _validate.positive("width", width)


def unscaled(value: float, low: float, width: float) -> float:
    """low + width * value: back to the loss's own units."""
    return low + _validate.positive("width", width) * value
