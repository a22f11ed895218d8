"""The accelerated projected gradient solver against closed forms and scipy's SLSQP."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.optimize import minimize

from crl.kernels.solver import SolverSpec, apg, autograd, project_ball


def _quadratic(A: torch.Tensor, b: torch.Tensor):
    """f(x) = 1/2 x^T A x - b^T x."""
    return autograd(lambda x: 0.5 * x @ A @ x - b @ x)


def test_unconstrained_quadratic_reaches_the_closed_form() -> None:
    gen = torch.Generator().manual_seed(0)
    Q = torch.randn(6, 6, dtype=torch.float64, generator=gen)
    A = Q @ Q.T + 0.5 * torch.eye(6, dtype=torch.float64)
    b = torch.randn(6, dtype=torch.float64, generator=gen)
    value, grad = _quadratic(A, b)
    sol = apg(value, grad, lambda x: x, torch.zeros(6, dtype=torch.float64), SolverSpec(1e-10))
    assert sol.converged and sol.criterion < 1e-10
    assert torch.allclose(sol.params, torch.linalg.solve(A, b), atol=1e-9)


def test_ball_constraint_binds_at_the_closed_form() -> None:
    """min 1/2 ||x - c||^2 over ||x|| <= r with ||c|| > r is c r / ||c||."""
    c = torch.tensor([3.0, -4.0], dtype=torch.float64)
    value, grad = autograd(lambda x: 0.5 * ((x - c) ** 2).sum())
    sol = apg(
        value,
        grad,
        lambda x: project_ball(x, 2.0),
        torch.zeros(2, dtype=torch.float64),
        SolverSpec(1e-12),
    )
    assert sol.converged
    assert torch.allclose(sol.params, c * 2.0 / 5.0, atol=1e-12)


def test_cap_reports_not_converged() -> None:
    gen = torch.Generator().manual_seed(1)
    Q = torch.randn(20, 20, dtype=torch.float64, generator=gen)
    A = Q @ Q.T + 1e-4 * torch.eye(20, dtype=torch.float64)  # ill-conditioned
    value, grad = _quadratic(A, torch.ones(20, dtype=torch.float64))
    sol = apg(value, grad, lambda x: x, torch.zeros(20, dtype=torch.float64), SolverSpec(1e-12, 5))
    assert not sol.converged and sol.iterations == 5 and sol.criterion > 1e-12


def test_logistic_regression_in_a_ball_matches_slsqp() -> None:
    """A convex, non-quadratic objective with the constraint active: the reference is scipy's
    SLSQP on the same problem."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(80, 5))
    y = np.sign(X @ np.array([2.0, -1.0, 0.5, 0.0, 1.0]) + 0.3 * rng.normal(size=80))
    radius = 1.5

    def f_np(w: np.ndarray) -> float:
        return float(np.mean(np.logaddexp(0.0, -y * (X @ w))))

    Xt, yt = torch.tensor(X), torch.tensor(y)
    value, grad = autograd(lambda w: torch.nn.functional.softplus(-yt * (Xt @ w)).mean())
    sol = apg(
        value,
        grad,
        lambda w: project_ball(w, radius),
        torch.zeros(5, dtype=torch.float64),
        SolverSpec(1e-9),
    )
    ref = minimize(
        f_np,
        np.zeros(5),
        method="SLSQP",
        tol=1e-14,
        constraints=[{"type": "ineq", "fun": lambda w: radius**2 - w @ w}],
    )
    assert sol.converged
    assert math.isclose(sol.value, ref.fun, rel_tol=1e-9, abs_tol=1e-12)
    assert np.allclose(sol.params.numpy(), ref.x, atol=1e-5)
    assert math.isclose(float(torch.linalg.vector_norm(sol.params)), radius, rel_tol=1e-9)


@pytest.mark.parametrize(("tol", "max_iter"), [(0.0, 10), (1e-5, 0)])
def test_spec_validation(tol: float, max_iter: int) -> None:
    with pytest.raises(ValueError, match="tol|max_iter"):
        SolverSpec(tol, max_iter)
