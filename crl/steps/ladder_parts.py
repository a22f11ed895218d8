"""What a family hands the certificate ladder's rungs (crl.steps.ladder): a loss's range
(`Scale`), the cell's setting (`Setting`), one PAC-Bayes rung's result (`Certificate`), the
draws of Gibbs heads on its i.i.d. units (`Draws`, `draws_on`), the held-out Gibbs losses
(`HeldOut`), differentiable losses on units (`Units`), and the data-dependent prior with its
fit (`Prior`, `FitPrior`, `prior_count`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from crl.core.ladder_config import PacBayesConfig
from crl.kernels import certificates, pac_bayes


@dataclass(frozen=True)
class Scale:
    """A loss's range: values in [low, low + width] map to [0, 1]."""

    low: float
    width: float

    @classmethod
    def of(cls, low: float, width: float) -> Scale | None:
        """The range [low, low + width], or None where the loss has no finite, positive one."""
        return cls(low, width) if math.isfinite(width) and width > 0 else None

    def to_unit(self, value: float) -> float:
        return certificates.scaled(value, self.low, self.width)

    def back(self, value: float) -> float:
        return certificates.unscaled(value, self.low, self.width)


@dataclass(frozen=True)
class Setting:
    """What a cell's rungs share: the ball's radius R, the ladder's section, the level delta and
    the loss's range."""

    radius: float
    ladder: PacBayesConfig
    delta: float
    scale: Scale


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
    prior_sigma: float
    draws: torch.Tensor  # (mc_draws,) the Monte Carlo draws' losses, in [0, 1]
    rows: torch.Tensor  # (mc_draws,) each draw's unit


# (mean (d, p), sigma, count, generator) -> the losses of `count` i.i.d. draws of a Gibbs head
# scored on a uniformly drawn training unit, (count,) in the loss's units, and each draw's unit
# (count,) (its index among the units the draws are on)
Draws = Callable[[torch.Tensor, float, int, torch.Generator], tuple[torch.Tensor, torch.Tensor]]
# (mean (d, p), sigma) -> each held-out unit's loss averaged over fresh Gibbs heads, (N,)
HeldOut = Callable[[torch.Tensor, float], torch.Tensor]


def draws_on(terms: pac_bayes.Terms, units: int, chunk: int, radius: float) -> Draws:
    """The draws of a family whose `units` i.i.d. units are scored by `terms` (a head on a unit,
    `chunk` draws at a time): crl.kernels.pac_bayes.unit_draws at the ball's radius."""

    def draws(
        mean: torch.Tensor, sigma: float, count: int, gen: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return pac_bayes.unit_draws(mean, sigma, radius, units, count, terms, chunk, gen)

    return draws


@dataclass(frozen=True)
class Units:
    """Differentiable losses on (a part of) the units a bound uses, for the posterior's
    optimisation: `terms` scores head k on unit rows[k] of `count` units."""

    terms: pac_bayes.Terms
    count: int


@dataclass(frozen=True)
class Prior:
    """The data-dependent prior's mean, fitted on a prefix of the training units, the draws on
    the other `n` units its bound uses and the prior mean's own losses on them (`reference`,
    (n,) in the loss's units, in the order the draws index them); `units`: those units for the
    posterior's optimisation, or None."""

    mean: torch.Tensor  # (d, p)
    draws: Draws
    n: int
    reference: torch.Tensor
    units: Units | None = None


# (units, cap) -> the data-dependent prior fitted on the first prior_count(units) of the first
# `units` training units (in their order), at most `cap` iterations (None: the head's own cap),
# its bound on the rest of those `units`
FitPrior = Callable[[int, int | None], Prior]


def prior_count(units: int, fraction: float) -> int:
    """How many of `units` training units fit the data-dependent prior: the nearest integer to
    fraction * units, at least 1 and at most units - 1."""
    return min(units - 1, max(1, round(fraction * units)))
