"""Certified bounds for the paired score model s(x, y) = <theta, psi(x, y)>, theta = (M, B) with
||theta||_F <= R and psi(x, y) = (x y^T, -y y^T): the arguments of docs/theory/bounds.md carried
over to a class that is linear in its parameters.

What carries over, and how (docs/theory/bounds.md section numbers):
- (A1) becomes ||x|| <= 1 and ||y|| <= 1 on the support (crl scales both modalities into the unit
  ball), so ||psi(x, y)||_F = sqrt(||x||^2 ||y||^2 + ||y||^4) <= sqrt 2 and |s| <= S := sqrt(2) R.
  Every Table 1 constant depends on the class only through the score range [-S, S] (there
  [-R^2, R^2]), so they are `loss_constants(loss, m, sqrt(S), T)`.
- The Rademacher term: with v_ij = <theta, D_ij>, D_ij = psi(x_i, y'_ij) - psi(x_i, y_i), the
  loss is sqrt(omega)-Lipschitz in v (Lemma 1.2, extended to R^m by T3), so Maurer's vector
  contraction (T2b) and Jensen give
      R_hat_S <= sqrt(2) sqrt(omega) R sqrt(S_D) / n,   S_D = sum_ij ||D_ij||_F^2,
  and T1's S-form: gamma_lin = 2 sqrt(2) sqrt(omega) R sqrt(S_D) / n + 3 B sqrt(ln(4/delta)/(2n)).
  sscrl: the same with the shared negatives repeated per anchor bounds the outer gap L_Y - Lhat
  given the negatives (Thm 4.1), at delta / 2.
- LSE's inner error L(s) - L_m(s) (Thm 5.1) only uses the score range:
  min{2S, T (e^{S/T} - 1)^2 / (2m)}.
What does not carry over: Lemma 3.1 and the bilinear routes of Thms 3.4-3.5 (they use the
factored form f(x)^T f(y) with ||f|| <= R), so gamma_m, gamma_S and gamma_E are not computed for
paired cells; the Gaussian source has unbounded psi, so none of this applies to it.
"""

from __future__ import annotations

import math

import torch

from crl.kernels import _validate
from crl.kernels.certified import Certificate, lse_inner_bound
from crl.kernels.loss_constants import LossConstants, loss_constants

__all__ = [
    "difference_energy",
    "gamma_linear",
    "paired_constants",
    "paired_lse_inner_bound",
    "score_bound",
]

_F64 = torch.float64


def score_bound(radius: float) -> float:
    """S = sup |s(x, y)| = sqrt(2) R for ||x||, ||y|| <= 1 and ||theta||_F <= R."""
    return math.sqrt(2.0) * _validate.positive("radius", radius)


def paired_constants(loss: str, m: int, radius: float, temperature: float) -> LossConstants:
    """Table 1 for the paired class: the factored class's constants at score radius sqrt(S)."""
    return loss_constants(loss, m, math.sqrt(score_bound(radius)), temperature)


def _psi_sq_norm(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """||psi(x, y)||_F^2 = ||x||^2 ||y||^2 + ||y||^4. Shape: (..., p) -> (...)."""
    yy = (y * y).sum(-1)
    return (x * x).sum(-1) * yy + yy * yy


def difference_energy(
    x: torch.Tensor, y: torch.Tensor, negatives: torch.Tensor, chunk: int = 4096
) -> float:
    """S_D = sum_ij ||psi(x_i, y'_ij) - psi(x_i, y_i)||_F^2, in float64 and in chunks of anchors.

    ||psi(x, a) - psi(x, b)||^2 = ||x||^2 ||a - b||^2 + ||a a^T - b b^T||_F^2 with
    ||a a^T - b b^T||_F^2 = ||a||^4 + ||b||^4 - 2 (a^T b)^2.
    Shape: x (n, px), y (n, py), negatives (n, m, py) own or (m, py) shared (repeated per anchor).
    """
    total = 0.0
    for start in range(0, x.shape[0], chunk):
        xs = x[start : start + chunk].to(_F64)  # (c, px)
        ys = y[start : start + chunk].to(_F64)  # (c, py)
        neg = negatives.to(_F64)
        neg = neg[None] if neg.dim() == 2 else neg[start : start + chunk]  # (1 or c, m, py)
        diff = neg - ys[:, None, :]  # (c, m, py)
        bilinear = (xs * xs).sum(-1)[:, None] * (diff * diff).sum(-1)  # (c, m)
        a4 = ((neg * neg).sum(-1)) ** 2  # (1 or c, m)
        b4 = ((ys * ys).sum(-1)) ** 2  # (c,)
        ab = (neg * ys[:, None, :]).sum(-1)  # (c, m)
        quadratic = a4 + b4[:, None] - 2.0 * ab * ab
        total += float((bilinear + quadratic).sum())
    return total


def gamma_linear(
    energy: float, n: int, constants: LossConstants, radius: float, delta: float
) -> Certificate:
    """2 sqrt(2) sqrt(omega) R sqrt(S_D) / n + 3 B sqrt(ln(4/delta) / (2n)) (module docstring)."""
    n = _validate.at_least("n", n, 1)
    energy = _validate.nonnegative("energy", energy)
    radius = _validate.positive("radius", radius)
    delta = _validate.open_unit("delta", delta)
    complexity = 2.0 * math.sqrt(2.0 * constants.omega) * radius * math.sqrt(energy) / n
    concentration = 3.0 * constants.B * math.sqrt(math.log(4.0 / delta) / (2.0 * n))
    return Certificate(complexity + concentration, complexity, concentration, "Vlin")


def paired_lse_inner_bound(m: int, radius: float, temperature: float) -> float:
    """Thm 5.1 for the paired class: min{2S, T (e^{S/T} - 1)^2 / (2m)}, S = sqrt(2) R."""
    return lse_inner_bound(m, math.sqrt(score_bound(radius)), temperature)
