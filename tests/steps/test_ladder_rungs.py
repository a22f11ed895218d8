"""The PAC-Bayes rungs as every family takes them (crl.steps.ladder): the Monte Carlo term
covers the exact empirical Gibbs risk, and both certificates cover a known Gibbs risk at their
level."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
import torch
from scipy.stats import norm

from crl.core.ladder_config import PacBayesConfig
from crl.kernels import certificates, pac_bayes
from crl.steps import ladder

LADDER = {"noise": [0.015, 0.05, 0.1], "pilot_draws": 256, "mc_draws": 4000}


def _threshold_draws(z: np.ndarray, radius: float) -> ladder.Draws:
    """The loss 1{z < Phi(w)} of a scalar head w on data z ~ U(0, 1), L(w) = Phi(w): each draw
    a Gibbs head on a uniformly drawn z_i."""
    values = torch.from_numpy(z)

    def draws(
        mean: torch.Tensor, sigma: float, count: int, gen: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        heads = pac_bayes.gibbs_heads(mean, sigma, radius, count, gen).reshape(-1)
        rows = torch.randint(0, len(z), (count,), generator=gen)
        cut = torch.from_numpy(norm.cdf(heads.numpy()))
        return (values[rows] < cut).double(), rows

    return draws


def _exact_gibbs_risk(z: np.ndarray, mean: float, sigma: float) -> float:
    """(1/n) sum_i P(z_i < Phi(W)), W ~ N(mean, sigma^2): the empirical Gibbs risk in closed
    form (no projection at these scales)."""
    return float(np.mean(norm.sf((norm.ppf(z) - mean) / sigma)))


def test_the_monte_carlo_term_covers_the_exact_empirical_gibbs_risk() -> None:
    """Draws of (head, uniform anchor) are unbiased for Lhat_S(Q), and the smaller of the kl and
    Bernstein bounds on them, each at delta/2, covers it in at least 1 - delta of 400 repeats,
    with few draws so that the test can fail."""
    rng = np.random.default_rng(3)
    z = rng.uniform(size=300)
    mean, sigma, draws, delta, reps = (
        torch.tensor([[-1.2]], dtype=torch.float64),
        0.3,
        200,
        0.2,
        400,
    )
    exact = _exact_gibbs_risk(z, -1.2, sigma)
    sample = _threshold_draws(z, 20.0)
    gen = torch.Generator().manual_seed(4)
    means, misses = [], 0
    for _ in range(reps):
        unit, _ = sample(mean, sigma, draws, gen)
        average = float(unit.mean())
        upper = min(
            pac_bayes.monte_carlo_upper(average, draws, delta / 2),
            certificates.empirical_bernstein_upper(average, float(unit.var()), draws, delta / 2),
        )
        means.append(average)
        misses += upper < exact
    assert misses / reps <= delta
    spread = float(np.std(means)) / math.sqrt(reps)
    assert abs(float(np.mean(means)) - exact) < 4 * spread


def test_pac_bayes_certificates_cover_the_true_gibbs_risk() -> None:
    """W ~ N(a, sigma^2) with a chosen from the data (the 10% quantile's probit), R = 20 (the
    projection is never active: |a| < 3, sigma <= 2): L(Q) = Phi(a / sqrt(1 + sigma^2))
    exactly. Over 150 samples the data-free and the data-dependent certificates fall below
    L(Q) in at most delta of them; the plug-in Gibbs risk alone falls below it often."""
    cfg = PacBayesConfig(**LADDER)
    rng = np.random.default_rng(0)
    n, delta, reps, radius = 400, 0.1, 150, 20.0
    scale = ladder.Scale(0.0, 1.0)
    gen = torch.Generator().manual_seed(0)
    misses = {"free": 0, "data": 0, "plug_in": 0}
    for _ in range(reps):
        z = rng.uniform(size=n)
        mean = torch.tensor([[norm.ppf(np.quantile(z, 0.1))]], dtype=torch.float64)
        prior = torch.tensor([[norm.ppf(np.quantile(z[: n // 2], 0.1))]], dtype=torch.float64)
        setting = ladder.Setting(radius, cfg, delta, scale)
        free = ladder.certificate(
            mean, torch.zeros_like(mean), _threshold_draws(z, radius), n, setting, gen
        )
        data = ladder.certificate(
            mean, prior, _threshold_draws(z[n // 2 :], radius), n - n // 2, setting, gen
        )
        for name, cert in (("free", free), ("data", data)):
            truth = norm.cdf(float(mean) / math.sqrt(1 + cert.sigma**2))
            assert cert.bound >= cert.mc >= cert.gibbs_train >= 0.0
            misses[name] += cert.bound < truth
        truth = norm.cdf(float(mean) / math.sqrt(1 + free.sigma**2))
        misses["plug_in"] += free.gibbs_train < truth
    assert misses["free"] / reps <= delta and misses["data"] / reps <= delta
    assert misses["plug_in"] / reps > 0.2  # without its terms the estimate is no bound
    # the data-dependent prior sits near the posterior: a smaller KL
    assert data.kl < free.kl


def _smooth_units(z: np.ndarray, width: float) -> ladder.Units:
    """The loss Phi((w - Phi^-1(z)) / width) of a scalar head w on z ~ U(0, 1): differentiable
    in w, with E_z loss = Phi(w / sqrt(1 + width^2))."""
    u = torch.from_numpy(norm.ppf(z))
    normal = torch.distributions.Normal(0.0, 1.0)

    def terms(heads: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        return normal.cdf((heads.reshape(-1) - u[rows]) / width)

    return ladder.Units(terms, len(z))


def _smooth_draws(units: ladder.Units, radius: float) -> ladder.Draws:
    def draws(
        mean: torch.Tensor, sigma: float, count: int, gen: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        heads = pac_bayes.gibbs_heads(mean, sigma, radius, count, gen)
        rows = torch.randint(0, units.count, (count,), generator=gen)
        with torch.no_grad():
            return units.terms(heads, rows), rows

    return draws


def test_a_posterior_optimised_on_the_bound_still_covers_and_is_tighter() -> None:
    """W ~ N(mu, s^2): L(Q) = Phi(mu / sqrt(1 + width^2 + s^2)) exactly (R = 20: no projection).
    Over 120 samples the certificate of the optimised posterior falls below L(Q) in at most
    delta of them, and it is below the plain posterior's certificate on average (its KL to a
    prior away from the head shrinks)."""
    plain = PacBayesConfig(**LADDER)
    tuned = PacBayesConfig(**LADDER, posterior_steps=60, posterior_batch=256, posterior_lr=0.05)
    rng = np.random.default_rng(7)
    n, delta, reps, radius, width = 400, 0.1, 120, 20.0, 0.5
    scale = ladder.Scale(0.0, 1.0)
    misses, gain = 0, []
    for rep in range(reps):
        z = rng.uniform(size=n)
        units = _smooth_units(z, width)
        draws = _smooth_draws(units, radius)
        head = torch.tensor([[-1.0]], dtype=torch.float64)
        prior = torch.tensor([[-0.6]], dtype=torch.float64)
        args = (head, prior, draws, n)
        # the same pilot draws: the same prior scale
        plain_setting = ladder.Setting(radius, plain, delta, scale)
        before = ladder.certificate(*args, plain_setting, torch.Generator().manual_seed(rep))
        gen = torch.Generator().manual_seed(rep)
        after = ladder.certificate(*args, ladder.Setting(radius, tuned, delta, scale), gen, units)
        truth = norm.cdf(float(after.mean) / math.sqrt(1 + width**2 + after.sigma**2))
        assert after.bound >= after.mc >= after.gibbs_train >= 0.0
        assert after.prior_sigma == before.prior_sigma  # the prior's scale is chosen first
        # KL(N(mu, s^2) || N(prior, sigma_p^2)) with both scales, and the bound from it
        expected_kl = pac_bayes.gaussian_kl(after.mean, prior, after.sigma, after.prior_sigma)
        assert after.kl == pytest.approx(expected_kl, rel=1e-12)
        level = delta / 2 / len(LADDER["noise"])
        bound = pac_bayes.pac_bayes_kl_bound(after.mc, after.kl, n, level)
        assert after.bound == pytest.approx(bound, rel=1e-12)
        misses += after.bound < truth
        gain.append(before.bound - after.bound)
    assert misses / reps <= delta
    assert float(np.mean(gain)) > 0


def _threshold_family(z: np.ndarray, held: np.ndarray, radius: float) -> tuple:
    """The threshold toy as a family: the head probit(10% quantile) of the units it is fitted
    on, `fit_prior(units)` fitting the prior on the first prior_count(units) of the first
    `units` units and scoring it on the rest, and each held-out unit's Gibbs loss."""

    def fitted(part: np.ndarray) -> torch.Tensor:
        return torch.tensor([[norm.ppf(np.quantile(part, 0.1))]], dtype=torch.float64)

    def fit_prior(units: int, cap: int | None) -> ladder.Prior:
        count = ladder.prior_count(units, 0.5)
        prefix, rest = z[:count], z[count:units]
        mean = fitted(prefix)
        reference = torch.from_numpy((rest < norm.cdf(float(mean))).astype(np.float64))
        return ladder.Prior(mean, _threshold_draws(rest, radius), len(rest), reference)

    def held_out(mean: torch.Tensor, sigma: float) -> torch.Tensor:
        # each held-out unit's loss averaged over W ~ N(mean, sigma^2), in closed form
        return torch.from_numpy(norm.sf((norm.ppf(held) - float(mean)) / sigma))

    return fitted(z), fit_prior, held_out


