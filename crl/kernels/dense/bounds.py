"""Certified bounds for dense contrastive learning with a frozen backbone
(docs/theory/dense-bounds.md).

A cell has n images (the unit, Prop. D0); image i has query features phi1 (K1, p), key features
phi2 (K2, p), m external negatives xi (m, p), all of norm <= 1 (D1), and a correspondence Pi of
pairs (a, b). The loss is h = sum_{(a,b)} w_ab psi_ab, w_ab = 1 / (|A| |P(a)|), psi_ab =
log(1 + sum_{u in N(a)} e^{(s_au - s_ab)/T}) (D4: DenseCL's head, no factor T). Negatives N(a):
regime "own" = the keys of view 2 that are not positives of a, plus the m external vectors;
"ext" (DenseCL) = the m external vectors only. Constants are Table 1 of docs/theory/bounds.md
for InfoNCE with m -> N (crl.kernels.loss_constants); contraction constants are
crl.kernels.certified's: c_V = sqrt(3) in V and Vw, Maurer's sqrt(2) in B2, as the numbers of
docs/theory/dense-bounds.md use them.

- `gamma_dense_V`, `gamma_dense_S`: Thm D4 (S-form, data-dependent) from `DenseStats`.
- `gamma_dense_E`: Thm D5 (E-form, data-free, regularity (R), one positive per position).
The shared queue (Thms D6-D8) is crl.kernels.dense.queue.
Prop. D9's lower confidence bound on I(U; V) is crl.kernels.dense.mi.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from crl.kernels import _validate
from crl.kernels.certified import CONTRACTION, MAURER, Certificate, sym_square_sum
from crl.kernels.loss_constants import loss_constants

__all__ = [
    "REGIMES",
    "CorrespondenceWeights",
    "DenseStats",
    "DenseStatsAccumulator",
    "correspondence_weights",
    "dense_range",
    "dense_routes_E",
    "dense_routes_S",
    "gamma_dense_E",
    "gamma_dense_S",
    "gamma_dense_V",
    "lipschitz_dense",
    "negatives_count",
    "omega",
]

REGIMES = ("own", "ext")


def omega(N: int, R: float, T: float) -> float:
    """omega(N) = L^2 / (1 + N e^{-2R^2/T}) >= sum_u g_u^2 (D4 constants; Table 1, m -> N)."""
    return loss_constants("info_nce", N, R, T).omega


def dense_range(n_min: int, n_max: int, R: float, T: float) -> tuple[float, float]:
    """Lemma D3: psi_lo(N_min) <= h <= psi_hi(N_max); returns (psi_lo(N_min), B)."""
    if not (isinstance(n_max, int) and isinstance(n_min, int) and 1 <= n_min <= n_max):
        raise ValueError(
            f"(n_min, n_max)={(n_min, n_max)!r}: expected integers 1 <= n_min <= n_max"
        )
    lo, hi = loss_constants("info_nce", n_min, R, T), loss_constants("info_nce", n_max, R, T)
    return lo.psi_lo, hi.psi_lo + hi.B - lo.psi_lo


def negatives_count(k2: int, m: int, regime: str) -> int:
    """N of every position with one positive: K2 - 1 + m ("own") or m ("ext")."""
    _validate.choice("regime", regime, REGIMES)
    return k2 - 1 + m if regime == "own" else m


@dataclass(frozen=True)
class CorrespondenceWeights:
    """The per-image quantities of (D3). negatives: N_a for a in A (sorted), (|A|,) int64."""

    size_A: int
    sum_wa2: float  # sum_a w_a^2 = 1 / |A|
    sum_wab2: float  # sum_ab w_ab^2
    sigma_alpha: float  # sum_b alpha_b^2
    alpha_max: float
    nu: float  # |Pi| sum_ab w_ab^2
    chi: int  # some key is a positive of one position and a negative of another
    negatives: torch.Tensor


def _pairs(pairs: object, k1: int | None, k2: int) -> torch.Tensor:
    p = _validate.tensor("pairs", pairs)
    ok = p.ndim == 2 and p.shape[1] == 2 and p.shape[0] >= 1 and p.dtype == torch.int64
    _validate.shape("pairs", p, "(P, 2) int64 with P >= 1 (images with A empty are discarded)", ok)
    if bool((p < 0).any() or (k1 is not None and (p[:, 0] >= k1).any()) or (p[:, 1] >= k2).any()):
        raise ValueError(f"pairs has entries outside [0, {k1}) x [0, {k2}): expected (a, b) cells")
    if torch.unique(p[:, 0] * k2 + p[:, 1]).numel() != p.shape[0]:
        raise ValueError("pairs has duplicate rows: expected each (a, b) at most once")
    return p.cpu()


def _weights(p: torch.Tensor, k2: int, m: int, regime: str):
    """w_ab per pair, the anchors A, inverse index, |P(a)|, alpha_b, and CorrespondenceWeights."""
    A, inv, npos = torch.unique(p[:, 0], return_inverse=True, return_counts=True)
    w = 1.0 / (A.numel() * npos[inv].double())  # (P,)
    alpha = torch.zeros(k2, dtype=torch.float64).index_add_(0, p[:, 1], w)  # (K2,)
    keys = torch.unique(p[:, 1])
    chi = int(regime == "own" and bool((npos < keys.numel()).any()))  # P(a) not all equal
    neg = (k2 - npos + m) if regime == "own" else torch.full_like(npos, m)
    if int(neg.min()) < 1:
        raise ValueError(f"pairs leave a position with N_a={int(neg.min())}: expected N_a >= 1")
    w2 = float((w * w).sum())
    sig, amax = float((alpha * alpha).sum()), float(alpha.max())
    cw = CorrespondenceWeights(
        int(A.numel()), 1.0 / A.numel(), w2, sig, amax, p.shape[0] * w2, chi, neg
    )
    return w, A, inv, npos, cw


def correspondence_weights(
    pairs: torch.Tensor, k2: int, m: int, regime: str
) -> CorrespondenceWeights:
    """(D3) of one image. Shape: pairs (P, 2) int64 rows (a, b) with 0 <= b < k2."""
    _validate.choice("regime", regime, REGIMES)
    p = _pairs(pairs, None, _validate.at_least("k2", k2, 1))
    return _weights(p, k2, _validate.at_least("m", m, 0), regime)[-1]


def lipschitz_dense(cw: CorrespondenceWeights, R: float, T: float) -> float:
    """Lemma D1(a): Lambda^2 = R^2 [4 L^2 sum w_a^2 + L^2 sigma_alpha + omega(N_min)
    + chi min{2 L^2 alpha_max, 2 L sqrt(sigma_alpha omega(N_min))}]."""
    L, om = 1.0 / T, omega(int(cw.negatives.min()), R, T)
    cross = min(2 * L * L * cw.alpha_max, 2 * L * math.sqrt(cw.sigma_alpha * om))
    return R * math.sqrt(4 * L * L * cw.sum_wa2 + L * L * cw.sigma_alpha + om + cw.chi * cross)


def _features(name: str, x: object, p: int | None) -> torch.Tensor:
    t = _validate.float_tensor(name, x, 2, "(rows, p)").to(torch.float64).cpu()
    _validate.shape(name, t, f"(rows, {p})", p is None or t.shape[1] == p)
    if float((t * t).sum(1).max()) > 1.0 + 1e-9:
        raise ValueError(
            f"{name} has a row of norm {float(t.norm(dim=1).max()):.6g}: expected <= 1 (D1)"
        )
    return t


@dataclass(frozen=True)
class DenseStats:
    """Sums over the n images of Thm D4: lam_S2 = sum_i Lambda_i^2 S_2,i; V_Q, V_P, V_N (Vw);
    v_plus, v_minus (B2, top eigenvalues); n_min, n_max: the sample's extremes of N_a."""

    n: int
    p: int
    R: float
    T: float
    regime: str
    lam_S2: float
    V_Q: float
    V_P: float
    V_N: float
    v_plus: float
    v_minus: float
    n_min: int
    n_max: int


