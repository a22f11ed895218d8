"""The certificate ladder of a single-modality cell beyond the test-set certificate
(`eval.ladder`, crl.core.ladder_config): PAC-Bayes-kl certificates and the uniform deviation.

Every rung targets L_m(f), the expected m-negative loss of a tuple with fresh negatives, for
every loss: for LSE that is the per-anchor loss with m negatives (Li et al.'s L(s) is at most
`lse_inner_bound` above it), not the pooled `test_loss`. Losses are scaled to [0, 1] by the
loss's range; every column is back in the loss's own units.

- `cert_pb_free`: Maurer's PAC-Bayes-kl bound (crl.kernels.pac_bayes) for the Gibbs head
  P_R(W), W ~ N(W_hat, sigma^2 I), prior N(0, sigma^2 I), on the whole training sample.
- `cert_pb_data`: the same with the prior's mean fitted (by the cell's solver) on the first
  `prior_fraction` of the training anchors; the bound uses the others (`cert_pb_data_n`). The
  posterior's mean is the cell's head W_hat, fitted on every anchor (the posterior may depend
  on the whole sample; the prior may not depend on the anchors its bound uses).
- `cert_pb_data`'s posterior mean is W_hat rotated onto the prior's mean (orthogonal
  Procrustes, crl.kernels.pac_bayes.procrustes): f(x)^T f(y) is invariant under W -> Q W, so
  the rotated head has the same losses, and its Gibbs head the same risks, while heads fitted
  from different starts otherwise sit at unrelated rotations and a KL of the size of the
  data-free one.
- Each at level delta: delta/2 for the PAC-Bayes bound, split evenly over the noise grid (a
  union bound, so the smallest is reported), delta/2 for the Monte Carlo bound on the empirical
  Gibbs risk from `mc_draws` draws at the chosen scale, each a fresh head scored on one anchor
  drawn uniformly from the sample (crl.kernels.pac_bayes.gibbs_draws: i.i.d. with mean exactly
  the empirical Gibbs risk, one tuple per draw whatever n is): the smaller of the kl bound
  (Langford and Caruana 2002) and the empirical Bernstein bound (Maurer and Pontil 2009), each
  at delta/4. The scale is chosen on `pilot_draws` draws per scale, whose randomness is
  independent of the final draws'. Columns per certificate: the bound, `_kl` (KL(Q || P)),
  `_n`, `_sigma` (per entry), `_gibbs_train` (the Monte Carlo mean of the empirical Gibbs
  risk), `_mc` (its upper bound), `_reason`. `gibbs_test_loss` (`_ci`): the data-dependent
  Gibbs head's held-out L_m, each held-out anchor scored by `test_heads` fresh heads of its own
  (crl.kernels.pac_bayes.gibbs_anchor_means); `cert_pb_free_gibbs_test` the data-free one's.
  `cert_pb_data_excess_ratio`: (cert_pb_data - gibbs_test_loss) over the excess of a test-set
  certificate of the same Gibbs head from as many tuples (`cert_pb_data_n`) at level delta.
- `uniform_deviation_est` (`_ci`): a lower estimate of sup_W (L_m(W) - Lhat_S(W)) over the ball:
  W* maximises Lhat_search(W) - Lhat_A(W) by projected gradient ascent from the fitted head and
  `ascent_starts` - 1 random points of norm R (search: the cell's held-out tuples; A: the first
  `ascent_anchors` training anchors, i.i.d. like the rest), then L_m(W*) - Lhat_S(W*) is
  measured with every training anchor and L_m(W*) on fresh tuples (95% normal half-width):
  any W* gives a lower estimate, so the search may use a part of S; needs fresh draws of the
  law.

A rung that does not apply gives None and its `_reason`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from crl.core.config import Config
from crl.core.ladder_config import LadderConfig
from crl.kernels import certificates, learner, pac_bayes, stats
from crl.kernels.solver import SolverSpec, apg, project_ball
from crl.steps.keys import CellKey
from crl.steps.unimodal import sampling
from crl.steps.unimodal.fit import fit_head

NOT_REQUESTED = "eval.ladder is not set"
SHARED = "sscrl: the training tuples share their negatives (not i.i.d.)"
REUSED = "the training tuples reuse rows of the split (not i.i.d.)"
NO_RANGE = "the loss has no finite range"
TOO_FEW = "fewer than two training anchors: no disjoint prior sample"
NOT_FRESH = "needs fresh draws of the law (synthetic data)"

_RUNG = ("", "_kl", "_n", "_sigma", "_gibbs_train", "_mc", "_reason")
PB_COLUMNS = (
    *(f"cert_pb_{prior}{suffix}" for prior in ("free", "data") for suffix in _RUNG),
    "cert_pb_free_gibbs_test",
    "gibbs_test_loss",
    "gibbs_test_loss_ci",
    "cert_pb_data_excess_ratio",
)
UD_COLUMNS = ("uniform_deviation_est", "uniform_deviation_est_ci", "uniform_deviation_reason")

Block = tuple[learner.Views, learner.Sample]


@dataclass(frozen=True)
class Scale:
    """A loss's range: values in [low, low + width] map to [0, 1]."""

    low: float
    width: float

    def to_unit(self, value: float) -> float:
        return certificates.scaled(value, self.low, self.width)

    def back(self, value: float) -> float:
        return certificates.unscaled(value, self.low, self.width)


