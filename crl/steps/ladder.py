"""The rungs of the certificate ladder that every family takes (single-modality cells:
crl.steps.unimodal.ladder; dense cells: crl.steps.dense.ladder; paired cells:
crl.steps.paired.ladder): the test-set certificate from held-out units that are i.i.d. given the
head (`test_set_columns`), and the PAC-Bayes rungs, for which a family supplies its i.i.d.
units (an anchor's tuple, an image with its negatives, a pair with its negatives), a draw of
their losses under fresh Gibbs heads, and a fit of the data-dependent prior's mean; this module
turns them into the certificates and their columns.

Losses are scaled to [0, 1] by the loss's range; every column is back in the loss's own units.

- `cert_pb_free`: Maurer's PAC-Bayes-kl bound (crl.kernels.pac_bayes) for the Gibbs head
  P_R(W), W ~ N(W_hat, sigma^2 I), prior N(0, sigma^2 I), on the whole training sample.
- `cert_pb_data`: the same with the prior's mean fitted (by the family's solver) on the first
  `prior_fraction` of the training units (`prior_count`); the bound uses the others
  (`cert_pb_data_n`). The
  posterior's mean is the cell's head W_hat, fitted on every unit (the posterior may depend on
  the whole sample; the prior may not depend on the units its bound uses), rotated onto the
  prior's mean (orthogonal Procrustes, crl.kernels.pac_bayes.procrustes): every family's scores
  are inner products of W phi, invariant under W -> Q W, so the rotated head has the same
  losses, while heads fitted from different starts otherwise sit at unrelated rotations and a
  KL of the size of the data-free one.
- The posterior: with `posterior_steps` (`optimise_posterior`), after the prior's scale is
  chosen, Adam moves the Gibbs head's mean and scale (`_sigma`; the prior's is `_prior_sigma`)
  to lower a smooth upper bound of the certificate on reparameterised draws from the bound's
  own units (PAC-Bayes-by-backprop; the bound holds for every posterior at once); without, the
  posterior is the head above at the prior's scale.
- Each at level delta: delta/2 for the PAC-Bayes bound, delta/2 for the Monte Carlo bound on
  the empirical Gibbs risk from `mc_draws` draws at the chosen scale, each a fresh head scored
  on one unit drawn uniformly from the sample (i.i.d. with mean exactly the empirical Gibbs
  risk, one unit per draw whatever n is): the smaller of the kl bound (Langford and Caruana
  2002) and the empirical Bernstein bound (Maurer and Pontil 2009), each at delta/4.
  `cert_pb_free`'s scale is chosen on `pilot_draws` draws per scale of the noise grid on its
  own units, whose randomness is independent of the final draws', so its PAC-Bayes part is
  split evenly over the grid (a union bound). The data-dependent rungs choose theirs, and
  `cert_pb_ref`'s eta, on the prior's units alone (`pilot_scales`): a pilot prior fitted on
  the first `prior_fraction` of those units plays the prior and the prior's mean plays the
  posterior, scored on the rest of the prior's units; the choice is then fixed before the
  bound's units are seen, so it costs no union bound (ln 7 for the noise grid, ln 13 for the
  eta grid, each in both the PAC-Bayes and the Monte Carlo part).
- `cert_pb_ref`: the data-dependent prior's mean h_ref as a reference head, fixed before the
  bound's units are seen: L(Q) = L(h_ref) + (L(Q) - L(h_ref)), the first term by the test-set
  certificate of h_ref on those units (`_reference`, at delta/3: `test_set_columns`'s bound),
  the second by the excess-loss PAC-Bayes bound (crl.kernels.pac_bayes.excess_bound, `_gap`, at
  `_eta`, chosen by `pilot_scales`) for the data-dependent certificate's posterior and prior,
  delta/3 for its PAC-Bayes part and delta/3 for its Monte Carlo draws (the data-dependent
  rung's `mc_draws` draws, each a fresh head on a uniformly drawn unit, less h_ref's loss on
  that unit). Where the Gibbs heads' losses differ little from h_ref's, the excess term falls
  as 1/n and the certificate sits near a test-set certificate of h_ref.
- The data-dependent rungs certify one Gibbs head: its mean is the fitted head (rotated onto
  the prior's) moved towards the prior's mean by the share `cert_pb_data_shrink` of `SHRINKS`
  (`shrunk_mean`): the one whose tighter rung pilot draws on the bound's units project
  smallest. Every posterior may be chosen so (the bounds hold for all at once); at small n it
  is often the prior's mean itself, whose KL is 0.
- Columns per certificate: the bound, `_kl` (KL(Q || P)), `_n`, `_sigma` (per entry),
  `_gibbs_train` (the Monte Carlo mean of the empirical Gibbs risk), `_mc` (its upper bound),
  `_reason`. `gibbs_test_loss` (`_ci`): the data-dependent Gibbs head's held-out loss, each
  held-out unit scored by `test_heads` fresh heads of its own; `cert_pb_free_gibbs_test` the
  data-free one's. `cert_pb_data_excess_ratio`: (cert_pb_data - gibbs_test_loss) over the
  excess of a test-set certificate of the same Gibbs head from as many units (`cert_pb_data_n`)
  at level delta.

A rung that does not apply gives None and its `_reason`.
"""

