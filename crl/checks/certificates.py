"""The certificate ladder's statements (crl.kernels.certificates, crl.kernels.pac_bayes).

CERT_kl_inverse     exact: kl^-1 against its definition (kl(q || p*) = c) and the closed form
                    at q = 0 (1 - e^-c).
CERT_gaussian_kl    exact: the isotropic Gaussian KL against the coordinate-wise formula.
CERT_monte_carlo    monte_carlo: coverage of the Monte Carlo terms (kl and empirical Bernstein)
                    on samples of U^g with a known mean.
CERT_pac_bayes      monte_carlo: coverage of Maurer's PAC-Bayes-kl bound with a data-dependent
                    Gaussian posterior on a law whose Gibbs risk has a closed form.
CERT_excess_bound   exact: the pointwise inequality exp(eta y - psi(eta) y^2) <= 1 + eta y
                    (y >= -1) on a grid; monte_carlo: coverage of the excess-loss PAC-Bayes
                    bound on L(Q) - L(h_ref) on a law whose Gibbs risks have a closed form.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from crl.checks._instances import _F64, Row, _instance_generator, _randint, _row, _uniform
from crl.checks._registry import statement
from crl.kernels import certificates, pac_bayes, stats

if TYPE_CHECKING:
    from crl.checks import Constants


@statement("CERT_kl_inverse", instances=40)
def _kl_inverse(seed: int, instance: int, constants: Constants) -> list[Row]:
    """p* = kl^-1(q, c) for q in [0, 0.95], c log-uniform in [1e-4, 1]: kl(q || p*) = c where
    p* < 1 (kl(q || .) is continuous and increasing on [q, 1]); and at q = 0, where kl(0 || p)
    = -ln(1 - p), p* = 1 - e^-c."""
    name = "CERT_kl_inverse"
    gen, instance_seed = _instance_generator(seed, name, instance)
    q = _uniform(gen, 0.0, 0.95)
    c = math.exp(_uniform(gen, math.log(1e-4), 0.0))
    params = {"q": q, "c": c, "instance_seed": instance_seed}
    p = certificates.kl_inverse_upper(q, c)
    rows = []
    if p < 1.0:
        lhs = certificates.kl_bernoulli(q, p)
        rows.append(_row(name, instance, "exact", "kl(q||p*)=c", params, lhs, c, kind="eq"))
    at_zero = certificates.kl_inverse_upper(0.0, c)
    rows.append(_row(name, instance, "exact", "q=0", params, at_zero, -math.expm1(-c), kind="eq"))
    return rows


@statement("CERT_gaussian_kl", instances=40)
def _gaussian_kl(seed: int, instance: int, constants: Constants) -> list[Row]:
    """KL(N(mu_q, s_q^2 I) || N(mu_p, s_p^2 I)) in k in [1, 64] dimensions against the sum over
    coordinates of ln(s_p / s_q) + (s_q^2 + (mu_q - mu_p)^2) / (2 s_p^2) - 1/2."""
    name = "CERT_gaussian_kl"
    gen, instance_seed = _instance_generator(seed, name, instance)
    k = _randint(gen, 1, 64)
    s_q, s_p = math.exp(_uniform(gen, -3.0, 1.0)), math.exp(_uniform(gen, -3.0, 1.0))
    mu_q = torch.randn(k, dtype=_F64, generator=gen)
    mu_p = torch.randn(k, dtype=_F64, generator=gen)
    coordinates = math.log(s_p / s_q) + (s_q**2 + (mu_q - mu_p) ** 2) / (2 * s_p**2) - 0.5  # (k,)
    expected = float(coordinates.sum())
    params = {"k": k, "sigma_q": s_q, "sigma_p": s_p, "instance_seed": instance_seed}
    value = pac_bayes.gaussian_kl(mu_q, mu_p, s_q, s_p)
    return [_row(name, instance, "exact", "kl", params, value, expected, kind="eq")]


def _coverage_row(
    name: str,
    instance: int,
    quantity: str,
    params: dict,
    covered: int,
    samples: int,
    delta: float,
    constants: Constants,
    note: str,
) -> Row:
    """lhs = 1 - delta <= rhs = coverage, ci = Wilson upper bound minus coverage."""
    coverage = covered / samples
    ci = max(0.0, stats.wilson_upper(covered, samples, constants.z) - coverage)  # 0 at 100%
    return _row(name, instance, "monte_carlo", quantity, params, 1 - delta, coverage, ci, note)


@statement("CERT_monte_carlo", instances=12)
def _monte_carlo(seed: int, instance: int, constants: Constants) -> list[Row]:
    """k in [2, 500] samples of U^g (U uniform, g log-uniform in [0.1, 10]: values in [0, 1],
    mean 1 / (1 + g)), 1000 repetitions at delta in {0.05, 0.1, 0.2}: the kl upper bound
    (Langford and Caruana 2002) and the empirical Bernstein bound (Maurer and Pontil 2009) each
    cover the mean in at least 1 - delta of them."""
    name = "CERT_monte_carlo"
    gen, instance_seed = _instance_generator(seed, name, instance)
    k = _randint(gen, 2, 500)
    power = math.exp(_uniform(gen, math.log(0.1), math.log(10.0)))
    delta = (0.05, 0.1, 0.2)[instance % 3]
    reps = 1000
    truth = 1.0 / (1.0 + power)
    draws = torch.rand(reps, k, dtype=_F64, generator=gen) ** power  # (reps, k)
    means, variances = draws.mean(1), draws.var(1, correction=1)
    params = {"k": k, "power": power, "delta": delta, "reps": reps, "instance_seed": instance_seed}
    kl_upper = [pac_bayes.monte_carlo_upper(float(m), k, delta) for m in means]
    bernstein = [
        certificates.empirical_bernstein_upper(float(m), float(v), k, delta)
        for m, v in zip(means, variances, strict=True)
    ]
    rows = []
    for quantity, uppers in (("kl", kl_upper), ("empirical_bernstein", bernstein)):
        covered = sum(u >= truth for u in uppers)
        excess = float(torch.tensor(uppers).median()) - truth
        note = f"covered={covered}/{reps}; median excess={excess:.4g}"
        rows.append(
            _coverage_row(name, instance, quantity, params, covered, reps, delta, constants, note)
        )
    return rows


@statement("CERT_pac_bayes", instances=6)
def _pac_bayes(seed: int, instance: int, constants: Constants) -> list[Row]:
    """Maurer's bound L(Q) <= kl^-1(Lhat_S(Q), (KL(Q||P) + ln(2 sqrt(n)/delta)) / n) on z ~ U(0,
    1) with the loss 1{z < Phi(w)} of a scalar head w: L(w) = Phi(w). The posterior N(a, s^2),
    a = Phi^-1 of the sample's q-quantile (data-dependent), prior N(0, s^2); then L(Q) =
    Phi(a / sqrt(1 + s^2)) and Lhat_S(Q) = mean_i Phi((a - Phi^-1(z_i)) / s), both exact.
    n in [50, 800], s in [0.2, 2], q in [0.05, 0.5], 1000 samples, delta in {0.05, 0.1, 0.2}:
    coverage >= 1 - delta."""
    name = "CERT_pac_bayes"
    gen, instance_seed = _instance_generator(seed, name, instance)
    n = _randint(gen, 50, 800)
    sigma, quantile = _uniform(gen, 0.2, 2.0), _uniform(gen, 0.05, 0.5)
    delta = (0.05, 0.1, 0.2)[instance % 3]
    reps = 1000
    normal = torch.distributions.Normal(
        torch.tensor(0.0, dtype=_F64), torch.tensor(1.0, dtype=_F64)
    )
    z = torch.rand(reps, n, dtype=_F64, generator=gen).clamp(1e-12, 1 - 1e-12)
    a = normal.icdf(torch.quantile(z, quantile, dim=1))  # (reps,)
    empirical = normal.cdf((a[:, None] - normal.icdf(z)) / sigma).mean(1)  # (reps,)
    truth = normal.cdf(a / math.sqrt(1 + sigma**2))  # (reps,)
    kl = a.square() / (2 * sigma**2)  # KL(N(a, s^2) || N(0, s^2))
    bounds = [
        pac_bayes.pac_bayes_kl_bound(float(e), float(k), n, delta)
        for e, k in zip(empirical, kl, strict=True)
    ]
    covered = sum(bound >= float(t) for bound, t in zip(bounds, truth, strict=True))
    params = {
        "n": n,
        "sigma": sigma,
        "quantile": quantile,
        "delta": delta,
        "reps": reps,
        "instance_seed": instance_seed,
    }
    excess = float((torch.tensor(bounds) - truth).median())
    note = f"covered={covered}/{reps}; median bound - L(Q)={excess:.4g}"
    return [_coverage_row(name, instance, "maurer", params, covered, reps, delta, constants, note)]


def _toy_gibbs_risk(mu: torch.Tensor, s: float, points: int = 4001) -> torch.Tensor:
    """L(Q) for l(w, z) = (z - clip(w, 0, 1))^2, z ~ U(0, 1) (so L(w) = 1/3 - w + w^2), Q =
    N(mu, s^2), by the trapezoid rule over mu +- 8 s. Shape: mu (r,) -> (r,)."""
    offsets = torch.linspace(-8.0, 8.0, points, dtype=_F64)  # in units of s
    w = mu[:, None] + s * offsets[None, :]  # (r, points)
    c = w.clamp(0.0, 1.0)
    density = torch.exp(-0.5 * offsets**2) / math.sqrt(2 * math.pi)
    return torch.trapezoid((1 / 3 - c + c * c) * density[None, :], offsets, dim=1)


@statement("CERT_excess_bound", instances=6)
def _excess_bound(seed: int, instance: int, constants: Constants) -> list[Row]:
    """The excess-loss bound of crl.kernels.pac_bayes.excess_bound. Exact: on a grid of y in
    [-1, 20] and eta in [0, 0.999], eta y - psi(eta) y^2 - ln(1 + eta y) <= 0 (its largest
    value). Monte Carlo: z ~ U(0, 1), l(w, z) = (z - clip(w, 0, 1))^2, reference h_ref = r and
    prior N(r, s^2) fixed before the sample, posterior N(mean of z, s^2) (data-dependent), KL
    exact; the bound on L(Q) - L(h_ref) from 4096 draws covers the exact difference in at least
    1 - delta of 300 samples. n in [200, 3000], s in [0.005, 0.1], r in [0.2, 0.8], delta in
    {0.05, 0.1, 0.2} (half to the PAC-Bayes part, half to the draws)."""
    name = "CERT_excess_bound"
    gen, instance_seed = _instance_generator(seed, name, instance)
    y = torch.linspace(-1.0, 20.0, 2101, dtype=_F64)
    gap = max(
        float((eta * y - pac_bayes.psi(eta) * y * y - torch.log1p(eta * y)).max())
        for eta in torch.linspace(0.0, 0.999, 200).tolist()
    )
    rows = [_row(name, instance, "exact", "pointwise", {"instance_seed": instance_seed}, gap, 0.0)]
    n = _randint(gen, 200, 3000)
    s, r = _uniform(gen, 0.005, 0.1), _uniform(gen, 0.2, 0.8)
    delta = (0.05, 0.1, 0.2)[instance % 3]
    reps, draws = 300, 4096
    z = torch.rand(reps, n, dtype=_F64, generator=gen)
    mu = z.mean(1)  # (reps,)
    truth = _toy_gibbs_risk(mu, s) - (1 / 3 - r + r * r)  # L(Q) - L(h_ref)
    heads = (mu[:, None] + s * torch.randn(reps, draws, dtype=_F64, generator=gen)).clamp(0, 1)
    units = torch.gather(z, 1, torch.randint(0, n, (reps, draws), generator=gen))
    excess = (units - heads) ** 2 - (units - r) ** 2  # (reps, draws) in [-1, 1]
    bounds = [
        pac_bayes.excess_bound(x, float((m - r) ** 2 / (2 * s * s)), n, delta / 2, delta / 2)[0]
        for x, m in zip(excess, mu, strict=True)
    ]
    covered = sum(b >= float(t) for b, t in zip(bounds, truth, strict=True))
    params = {"n": n, "sigma": s, "reference": r, "delta": delta, "reps": reps}
    params["instance_seed"] = instance_seed
    median = float((torch.tensor(bounds) - truth).median())
    note = f"covered={covered}/{reps}; median bound - (L(Q) - L(h_ref))={median:.4g}"
    rows.append(
        _coverage_row(name, instance, "excess", params, covered, reps, delta, constants, note)
    )
    return rows
