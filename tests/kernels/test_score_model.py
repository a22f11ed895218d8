"""The paired score model: empirical LSE risk against a naive loop, the exact gradient against
autograd, and the fitted model against scipy's SLSQP on the same convex program."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.optimize import minimize

from crl.kernels import score_model
from crl.kernels.score_model import PairedSample, _LseProblem
from crl.kernels.solver import SolverSpec

F64 = torch.float64


def _sample(n: int, m: int, p: int, shared: bool, seed: int = 0) -> PairedSample:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, p, dtype=F64, generator=gen)
    y = 0.8 * x + 0.6 * torch.randn(n, p, dtype=F64, generator=gen)
    shape = (m, p) if shared else (n, m, p)
    return PairedSample(x, y, torch.randn(*shape, dtype=F64, generator=gen))


def _naive_risk(M: np.ndarray, B: np.ndarray, s: PairedSample, T: float) -> float:
    def score(x: np.ndarray, y: np.ndarray) -> float:
        return float(x @ M @ y - y @ B @ y)

    x, y, neg = s.x.numpy(), s.y.numpy(), s.negatives.numpy()
    total = 0.0
    for i in range(len(x)):
        negs = neg if s.shared else neg[i]
        terms = [math.exp((score(x[i], yn) - score(x[i], y[i])) / T) for yn in negs]
        total += T * math.log(sum(terms) / len(terms))
    return total / len(x)


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("T", [0.5, 1.0])
def test_empirical_risk_matches_a_naive_loop(shared: bool, T: float) -> None:
    s = _sample(7, 5, 3, shared)
    gen = torch.Generator().manual_seed(3)
    M = 0.5 * torch.randn(3, 3, dtype=F64, generator=gen)
    Bh = 0.3 * torch.randn(3, 3, dtype=F64, generator=gen)
    B = Bh + Bh.T
    got = float(score_model.empirical_risk(M, B, s, T))
    assert got == pytest.approx(_naive_risk(M.numpy(), B.numpy(), s, T), rel=1e-12, abs=1e-12)
    problem = _LseProblem(s, T)
    theta = torch.cat([M.reshape(-1), B.reshape(-1)])
    assert problem.value(theta) == pytest.approx(got, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("shared", [False, True])
def test_exact_gradient_matches_autograd(shared: bool) -> None:
    s = _sample(9, 6, 4, shared, seed=1)
    problem = _LseProblem(s, 0.7)
    gen = torch.Generator().manual_seed(5)
    theta = 0.4 * torch.randn(32, dtype=F64, generator=gen)
    theta[16:] = (theta[16:].reshape(4, 4) + theta[16:].reshape(4, 4).T).reshape(-1)
    value, grad = problem.value_and_grad(theta)
    point = theta.clone().requires_grad_(True)
    ref = score_model.empirical_risk(*problem.split(point), s, 0.7)
    (ref_grad,) = torch.autograd.grad(ref, point)
    assert value == pytest.approx(float(ref.detach()), rel=1e-12)
    assert torch.allclose(grad, ref_grad, atol=1e-12)


@pytest.mark.parametrize("shared", [False, True])
def test_fit_matches_slsqp_and_keeps_b_symmetric(shared: bool) -> None:
    s = _sample(24, 6, 2, shared, seed=2)
    radius, T = 3.0, 1.0
    score, sol = score_model.fit(s, radius, T, SolverSpec(1e-9, 4000))
    problem = _LseProblem(s, T)

    def f(theta: np.ndarray) -> float:
        return problem.value(torch.tensor(theta))

    def g(theta: np.ndarray) -> np.ndarray:
        return problem.value_and_grad(torch.tensor(theta))[1].numpy()

    ref = minimize(
        f,
        np.zeros(8),
        jac=g,
        method="SLSQP",
        tol=1e-14,
        options={"maxiter": 2000},
        constraints=[{"type": "ineq", "fun": lambda t: radius**2 - t @ t}],
    )
    assert sol.converged and sol.criterion < 1e-9
    assert sol.value == pytest.approx(ref.fun, abs=1e-9)
    theta = torch.cat([score.M.reshape(-1), score.B.reshape(-1)]).numpy()
    assert np.allclose(theta, ref.x, atol=1e-4)
    assert torch.allclose(score.B, score.B.T, atol=1e-14)
    assert score.norm <= radius * (1 + 1e-12)


def test_one_negative_is_linear_so_the_ball_binds() -> None:
    """At m = 1 the LSE loss is the linear score difference: the minimiser is on the sphere."""
    score, sol = score_model.fit(_sample(30, 1, 3, False), 2.0, 1.0, SolverSpec(1e-8))
    assert sol.converged and score.norm == pytest.approx(2.0, rel=1e-9)


def test_quadratic_score_call() -> None:
    M = torch.eye(2, dtype=F64)
    B = torch.diag(torch.tensor([1.0, 0.0], dtype=F64))
    x = torch.tensor([[1.0, 2.0]], dtype=F64)
    y = torch.tensor([[3.0, 4.0]], dtype=F64)
    assert score_model.QuadraticScore(M, B)(x, y).item() == 1 * 3 + 2 * 4 - 9