@dataclass(frozen=True)
class Certificate:
    """One PAC-Bayes rung, in [0, 1] units, with the Gibbs head's mean and scale."""

    bound: float
    kl: float
    n: int
    sigma: float
    gibbs_train: float
    mc: float
    mean: torch.Tensor  # (d, p)


# (mean (d, p), sigma, count, generator) -> the losses of `count` i.i.d. draws of a Gibbs head
# scored on a uniformly drawn training anchor, (count,) in the loss's units
Draws = Callable[[torch.Tensor, float, int, torch.Generator], torch.Tensor]


def certificate(
    mean: torch.Tensor,
    prior: torch.Tensor,
    draws: Draws,
    n: int,
    radius: float,
    ladder: LadderConfig,
    delta: float,
    scale: Scale,
    gen: torch.Generator,
) -> Certificate:
    """The PAC-Bayes-kl certificate of the Gibbs head P_R(W), W ~ N(mean, sigma^2 I), against
    the prior N(prior, sigma^2 I), from draws of its losses on n i.i.d. anchors, at level
    delta (module docstring)."""
    level = delta / 2 / len(ladder.noise)
    sigmas = [pac_bayes.noise_scale(s, radius, mean.numel()) for s in ladder.noise]

    def plug_in(sigma: float) -> float:
        kl = pac_bayes.gaussian_kl(mean, prior, sigma, sigma)
        empirical = scale.to_unit(float(draws(mean, sigma, ladder.pilot_draws, gen).mean()))
        return pac_bayes.pac_bayes_kl_bound(empirical, kl, n, level)

    sigma = min(sigmas, key=plug_in)
    unit = (draws(mean, sigma, ladder.mc_draws, gen) - scale.low) / scale.width  # in [0, 1]
    gibbs_train = float(unit.mean())
    mc = pac_bayes.monte_carlo_upper(gibbs_train, ladder.mc_draws, delta / 4)
    variance = float(unit.var(correction=1))
    bernstein = pac_bayes.empirical_bernstein_upper(
        gibbs_train, variance, ladder.mc_draws, delta / 4
    )
    mc = min(mc, bernstein)
    kl = pac_bayes.gaussian_kl(mean, prior, sigma, sigma)
    bound = pac_bayes.pac_bayes_kl_bound(mc, kl, n, level)
    return Certificate(bound, kl, n, sigma, gibbs_train, mc, mean)


def _rung_columns(prefix: str, cert: Certificate | None, scale: Scale, reason: str | None) -> dict:
    if cert is None:
        return {f"{prefix}{suffix}": None for suffix in _RUNG[:-1]} | {f"{prefix}_reason": reason}
    return {
        prefix: scale.back(cert.bound),
        f"{prefix}_kl": cert.kl,
        f"{prefix}_n": cert.n,
        f"{prefix}_sigma": cert.sigma,
        f"{prefix}_gibbs_train": scale.back(cert.gibbs_train),
        f"{prefix}_mc": scale.back(cert.mc),
        f"{prefix}_reason": None,
    }


def _pac_bayes_reason(
    ladder: LadderConfig | None, draw: sampling.TrainDraw, scale: Scale | None
) -> str | None:
    """Why the PAC-Bayes rungs do not apply to the cell, or None."""
    for reason, applies in (
        (NOT_REQUESTED, ladder is not None),
        (SHARED, not draw.shared),
        (REUSED, draw.certified),
        (NO_RANGE, scale is not None),
        (TOO_FEW, draw.n >= 2),
    ):
        if not applies:
            return reason
    return None


