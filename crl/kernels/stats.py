"""Confidence intervals used across crl: normal and Student-t half-widths, Wilson's upper end.

One home for every z-value: a cell's held-out loss, the Monte Carlo R_S(F), the population Monte
Carlo of the latent models and the checks' tolerances all call these.
"""

from __future__ import annotations

import math

import torch

from crl.kernels import _validate

__all__ = ["mean_ci", "mean_ci_rows", "normal_half_width", "t_quantile", "wilson_upper", "z_value"]


def z_value(confidence: float = 0.95) -> float:
    """Two-sided normal quantile Phi^{-1}((1 + confidence) / 2); 1.959964 at 0.95.

    scipy's ndtri is correctly rounded here (1.959963984540054 at 0.95); statistics.NormalDist
    is one ulp low (1.9599639845400536).
    """
    _validate.open_unit("confidence", confidence)
    from scipy.special import ndtri

    return float(ndtri((1.0 + confidence) / 2.0))


def t_quantile(confidence: float, dof: int) -> float:
    """Two-sided Student-t quantile with `dof` degrees of freedom (nan for dof < 1)."""
    _validate.open_unit("confidence", confidence)
    if dof < 1:
        return math.nan
    from scipy import stats

    return float(stats.t.ppf((1.0 + confidence) / 2.0, dof))


def normal_half_width(
    std: float | torch.Tensor, count: int, confidence: float = 0.95
) -> float | torch.Tensor:
    """z * std / sqrt(count): the half-width of the normal CI for a mean of `count` iid values.

    `std` may be a tensor (the result is then a tensor of its shape).
    """
    return z_value(confidence) * std / math.sqrt(count)


def mean_ci_rows(
    values: torch.Tensor, confidence: float = 0.95
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean over dim 0 and normal-approximation CI half-width z * std / sqrt(n).

    z = Phi^{-1}((1 + confidence) / 2) (1.96 at 0.95); std with Bessel's correction; float64.

    Shape:
        values: (n, *rest) with n >= 2 -> mean: rest, half_width: rest.
    """
    _validate.tensor("values", values)
    _validate.shape("values", values, "(n, ...) with n >= 2", values.ndim >= 1 and len(values) > 1)
    z = z_value(confidence)
    values = values.to(torch.float64)
    return values.mean(0), z * values.std(0) / math.sqrt(len(values))


def mean_ci(values: torch.Tensor, confidence: float = 0.95) -> tuple[float, float]:
    """(mean, half-width) of a normal-approximation CI for the mean of iid `values`.

    Shape:
        values: (n,) with n >= 2.
    """
    _validate.tensor("values", values)
    _validate.shape("values", values, "(n,) with n >= 2", values.ndim == 1 and len(values) > 1)
    mean, half = mean_ci_rows(values, confidence)
    return mean.item(), half.item()


def wilson_upper(successes: int, trials: int, z: float) -> float:
    """Upper end of the Wilson score interval for a binomial proportion."""
    p = successes / trials
    centre = p + z * z / (2 * trials)
    spread = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials))
    return min(1.0, (centre + spread) / (1 + z * z / trials))


def within(gap: float | None, low: float, high: float) -> bool | None:
    """Whether a gap lies in its certified interval: -low <= gap <= high; None when the gap is
    unknown (None or not finite)."""
    if gap is None or not math.isfinite(gap):
        return None
    return bool(-low <= gap <= high)


def paired_difference(
    a: torch.Tensor, b: torch.Tensor, confidence: float = 0.95
) -> tuple[float, float]:
    """The mean of a - b over paired observations and its normal half-width (NaN below two).

    Shape: a, b (n,). The pairing (the same held-out tuples under two predictors) removes the
    variance the two share; reduced in float64."""
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(
            f"paired_difference: a {tuple(a.shape)} and b {tuple(b.shape)}: "
            "expected two (n,) tensors"
        )
    diff = a.double() - b.double()
    n = diff.shape[0]
    if n < 2:
        return float(diff.mean()) if n else math.nan, math.nan
    return float(diff.mean()), float(normal_half_width(diff.std(), n, confidence))
