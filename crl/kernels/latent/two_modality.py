"""Li et al. 2026's two-modality Gaussian (docs/theory/statements.md section B): a pair (X, Y)
whose optimal score, minimal LSE risk and AUC have closed forms or direct estimators.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from crl.kernels import _validate
from crl.kernels.losses import lse_risk
from crl.kernels.metrics import retrieval_auc
from crl.kernels.stats import mean_ci

ScoreFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
_F64 = torch.float64


@dataclass(frozen=True)
class Estimate:
    """Monte Carlo estimate and its 95% CI half-width."""

    value: float
    ci: float


@dataclass(frozen=True, eq=False)
class TwoModalityGaussian:
    """X ~ N(0, I_Dx); Y | X = x ~ p+_x = N(A x, s^2 I_Dy); negatives Y' ~ p- = N(0, A A^T + s^2 I).

    p- is the marginal law of Y (Li et al., section B, with p-_x = p- for every x).

    Shape: transform A (Dy, Dx); noise s > 0 a scalar std.
    """

    transform: torch.Tensor
    noise: float

    def __post_init__(self) -> None:
        transform = _validate.tensor("transform", self.transform).to(_F64)
        _validate.shape("transform", transform, "(Dy, Dx)", transform.ndim == 2)
        object.__setattr__(self, "transform", transform)
        object.__setattr__(self, "noise", _validate.positive("noise", self.noise))

    @property
    def marginal_cov(self) -> torch.Tensor:
        """Sigma = A A^T + s^2 I, the covariance of p-.  Shape: (Dy, Dy)."""
        a = self.transform
        return a @ a.T + self.noise**2 * torch.eye(len(a), dtype=_F64)

    @property
    def mutual_information(self) -> float:
        """I(X; Y) = h(Y) - h(Y | X) = 1/2 log det(A A^T + s^2 I) - Dy log s (nats)."""
        dy = len(self.transform)
        return (0.5 * torch.logdet(self.marginal_cov) - dy * math.log(self.noise)).item()

    def sample_pairs(self, n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """n iid (x, y) ~ p+.  Shape: x (n, Dx), y (n, Dy)."""
        _validate.at_least("n", n, 1)
        gen = _validate.generator(generator)
        dy, dx = self.transform.shape
        x = torch.randn(n, dx, dtype=_F64, generator=gen)
        y = x @ self.transform.T + self.noise * torch.randn(n, dy, dtype=_F64, generator=gen)
        return x, y

    def sample_negatives(self, n: int, m: int, generator: torch.Generator) -> torch.Tensor:
        """n x m iid y' ~ p- (as A x' + s eps with fresh x').  Shape: (n, m, Dy)."""
        _validate.at_least("m", m, 1)
        return self.sample_pairs(n * m, generator)[1].reshape(n, m, -1)

    def optimal_score(self, x: torch.Tensor, y: torch.Tensor, temperature: float) -> torch.Tensor:
        """s*(x, y) = T log(p+_x(y) / p-(y)) (Li et al. Fisher consistency, g = 0):
        T [ -||y - A x||^2 / (2 s^2) - Dy log s + 1/2 y^T Sigma^{-1} y + 1/2 log det Sigma ].

        Shape: x (..., Dx), y (..., Dy) broadcastable -> (...) float64.
        """
        _validate.positive("temperature", temperature)
        x, y = x.to(_F64), y.to(_F64)
        cov = self.marginal_cov
        precision = torch.cholesky_inverse(torch.linalg.cholesky(cov))  # Dy x Dy
        resid = y - x @ self.transform.T  # ... x Dy
        log_pos = -0.5 * resid.square().sum(-1) / self.noise**2 - len(cov) * math.log(self.noise)
        log_neg = -0.5 * torch.einsum("...i,ij,...j->...", y, precision, y)
        log_neg = log_neg - 0.5 * torch.logdet(cov)
        return temperature * (log_pos - log_neg)

    def optimal_lse(self, temperature: float) -> float:
        """L* = min_s L(s) = L(s*) = -T I(X; Y).

        For s*, E_{y'~p-} exp((s*(x, y') - s*(x, y)) / T) = E_{p-}[p+/p-] / r(x, y) = 1 / r(x, y)
        with r = p+_x / p-, so L* = -T E_{p+} log r = -T I(X; Y) (Donsker-Varadhan: minimal).
        """
        _validate.positive("temperature", temperature)
        return -temperature * self.mutual_information

    def _scores(
        self, score_fn: ScoreFn, n: int, m: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Positive scores s(x, y) and negative scores s(x, y'_j).  Shape: (n,), (n, m)."""
        x, y = self.sample_pairs(n, generator)
        y_neg = self.sample_negatives(n, m, generator)  # n x m x Dy
        pos = score_fn(x, y).to(_F64)  # n
        neg = score_fn(x[:, None, :].expand(n, m, x.shape[1]), y_neg).to(_F64)
        _validate.shape("score_fn(x, y)", pos, f"({n},)", pos.shape == (n,))
        _validate.shape("score_fn(x, y')", neg, f"({n}, {m})", neg.shape == (n, m))
        return pos, neg

    def population_lse(
        self,
        score_fn: ScoreFn,
        temperature: float,
        samples: int,
        negatives: int,
        generator: torch.Generator,
    ) -> Estimate:
        """Monte Carlo L(s) = E_{(x,y)} T log E_{y'~p-} exp((s(x, y') - s(x, y)) / T).

        Per anchor, T (logsumexp_j (Delta_j / T) - log m) over m = `negatives` fresh y'; the CI
        is over the `samples` anchors. The inner log of an average is biased low by
        about T Var(Z) / (2 m E[Z]^2), Z = exp(Delta / T): O(1 / negatives), not in the CI.
        `score_fn` maps x (..., Dx), y (..., Dy) of equal leading shape to scores (...).
        """
        _validate.positive("temperature", temperature)
        pos, neg = self._scores(score_fn, samples, negatives, generator)
        return Estimate(*mean_ci(lse_risk(pos, neg, temperature, reduction="none")))

    def population_auc(
        self, score_fn: ScoreFn, samples: int, generator: torch.Generator
    ) -> Estimate:
        """Monte Carlo E(s) = P[s(x, y) > s(x, y')] + 1/2 P[s(x, y) = s(x, y')], one y' ~ p-
        per anchor, over `samples` iid anchors.
        """
        pos, neg = self._scores(score_fn, samples, 1, generator)
        return Estimate(*mean_ci(retrieval_auc(pos, neg, reduction="none")))
