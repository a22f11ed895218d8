"""The excess-loss PAC-Bayes bound (crl.kernels.pac_bayes.excess_bound): the pointwise inequality
it rests on, and its coverage on a toy whose Gibbs risks are known in closed form."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from crl.kernels import pac_bayes


def test_the_pointwise_inequality_behind_the_bound() -> None:
    """exp(lambda y - psi(lambda) y^2) <= 1 + lambda y for y >= -1 and lambda in [0, 1): the
    log of the left side minus the log of the right side is <= 0 on a fine grid (equality at
    y = 0 and at y = -1)."""
    y = torch.cat([torch.linspace(-1.0, 0.0, 4001), torch.linspace(0.0, 50.0, 4001)]).double()
    for lam in (*np.linspace(0.0, 0.99, 100).tolist(), 0.999):
        left = lam * y - pac_bayes.psi(lam) * y * y
        right = torch.log1p(lam * y)
        assert float((left - right).max()) <= 1e-12, lam
    assert pac_bayes.psi(0.5) == math.log(2.0) - 0.5


def _gibbs_risk(mu: float, s: float, points: int = 20001) -> float:
    """L(Q) for the toy: l(w, z) = (z - clip(w, 0, 1))^2, z ~ U(0, 1), so L(w) = 1/3 - w + w^2;
    Q = N(mu, s^2), by the trapezoid rule over +-8 s (error far below the test's margins)."""
    w = torch.linspace(mu - 8 * s, mu + 8 * s, points, dtype=torch.float64)
    c = w.clamp(0.0, 1.0)
    density = torch.exp(-0.5 * ((w - mu) / s) ** 2) / (s * math.sqrt(2 * math.pi))
    return float(torch.trapezoid((1 / 3 - c + c * c) * density, w))


def test_the_excess_bound_covers_and_beats_the_kl_bound_where_heads_agree() -> None:
    """A 1-d toy: units z ~ U(0, 1), heads w, loss (z - clip(w))^2 in [0, 1]; reference
    h_ref = 0.45 and prior N(0.45, s^2), fixed before the sample; posterior N(mean of z, s^2),
    chosen from it. Over 300 samples of n = 2000 the bound on L(Q) - L(h_ref) misses the true
    difference in at most delta of them, and on average its excess over the truth is below a
    third of Maurer's PAC-Bayes-kl bound's (the heads' losses differ little from the
    reference's, which the kl bound cannot use)."""
    gen = torch.Generator().manual_seed(0)
    n, draws, s, ref, delta = 2000, 2**16, 0.02, 0.45, 0.1
    l_ref = 1 / 3 - ref + ref * ref
    misses, excess_gaps, kl_gaps = 0, [], []
    for _ in range(300):
        z = torch.rand(n, generator=gen, dtype=torch.float64)
        mu = float(z.mean())
        kl = 0.5 * ((mu - ref) / s) ** 2  # equal scales
        truth = _gibbs_risk(mu, s) - l_ref
        w = (mu + s * torch.randn(draws, generator=gen, dtype=torch.float64)).clamp(0.0, 1.0)
        zi = z[torch.randint(0, n, (draws,), generator=gen)]
        x = (zi - w) ** 2 - (zi - ref) ** 2
        bound, eta = pac_bayes.excess_bound(x, kl, n, delta / 2, delta / 2)
        assert eta in pac_bayes.ETAS
        misses += bound < truth
        excess_gaps.append(bound - truth)
        losses = (zi - w) ** 2
        mc = float(losses.mean()) + 3 * float(losses.std()) / math.sqrt(draws)
        kl_bound = pac_bayes.pac_bayes_kl_bound(mc, kl, n, delta / 2)
        kl_gaps.append(kl_bound - (truth + l_ref))
    assert misses <= 300 * delta
    assert np.mean(excess_gaps) < np.mean(kl_gaps) / 3


def test_y_floor_is_the_minimum_of_y_over_the_unit_interval() -> None:
    """y_floor(c) = min over x in [-1, 1] of x + c x^2, against a fine grid, on both sides of
    c = 1/2 (the vertex -1/(2c) inside the interval, or x = -1), for every eta of the grid."""
    x = torch.linspace(-1.0, 1.0, 200001, dtype=torch.float64)
    for c in (
        0.01,
        0.2,
        0.49,
        0.5,
        0.51,
        1.0,
        3.0,
        *(pac_bayes.psi(e) / e for e in pac_bayes.ETAS),
    ):
        grid_min = float((x + c * x * x).min())
        assert pac_bayes.y_floor(c) == pytest.approx(grid_min, abs=1e-9), c
        assert pac_bayes.y_floor(c) <= grid_min + 1e-15


def test_one_eta_fixed_in_advance_pays_no_union_bound() -> None:
    """excess_bound on a grid of one eta is its value on the full grid at that eta less the
    union bound's price: (ln |grid|) / (eta n) in the PAC-Bayes part and a Monte Carlo part at
    delta_mc instead of delta_mc / |grid| (never larger); projected_excess_bound with the
    draws' own count is that one-eta bound; a bad grid is refused."""
    gen = torch.Generator().manual_seed(1)
    x = 0.05 * torch.randn(4096, generator=gen, dtype=torch.float64) + 0.01
    kl, n, delta = 2.0, 500, 0.05
    grid = len(pac_bayes.ETAS)
    for eta in (0.3, 0.9):
        one, chosen = pac_bayes.excess_bound(x, kl, n, delta, delta, (eta,))
        assert chosen == eta
        # the same eta under the grid's union bound: PAC-Bayes and Monte Carlo at delta / |grid|
        unioned, _ = pac_bayes.excess_bound(x, kl, n, delta / grid, delta / grid, (eta,))
        assert one < unioned
        pb_only, _ = pac_bayes.excess_bound(x, kl, n, delta / grid, delta, (eta,))
        assert pb_only - one == pytest.approx(math.log(grid) / (eta * n), rel=1e-12)
        projected = pac_bayes.projected_excess_bound(x, kl, n, delta, delta, eta, x.shape[0])
        assert projected == pytest.approx(one, rel=1e-12)
        more = pac_bayes.projected_excess_bound(x, kl, n, delta, delta, eta, 16 * x.shape[0])
        assert more < one  # more draws: a smaller Monte Carlo term
    best, eta = pac_bayes.excess_bound(x, kl, n, delta, delta)
    assert best == pytest.approx(
        pac_bayes.excess_bound(x, kl, n, delta / grid, delta / grid, (eta,))[0]
    )
    with pytest.raises(ValueError, match="etas"):
        pac_bayes.excess_bound(x, kl, n, delta, delta, (0.5, 1.0))
    with pytest.raises(ValueError, match="etas"):
        pac_bayes.excess_bound(x, kl, n, delta, delta, ())
