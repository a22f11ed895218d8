"""Rank statistics of certificates against gaps: against scipy, by hand, and in closed cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from crl.kernels.tracking import granulated_tau, kendall_tau, sign_error


@pytest.mark.parametrize("seed", range(5))
def test_kendall_tau_b_matches_scipy_with_ties(seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 5, size=30).astype(float)  # many ties
    b = a + rng.integers(-2, 3, size=30)
    assert kendall_tau(a, b) == pytest.approx(stats.kendalltau(a, b).statistic, abs=1e-12)


def test_kendall_tau_closed_cases() -> None:
    assert kendall_tau([1, 2, 3], [10, 20, 30]) == 1.0
    assert kendall_tau([1, 2, 3], [3, 2, 1]) == -1.0
    assert math.isnan(kendall_tau([1, 1, 1], [1, 2, 3]))


def test_granulated_tau_averages_within_groups() -> None:
    # group x: perfectly concordant; group y: perfectly discordant; a lone point is left out
    a = [1, 2, 3, 1, 2, 9]
    b = [1, 2, 3, 2, 1, 0]
    groups = ["x", "x", "x", "y", "y", "z"]
    assert granulated_tau(a, b, groups) == pytest.approx(0.0)
    assert granulated_tau(a[:3], b[:3], groups[:3]) == 1.0
    assert math.isnan(granulated_tau([1, 2], [1, 2], ["p", "q"]))


def test_sign_error_weights_pairs_by_the_confidence_that_gaps_differ() -> None:
    # one group, three points; the measure orders (0, 1) wrongly, the rest rightly
    a = [2.0, 1.0, 3.0]
    b = [0.10, 0.20, 0.90]
    se = [0.05, 0.05, 0.05]
    out = sign_error(a, b, se, ["g"] * 3)
    w = [
        2 * stats.norm.cdf(abs(b[i] - b[j]) / math.hypot(se[i], se[j])) - 1
        for i, j in ((0, 1), (0, 2), (1, 2))
    ]
    assert out.mean == pytest.approx(w[0] / sum(w), rel=1e-12)
    assert out.worst == out.mean and out.pairs == 3
    # gaps inside their noise weigh ~nothing: the same wrong pair with a tiny difference
    noisy = sign_error(a, [0.10, 0.1001, 0.90], [0.05, 0.05, 0.05], ["g"] * 3)
    assert noisy.mean < 0.01
    # two groups: the mean and the worst over them
    two = sign_error([1, 2, 2, 1], [1, 2, 1, 2], [0.1] * 4, ["u", "u", "v", "v"])
    assert (two.mean, two.worst) == (pytest.approx(0.5), 1.0)
    assert math.isnan(sign_error([1, 2], [1, 1], [0.1, 0.1], ["g", "g"]).mean)
