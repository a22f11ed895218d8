"""The excess-loss PAC-Bayes bound (crl.kernels.pac_bayes.excess_bound): the pointwise inequality
it rests on, and its coverage on a toy whose Gibbs risks are known in closed form."""

from __future__ import annotations

import math

import numpy as np
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