from __future__ import annotations

import math

import torch

from crl.kernels import certificates, pac_bayes, stats
from crl.steps.ladder_parts import (
    Certificate,
    Draws,
    FitPrior,
    HeldOut,
    Prior,
    Scale,
    Setting,
    Units,
    draws_on,
    prior_count,
)
from crl.steps.ladder_posterior import optimise_posterior

__all__ = [
    "Certificate",
    "Draws",
    "FitPrior",
    "HeldOut",
    "Prior",
    "Scale",
    "Setting",
    "Units",
    "draws_on",
    "prior_count",
]

NOT_REQUESTED = "eval.ladder is not set"
SHARED = "sscrl: the training tuples share their negatives (not i.i.d.)"
NO_RANGE = "the loss has no finite range"
TOO_FEW = "too few training units for disjoint pilot, prior and bound samples"

_RUNG = ("", "_kl", "_n", "_sigma", "_prior_sigma", "_gibbs_train", "_mc", "_reason")
PB_COLUMNS = (
    *(f"cert_pb_{prior}{suffix}" for prior in ("free", "data") for suffix in _RUNG),
    "cert_pb_free_gibbs_test",
    "cert_pb_data_shrink",
    "gibbs_test_loss",
    "gibbs_test_loss_ci",
    "cert_pb_data_excess_ratio",
    *(f"cert_pb_ref{suffix}" for suffix in ("", "_reference", "_gap", "_eta", "_reason")),
    "cert_pb_ref_excess_ratio",
)


def pilot_scales(
    head: torch.Tensor, pilot: Prior, n: int, setting: Setting, gen: torch.Generator
) -> tuple[float, float]:
    """The data-dependent rungs' noise scale and `cert_pb_ref`'s eta (module docstring), from
    the prior's units alone: `head` (the prior's mean, already rotated onto the pilot's where
    the family allows) plays the posterior and `pilot` (a prior fitted on the first part of the
    prior's units, with its draws and losses on the rest) the prior. For each scale of the noise
    grid, `pilot_draws` draws X = l(W, z) - l(pilot mean, z) estimate the excess bound at each
    eta of crl.kernels.pac_bayes.ETAS as the bound's n units and `mc_draws` draws would give it
    (`projected_excess_bound`), with KL(Q || P) halved: fits on nested samples of n/4, n/2 and n
    units differ by about 2 Sigma/n and Sigma/n in squared distance (an M-estimator's mean
    gradients), so the pilot's pair is about twice as far apart as the bound's. Returns the
    (sigma, eta) of the smallest estimate."""
    ladder, scale, delta = setting.ladder, setting.scale, setting.delta
    reference = (pilot.reference.double() - scale.low) / scale.width
    best = (math.inf, 0.0, pac_bayes.ETAS[0])
    for relative in ladder.noise:
        sigma = pac_bayes.noise_scale(relative, setting.radius, head.numel())
        kl = pac_bayes.gaussian_kl(head, pilot.mean, sigma, sigma) / 2
        losses, rows = pilot.draws(head, sigma, ladder.pilot_draws, gen)
        excess = (losses - scale.low) / scale.width - reference[rows]
        for eta in pac_bayes.ETAS:
            value = pac_bayes.projected_excess_bound(
                excess, kl, n, delta / 3, delta / 3, eta, ladder.mc_draws
            )
            best = min(best, (value, sigma, eta))
    return best[1], best[2]