def pac_bayes_columns(
    config: Config,
    key: CellKey,
    draw: sampling.TrainDraw,
    weight: torch.Tensor,
    held: Block,
    scale: Scale | None,
    gen: torch.Generator,
) -> dict:
    """Both PAC-Bayes rungs of the cell, the Gibbs heads' held-out risks and the excess ratio."""
    ladder, ev = config.eval.ladder, config.eval
    reason = _pac_bayes_reason(ladder, draw, scale)
    out = {name: None for name in PB_COLUMNS}
    if reason is not None:
        return out | {"cert_pb_free_reason": reason, "cert_pb_data_reason": reason}
    R, T = config.model.R, ev.temperature

    def on(blocks: learner.Blocks) -> Draws:
        def draws(mean: torch.Tensor, sigma: float, count: int, g: torch.Generator) -> torch.Tensor:
            return pac_bayes.gibbs_draws(mean, sigma, R, blocks, count, key.loss, T, g)

        return draws

    def held_out(cert: Certificate) -> torch.Tensor:
        return pac_bayes.gibbs_anchor_means(
            cert.mean, cert.sigma, R, held, ladder.test_heads, key.loss, T, gen
        )

    mean = weight.double()
    free = certificate(
        mean, torch.zeros_like(mean), on(draw), draw.n, R, ladder, ev.delta, scale, gen
    )
    count = min(draw.n - 1, max(1, round(ladder.prior_fraction * draw.n)))
    prior_draw, rest = sampling.split_anchors(draw, count)
    prior = fit_head(_prior_config(config, ladder), prior_draw, key.loss, gen)[0].double()
    # scores are invariant under W -> Q W (Q orthogonal), and heads fitted from different
    # starts land on different rotations: the posterior's mean is the head rotated onto the
    # prior's (the posterior may depend on every anchor; the prior does not move)
    aligned = pac_bayes.procrustes(mean, prior) @ mean
    data = certificate(aligned, prior, on(rest), rest.n, R, ladder, ev.delta, scale, gen)
    out.update(_rung_columns("cert_pb_free", free, scale, None))
    out.update(_rung_columns("cert_pb_data", data, scale, None))
    out["cert_pb_free_gibbs_test"] = float(held_out(free).mean())
    per_anchor = held_out(data)
    gibbs_test = float(per_anchor.mean())
    out["gibbs_test_loss"] = gibbs_test
    n_test = per_anchor.shape[0]
    out["gibbs_test_loss_ci"] = (
        float(stats.normal_half_width(per_anchor.std(), n_test)) if n_test > 1 else None
    )
    test_unit = min(max(scale.to_unit(gibbs_test), 0.0), 1.0)
    reference = certificates.held_out_bound(test_unit, data.n, ev.delta) - test_unit
    excess = data.bound - test_unit
    out["cert_pb_data_excess_ratio"] = excess / reference if reference > 0 else None
    return out


def _prior_config(config: Config, ladder: LadderConfig) -> Config:
    """The config the data-dependent prior is fitted with: the model's, its iteration cap
    replaced by `prior_iterations` where set."""
    if ladder.prior_iterations is None:
        return config
    cap = ladder.prior_iterations
    model = config.model.model_copy(update={"max_iter": cap, "steps": cap})
    return config.model_copy(update={"model": model})


def uniform_deviation_columns(
    draw: sampling.TrainDraw,
    weight: torch.Tensor,
    search: Block,
    fresh: Block | None,
    loss: str,
    temperature: float,
    radius: float,
    ladder: LadderConfig | None,
    gen: torch.Generator,
) -> dict:
    """The uniform deviation estimate (module docstring); `fresh` None: not fresh draws."""
    reason = NOT_REQUESTED if ladder is None or ladder.ascent_starts == 0 else None
    reason = reason or (NOT_FRESH if fresh is None else None)
    if reason is not None:
        return {name: None for name in UD_COLUMNS[:-1]} | {"uniform_deviation_reason": reason}
    d, p = weight.shape
    part = sampling.first_anchors(draw, ladder.ascent_anchors)
    train_value, train_grad = learner.mean_loss(part, d, loss, temperature)
    search_value, search_grad = learner.mean_loss([search], d, loss, temperature)

    def value(flat: torch.Tensor) -> float:
        return train_value(flat) - search_value(flat)

    def value_and_grad(flat: torch.Tensor) -> tuple[float, torch.Tensor]:
        (a, ga), (b, gb) = train_grad(flat), search_grad(flat)
        return a - b, ga - gb

    starts = [weight.double().reshape(-1)]
    for _ in range(ladder.ascent_starts - 1):
        direction = torch.randn(d * p, generator=gen, dtype=torch.float64)
        starts.append(radius * direction / torch.linalg.vector_norm(direction))
    solver = SolverSpec(tol=1e-7, max_iter=ladder.ascent_iterations)
    solutions = [
        apg(value, value_and_grad, lambda x: project_ball(x, radius), s, solver) for s in starts
    ]
    # the ascent need not end above its start: the fitted head itself is a candidate
    candidates = [(value(starts[0]), starts[0])] + [(s.value, s.params) for s in solutions]
    _, best = min(candidates, key=lambda candidate: candidate[0])
    top = best.reshape(d, p).to(weight.dtype)
    train_terms = [learner.per_anchor_loss(top, *block, loss, temperature) for block in draw]
    train_loss = float(torch.cat(train_terms).mean())
    held = learner.per_anchor_loss(top, *fresh, loss, temperature)  # (N,)
    n = held.shape[0]
    return {
        "uniform_deviation_est": float(held.mean()) - train_loss,
        "uniform_deviation_est_ci": (
            float(stats.normal_half_width(held.std(), n)) if n > 1 else math.nan
        ),
        "uniform_deviation_reason": None,
    }
