"""Rate shapes in m (negatives per anchor) and n (anchors), fitted to measured gaps by least
squares (the critical number of negatives m*(n) is crl.kernels.saturation).

Rate shapes, each `c + sum of slope * basis(m, n)` with slopes >= 0:
    scrl       c + a / m + b / sqrt(n)             Li et al., SCRL: O(1/m + sqrt(log(1/delta)/n))
    sscrl      c + a / sqrt(m) + b / sqrt(n)       Li et al., SSCRL: O~(1/sqrt(m) + 1/sqrt(n))
    lei        c + a log(m + 1) / sqrt(n)          Lei et al. 2023, O(log(m)/sqrt(n))
    saunshi_k  c + a m / sqrt(n)                   Saunshi et al. Sec. 6, k = m negatives
`lei` uses log(m + 1): smooth, positive at m = 1 and ~ log m for large m, where log(max(m, 2))
would put a kink at m = 2 and log m would make the basis vanish at m = 1.

numpy and scipy only: aggregation imports this without torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import stats
from scipy.optimize import least_squares, nnls

__all__ = [
    "RATE_SHAPES",
    "PowerFit",
    "RateFit",
    "LogLogSlopes",
    "fit_loglog_slopes",
    "fit_power",
    "fit_rate",
    "rate_basis",
    "rate_curve",
]

_Basis = Callable[[np.ndarray, np.ndarray], np.ndarray]
RATE_SHAPES: dict[str, tuple[tuple[str, _Basis], ...]] = {
    "scrl": (("a", lambda m, n: 1.0 / m), ("b", lambda m, n: 1.0 / np.sqrt(n))),
    "sscrl": (("a", lambda m, n: 1.0 / np.sqrt(m)), ("b", lambda m, n: 1.0 / np.sqrt(n))),
    "lei": (("a", lambda m, n: np.log(m + 1.0) / np.sqrt(n)),),
    "saunshi_k": (("a", lambda m, n: m / np.sqrt(n)),),
}


@dataclass(frozen=True)
class RateFit:
    """Least-squares fit of one rate shape: coefs by name ("c" intercept, slopes "a", "b")."""

    shape: str
    coefs: dict[str, float]
    rss: float
    r2: float
    rmse: float
    n_points: int


@dataclass(frozen=True)
class PowerFit:
    """Fit of gap = c + a m^-alpha + b n^-beta; coefs has "c", "a", "b"."""

    alpha: float
    beta: float
    coefs: dict[str, float]
    rss: float
    r2: float
    rmse: float
    n_points: int


def _shape(shape: str) -> tuple[tuple[str, _Basis], ...]:
    if shape not in RATE_SHAPES:
        raise ValueError(f"shape={shape!r}: expected one of {tuple(RATE_SHAPES)}")
    return RATE_SHAPES[shape]


def _grid(m: object, n: object) -> tuple[np.ndarray, np.ndarray]:
    """m, n as matching 1-D float64 arrays with m >= 1 and n >= 1."""
    arrays = []
    for name, value in (("m", m), ("n", n)):
        array = np.atleast_1d(np.asarray(value, dtype=np.float64))
        if array.ndim != 1 or not np.all(np.isfinite(array)) or not np.all(array >= 1):
            raise ValueError(f"{name}={value!r}: expected a 1-D array of finite values >= 1")
        arrays.append(array)
    if arrays[0].shape != arrays[1].shape:
        raise ValueError(f"m has shape {arrays[0].shape} and n {arrays[1].shape}: expected equal")
    return arrays[0], arrays[1]


def _points(m: object, n: object, gap: object, parameters: int) -> tuple[np.ndarray, ...]:
    m_, n_ = _grid(m, n)
    y = np.atleast_1d(np.asarray(gap, dtype=np.float64))
    if y.shape != m_.shape or not np.all(np.isfinite(y)):
        raise ValueError(f"gap has shape {y.shape}: expected finite values of shape {m_.shape}")
    if y.size < parameters:
        raise ValueError(f"gap has {y.size} points: expected at least {parameters}")
    return m_, n_, y


def _r2(y: np.ndarray, rss: float) -> float:
    """1 - rss / tss; NaN when the gaps are all equal (tss = 0)."""
    tss = float(np.sum((y - y.mean()) ** 2))
    return 1.0 - rss / tss if tss > 0 else math.nan


def rate_basis(shape: str, m: object, n: object) -> np.ndarray:
    """Columns [1, basis_1(m, n), ...] of a rate shape (module docstring).

    Shape: m, n (N,) with m, n >= 1; returns (N, P) float64, P = 1 + number of slopes.
    """
    basis = _shape(shape)
    m_, n_ = _grid(m, n)
    columns = [np.ones_like(m_)] + [f(m_, n_) for _, f in basis]
    return np.stack(columns, axis=1)


def rate_curve(shape: str, coefs: dict[str, float], m: object, n: object) -> np.ndarray:
    """c + sum_k coefs[k] basis_k(m, n). Shape: m, n (N,); returns (N,) float64."""
    names = ("c",) + tuple(name for name, _ in _shape(shape))
    if set(coefs) != set(names):
        raise ValueError(f"coefs has keys {sorted(coefs)}: expected {sorted(names)}")
    weights = np.array([float(coefs[name]) for name in names], dtype=np.float64)
    return rate_basis(shape, m, n) @ weights


def fit_rate(shape: str, m: object, n: object, gap: object) -> RateFit:
    """Least squares gap ~ rate shape, intercept free, slopes >= 0.

    Centering removes the intercept exactly (c = mean(y) - mean(X) a), and scipy's nnls solves
    the centred problem min ||X_c a - y_c|| s.t. a >= 0. Shape: m, n, gap (N,).
    """
    names = tuple(name for name, _ in _shape(shape))
    m_, n_, y = _points(m, n, gap, 1 + len(names))
    X = rate_basis(shape, m_, n_)[:, 1:]  # (N, slopes)
    X_mean, y_mean = X.mean(axis=0), y.mean()
    slopes, _ = nnls(X - X_mean, y - y_mean)
    intercept = float(y_mean - X_mean @ slopes)
    rss = float(np.sum((y - intercept - X @ slopes) ** 2))
    coefs = {"c": intercept} | {name: float(s) for name, s in zip(names, slopes, strict=True)}
    return RateFit(shape, coefs, rss, _r2(y, rss), math.sqrt(rss / y.size), int(y.size))


def _two_slope_nnls(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """min ||c + X s - y|| over c free and s >= 0, for a batch of two-column designs.

    Shape: X (G, N, 2), y (N,) -> slopes (G, 2), rss (G,). The active-set solutions of a
    two-variable NNLS are enumerated exactly: both slopes free, one slope zero, both zero.
    """
    Xc = X - X.mean(axis=1, keepdims=True)
    yc = y - y.mean()
    g11, g22 = (Xc[..., 0] ** 2).sum(1), (Xc[..., 1] ** 2).sum(1)
    g12 = (Xc[..., 0] * Xc[..., 1]).sum(1)
    r1, r2 = (Xc[..., 0] * yc).sum(1), (Xc[..., 1] * yc).sum(1)
    det = g11 * g22 - g12**2
    with np.errstate(divide="ignore", invalid="ignore"):
        both = np.stack([(g22 * r1 - g12 * r2) / det, (g11 * r2 - g12 * r1) / det], axis=1)
        only_a = np.stack([np.maximum(r1 / g11, 0.0), np.zeros_like(r1)], axis=1)
        only_b = np.stack([np.zeros_like(r2), np.maximum(r2 / g22, 0.0)], axis=1)
    candidates = [only_a, only_b, np.zeros_like(both)]
    feasible = np.all(both >= 0, axis=1) & np.isfinite(det) & (det > 1e-300)
    candidates.append(np.where(feasible[:, None], both, 0.0))
    best_rss, best = None, None
    for slopes in candidates:
        slopes = np.nan_to_num(slopes)
        resid = yc[None] - np.einsum("gnk,gk->gn", Xc, slopes)
        rss = (resid**2).sum(1)
        if best is None:
            best_rss, best = rss, slopes
        else:
            better = rss < best_rss
            best_rss = np.where(better, rss, best_rss)
            best = np.where(better[:, None], slopes, best)
    return best, best_rss


_EXPONENT_GRID = np.linspace(0.0, 4.0, 81)


def fit_power(m: object, n: object, gap: object) -> PowerFit:
    """Fit gap ~ c + a m^-alpha + b n^-beta with a, b >= 0 and 0 <= alpha, beta <= 4.

    Variable projection: for fixed exponents the model is linear in (c, a, b), solved exactly
    (c free, a, b >= 0) on an 81 x 81 grid of (alpha, beta); the best grid point then seeds
    one bounded scipy least_squares refinement of all five parameters, kept only if it lowers
    the residual. Deterministic. Shape: m, n, gap (N,).
    """
    m_, n_, y = _points(m, n, gap, 5)
    alphas, betas = np.meshgrid(_EXPONENT_GRID, _EXPONENT_GRID, indexing="ij")
    alphas, betas = alphas.ravel(), betas.ravel()
    X = np.stack([m_[None] ** -alphas[:, None], n_[None] ** -betas[:, None]], axis=2)
    slopes, rss = _two_slope_nnls(X, y)
    k = int(np.argmin(rss))
    a0, b0 = slopes[k]
    c0_ = float(y.mean() - X[k].mean(axis=0) @ slopes[k])
    start = np.array([c0_, a0, alphas[k], b0, betas[k]])

    def residuals(x: np.ndarray) -> np.ndarray:
        c, a, alpha, b, beta = x
        return c + a * m_**-alpha + b * n_**-beta - y

    lower = [-np.inf, 0.0, 0.0, 0.0, 0.0]
    upper = [np.inf, np.inf, 4.0, np.inf, 4.0]
    best = start
    refined = least_squares(residuals, start, bounds=(lower, upper), method="trf", max_nfev=200)
    if np.sum(residuals(refined.x) ** 2) < np.sum(residuals(start) ** 2):
        best = refined.x
    c, a, alpha, b, beta = (float(v) for v in best)
    rss_best = float(np.sum(residuals(best) ** 2))
    coefs = {"c": c, "a": a, "b": b}
    return PowerFit(
        alpha, beta, coefs, rss_best, _r2(y, rss_best), math.sqrt(rss_best / y.size), int(y.size)
    )


@dataclass(frozen=True)
class LogLogSlopes:
    """log y = c + slope_m log m + slope_n log n by least squares (a slope is NaN when its
    axis has a single value, and that column is left out of the fit); `slope_m_ci`,
    `slope_n_ci`: the slopes' 95% half-widths under the linear model with i.i.d. Gaussian
    residuals (t quantile at N - k >= 1 degrees of freedom: a fit needs a spare point)."""

    coef_c: float
    slope_m: float
    slope_n: float
    r2: float
    n_points: int
    slope_m_ci: float = math.nan
    slope_n_ci: float = math.nan


def fit_loglog_slopes(m: object, n: object, y: object) -> LogLogSlopes:
    """Slopes of a positive quantity (a gap or a bound) in m and n on log-log axes.

    Points with y <= 0 or non-finite y are left out. Shape: m, n, y (N,).
    """
    m_, n_ = _grid(m, n)
    y_ = np.atleast_1d(np.asarray(y, dtype=np.float64))
    if y_.shape != m_.shape:
        raise ValueError(f"y has shape {y_.shape}: expected {m_.shape}")
    keep = np.isfinite(y_) & (y_ > 0)
    m_, n_, log_y = m_[keep], n_[keep], np.log(y_[keep])
    columns, names = [np.ones_like(log_y)], ["c"]
    for name, axis in (("m", m_), ("n", n_)):
        if np.unique(axis).size > 1:
            columns.append(np.log(axis))
            names.append(name)
    if log_y.size < len(columns) + 1:
        return LogLogSlopes(math.nan, math.nan, math.nan, math.nan, int(log_y.size))
    X = np.stack(columns, axis=1)
    coef, *_ = np.linalg.lstsq(X, log_y, rcond=None)
    fitted = dict(zip(names, coef, strict=True))
    rss = float(np.sum((log_y - X @ coef) ** 2))
    dof = log_y.size - X.shape[1]  # >= 1 (above)
    covariance = rss / dof * np.linalg.inv(X.T @ X)
    t = float(stats.t.ppf(0.975, dof))
    half = {name: t * math.sqrt(max(covariance[i, i], 0.0)) for i, name in enumerate(names)}
    return LogLogSlopes(
        float(fitted["c"]),
        float(fitted.get("m", math.nan)),
        float(fitted.get("n", math.nan)),
        _r2(log_y, rss),
        int(log_y.size),
        float(half.get("m", math.nan)),
        float(half.get("n", math.nan)),
    )
