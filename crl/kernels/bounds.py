"""Closed-form bound terms (docs/theory/statements.md sections A and B).

Section A (Saunshi et al. 2019): loss oscillation B_{l,R}, the generalization gap
Gamma_M(S, delta), Lemma 5.1's gamma, the class-collision term s(f) and the transfer to the mean
classifier. Section B (Li et al. 2026): the calibration inequality. Rate fits and m*(n) live in
crl.kernels.rates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from crl.kernels import _validate
from crl.kernels.losses import BINARY_LOSSES

__all__ = [
    "L0",
    "Gamma",
    "c0",
    "calibration_rhs",
    "collision_term",
    "collision_upper",
    "lemma51_gamma",
    "oscillation",
    "saunshi_gamma",
    "transfer",
]

L0 = 1.0 + 1.0 / math.log(2.0)  # common Lipschitz constant of the hinge and logistic losses
c0 = math.sqrt(2.0) * L0  # collision constant of Saunshi et al. Lemma 4.4


@dataclass(frozen=True)
class Gamma:
    """Gamma_M(S, delta) = rademacher_term + concentration_term (docs/theory/statements.md A,
    the seed theorem)."""

    value: float
    rademacher_term: float
    concentration_term: float


def oscillation(loss: str, R: float) -> float:
    """B_{l,R} = l(2R^2) - l(-2R^2), the range of the loss on scores |q| <= 2R^2.

    In closed form, free of cancellation for small R: hinge 4R^2 if 2R^2 <= 1 else 1 + 2R^2;
    logistic 2R^2 / ln 2, since log(1 + e^a) - log(1 + e^-a) = a. Both satisfy 0 < B <= 4 L0 R^2.
    """
    _validate.choice("loss", loss, BINARY_LOSSES)
    a = 2.0 * _validate.positive("R", R) ** 2
    if loss == "hinge":
        return 2.0 * a if a <= 1.0 else 1.0 + a
    return a / math.log(2.0)


def saunshi_gamma(rademacher: float, n: int, R: float, delta: float, loss: str) -> Gamma:
    """Gamma_M(S, delta) = 2 sqrt(18) L0 R R_S / M + 3 B_{l,R} sqrt(ln(4/delta) / (2M)).

    `rademacher` is the unnormalised one-sided R_S(F) of the sample, `n` = M triplets.
    """
    rademacher = _validate.nonnegative("rademacher", rademacher)
    n = _validate.at_least("n", n, 1)
    R = _validate.positive("R", R)
    delta = _validate.open_unit("delta", delta)
    rademacher_term = 2.0 * math.sqrt(18.0) * L0 * R * rademacher / n
    concentration_term = 3.0 * oscillation(loss, R) * math.sqrt(math.log(4.0 / delta) / (2.0 * n))
    return Gamma(rademacher_term + concentration_term, rademacher_term, concentration_term)


def lemma51_gamma(R: float, sigma: float, eps: float) -> float:
    """Saunshi et al. Lemma 5.1: 1 + 2 R sigma sqrt(2 ln R + ln(3/eps)) if R >= 1, else
    1 + 2 R sigma sqrt(ln(3/eps)); sigma^2 the sub-Gaussian proxy, 0 < eps <= 1."""
    R = _validate.positive("R", R)
    sigma = _validate.nonnegative("sigma", sigma)
    if not (isinstance(eps, (int, float)) and 0 < eps <= 1):
        raise ValueError(f"eps={eps!r}: expected a number in (0, 1]")
    log_term = math.log(3.0 / eps) + (2.0 * math.log(R) if R >= 1 else 0.0)
    return 1.0 + 2.0 * R * sigma * math.sqrt(log_term)


def collision_term(op_norms: torch.Tensor, mean_norms: torch.Tensor, nu: torch.Tensor) -> float:
    """s(f) = sum_c nu_c sqrt(||Sigma_f(c)||_op) E_{D_c} ||f(X)|| (Saunshi et al. Lemma 4.4).

    Shape: op_norms (C,) = ||Sigma_f(c)||_op >= 0; mean_norms (C,) = E ||f(X)|| >= 0;
    nu (C,) the collision law rho(c)^2 / tau, summing to 1. Summed in float64.
    """
    op_norms = _validate.tensor("op_norms", op_norms)
    _validate.shape("op_norms", op_norms, "(C,), C >= 1", op_norms.dim() == 1 and op_norms.numel())
    for name, value in (("op_norms", op_norms), ("mean_norms", mean_norms), ("nu", nu)):
        value = _validate.tensor(name, value)
        _validate.shape(name, value, f"{tuple(op_norms.shape)}", value.shape == op_norms.shape)
        if not bool(torch.isfinite(value).all() and (value >= 0).all()):
            raise ValueError(f"{name}={value.tolist()!r}: expected finite entries >= 0")
    total = float(nu.to(torch.float64).sum())
    if abs(total - 1.0) > 1e-6:
        raise ValueError(f"nu sums to {total!r}: expected a probability vector summing to 1")
    terms = op_norms.to(torch.float64).sqrt() * mean_norms.to(torch.float64)  # (C,)
    return float((nu.to(torch.float64) * terms).sum())


def collision_upper(s: float, constant: float = c0) -> float:
    """Upper bound 1 + c0 s(f) on L_un^=(f) (Saunshi et al. Lemma 4.4; docs/theory/statements.md
    S5).

    `constant` is c0 unless a check substitutes a wrong one to show that it can fail.
    """
    return 1.0 + _validate.nonnegative("constant", constant) * _validate.nonnegative("s", s)


def transfer(L_un: float, tau: float) -> float:
    """(L_un - tau) / (1 - tau) >= L_sup^mu (Saunshi et al. Thm 4.1 form, since L_un^= >= 1)."""
    L_un = _validate.finite("L_un", L_un)
    if not (isinstance(tau, (int, float)) and 0 <= tau < 1):
        raise ValueError(f"tau={tau!r}: expected a number in [0, 1)")
    return (L_un - tau) / (1.0 - tau)


def calibration_rhs(
    L_s: float, L_star: float, temperature: float, factor: float = 2.0, clip: bool = False
) -> float:
    """sqrt((factor/T)(L(s) - L*)), factor = 2: the bound on E* - E(s) of Li et al. Thm 3.4.

    L(s) < L* is an error (L* is the minimum) unless `clip`, for estimates of both, where the
    excess is clipped at 0. `factor` is 2 unless a check substitutes a wrong one.
    """
    L_s = _validate.finite("L_s", L_s)
    L_star = _validate.finite("L_star", L_star)
    temperature = _validate.positive("temperature", temperature)
    factor = _validate.nonnegative("factor", factor)
    if L_s < L_star and not clip:
        raise ValueError(f"L_s={L_s!r}: expected L_s >= L_star={L_star!r} (L* is the minimum)")
    return math.sqrt(factor / temperature * max(L_s - L_star, 0.0))
