"""Li et al. 2026's two-modality Gaussian in canonical-correlation form, with the quadratic score
s(x, y) = x^T M y - y^T B y, its exact population LSE risk and a common-random-numbers AUC.

x ~ N(0, I_p); y = V (rho * U^T x + sqrt(1 - rho^2) * eps), eps ~ N(0, I_p): y ~ N(0, I_p),
E[x y^T] = U diag(rho) V^T and I(X; Y) = -1/2 sum log(1 - rho^2).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from crl.kernels import _validate
from crl.kernels.metrics import retrieval_auc
from crl.kernels.score_model import pair_scores

_F64 = torch.float64
_ORTHO_TOL = 1e-8
_CHUNK = 1 << 16  # triples scored at a time in excess_auc


def _orthogonal(name: str, value: object, p: int) -> torch.Tensor:
    q = _validate.float_tensor(name, value, 2, f"({p}, {p})").to(_F64)
    _validate.shape(name, q, f"({p}, {p})", q.shape == (p, p))
    err = (q.T @ q - torch.eye(p, dtype=_F64, device=q.device)).abs().max().item()
    if err > _ORTHO_TOL:
        raise ValueError(f"{name}: max |Q^T Q - I| = {err:.3g}, expected an orthogonal matrix")
    return q


def _square(name: str, value: object, p: int) -> torch.Tensor:
    t = _validate.float_tensor(name, value, 2, f"({p}, {p})").to(_F64)
    _validate.shape(name, t, f"({p}, {p})", t.shape == (p, p))
    return t


def _haar(p: int, generator: torch.Generator) -> torch.Tensor:
    """Haar-random orthogonal matrix: Q R = G Gaussian, Q diag(sign(diag R)).  Shape: (p, p)."""
    g = torch.randn(p, p, dtype=_F64, generator=generator, device=generator.device)
    q, r = torch.linalg.qr(g)
    return (q * torch.sign(torch.diagonal(r))).cpu()


@dataclass(frozen=True, eq=False)
class CanonicalGaussian:
    """(X, Y) with canonical correlations rho and canonical directions U (for x), V (for y).

    Shape: correlations rho (p,) in (0, 1); rotation_x U (p, p), rotation_y V (p, p) orthogonal.
    """

    correlations: torch.Tensor
    rotation_x: torch.Tensor
    rotation_y: torch.Tensor

    def __post_init__(self) -> None:
        rho = _validate.float_tensor("correlations", self.correlations, 1, "(p,)").to(_F64)
        if not bool(((rho > 0) & (rho < 1)).all()):
            raise ValueError(f"correlations={rho.tolist()}: expected every entry in (0, 1)")
        p = len(rho)
        object.__setattr__(self, "correlations", rho)
        object.__setattr__(self, "rotation_x", _orthogonal("rotation_x", self.rotation_x, p))
        object.__setattr__(self, "rotation_y", _orthogonal("rotation_y", self.rotation_y, p))

    @classmethod
    def make(
        cls, correlations: Sequence[float], rotate: bool, generator: torch.Generator
    ) -> CanonicalGaussian:
        """U = V = I when not `rotate`, else U then V Haar-random, drawn from `generator`."""
        gen = _validate.generator(generator)
        if not isinstance(rotate, bool):
            raise ValueError(f"rotate={rotate!r}: expected a bool")
        rho = torch.tensor([float(r) for r in correlations], dtype=_F64)
        p = len(rho)
        if not rotate:
            return cls(rho, torch.eye(p, dtype=_F64), torch.eye(p, dtype=_F64))
        return cls(rho, _haar(p, gen), _haar(p, gen))

    @property
    def p(self) -> int:
        return len(self.correlations)

    @property
    def mutual_information(self) -> float:
        """I(X; Y) = -1/2 sum_i log(1 - rho_i^2) (nats)."""
        return -0.5 * torch.log1p(-self.correlations.square()).sum().item()

    def sample_marginal(self, shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
        """iid y' ~ N(0, I_p), the marginal of Y, on the generator's device.  Shape: (*shape, p)."""
        gen = _validate.generator(generator)
        for i, n in enumerate(shape):
            _validate.at_least(f"shape[{i}]", n, 0)
        return torch.randn(*shape, self.p, dtype=_F64, generator=gen, device=gen.device)

    def sample_pairs(self, n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """n iid (x, y): x first, then eps, from `generator`.  Shape: x (n, p), y (n, p)."""
        _validate.at_least("n", n, 1)
        x = self.sample_marginal((n,), generator)  # n x p
        eps = self.sample_marginal((n,), generator)  # n x p
        rho = self.correlations.to(x.device)
        u, v = self.rotation_x.to(x.device), self.rotation_y.to(x.device)
        z = rho * (x @ u) + torch.sqrt(1 - rho.square()) * eps  # n x p, canonical coordinates
        return x, z @ v.T

    def bayes_parameters(self, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
        """(M*, B*) with s* = T [log p(y | x) / p(y) - g(x)] = x^T M* y - y^T B* y.

        With D = diag(rho), S = diag(1 - rho^2): y | x ~ N(V D U^T x, V S V^T), so
        log p(y|x) - log p(y) = y^T V D S^{-1} U^T x - 1/2 y^T V (S^{-1} - I) V^T y + g(x), and
        S^{-1} - I = diag(rho^2 / (1 - rho^2)).  Hence
        M* = T U diag(rho / (1 - rho^2)) V^T,  B* = T V diag(rho^2 / (2 (1 - rho^2))) V^T.

        Shape: M* (p, p), B* (p, p) symmetric.
        """
        t = _validate.positive("temperature", temperature)
        rho, u, v = self.correlations, self.rotation_x, self.rotation_y
        s = 1 - rho.square()
        m = t * (u * (rho / s)) @ v.T
        b = t * (v * (rho.square() / (2 * s))) @ v.T
        return m, 0.5 * (b + b.T)

    def lse_risk(self, M: torch.Tensor, B: torch.Tensor, temperature: float) -> float:
        """Exact L(s) = E_{(x,y)} [T log E_{y'} exp((s(x, y') - s(x, y)) / T)], y' ~ N(0, I_p)
        independent (Li et al.'s population LSE risk), for s(x, y) = x^T M y - y^T B y.

        Only the symmetric part of B enters s, so B is symmetrised. With Mt = M / T,
        Bt = B / T, A = I + 2 Bt and b = Mt^T x, the inner Gaussian integral is
            E_{y'} exp(b^T y' - y'^T Bt y') = det(A)^{-1/2} exp(1/2 b^T A^{-1} b)
        when A is positive definite; otherwise it diverges for every x and L = +inf.
        E_x[b^T A^{-1} b] = tr(Mt A^{-1} Mt^T), and E[s(x, y)] / T = tr(Mt E[y x^T]) - tr(Bt)
        with E[y x^T] = V diag(rho) U^T and E[y y^T] = I, so
            L / T = -1/2 logdet A + 1/2 tr(Mt A^{-1} Mt^T) - tr(Mt V diag(rho) U^T) + tr(Bt).

        Shape: M (p, p), B (p, p).
        """
        t = _validate.positive("temperature", temperature)
        p = self.p
        mt = _square("M", M, p).to(self.correlations.device) / t
        bt = _square("B", B, p).to(self.correlations.device) / t
        bt = 0.5 * (bt + bt.T)
        eye = torch.eye(p, dtype=_F64, device=bt.device)
        lam, q = torch.linalg.eigh(eye + 2 * bt)  # A = Q diag(lam) Q^T
        if lam.min().item() <= 0:
            return math.inf
        quad = ((mt @ q).square() / lam).sum()  # tr(Mt A^{-1} Mt^T)
        cross = (self.rotation_y * self.correlations) @ self.rotation_x.T  # E[y x^T]
        risk = -0.5 * torch.log(lam).sum() + 0.5 * quad - (mt * cross.T).sum() + torch.trace(bt)
        return t * risk.item()

    def lse_risk_star(self, temperature: float) -> float:
        """L* = min_s L(s) = -T I(X; Y) = (T / 2) sum log(1 - rho^2), attained at s*."""
        return -_validate.positive("temperature", temperature) * self.mutual_information


@dataclass(frozen=True, eq=False)
class Triples:
    """K iid (x, y) ~ p(x, y) with y' ~ p(y) independent of them, shared across the scores
    compared on them (common random numbers).

    Shape: x (K, p), y (K, p), y_neg (K, p) float64.
    """

    x: torch.Tensor
    y: torch.Tensor
    y_neg: torch.Tensor

    def __post_init__(self) -> None:
        for name in ("x", "y", "y_neg"):
            value = _validate.float_tensor(name, getattr(self, name), 2, "(K, p)").to(_F64)
            want = tuple(self.x.shape)
            _validate.shape(name, value, f"{want} like x", value.shape == want)
            object.__setattr__(self, name, value)


def sample_triples(model: CanonicalGaussian, count: int, generator: torch.Generator) -> Triples:
    """`count` triples: (x, y) from model.sample_pairs, then y_neg from model.sample_marginal."""
    x, y = model.sample_pairs(count, generator)
    return Triples(x, y, model.sample_marginal((count,), generator))


@dataclass(frozen=True)
class ExcessAuc:
    """E(s), E(s*) on the same triples, excess = E(s*) - E(s) and its Monte Carlo std error."""

    auc: float
    auc_star: float
    excess: float
    excess_se: float


def excess_auc(
    model: CanonicalGaussian,
    triples: Triples,
    M: torch.Tensor,
    B: torch.Tensor,
    temperature: float,
    reference: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> ExcessAuc:
    """Li et al.'s retrieval criterion E(s) = P[s(x, y) > s(x, y')] + 1/2 P[tie] for
    s = pair_scores(M, B) and for the Bayes score (model.bayes_parameters(temperature)), or for
    the score `reference` = (M_ref, B_ref) when given, one y' per anchor; excess_se = std(per-
    triple differences) / sqrt(K), Bessel-corrected.

    Shape: M (p, p), B (p, p); triples with K >= 2 rows of width p.
    """
    k, p = triples.x.shape
    _validate.shape("triples.x", triples.x, f"(K, {model.p}) with K >= 2", k >= 2 and p == model.p)
    m, b = _square("M", M, p), _square("B", B, p)
    if reference is None:
        m_star, b_star = model.bayes_parameters(temperature)
    else:
        m_star, b_star = _square("M_ref", reference[0], p), _square("B_ref", reference[1], p)
    hits, hits_star = [], []
    for lo in range(0, k, _CHUNK):
        x, y, y_neg = (t[lo : lo + _CHUNK] for t in (triples.x, triples.y, triples.y_neg))
        for (mm, bb), out in (((m, b), hits), ((m_star, b_star), hits_star)):
            pos, neg = pair_scores(mm, bb, x, y), pair_scores(mm, bb, x, y_neg)  # chunk
            out.append(retrieval_auc(pos, neg[:, None], reduction="none"))
    h, h_star = torch.cat(hits), torch.cat(hits_star)  # K, K
    diff = h_star - h  # K
    return ExcessAuc(
        auc=h.mean().item(),
        auc_star=h_star.mean().item(),
        excess=diff.mean().item(),
        excess_se=(diff.std() / math.sqrt(k)).item(),
    )