def test_the_data_dependent_rungs_with_pilot_scales_cover_the_true_gibbs_risk() -> None:
    """The whole PAC-Bayes ladder of a cell (crl.steps.ladder.pac_bayes_columns) on the
    threshold toy, where L(Q) = Phi(a / sqrt(1 + sigma^2)) exactly for the posterior's mean a
    and the Gibbs scale sigma: with the noise scale and eta chosen by the pilot on the prior's
    units and the mean the share `cert_pb_data_shrink` of the way from the prior's to the head,
    over 150 samples `cert_pb_data` and `cert_pb_ref` each fall below L(Q) in at most delta of
    them (the plug-in empirical Gibbs risk in many), and the choices varied across the
    samples."""
    cfg = PacBayesConfig(**LADDER)
    rng = np.random.default_rng(11)
    n, delta, reps, radius = 400, 0.1, 150, 20.0
    setting = ladder.Setting(radius, cfg, delta, ladder.Scale(0.0, 1.0))
    gen = torch.Generator().manual_seed(5)
    misses = {"cert_pb_data": 0, "cert_pb_ref": 0, "cert_pb_data_gibbs_train": 0}
    chosen = set()
    for _ in range(reps):
        z = rng.uniform(size=n)
        head, fit_prior, held_out = _threshold_family(z, rng.uniform(size=200), radius)
        draws = _threshold_draws(z, radius)
        row = ladder.pac_bayes_columns(
            head, n, draws, fit_prior, held_out, setting, gen, rotations=False
        )
        sigma, t = row["cert_pb_data_sigma"], row["cert_pb_data_shrink"]
        prior = float(fit_prior(n, None).mean)
        truth = norm.cdf((prior + t * (float(head) - prior)) / math.sqrt(1 + sigma**2))
        for name in misses:
            misses[name] += row[name] < truth
        assert row["cert_pb_data_n"] == n // 2 and row["cert_pb_ref_reason"] is None
        assert row["cert_pb_data_prior_sigma"] == sigma  # no posterior optimisation
        chosen.add((sigma, row["cert_pb_ref_eta"], t))
    assert misses["cert_pb_data"] / reps <= delta and misses["cert_pb_ref"] / reps <= delta
    assert misses["cert_pb_data_gibbs_train"] / reps > 0.2  # the plug-in alone is no bound
    assert len(chosen) > 1