class DenseStatsAccumulator:
    """Thm D4's data-dependent ingredients, fed one image at a time, in float64.

    For B2, sum_u sym(phi_a varphi_u^T)^2 = [phi_a (C phi_a)^T + (C phi_a) phi_a^T + s phi_a
    phi_a^T + ||phi_a||^2 C] / 4 with C = sum_u varphi_u varphi_u^T, s = sum_u ||varphi_u||^2
    (Computation after Thm D4); in the own regime C_a = C_keys + C_ext - sum_{b in P(a)}.
    For a shared queue (Thm D6) pass the same queue to every image.
    """

    def __init__(self, p: int, R: float, T: float, regime: str) -> None:
        self.p = _validate.at_least("p", p, 1)
        self.R, self.T = _validate.positive("R", R), _validate.positive("T", T)
        self.regime = _validate.choice("regime", regime, REGIMES)
        self.n, self.lam_S2, self.V = 0, 0.0, [0.0, 0.0, 0.0]
        self.n_min, self.n_max = math.inf, 0
        self._plus = torch.zeros(p, p, dtype=torch.float64)
        self._minus = torch.zeros(p, p, dtype=torch.float64)

    def update(
        self,
        phi1: torch.Tensor,
        phi2: torch.Tensor,
        pairs: torch.Tensor,
        negatives: torch.Tensor | None,
    ) -> None:
        """Shape: phi1 (K1, p), phi2 (K2, p), pairs (P, 2) int64 rows (a, b), negatives (m, p)."""
        x1, x2 = _features("phi1", phi1, self.p), _features("phi2", phi2, self.p)
        xi = (
            torch.zeros(0, self.p, dtype=torch.float64)
            if negatives is None
            else _features("negatives", negatives, self.p)
        )
        k2, m, R, L = x2.shape[0], xi.shape[0], self.R, 1.0 / self.T
        pr = _pairs(pairs, x1.shape[0], k2)
        _, A, inv, _, cw = _weights(pr, k2, m, self.regime)
        a_rows, b_rows = x1[pr[:, 0]], x2[pr[:, 1]]  # (P, p): phi_a and phi_b of every pair
        n1, n2, nx = (x1 * x1).sum(1), (x2 * x2).sum(1), float((xi * xi).sum())
        in_all = torch.bincount(pr[:, 1], minlength=k2) == A.numel()  # b in every P(a)
        in_neg = ~in_all if self.regime == "own" else torch.zeros(k2, dtype=torch.bool)
        used = in_neg | (torch.bincount(pr[:, 1], minlength=k2) > 0)  # keys h depends on
        lam = lipschitz_dense(cw, R, self.T)
        om = [omega(int(N), R, self.T) for N in cw.negatives.tolist()]  # omega(N_a), a in A
        S_Q, S_P, S_N = float(n1[A].sum()), float(n2[pr[:, 1]].sum()), float(n2[in_neg].sum()) + nx
        self.lam_S2 += lam * lam * (S_Q + float(n2[used].sum()) + nx)
        blocks = (4 * L * L * cw.sum_wa2 * S_Q, L * L * cw.sum_wab2 * S_P, max(om) * S_N)
        self.V = [v + R * R * b for v, b in zip(self.V, blocks, strict=True)]  # c_N: omega(N_min)
        c_plus2 = L * L * cw.sum_wab2
        c_minus2 = cw.sum_wa2**2 * sum(om)  # sum_a w_a^2 omega(N_a), w_a = 1 / |A|
        self._plus += c_plus2 * sym_square_sum(a_rows, b_rows)
        X = x1[A]  # (|A|, p)
        C = xi.T @ xi + (x2.T @ x2 if self.regime == "own" else 0.0)  # (p, p)
        CX = X @ C  # (|A|, p): C phi_a before removing the positives
        s = torch.full(
            (A.numel(),),
            nx + (float(n2.sum()) if self.regime == "own" else 0.0),
            dtype=torch.float64,
        )
        normC = float(n1[A].sum()) * C
        if self.regime == "own":  # remove each a's positives from its negative set
            CX = CX.index_add(0, inv, -b_rows * (a_rows * b_rows).sum(1, keepdim=True))
            s = s.index_add(0, inv, -n2[pr[:, 1]])
            normC = normC - (b_rows * n1[pr[:, 0], None]).T @ b_rows
        cross = X.T @ CX
        self._minus += c_minus2 * (cross + cross.T + X.T @ (s[:, None] * X) + normC) / 4.0
        self.n += 1
        self.n_min = min(self.n_min, int(cw.negatives.min()))
        self.n_max = max(self.n_max, int(cw.negatives.max()))

    def finish(self) -> DenseStats:
        if self.n == 0:
            raise ValueError("DenseStatsAccumulator: no images were fed")
        top = [
            float(torch.linalg.eigvalsh(M)[-1].clamp(min=0.0)) for M in (self._plus, self._minus)
        ]
        extremes = (int(self.n_min), self.n_max)
        return DenseStats(
            self.n, self.p, self.R, self.T, self.regime, self.lam_S2, *self.V, *top, *extremes
        )