# the data-dependent posterior's mean between the prior's (0) and the fitted head's (1)
SHRINKS = (0.0, 0.25, 0.5, 0.75, 1.0)


def shrunk_mean(
    head: torch.Tensor,
    prior: Prior,
    sigma: float,
    eta: float,
    setting: Setting,
    gen: torch.Generator,
) -> tuple[torch.Tensor, float]:
    """The data-dependent rungs' posterior mean prior.mean + t (head - prior.mean), t of
    `SHRINKS`, and its t: the one whose tighter rung is smallest as `pilot_draws` draws on the
    bound's units project both at the scale sigma, each with its Monte Carlo term at `mc_draws`
    draws (`cert_pb_data`: Maurer's bound on their mean; `cert_pb_ref`: its reference's
    test-set certificate plus `projected_excess_bound` at `eta`). The PAC-Bayes bounds hold for
    every posterior at once, so the bound's own units may choose it (as `optimise_posterior`
    does); the Monte Carlo draws that certify it come after, fresh. Moving towards the prior
    trades the KL against the Gibbs heads' losses, and for `cert_pb_ref` against their spread
    around the reference's too (the X^2 term). `head` is already rotated onto the prior's mean
    where the family allows."""
    ladder, scale, delta = setting.ladder, setting.scale, setting.delta
    prior_mean = prior.mean.double()
    reference = (prior.reference.double() - scale.low) / scale.width
    certified = scale.to_unit(test_set_columns(prior.reference, scale, delta / 3)["cert_test_set"])
    best = (math.inf, 1.0)
    for t in SHRINKS:
        mean = prior_mean + t * (head - prior_mean)
        kl = pac_bayes.gaussian_kl(mean, prior_mean, sigma, sigma)
        losses, rows = prior.draws(mean, sigma, ladder.pilot_draws, gen)
        unit = (losses - scale.low) / scale.width
        gap = pac_bayes.projected_excess_bound(
            unit - reference[rows], kl, prior.n, delta / 3, delta / 3, eta, ladder.mc_draws
        )
        upper = certificates.held_out_upper(
            float(unit.mean()), float(unit.var()), ladder.mc_draws, delta / 2
        )
        data = pac_bayes.pac_bayes_kl_bound(upper, kl, prior.n, delta / 2)
        best = min(best, (min(certified + gap, data), t))
    t = best[1]
    return prior_mean + t * (head - prior_mean), t


def certificate(
    mean: torch.Tensor,
    prior: torch.Tensor,
    draws: Draws,
    n: int,
    setting: Setting,
    gen: torch.Generator,
    units: Units | None = None,
    sigma: float | None = None,
) -> Certificate:
    """The PAC-Bayes-kl certificate of the Gibbs head P_R(W), W ~ N(mean, sigma^2 I), against
    the prior N(prior, sigma^2 I), from draws of its losses on n i.i.d. units, at level delta
    (module docstring): at `sigma` where given (chosen before these units are seen), else at the
    scale of the noise grid that the pilot draws favour, the PAC-Bayes part split over the grid;
    with `posterior_steps` and `units`, the posterior's mean and scale are then optimised on the
    bound (`optimise_posterior`) before the Monte Carlo draws."""
    ladder, delta, scale = setting.ladder, setting.delta, setting.scale
    if sigma is None:
        sigmas = [pac_bayes.noise_scale(s, setting.radius, mean.numel()) for s in ladder.noise]
    else:
        sigmas = [sigma]
    level = delta / 2 / len(sigmas)

    def plug_in(sigma: float) -> float:
        kl = pac_bayes.gaussian_kl(mean, prior, sigma, sigma)
        empirical = scale.to_unit(float(draws(mean, sigma, ladder.pilot_draws, gen)[0].mean()))
        return pac_bayes.pac_bayes_kl_bound(empirical, kl, n, level)

    prior_sigma = sigmas[0] if len(sigmas) == 1 else min(sigmas, key=plug_in)
    sigma = prior_sigma
    if ladder.posterior_steps > 0 and units is not None:
        mean, sigma = optimise_posterior(mean, prior, prior_sigma, units, n, level, setting, gen)
    losses, rows = draws(mean, sigma, ladder.mc_draws, gen)
    unit = (losses - scale.low) / scale.width  # in [0, 1]
    gibbs_train = float(unit.mean())
    mc = pac_bayes.monte_carlo_upper(gibbs_train, ladder.mc_draws, delta / 4)
    variance = float(unit.var(correction=1))
    bernstein = certificates.empirical_bernstein_upper(
        gibbs_train, variance, ladder.mc_draws, delta / 4
    )
    mc = min(mc, bernstein)
    kl = pac_bayes.gaussian_kl(mean, prior, sigma, prior_sigma)
    bound = pac_bayes.pac_bayes_kl_bound(mc, kl, n, level)
    return Certificate(bound, kl, n, sigma, gibbs_train, mc, mean, prior_sigma, unit, rows)


