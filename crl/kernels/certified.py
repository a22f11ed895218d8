"""Certified generalization bounds for the linear class in every (m, n) cell
(docs/theory/bounds.md).

The class is F_R = {x -> W phi(x) : ||W||_F <= R} with ||phi(x)|| <= 1 for every x (A1-A2); a
tuple is (x, y, y'_1..y'_m) with scores t_0 = s(x, y), t_j = s(x, y'_j), v_j = t_j - t_0, and
the loss psi(v) is one of (A4), in crl's conventions (crl.kernels.losses):
    hinge     max(0, 1 + max_j v_j)            logistic  log2(1 + sum_j e^{v_j})
    lse       T log((1/m) sum_j e^{v_j / T})   info_nce  log(1 + sum_j e^{v_j / T})  (no factor T)

Bounds (each with its terms; every one is a deterministic function of the sample statistics):
The per-loss constants (Table 1) are crl.kernels.loss_constants, re-exported here.

- `gamma_m`: Thm 3.2, the seed's Gamma_M generalised to m negatives, with the seed's constant
  L0 for hinge and logistic and the closed form R_S = R sqrt(d S2) (T4) instead of Monte Carlo;
  at m = 1 it is Saunshi's Gamma_M exactly.
- `gamma_S`: Thm 3.4, data-dependent, min over the routes V, Vw, B1, B2 + the S-form term.
- `gamma_E`: Thm 3.5, data-free, min over V^E, Vw^E, B1^E, B2^E + the E-form term.
- `lse_inner_bound`: Thm 5.1, 0 <= L(f) - L_m(f) <= min(2R^2, T (e^{R^2/T} - 1)^2 / (2m)).
- `sscrl_inner`: Thm 4.2, the inner error of shared negatives for logistic, LSE, InfoNCE;
  for hinge none exists (Prop. 4.4).
The contraction constant of the vector routes is the seed's sqrt(3) (T2a); B1 (m >= 2) and B2 use
Maurer's sqrt(2), B1 at m = 1 Talagrand's 1 (T2b, T2c).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from crl.kernels import _validate
from crl.kernels.loss_constants import LOSSES as LOSSES
from crl.kernels.loss_constants import LossConstants as LossConstants
from crl.kernels.loss_constants import loss_constants as loss_constants

__all__ = [
    "CONTRACTION",
    "Certificate",
    "LossConstants",
    "SampleStats",
    "StatsAccumulator",
    "gamma_e",
    "gamma_m",
    "gamma_s",
    "loss_constants",
    "lse_inner_bound",
    "smooth_bias",
    "lse_inner_estimate",
    "sample_stats",
    "sscrl_inner",
]

CONTRACTION = math.sqrt(3.0)  # c_V of the seed's vector contraction lemma (T2a)
MAURER = math.sqrt(2.0)  # Maurer 2016 (T2b)


@dataclass(frozen=True)
class SampleStats:
    """The data-dependent ingredients of the bounds (docs/theory/bounds.md section 3, per-cell
    recipe).

    S_pairs = sum_i ||phi(x_i)||^2 + ||phi(y_i)||^2, S_neg = sum_ij ||phi(y'_ij)||^2 (shared
    negatives counted once per anchor), S2 = S_pairs + S_neg; v_A, v_0, v_N the largest
    eigenvalues of sum H_ij^2, sum P_i^2, sum G_ij^2; n anchors, m negatives, p feature dim.
    """

    n: int
    m: int
    p: int
    S_pairs: float
    S_neg: float
    v_A: float
    v_0: float
    v_N: float

    @property
    def S2(self) -> float:
        return self.S_pairs + self.S_neg


def sym_square_sum(u: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """sum_k sym(u_k w_k^T)^2 in float64, with sym(A) = (A + A^T) / 2.

    For H = sym(u w^T): H^2 = [(u.w)(u w^T + w u^T) + ||w||^2 u u^T + ||u||^2 w w^T] / 4.
    Shape: u, w (K, p) -> (p, p).
    """
    uw = (u * w).sum(1)  # (K,)
    cross = u.T @ (uw[:, None] * w)  # (p, p)
    return (
        cross + cross.T + u.T @ ((w * w).sum(1)[:, None] * u) + w.T @ ((u * u).sum(1)[:, None] * w)
    ) / 4.0


def _top_eigenvalue(matrix: torch.Tensor) -> float:
    return float(torch.linalg.eigvalsh(matrix)[-1].clamp(min=0.0))


class StatsAccumulator:
    """S_pairs, S_neg, v_A, v_0, v_N of a training sample, fed in chunks of anchors (float64).

    With `shared` negatives (m, p) the m negatives are repeated in every tuple (Thm 4.1: the
    outer error of sscrl): S_neg = n sum_j ||phi(y'_j)||^2 and H_ij = sym(phi(x_i)(phi(y'_j) -
    phi(y_i))^T). Memory is O(chunk m p), whatever n.
    """

    def __init__(self, p: int, m: int, shared_negatives: torch.Tensor | None = None) -> None:
        self.p = _validate.at_least("p", p, 1)
        self.m = _validate.at_least("m", m, 1)
        self.shared = None
        if shared_negatives is not None:
            neg = _validate.float_tensor("negatives", shared_negatives, 2, f"({m}, {p})")
            _validate.shape("negatives", neg, f"({m}, {p})", tuple(neg.shape) == (m, p))
            self.shared = neg.to(torch.float64)
        self.n = 0
        self.S_pairs = self.S_neg = 0.0
        self._A = torch.zeros(p, p, dtype=torch.float64)
        self._N = torch.zeros(p, p, dtype=torch.float64)
        self._0 = torch.zeros(p, p, dtype=torch.float64)

    def update(
        self, anchors: torch.Tensor, positives: torch.Tensor, negatives: torch.Tensor | None = None
    ) -> None:
        """Shape: anchors, positives (b, p); negatives (b, m, p), or None when shared.

        With sym(u w^T)^2 = [(u.w)(u w^T + w u^T) + ||w||^2 u u^T + ||u||^2 w w^T] / 4, the sums
        over j of each anchor reduce to O(b m p) contractions and one weighted Gram matrix of the
        negatives (O(b m p^2); O(m p^2) once for shared negatives); w = n - y expands into the
        same pieces.
        """
        x = _validate.float_tensor("anchors", anchors, 2, f"(b, {self.p})").to(torch.float64)
        y = _validate.float_tensor("positives", positives, 2, f"(b, {self.p})").to(torch.float64)
        b, p, m = x.shape[0], self.p, self.m
        _validate.shape("anchors", x, f"(b, {p})", x.shape[1] == p)
        _validate.shape("positives", y, f"({b}, {p})", y.shape == x.shape)
        xx = (x * x).sum(1)  # (b,) ||x_i||^2
        xy = (x * y).sum(1)  # (b,)
        yy = (y * y).sum(1)  # (b,)
        if self.shared is not None:
            N = self.shared  # (m, p)
            dots = x @ N.T  # (b, m): x_i . n_j
            a_n = dots @ N  # (b, p): sum_j (x.n_j) n_j
            sums = N.sum(0).expand(b, p)  # (b, p): sum_j n_j
            norms = torch.full((b,), float((N * N).sum()), dtype=torch.float64)  # sum_j ||n_j||^2
            gram = float(xx.sum()) * (N.T @ N)  # sum_i ||x_i||^2 sum_j n_j n_j^T
        else:
            neg = _validate.float_tensor("negatives", negatives, 3, f"({b}, {m}, {p})")
            _validate.shape("negatives", neg, f"({b}, {m}, {p})", tuple(neg.shape) == (b, m, p))
            neg = neg.to(torch.float64)
            dots = torch.einsum("bp,bmp->bm", x, neg)
            a_n = torch.einsum("bm,bmp->bp", dots, neg)
            sums = neg.sum(1)
            norms = (neg * neg).sum((1, 2))
            weighted = (neg * xx.sqrt()[:, None, None]).reshape(-1, p)  # (b m, p)
            gram = weighted.T @ weighted
        self.n += b
        self.S_pairs += float(xx.sum() + yy.sum())
        self.S_neg += float(norms.sum())
        # G_ij = sym(x_i n_ij^T)
        cross = x.T @ a_n
        self._N += (cross + cross.T + x.T @ (norms[:, None] * x) + gram) / 4.0
        # H_ij = sym(x_i w_ij^T), w_ij = n_ij - y_i
        # sum_j (x.w_ij) w_ij = a_n - (sum_j x.n_ij) y - (x.y) S_i + m (x.y) y
        a_w = a_n - dots.sum(1)[:, None] * y - xy[:, None] * sums + m * xy[:, None] * y
        cross = x.T @ a_w
        w_norms = norms - 2.0 * (y * sums).sum(1) + m * yy  # (b,) sum_j ||w_ij||^2
        sy = (sums * xx[:, None]).T @ y  # (p, p): sum_i ||x_i||^2 S_i y_i^T
        gram_w = gram - sy - sy.T + m * (y * xx[:, None]).T @ y
        self._A += (cross + cross.T + x.T @ (w_norms[:, None] * x) + gram_w) / 4.0
        self._0 += sym_square_sum(x, y)

    def finish(self) -> SampleStats:
        if self.n == 0:
            raise ValueError("StatsAccumulator: no anchors were fed")
        return SampleStats(
            self.n,
            self.m,
            self.p,
            self.S_pairs,
            self.S_neg,
            _top_eigenvalue(self._A),
            _top_eigenvalue(self._0),
            _top_eigenvalue(self._N),
        )


def sample_stats(
    anchors: torch.Tensor,
    positives: torch.Tensor,
    negatives: torch.Tensor,
    shared: bool,
    chunk: int = 65536,
) -> SampleStats:
    """The statistics of a whole sample (StatsAccumulator fed `chunk` tuple rows at a time).

    Shape: anchors, positives (n, p); negatives (n, m, p) own or, `shared`, (m, p).
    """
    x = _validate.float_tensor("anchors", anchors, 2, "(n, p)")
    dims = 2 if shared else 3
    neg = _validate.float_tensor("negatives", negatives, dims, "(m, p)" if shared else "(n, m, p)")
    n, p = x.shape
    ok = neg.shape[-1] == p and (shared or neg.shape[0] == n)
    _validate.shape("negatives", neg, f"(m, {p})" if shared else f"({n}, m, {p})", ok)
    m = neg.shape[0] if shared else neg.shape[1]
    acc = StatsAccumulator(p, m, neg if shared else None)
    rows = max(1, chunk // m)
    for start in range(0, n, rows):
        part = slice(start, start + rows)
        acc.update(x[part], positives[part], None if shared else neg[part])
    return acc.finish()


@dataclass(frozen=True)
class Certificate:
    """A certified bound: value = complexity_term + concentration_term; `route` names the
    Rademacher route that won the minimum (V, Vw, B1, B2; "seed" for gamma_m)."""

    value: float
    complexity_term: float
    concentration_term: float
    route: str


def gamma_m(stats: SampleStats, constants: LossConstants, d: int, delta: float) -> Certificate:
    """Thm 3.2: 2 sqrt(18) L_seed R R_S / n + 3 B sqrt(ln(4/delta) / (2n)), R_S = R sqrt(d S2)."""
    d = _validate.at_least("d", d, 1)
    delta = _validate.open_unit("delta", delta)
    R, n = constants.R, stats.n
    rademacher = R * math.sqrt(d * stats.S2)  # T4: closed form, >= E_eps sup
    complexity = 2.0 * math.sqrt(18.0) * constants.L_seed * R * rademacher / n
    concentration = 3.0 * constants.B * math.sqrt(math.log(4.0 / delta) / (2.0 * n))
    return Certificate(complexity + concentration, complexity, concentration, "seed")


def _c1(m: int) -> float:
    return 1.0 if m == 1 else MAURER


def gamma_s_routes(stats: SampleStats, constants: LossConstants, d: int) -> dict[str, float]:
    """The four data-dependent Rademacher terms of Thm 3.4 (each bounds 2 B R_hat_S)."""
    R2, n, L, omega = constants.R**2, stats.n, constants.L, constants.omega
    log2p = math.log(2.0 * stats.p)
    return {
        "V": 2.0 * CONTRACTION * math.sqrt(6.0) * L * R2 * math.sqrt(d * stats.S2) / n,
        "Vw": 2.0
        * CONTRACTION
        * R2
        * math.sqrt(d)
        * (L * math.sqrt(5.0 * stats.S_pairs) + math.sqrt(omega * stats.S_neg))
        / n,
        "B1": 2.0 * _c1(stats.m) * L * R2 * math.sqrt(2.0 * log2p * stats.v_A) / n,
        "B2": 2.0
        * MAURER
        * R2
        * math.sqrt(2.0 * log2p)
        * (L * math.sqrt(stats.v_0) + math.sqrt(omega * stats.v_N))
        / n,
    }


def gamma_s(stats: SampleStats, constants: LossConstants, d: int, delta: float) -> Certificate:
    """Thm 3.4: min{V, Vw, B1, B2} + 3 B sqrt(ln(4/delta) / (2n))."""
    d = _validate.at_least("d", d, 1)
    delta = _validate.open_unit("delta", delta)
    routes = gamma_s_routes(stats, constants, d)
    route = min(routes, key=routes.__getitem__)
    concentration = 3.0 * constants.B * math.sqrt(math.log(4.0 / delta) / (2.0 * stats.n))
    return Certificate(routes[route] + concentration, routes[route], concentration, route)


def gamma_e_routes(n: int, m: int, p: int, constants: LossConstants, d: int) -> dict[str, float]:
    """The four data-free Rademacher terms of Thm 3.5 (valid for every sample, ||phi|| <= 1)."""
    R2, L, omega = constants.R**2, constants.L, constants.omega
    log2p = math.log(2.0 * p)
    return {
        "V": 2.0 * CONTRACTION * math.sqrt(6.0) * L * R2 * math.sqrt(d * (m + 2) / n),
        "Vw": 2.0
        * CONTRACTION
        * R2
        * math.sqrt(d / n)
        * (math.sqrt(10.0) * L + math.sqrt(omega * m)),
        "B1": 4.0 * MAURER * _c1(m) * L * R2 * math.sqrt(log2p * m / n),
        "B2": 4.0 * R2 * math.sqrt(log2p / n) * (L + math.sqrt(omega * m)),
    }


def gamma_e(n: int, m: int, p: int, constants: LossConstants, d: int, delta: float) -> Certificate:
    """Thm 3.5: min{V^E, Vw^E, B1^E, B2^E} + B sqrt(ln(2/delta) / (2n))."""
    n = _validate.at_least("n", n, 1)
    d = _validate.at_least("d", d, 1)
    delta = _validate.open_unit("delta", delta)
    routes = gamma_e_routes(n, m, p, constants, d)
    route = min(routes, key=routes.__getitem__)
    concentration = constants.B * math.sqrt(math.log(2.0 / delta) / (2.0 * n))
    return Certificate(routes[route] + concentration, routes[route], concentration, route)


def smooth_bias(c: float, tau: float, R: float, m: int) -> float:
    """min{2 c R^2 / tau, c (e^{R^2/tau} - 1)^2 / (2m)} (Thms 5.1, 5.2)."""
    return min(2.0 * c * R * R / tau, c * math.expm1(R * R / tau) ** 2 / (2.0 * m))


def lse_inner_bound(m: int, R: float, temperature: float) -> float:
    """Thm 5.1: 0 <= L(f) - L_m(f) <= min{2R^2, T (e^{R^2/T} - 1)^2 / (2m)} for every f."""
    m = _validate.at_least("m", m, 1)
    return smooth_bias(
        _validate.positive("temperature", temperature), temperature, _validate.positive("R", R), m
    )


def sscrl_inner(constants: LossConstants, delta: float) -> float | None:
    """Thm 4.2 at level delta: Lip_mu Delta_m(delta) (+ bias_m unless LSE); None for hinge.

    Delta_m(delta) = 2 R^2 e^{R^2/tau} / (tau sqrt m) + (e^{R^2/tau} - e^{-R^2/tau})
    sqrt(ln(2/delta) / (2m)). For LSE the target is Li et al.'s L (no bias term); for logistic
    and InfoNCE it is L_m, which differs from L_infinity by at most bias_m.
    """
    delta = _validate.open_unit("delta", delta)
    if constants.loss == "hinge":
        return None
    R, m, tau = constants.R, constants.m, constants.tau
    e = math.exp(R * R / tau)
    spread = 2.0 * R * R * e / (tau * math.sqrt(m))
    deviation = (e - 1.0 / e) * math.sqrt(math.log(2.0 / delta) / (2.0 * m))
    inner = constants.lip_mu * (spread + deviation)
    if constants.loss != "lse":
        inner += smooth_bias(constants.c, tau, R, m)
    return inner


@torch.no_grad()
def lse_inner_estimate(pool_scores: torch.Tensor, m: int, temperature: float) -> float:
    """ESTIMATE (not a bound) of L(f) - L_m(f) by the delta method (docs/theory/bounds.md 5.4):
    (T / 2m) mean_x Var_k(e^{s(x, y'_k)/T}) / Mean_k(e^{s(x, y'_k)/T})^2 over a pool of negatives.

    The positive score cancels. Shape: pool_scores (N, K), the scores s(x, y'_k) of N anchors
    against K >= 2 pool negatives.
    """
    s = _validate.float_tensor("pool_scores", pool_scores, 2, "(N, K)").to(torch.float64)
    _validate.shape("pool_scores", s, "(N, K) with K >= 2", s.shape[1] >= 2)
    T = _validate.positive("temperature", temperature)
    m = _validate.at_least("m", m, 1)
    z = s / T  # (N, K); one buffer, then in place
    e = z.sub_(z.max(dim=1, keepdim=True).values).exp_()  # Var/Mean^2 are shift-invariant
    ratio = e.var(dim=1, correction=1) / e.mean(dim=1) ** 2
    return float(T / (2.0 * m) * ratio.mean())