def dense_routes_S(stats: DenseStats, d: int) -> dict[str, float]:
    """The three complexity terms of Thm D4 (each bounds (2/n) E sup sum eps_i h_i)."""
    d, R, n = _validate.at_least("d", d, 1), stats.R, stats.n
    vw = sum(math.sqrt(v) for v in (stats.V_Q, stats.V_P, stats.V_N))
    b2 = math.sqrt(2 * math.log(2 * stats.p)) * (math.sqrt(stats.v_plus) + math.sqrt(stats.v_minus))
    return {
        "V": 2 * CONTRACTION * R * math.sqrt(d * stats.lam_S2) / n,
        "Vw": 2 * CONTRACTION * R * math.sqrt(d) * vw / n,
        "B2": 2 * MAURER * R * R * b2 / n,
    }


def _s_form(
    stats: DenseStats,
    d: int,
    delta: float,
    negatives_range: tuple[int, int],
    routes: tuple[str, ...],
) -> Certificate:
    delta = _validate.open_unit("delta", delta)
    lo, hi = negatives_range
    if not (lo <= stats.n_min and stats.n_max <= hi):
        raise ValueError(
            f"negatives_range={negatives_range!r}: expected the support's (N_min, N_max), "
            f"containing the sample's ({stats.n_min}, {stats.n_max})"
        )
    B = dense_range(lo, hi, stats.R, stats.T)[1]
    terms = {k: v for k, v in dense_routes_S(stats, d).items() if k in routes}
    route = min(terms, key=terms.__getitem__)
    conc = 3 * B * math.sqrt(math.log(4 / delta) / (2 * stats.n))
    return Certificate(terms[route] + conc, terms[route], conc, route)


