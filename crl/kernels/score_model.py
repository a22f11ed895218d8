"""The paired score model s(x, y) = x^T M y - y^T B y in a Frobenius ball, and its empirical LSE
risk (Li et al. 2026) with negatives per anchor (scrl) or shared by all anchors (sscrl).

The score is linear in theta = (M, B): s(x, y) = <theta, psi(x, y)> with
psi(x, y) = (x y^T, -y y^T), so the empirical LSE risk, a log-sum-exp of linear functions of
theta, is convex, and {||theta||_F <= R} makes the problem a convex program that `fit` solves to
a gradient-mapping tolerance. The quadratic term is what the Bayes score of a Gaussian pair needs
(log p(y|x)/p(y) has a -y^T B* y part), so the class contains it; a purely bilinear x^T M y does
not. B stays symmetric: it starts at 0 and every gradient in B is a sum of -y y^T terms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from crl.kernels import _validate, losses
from crl.kernels.solver import Solution, SolverSpec, apg, project_ball

__all__ = ["PairedSample", "QuadraticScore", "empirical_risk", "fit", "pair_scores"]


@dataclass(frozen=True)
class QuadraticScore:
    """theta = (M, B). Shape: M (px, py), B (py, py) symmetric."""

    M: torch.Tensor
    B: torch.Tensor

    @property
    def norm(self) -> float:
        """||theta||_F = sqrt(||M||_F^2 + ||B||_F^2)."""
        return float(torch.sqrt((self.M**2).sum() + (self.B**2).sum()))

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """s(x, y), batched. Shape: x (..., px), y (..., py) broadcastable -> (...)."""
        return pair_scores(self.M, self.B, x, y)


@dataclass(frozen=True)
class PairedSample:
    """n positive pairs and m negatives each (own: (n, m, py)) or shared ((m, py)).

    Shape: x (n, px), y (n, py); negatives (n, m, py) or (m, py).
    """

    x: torch.Tensor
    y: torch.Tensor
    negatives: torch.Tensor

    @property
    def shared(self) -> bool:
        return self.negatives.dim() == 2


def pair_scores(M: torch.Tensor, B: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x^T M y - y^T B y. Shape: M (px, py), B (py, py), x (..., px), y (..., py) -> (...)."""
    return ((x @ M) * y).sum(-1) - ((y @ B) * y).sum(-1)


def _negative_scores(M: torch.Tensor, B: torch.Tensor, sample: PairedSample) -> torch.Tensor:
    """s(x_i, y'_ij). Shape: (n, m)."""
    xm = sample.x @ M  # (n, py)
    neg = sample.negatives
    if sample.shared:
        quad = ((neg @ B) * neg).sum(-1)  # (m,)
        return xm @ neg.T - quad[None, :]
    return torch.einsum("iq,ijq->ij", xm, neg) - ((neg @ B) * neg).sum(-1)


def empirical_risk(
    M: torch.Tensor,
    B: torch.Tensor,
    sample: PairedSample,
    temperature: float,
    reduction: str = "mean",
) -> torch.Tensor:
    """Li et al.'s empirical LSE risk (1/n) sum_i T log((1/m) sum_j e^{(s_ij - s_i0)/T}).

    Shape: () for "mean", (n,) for "none".
    """
    pos = pair_scores(M, B, sample.x, sample.y)  # (n,)
    return losses.lse_risk(pos, _negative_scores(M, B, sample), temperature, reduction)


class _LseProblem:
    """The empirical LSE risk of theta = (M, B) on a fixed sample, with its exact gradient.

    Separable form: Lhat = (T/n) sum_i logsumexp_j(s_ij / T) - T log m - (1/n) sum_i s_i0, where
    the last sum is linear in theta: <M, C_M> - <B, C_B> with C_M = (1/n) sum x_i y_i^T and
    C_B = (1/n) sum y_i y_i^T. With w = softmax_j(s_ij / T):
    dM = (1/n) sum_ij w_ij x_i y'_ij^T - C_M,  dB = -(1/n) sum_ij w_ij y'_ij y'_ij^T + C_B.
    Cost per evaluation O(n m py (px + py)) and memory O(n m), with no autograd graph.
    """

    def __init__(self, sample: PairedSample, temperature: float) -> None:
        self.x = sample.x.to(torch.float64)  # (n, px)
        y = sample.y.to(torch.float64)  # (n, py)
        self.neg = sample.negatives.to(torch.float64)  # (n, m, py) or (m, py)
        self.shared = sample.shared
        self.T = _validate.positive("temperature", temperature)
        self.n, self.px, self.py = self.x.shape[0], self.x.shape[1], y.shape[1]
        self.m = self.neg.shape[-2]
        self.c_m = self.x.T @ y / self.n  # (px, py)
        self.c_b = y.T @ y / self.n  # (py, py)

    def split(self, theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return theta[: self.px * self.py].reshape(self.px, self.py), theta[
            self.px * self.py :
        ].reshape(self.py, self.py)

    def _logits(self, M: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        """s_ij / T. Shape: (n, m)."""
        return _negative_scores(M, B, PairedSample(self.x, self.x, self.neg)) / self.T

    def _linear(self, M: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return (M * self.c_m).sum() - (B * self.c_b).sum()

    def value(self, theta: torch.Tensor) -> float:
        M, B = self.split(theta)
        lse = torch.logsumexp(self._logits(M, B), dim=1).mean()
        return float(self.T * (lse - math.log(self.m)) - self._linear(M, B))

    def value_and_grad(self, theta: torch.Tensor) -> tuple[float, torch.Tensor]:
        M, B = self.split(theta)
        logits = self._logits(M, B)  # (n, m)
        lse = torch.logsumexp(logits, dim=1, keepdim=True)  # (n, 1)
        w = torch.exp(logits - lse) / self.n  # (n, m), rows sum to 1/n
        value = float(self.T * (lse.mean() - math.log(self.m)) - self._linear(M, B))
        if self.shared:
            grad_m = self.x.T @ (w @ self.neg)  # (px, py)
            weighted = self.neg * w.sum(0)[:, None]  # (m, py)
            grad_b = -(weighted.T @ self.neg)
        else:
            grad_m = self.x.T @ torch.einsum("ij,ijq->iq", w, self.neg)
            flat = self.neg.reshape(-1, self.py)  # (n m, py)
            grad_b = -((flat * w.reshape(-1, 1)).T @ flat)
        grad = torch.cat([(grad_m - self.c_m).reshape(-1), (grad_b + self.c_b).reshape(-1)])
        return value, grad


def fit(
    sample: PairedSample, radius: float, temperature: float, spec: SolverSpec
) -> tuple[QuadraticScore, Solution]:
    """The minimiser of the empirical LSE risk over ||theta||_F <= radius, from theta = 0, by
    accelerated projected gradient to the spec's tolerance (deterministic: no randomness)."""
    _validate.positive("radius", radius)
    problem = _LseProblem(sample, temperature)
    start = torch.zeros(problem.px * problem.py + problem.py**2, dtype=torch.float64)
    solution = apg(
        problem.value,
        problem.value_and_grad,
        lambda theta: project_ball(theta, radius),
        start,
        spec,
    )
    M, B = problem.split(solution.params)
    return QuadraticScore(M.clone(), B.clone()), solution
