"""Certified bounds of the paired score model: the sample statistic against a naive loop, the
score range, the Table 1 constants at the score radius, and gamma_lin against its formula."""

from __future__ import annotations

import math

import pytest
import torch

from crl.kernels import certified_paired as cp
from crl.kernels.certified import lse_inner_bound
from crl.kernels.loss_constants import loss_constants
from crl.kernels.score_model import pair_scores

F64 = torch.float64


def _ball(shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    """Points in the unit ball (norms uniform in [0, 1])."""
    z = torch.randn(*shape, dtype=F64, generator=gen)
    radius = torch.rand(*shape[:-1], 1, dtype=F64, generator=gen)
    return z / z.norm(dim=-1, keepdim=True) * radius


def _psi(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """psi(x, y) = (x y^T, -y y^T) flattened. Shape: (p,), (p,) -> (2 p^2,)."""
    return torch.cat([torch.outer(x, y).reshape(-1), -torch.outer(y, y).reshape(-1)])


@pytest.mark.parametrize("shared", [False, True])
def test_difference_energy_matches_a_naive_loop(shared: bool) -> None:
    gen = torch.Generator().manual_seed(0)
    n, m, p = 7, 5, 3
    x, y = _ball((n, p), gen), _ball((n, p), gen)
    neg = _ball((m, p) if shared else (n, m, p), gen)
    naive = 0.0
    for i in range(n):
        for j in range(m):
            yn = neg[j] if shared else neg[i, j]
            naive += float(((_psi(x[i], yn) - _psi(x[i], y[i])) ** 2).sum())
    assert cp.difference_energy(x, y, neg, chunk=3) == pytest.approx(naive, rel=1e-12)


def test_scores_stay_within_the_score_bound() -> None:
    """|s| <= ||theta|| ||psi|| <= sqrt(2) R on the unit ball, approached at ||x|| = ||y|| = 1."""
    gen = torch.Generator().manual_seed(1)
    R, p = 1.7, 4
    x, y = _ball((20000, p), gen), _ball((20000, p), gen)
    M, B = torch.randn(p, p, dtype=F64, generator=gen), torch.randn(p, p, dtype=F64, generator=gen)
    B = B + B.T
    scale = R / math.sqrt(float((M**2).sum() + (B**2).sum()))
    s = pair_scores(M * scale, B * scale, x, y)
    assert float(s.abs().max()) <= cp.score_bound(R)
    # the extreme: x = y = u a unit vector and theta = R psi(u, u) / ||psi(u, u)||
    u = torch.zeros(p, dtype=F64)
    u[0] = 1.0
    theta = _psi(u, u) / _psi(u, u).norm() * R
    M_star, B_star = theta[: p * p].reshape(p, p), theta[p * p :].reshape(p, p)
    top = float(pair_scores(M_star, B_star, u, u))
    assert top == pytest.approx(R * math.sqrt(2.0), rel=1e-12)  # sqrt(1 + 1) * R: attained


def test_constants_are_the_factored_ones_at_the_score_radius() -> None:
    R, m, T = 1.3, 8, 0.7
    got = cp.paired_constants("lse", m, R, T)
    S = math.sqrt(2.0) * R
    assert got == loss_constants("lse", m, math.sqrt(S), T)
    assert got.B == pytest.approx(4 * S) and got.psi_lo == pytest.approx(-2 * S)
    assert got.omega == pytest.approx(1 / (1 + (m - 1) * math.exp(-2 * S / T)))
    inner = cp.paired_lse_inner_bound(m, R, T)
    assert inner == pytest.approx(min(2 * S, T * (math.exp(S / T) - 1) ** 2 / (2 * m)))
    assert inner == lse_inner_bound(m, math.sqrt(S), T)


def test_gamma_linear_against_its_formula() -> None:
    R, m, T, n, delta, energy = 0.9, 16, 1.0, 300, 0.05, 812.5
    c = cp.paired_constants("lse", m, R, T)
    got = cp.gamma_linear(energy, n, c, R, delta)
    complexity = 2 * math.sqrt(2) * math.sqrt(c.omega) * R * math.sqrt(energy) / n
    concentration = 3 * c.B * math.sqrt(math.log(4 / delta) / (2 * n))
    assert got.complexity_term == pytest.approx(complexity, rel=1e-14)
    assert got.concentration_term == pytest.approx(concentration, rel=1e-14)
    assert got.value == pytest.approx(complexity + concentration, rel=1e-14)


def test_the_jensen_step_bounds_the_sign_supremum() -> None:
    """E sup_{||theta|| <= R} sum eps_ij <theta, D_ij> = R E ||sum eps_ij D_ij|| <= R sqrt(S_D),
    by Monte Carlo over the signs (the supremum is exact for each draw)."""
    gen = torch.Generator().manual_seed(2)
    n, m, p = 12, 4, 3
    x, y, neg = _ball((n, p), gen), _ball((n, p), gen), _ball((n, m, p), gen)
    D = torch.stack(
        [
            torch.stack([_psi(x[i], neg[i, j]) - _psi(x[i], y[i]) for j in range(m)])
            for i in range(n)
        ]
    )  # (n, m, 2 p^2)
    signs = torch.randint(0, 2, (4000, n, m), generator=gen).to(F64) * 2 - 1
    sup = torch.einsum("bij,ijk->bk", signs, D).norm(dim=1)  # (draws,)
    energy = cp.difference_energy(x, y, neg)
    assert float(sup.mean()) <= math.sqrt(energy)
    assert float(sup.mean()) >= 0.5 * math.sqrt(energy)  # and the Jensen step is not loose


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: cp.score_bound(0.0), "radius"),
        (
            lambda: cp.gamma_linear(-1.0, 10, cp.paired_constants("lse", 2, 1, 1), 1.0, 0.1),
            "energy",
        ),
        (lambda: cp.gamma_linear(1.0, 0, cp.paired_constants("lse", 2, 1, 1), 1.0, 0.1), "n="),
        (lambda: cp.gamma_linear(1.0, 5, cp.paired_constants("lse", 2, 1, 1), 1.0, 1.0), "delta"),
    ],
)
def test_bad_inputs(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()
