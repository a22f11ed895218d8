"""The accelerated projected gradient solver against closed forms and scipy's SLSQP."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.optimize import minimize

from crl.kernels.solver import SolverSpec, apg, autograd, ball_descent, project_ball


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


# --- ball_descent -----------------------------------------------------------------------------


def _on_sphere_minimiser(A: torch.Tensor, b: torch.Tensor, radius: float) -> torch.Tensor:
    """The minimiser of 1/2 x^T A x - b^T x (A positive definite) over ||x|| <= radius when the
    unconstrained one lies outside: x(mu) = (A + mu I)^-1 b with ||x(mu)|| = radius, mu by
    bisection (||x(mu)|| falls as mu grows)."""
    eye = torch.eye(A.shape[0], dtype=A.dtype)
    low, high = 0.0, 1e6
    for _ in range(200):
        mu = 0.5 * (low + high)
        if float(torch.linalg.vector_norm(torch.linalg.solve(A + mu * eye, b))) > radius:
            low = mu
        else:
            high = mu
    return torch.linalg.solve(A + high * eye, b)


def _ill_conditioned(seed: int, k: int = 12, condition: float = 1e4):
    """An ill-conditioned quadratic, a radius half its minimiser's norm, and a start where APG
    reaches a gradient-mapping norm of 10^-2 (the descent's contract: near a point of the
    sphere where the constraint is active), with APG's iterations to it."""
    gen = torch.Generator().manual_seed(seed)
    Q, _ = torch.linalg.qr(torch.randn(k, k, dtype=torch.float64, generator=gen))
    A = Q @ torch.diag(torch.logspace(0, math.log10(condition), k, dtype=torch.float64)) @ Q.T
    b = 5.0 * torch.randn(k, dtype=torch.float64, generator=gen)
    radius = 0.5 * float(torch.linalg.vector_norm(torch.linalg.solve(A, b)))
    value, value_and_grad = _quadratic(A, b)
    origin = torch.zeros(k, dtype=torch.float64)
    ball = lambda x: project_ball(x, radius)  # noqa: E731
    coarse = apg(value, value_and_grad, ball, origin, SolverSpec(1e-2, 20000))
    return A, b, radius, coarse.params, coarse.iterations


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ball_descent_reaches_the_constrained_minimiser(seed: int) -> None:
    """On an ill-conditioned quadratic whose minimiser lies outside the ball, the descent ends
    at the closed-form minimiser on the sphere, where APG ends too."""
    A, b, radius, start, _ = _ill_conditioned(seed)
    value, value_and_grad = _quadratic(A, b)
    point, _, _ = ball_descent(value_and_grad, start, radius, 1e-9, 20000)
    expected = _on_sphere_minimiser(A, b, radius)
    assert float(torch.linalg.vector_norm(point)) == pytest.approx(radius, rel=1e-12)
    torch.testing.assert_close(point, expected, atol=1e-6, rtol=0)
    ball = lambda x: project_ball(x, radius)  # noqa: E731
    reference = apg(value, value_and_grad, ball, torch.zeros_like(b), SolverSpec(1e-9, 20000))
    assert reference.converged
    torch.testing.assert_close(reference.params, expected, atol=1e-6, rtol=0)


def test_ball_descent_preconditioned_by_the_inverse_converges_in_a_few_steps() -> None:
    """A preconditioner close to the inverse Hessian turns the same problem into an easy one."""
    A, b, radius, start, _ = _ill_conditioned(3)
    _, value_and_grad = _quadratic(A, b)
    plain = ball_descent(value_and_grad, start, radius, 1e-9, 5000)
    inverse = torch.linalg.inv(A)
    scaled = ball_descent(value_and_grad, start, radius, 1e-9, 5000, lambda x, v: inverse @ v)
    torch.testing.assert_close(scaled[0], _on_sphere_minimiser(A, b, radius), atol=1e-6, rtol=0)
    assert scaled[2] < plain[2] / 2


def test_ball_descent_where_the_minimiser_lies_inside_finds_it() -> None:
    """f = 1/2 ||x||^2 - b^T x with ||b|| < 1, from a point of the unit sphere: the gradient
    points inwards there, so the descent leaves the sphere and ends at b."""
    A = torch.eye(4, dtype=torch.float64)
    b = torch.tensor([0.1, 0.0, 0.0, 0.0], dtype=torch.float64)
    value, value_and_grad = _quadratic(A, b)
    start = torch.tensor([1.0, 1.0, 0.0, 0.0], dtype=torch.float64)
    point, at_point, _ = ball_descent(value_and_grad, start, 1.0, 1e-10, 1000)
    torch.testing.assert_close(point, b, atol=1e-9, rtol=0)
    assert at_point == pytest.approx(value(point), rel=1e-15)


@pytest.mark.parametrize("seed", [0, 1])
def test_ball_descent_reaches_an_interior_minimiser_of_an_ill_conditioned_quadratic(
    seed: int,
) -> None:
    """The minimiser A^-1 b inside the ball (radius twice its norm), condition 10^4, from the
    origin: the descent ends there, and a near-inverse preconditioner needs a few steps."""
    gen = torch.Generator().manual_seed(seed)
    Q, _ = torch.linalg.qr(torch.randn(12, 12, dtype=torch.float64, generator=gen))
    A = Q @ torch.diag(torch.logspace(0, 4, 12, dtype=torch.float64)) @ Q.T
    b = torch.randn(12, dtype=torch.float64, generator=gen)
    expected = torch.linalg.solve(A, b)
    radius = 2.0 * float(torch.linalg.vector_norm(expected))
    _, value_and_grad = _quadratic(A, b)
    origin = torch.zeros(12, dtype=torch.float64)
    plain = ball_descent(value_and_grad, origin, radius, 1e-10, 20000)
    torch.testing.assert_close(plain[0], expected, atol=1e-6, rtol=0)
    inverse = torch.linalg.inv(A)
    scaled = ball_descent(value_and_grad, origin, radius, 1e-10, 20000, lambda x, v: inverse @ v)
    torch.testing.assert_close(scaled[0], expected, atol=1e-6, rtol=0)
    assert scaled[2] <= 5 < plain[2]


def test_ball_descent_respects_its_budget() -> None:
    A, b, radius, start, _ = _ill_conditioned(4)
    _, value_and_grad = _quadratic(A, b)
    *_, evaluations = ball_descent(value_and_grad, start, radius, 1e-14, 7)
    assert evaluations == 7