def test_set_columns(terms: torch.Tensor, scale: Scale | None, delta: float) -> dict:
    """The test-set certificate from the losses of N held-out units that are i.i.d. given the
    head, with the losses scaled to [0, 1] by `scale` (None: the loss has no finite range,
    `NO_RANGE`): at level delta, the smaller of Langford's (2005) kl bound
    kl^-1(mean, ln(2/delta) / N) and Maurer and Pontil's (2009) empirical Bernstein bound, each
    at delta / 2 (crl.kernels.certificates.held_out_upper): losses that spread little next to
    their range, as most do, get the second. Shape: terms (N,)."""
    if scale is None:
        return test_set_not_applied(NO_RANGE)
    unit = (terms.double() - scale.low) / scale.width
    n = int(unit.shape[0])
    variance = float(unit.var(correction=1)) if n > 1 else 0.0
    bound = certificates.held_out_upper(float(unit.mean()), variance, n, delta)
    return {"cert_test_set": scale.back(bound), "cert_test_set_n": n, "cert_test_set_reason": None}


def own_negatives_columns(terms: torch.Tensor) -> dict:
    """`test_loss_m` (`_ci`): the mean of the held-out units' losses with their own negatives,
    the estimate of what the test-set certificate bounds, and its 95% normal half-width.
    Shape: terms (N,)."""
    n = int(terms.shape[0])
    ci = float(stats.normal_half_width(terms.double().std(), n)) if n > 1 else math.nan
    return {"test_loss_m": float(terms.double().mean()), "test_loss_m_ci": ci}


def test_set_not_applied(reason: str | None) -> dict:
    """The test-set columns of a cell without the certificate, and why."""
    return {"cert_test_set": None, "cert_test_set_n": None, "cert_test_set_reason": reason}


def not_applied(reason: str) -> dict:
    """Every PAC-Bayes column null, every rung with `reason`."""
    out = {name: None for name in PB_COLUMNS}
    reasons = ("cert_pb_free_reason", "cert_pb_data_reason", "cert_pb_ref_reason")
    return out | dict.fromkeys(reasons, reason)


def reference_columns(data: Certificate, prior: Prior, eta: float, setting: Setting) -> dict:
    """`cert_pb_ref` and its parts (module docstring), for the data-dependent certificate's
    posterior N(data.mean, data.sigma^2 I) and prior N(prior.mean, data.prior_sigma^2 I), at
    `eta` (chosen before the bound's units are seen)."""
    delta, scale = setting.delta, setting.scale
    reference = test_set_columns(prior.reference, scale, delta / 3)["cert_test_set"]
    # the data-dependent certificate's own Monte Carlo draws, each against the reference's loss
    # on the same unit (a union bound: these draws serve both rungs, each at its own level)
    excess = data.draws - (prior.reference.double()[data.rows] - scale.low) / scale.width
    gap, eta = pac_bayes.excess_bound(excess, data.kl, prior.n, delta / 3, delta / 3, (eta,))
    upper = scale.low + scale.width  # the loss's top: no certificate says more
    return {
        "cert_pb_ref": min(reference + gap * scale.width, upper),
        "cert_pb_ref_reference": reference,
        "cert_pb_ref_gap": gap * scale.width,
        "cert_pb_ref_eta": eta,
        "cert_pb_ref_reason": None,
    }


