"""The shared queue of docs/theory/dense-bounds.md section 5: every image contrasts against one
queue Y of m negatives, so the gap splits into an outer error given Y (Thm D6: the D4/D5 bounds
at delta/2 with the queue repeated in every image) and an inner error of sharing Y (Thm D7 at
delta/2); Corollary D7.1 adds them; Prop. D8 shows the inner error cannot be certified smaller.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from crl.kernels import _validate
from crl.kernels.certified import Certificate, smooth_bias
from crl.kernels.dense.bounds import DenseStats, gamma_dense_E, gamma_dense_S

__all__ = [
    "InnerBound",
    "QueueBound",
    "queue_bound",
    "queue_inner",
    "queue_inner_lower",
    "queue_outer_E",
    "queue_outer_S",
]


def queue_outer_S(
    stats: DenseStats, d: int, delta: float, negatives_range: tuple[int, int]
) -> Certificate:
    """Thm D6, data-dependent: gamma_dense_S at delta / 2, the stats built with the queue passed
    as every image's negatives; bounds sup_W |L_hat - L_Y| for the fixed queue Y."""
    return gamma_dense_S(stats, d, _validate.open_unit("delta", delta) / 2, negatives_range)


def queue_outer_E(
    n: int,
    k: int,
    m: int,
    p: int,
    d: int,
    R: float,
    T: float,
    delta: float,
    regime: str,
    full: bool = False,
) -> Certificate:
    """Thm D6, data-free: gamma_dense_E at delta / 2."""
    delta = _validate.open_unit("delta", delta)
    return gamma_dense_E(n, k, m, p, d, R, T, delta / 2, regime, full)


@dataclass(frozen=True)
class InnerBound:
    """Thm D7 at delta2: value = lip_mu * delta_m + bias (|L_Y - L_m| <= value, one side
    without the bias)."""

    value: float
    lip_mu: float
    delta_m: float
    bias: float
    delta2: float


def queue_inner(m: int, R: float, T: float, delta: float, n_in_min: int = 0) -> InnerBound:
    """Thm D7 at delta2 = delta / 2 (Corollary D7.1): Lip_mu = m e^{R^2/T} / (m + 1 + N_in,min),
    Delta_m = 2 R^2 e^{R^2/T} / (T sqrt m) + (e^{R^2/T} - e^{-R^2/T}) sqrt(ln(2/delta2) / (2m)),
    bias_m = min{2R^2/T, (e^{R^2/T} - 1)^2 / (2m)}. n_in_min: 0 for "ext", K - P_max for "own"."""
    m, n_in = _validate.at_least("m", m, 1), _validate.at_least("n_in_min", n_in_min, 0)
    R, T = _validate.positive("R", R), _validate.positive("T", T)
    delta2 = _validate.open_unit("delta", delta) / 2
    e = math.exp(R * R / T)
    lip = m * e / (m + 1 + n_in)
    spread = 2 * R * R * e / (T * math.sqrt(m))
    dm = spread + (e - 1 / e) * math.sqrt(math.log(2 / delta2) / (2 * m))
    bias = smooth_bias(1.0, T, R, m)  # Thm 5.2 with c = 1, tau = T
    return InnerBound(lip * dm + bias, lip, dm, bias, delta2)


@dataclass(frozen=True)
class QueueBound:
    """Corollary D7.1: |L_hat - L_m| <= outer(delta/2) + inner(delta/2), for all W."""

    value: float
    outer: Certificate
    inner: InnerBound


def queue_bound(outer: Certificate, inner: InnerBound) -> QueueBound:
    return QueueBound(outer.value + inner.value, outer, inner)


def queue_inner_lower(m: int, R: float, T: float) -> float:
    """Prop. D8: a law and a W with L_m - L_Y >= (1 - (1 - 1/m)^m) log(1 + (e^{2R^2/T} - 1)/(m+1))
    with probability >= (1 - 1/m)^m over the queue: no certified inner bound can be smaller."""
    m = _validate.at_least("m", m, 2)
    R, T = _validate.positive("R", R), _validate.positive("T", T)
    return -math.expm1(m * math.log1p(-1 / m)) * math.log1p(math.expm1(2 * R * R / T) / (m + 1))
