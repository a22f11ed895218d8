"""Table 1 of docs/theory/bounds.md: the per-loss constants of the certified bounds
(crl.kernels.certified).

For the losses of (A4) in crl's conventions and a = 2R^2: the loss's lower end psi_lo and range B
on the class (Lemma 1.1), its l_inf Lipschitz constant L and omega >= sup ||grad psi||_2^2
(Lemma 1.2), the seed-compatible constant (L0 for hinge and logistic), and the smooth
representation (tau, c, Lip_mu) of section 4.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from crl.kernels import _validate
from crl.kernels.bounds import L0

__all__ = ["LOSSES", "LossConstants", "loss_constants"]

LOSSES = ("hinge", "logistic", "lse", "info_nce")


@dataclass(frozen=True)
class LossConstants:
    """Table 1 of docs/theory/bounds.md for one (loss, m, R, T), a = 2R^2.

    psi_lo, B: the loss lies in [psi_lo, psi_lo + B] on the class (Lemma 1.1); L: the l_inf
    Lipschitz constant sup ||grad psi||_1; L_seed: the constant of the seed-compatible column
    (L0 for hinge and logistic, L otherwise); omega >= sup ||grad psi||_2^2 (Lemma 1.2); tau, c,
    lip_mu: the smooth representation of section 4 (None for hinge).
    """

    loss: str
    m: int
    R: float
    temperature: float
    psi_lo: float
    B: float
    L: float
    L_seed: float
    omega: float
    tau: float | None
    c: float | None
    lip_mu: float | None


def _log1p_m_exp(m: int, a: float) -> float:
    """log(1 + m e^a), without overflow."""
    return float(
        torch.logaddexp(
            torch.tensor(0.0, dtype=torch.float64),
            torch.tensor(math.log(m) + a, dtype=torch.float64),
        )
    )


def loss_constants(loss: str, m: int, R: float, temperature: float) -> LossConstants:
    """The per-loss constants of Table 1 (docs/theory/bounds.md section 1)."""
    _validate.choice("loss", loss, LOSSES)
    m = _validate.at_least("m", m, 1)
    R = _validate.positive("R", R)
    T = _validate.positive("temperature", temperature)
    a = 2.0 * R * R
    ln2 = math.log(2.0)
    if loss == "hinge":
        B = 2.0 * a if a <= 1.0 else 1.0 + a
        return LossConstants(loss, m, R, T, max(0.0, 1.0 - a), B, 1.0, L0, 1.0, None, None, None)
    if loss == "logistic":
        lo = _log1p_m_exp(m, -a) / ln2
        B = (_log1p_m_exp(m, a) - _log1p_m_exp(m, -a)) / ln2
        omega = 1.0 / (ln2**2 * (1.0 + m * math.exp(-a)))
        lip_mu = m * math.exp(R * R) / ((m + 1) * ln2)
        return LossConstants(loss, m, R, T, lo, B, 1.0 / ln2, L0, omega, 1.0, 1.0 / ln2, lip_mu)
    if loss == "lse":
        omega = 1.0 / (1.0 + (m - 1) * math.exp(-a / T))
        lip_mu = T * math.exp(R * R / T)
        return LossConstants(loss, m, R, T, -a, 2.0 * a, 1.0, 1.0, omega, T, T, lip_mu)
    lo = _log1p_m_exp(m, -a / T)
    B = _log1p_m_exp(m, a / T) - lo
    omega = 1.0 / (T * T * (1.0 + m * math.exp(-a / T)))
    lip_mu = m * math.exp(R * R / T) / (m + 1)
    return LossConstants(loss, m, R, T, lo, B, 1.0 / T, 1.0 / T, omega, T, 1.0, lip_mu)