def rung_columns(prefix: str, cert: Certificate, scale: Scale) -> dict:
    """One certificate's columns, in the loss's units."""
    return {
        prefix: scale.back(cert.bound),
        f"{prefix}_kl": cert.kl,
        f"{prefix}_n": cert.n,
        f"{prefix}_sigma": cert.sigma,
        f"{prefix}_prior_sigma": cert.prior_sigma,
        f"{prefix}_gibbs_train": scale.back(cert.gibbs_train),
        f"{prefix}_mc": scale.back(cert.mc),
        f"{prefix}_reason": None,
    }


def pac_bayes_columns(
    head: torch.Tensor,
    n: int,
    draws: Draws,
    fit_prior: FitPrior,
    held_out: HeldOut,
    setting: Setting,
    gen: torch.Generator,
    units: Units | None = None,
    rotations: bool = True,
) -> dict:
    """Both PAC-Bayes rungs of a cell whose n training units are i.i.d., the Gibbs heads'
    held-out risks and the excess ratio (module docstring); every rung `TOO_FEW` where the
    prior's share of the units cannot hold a pilot and its own units. `fit_prior` is called
    twice, after the data-free certificate: for the prior (on the n units) and for its pilot
    (on the prior's units); it may draw from `gen`. `units` (the sample's, for the data-free
    rung) and the prior's serve the posterior's optimisation. `rotations`: the family's losses
    are invariant under W -> Q W, so the head is rotated onto the prior's mean and the prior's
    mean onto the pilot's (False: a class without that symmetry, as the paired score model;
    the heads are taken as they are)."""
    if prior_count(n, setting.ladder.prior_fraction) < 2:
        return not_applied(TOO_FEW)

    def rotated(moving: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return pac_bayes.procrustes(moving, target) @ moving if rotations else moving

    mean = head.double()
    zero = torch.zeros_like(mean)
    free = certificate(mean, zero, draws, n, setting, gen, units)
    ladder = setting.ladder
    prior = fit_prior(n, ladder.prior_iterations)
    pilot = fit_prior(n - prior.n, ladder.pilot_iterations or ladder.prior_iterations)
    prior_mean, pilot_mean = prior.mean.double(), pilot.mean.double()
    sigma, eta = pilot_scales(rotated(prior_mean, pilot_mean), pilot, prior.n, setting, gen)
    posterior, shrink = shrunk_mean(rotated(mean, prior_mean), prior, sigma, eta, setting, gen)
    data = certificate(
        posterior,
        prior_mean,
        prior.draws,
        prior.n,
        setting,
        gen,
        prior.units,
        sigma,
    )
    scale, delta = setting.scale, setting.delta
    out = {**rung_columns("cert_pb_free", free, scale), **rung_columns("cert_pb_data", data, scale)}
    out["cert_pb_data_shrink"] = shrink
    out |= reference_columns(data, prior, eta, setting)
    out["cert_pb_free_gibbs_test"] = float(held_out(free.mean, free.sigma).mean())
    per_unit = held_out(data.mean, data.sigma)
    gibbs_test = float(per_unit.mean())
    n_test = per_unit.shape[0]
    test_unit = min(max(scale.to_unit(gibbs_test), 0.0), 1.0)
    reference = certificates.held_out_bound(test_unit, data.n, delta) - test_unit
    excess = data.bound - test_unit
    ref_excess = None
    if out["cert_pb_ref"] is not None and reference > 0:
        ref_excess = (scale.to_unit(out["cert_pb_ref"]) - test_unit) / reference
    return out | {
        "cert_pb_ref_excess_ratio": ref_excess,
        "gibbs_test_loss": gibbs_test,
        "gibbs_test_loss_ci": (
            float(stats.normal_half_width(per_unit.std(), n_test)) if n_test > 1 else None
        ),
        "cert_pb_data_excess_ratio": excess / reference if reference > 0 else None,
    }