def test_the_pilot_choice_does_not_see_the_bound_units() -> None:
    """Two samples with the same prior units and different bound units get the same noise scale
    and eta (chosen on the prior's units alone) and different certificates; the prior is fitted
    on the n units at `prior_iterations`, its pilot on the prior's at `pilot_iterations`."""
    cfg = PacBayesConfig(**LADDER, prior_iterations=30, pilot_iterations=5)
    rng = np.random.default_rng(2)
    n, radius = 400, 20.0
    setting = ladder.Setting(radius, cfg, 0.05, ladder.Scale(0.0, 1.0))
    prefix, held = rng.uniform(size=n // 2), rng.uniform(size=100)
    rows = []
    for rest in (rng.uniform(size=n // 2), rng.uniform(size=n // 2) ** 2):
        z = np.concatenate([prefix, rest])
        head, fit_family_prior, held_out = _threshold_family(z, held, radius)
        calls = []

        def fit_prior(
            units: int, cap: int | None, calls: list = calls, fit: Callable = fit_family_prior
        ) -> ladder.Prior:
            calls.append((units, cap))
            return fit(units, cap)

        gen = torch.Generator().manual_seed(0)
        draws = _threshold_draws(z, radius)
        rows.append(
            ladder.pac_bayes_columns(
                head, n, draws, fit_prior, held_out, setting, gen, rotations=False
            )
        )
        assert calls == [(n, 30), (n // 2, 5)]
    first, second = rows
    assert first["cert_pb_data_sigma"] == second["cert_pb_data_sigma"]
    assert first["cert_pb_ref_eta"] == second["cert_pb_ref_eta"]
    assert first["cert_pb_ref"] != second["cert_pb_ref"]


def test_a_prior_share_too_small_for_a_pilot_leaves_every_rung_with_its_reason() -> None:
    """prior_count(n, fraction) < 2: no pilot can be fitted within the prior's units, so no
    PAC-Bayes rung (`TOO_FEW`); prior_count keeps at least one unit on each side."""
    assert ladder.prior_count(3, 0.3) == 1 and ladder.prior_count(2, 0.99) == 1
    assert ladder.prior_count(400, 0.5) == 200 and ladder.prior_count(4, 0.5) == 2
    cfg = PacBayesConfig(**{**LADDER, "prior_fraction": 0.3})
    z = np.array([0.2, 0.5, 0.9])
    head, fit_prior, held_out = _threshold_family(z, z, 20.0)
    setting = ladder.Setting(20.0, cfg, 0.05, ladder.Scale(0.0, 1.0))
    gen = torch.Generator().manual_seed(0)
    row = ladder.pac_bayes_columns(
        head, 3, _threshold_draws(z, 20.0), fit_prior, held_out, setting, gen
    )
    assert row["cert_pb_data"] is None and row["cert_pb_free"] is None
    assert row["cert_pb_ref_reason"] == row["cert_pb_free_reason"] == ladder.TOO_FEW


def test_the_posterior_mean_moves_to_the_prior_where_the_kl_outweighs_the_loss_it_saves() -> None:
    """shrunk_mean returns prior + t (head - prior) for a t of SHRINKS: on a smooth toy (the
    loss Phi((w - Phi^-1(z)) / 0.5)), a head at -1.5 against the prior's -1.0 at sigma 0.05 (KL
    50 nats at t = 1): with 200000 bound units the head itself (t = 1), with 50 a point nearer
    the prior."""
    cfg = PacBayesConfig(**LADDER)
    setting = ladder.Setting(20.0, cfg, 0.05, ladder.Scale(0.0, 1.0))
    head = torch.tensor([[-1.5]], dtype=torch.float64)
    prior_mean = torch.tensor([[-1.0]], dtype=torch.float64)
    rng = np.random.default_rng(4)
    chosen = {}
    for count in (200000, 50):
        units = _smooth_units(rng.uniform(size=count), 0.5)
        reference = units.terms(prior_mean.expand(count, 1, 1), torch.arange(count))
        prior = ladder.Prior(prior_mean, _smooth_draws(units, 20.0), count, reference)
        gen = torch.Generator().manual_seed(0)
        mean, t = ladder.shrunk_mean(head, prior, 0.05, 0.9, setting, gen)
        assert t in ladder.SHRINKS
        assert torch.equal(mean, prior_mean + t * (head - prior_mean))
        chosen[count] = t
    assert chosen[200000] == 1.0 and chosen[50] < 1.0
