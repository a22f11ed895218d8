"""Test-set certificates: kl, its inverse against bisection and closed cases, coverage."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crl.kernels.certificates import (
    empirical_bernstein_upper,
    held_out_bound,
    held_out_upper,
    kl_bernoulli,
    kl_inverse_upper,
)


def test_kl_closed_cases() -> None:
    assert kl_bernoulli(0.5, 0.5) == 0.0
    assert kl_bernoulli(0.0, 0.5) == pytest.approx(math.log(2))
    assert kl_bernoulli(1.0, 0.25) == pytest.approx(math.log(4))
    assert kl_bernoulli(0.3, 0.0) == math.inf
    q, p = 0.2, 0.6
    assert kl_bernoulli(q, p) == pytest.approx(
        q * math.log(q / p) + (1 - q) * math.log((1 - q) / (1 - p))
    )
    with pytest.raises(ValueError, match="q must lie"):
        kl_bernoulli(1.5, 0.5)


@settings(max_examples=200, deadline=None)
@given(st.floats(0.0, 1.0), st.floats(0.0, 3.0))
def test_kl_inverse_is_the_largest_p_within_c(q: float, c: float) -> None:
    p = kl_inverse_upper(q, c)
    assert q <= p <= 1.0
    if p < 1.0:
        assert kl_bernoulli(q, p) >= c - 1e-12  # not below the exact end
        below = max(q, p - 1e-9)
        assert kl_bernoulli(q, below) <= c + 1e-9  # and just inside it
    # a naive scan agrees to its resolution
    grid = np.linspace(q, 1.0, 2001)
    inside = [g for g in grid if kl_bernoulli(q, float(g)) <= c]
    assert max(inside) <= p + 1e-12 and p - max(inside) <= (1.0 - q) / 2000 + 1e-12


def test_kl_inverse_at_zero_is_one_minus_e_to_the_minus_c() -> None:
    """kl(0 || p) = -ln(1 - p), so the inverse at q = 0 is 1 - e^-c."""
    for c in (0.01, 0.1, 1.0):
        assert kl_inverse_upper(0.0, c) == pytest.approx(1 - math.exp(-c), rel=1e-12)


def test_the_held_out_bound_covers_at_its_level() -> None:
    """Bernoulli(p) losses, p known: the bound falls below p in at most delta of the draws."""
    rng = np.random.default_rng(0)
    p, n, delta, reps = 0.3, 200, 0.1, 4000
    means = rng.binomial(n, p, size=reps) / n
    misses = sum(held_out_bound(float(m), n, delta) < p for m in means)
    assert misses / reps <= delta
    # bounded, non-binary losses too (Maurer: the Bernoulli case is the worst)
    values = rng.beta(2.0, 5.0, size=(reps, n))
    truth = 2.0 / 7.0
    misses = sum(held_out_bound(float(v.mean()), n, delta) < truth for v in values)
    assert misses / reps <= delta


def test_the_test_set_certificate_is_the_smaller_bound_at_half_the_level() -> None:
    mean, variance, n, delta = 0.3, 0.0004, 2000, 0.05
    kl = held_out_bound(mean, n, delta / 2)
    bernstein = empirical_bernstein_upper(mean, variance, n, delta / 2)
    assert bernstein < kl  # a small spread next to the range
    assert held_out_upper(mean, variance, n, delta) == min(kl, bernstein)
    # a spread as wide as the range: the kl bound is the smaller
    assert held_out_upper(0.5, 0.25, n, delta) == held_out_bound(0.5, n, delta / 2)
    assert held_out_upper(0.5, 0.0, 1, delta) == held_out_bound(0.5, 1, delta)


def test_the_test_set_certificate_covers_losses_that_spread_little() -> None:
    """Losses of mean 0.3 and standard deviation 0.02 in [0, 1] (a scaled Beta): the
    certificate misses the mean in at most delta of 2000 draws, and lies well below the kl
    bound (which only sees the mean), so it uses the spread."""
    rng = np.random.default_rng(1)
    n, delta, reps = 1000, 0.1, 2000
    a, b = 157.2, 366.8  # Beta(a, b): mean 0.3, sd about 0.02
    values = rng.beta(a, b, size=(reps, n))
    bounds = [held_out_upper(float(v.mean()), float(v.var(ddof=1)), n, delta) for v in values]
    truth = a / (a + b)
    misses = sum(bound < truth for bound in bounds)
    assert misses / reps <= delta
    kl = [held_out_bound(float(v.mean()), n, delta) for v in values]
    assert np.mean(np.subtract(bounds, truth)) < 0.5 * np.mean(np.subtract(kl, truth))