def gamma_dense_V(
    stats: DenseStats, d: int, delta: float, negatives_range: tuple[int, int]
) -> Certificate:
    """The requested Gamma^V_dense: V + 3 B sqrt(ln(4/delta)/(2n)), B over the support (Thm D4)."""
    return _s_form(stats, d, delta, negatives_range, ("V",))


def gamma_dense_S(
    stats: DenseStats, d: int, delta: float, negatives_range: tuple[int, int]
) -> Certificate:
    """Thm D4: min{V, Vw, B2} + 3 B sqrt(ln(4/delta)/(2n)); negatives_range = the (N_min, N_max)
    the design allows (e.g. (N, N) with N = negatives_count(...)), not the sample's."""
    return _s_form(stats, d, delta, negatives_range, ("V", "Vw", "B2"))


def dense_routes_E(
    n: int, k: int, m: int, p: int, d: int, R: float, T: float, regime: str, full: bool = False
) -> dict[str, float]:
    """The complexity terms of Thm D5 under (R), one positive per position (nu = 1), ||phi|| <= 1:
    Vw^E = 2 c_V R^2 sqrt(d/n) (2L + L + sqrt(omega(N) (K_N + m))), B2^E = 2 sqrt2 R^2
    sqrt(2 ln(2p)/n) (L + sqrt(omega(N) N)) and, for full one-to-one correspondences only,
    V^E = 2 c_V Lambda_K R sqrt(d (2K + m)/n)."""
    n, k, p, d = (_validate.at_least(a, v, 1) for a, v in (("n", n), ("k", k), ("p", p), ("d", d)))
    N = negatives_count(k, _validate.at_least("m", m, 0), regime)
    L, om = 1.0 / T, omega(N, R, T)
    rows_N = (k if regime == "own" else 0) + m  # K_N + m
    terms = {
        "Vw": 2 * CONTRACTION * R * R * math.sqrt(d / n) * (3 * L + math.sqrt(om * rows_N)),
        "B2": 2 * MAURER * R * R * math.sqrt(2 * math.log(2 * p) / n) * (L + math.sqrt(om * N)),
    }
    if full:
        chi = int(regime == "own" and k >= 2)
        lam2 = 5 * L * L / k + om + chi * min(2 * L * L / k, 2 * L * math.sqrt(om / k))
        terms["V"] = 2 * CONTRACTION * R * R * math.sqrt(lam2 * d * (2 * k + m) / n)
    return terms


def gamma_dense_E(
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
    """Thm D5: min over dense_routes_E + B sqrt(ln(2/delta)/(2n)), B = Lemma D3 at N."""
    delta = _validate.open_unit("delta", delta)
    terms = dense_routes_E(n, k, m, p, d, R, T, regime, full)
    route = min(terms, key=terms.__getitem__)
    N = negatives_count(k, m, regime)
    conc = dense_range(N, N, R, T)[1] * math.sqrt(math.log(2 / delta) / (2 * n))
    return Certificate(terms[route] + conc, terms[route], conc, route)
