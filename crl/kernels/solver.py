"""Accelerated projected gradient (FISTA) with backtracking, adaptive restart and a
gradient-mapping stopping rule: training to a tolerance, so that no cell's n is confounded with
a fixed budget of steps.

Beck & Teboulle (2009), FISTA with backtracking; O'Donoghue & Candes (2015), gradient restart.
`ball_descent` refines a point where APG crawls: preconditioned gradient descent over the ball
(along the sphere, Riemannian, where the ball's constraint is active) with Barzilai-Borwein
steps (Barzilai & Borwein 1988) and a nonmonotone Armijo search (Grippo, Lampariello & Lucidi
1986); APG's stopping rule still decides (`crl.kernels.learner.fit_to_tolerance`).
For a convex objective (the quadratic score model with the LSE loss) the gradient mapping
G = L (y - P(y - grad f(y) / L)) vanishes exactly at the constrained minimiser; for the factored
class f(x)^T f(y) (not convex in W) it certifies a constrained stationary point.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from crl.kernels import _validate

__all__ = ["Solution", "SolverSpec", "apg", "autograd", "ball_descent", "project_ball"]

Value = Callable[[torch.Tensor], float]
ValueAndGrad = Callable[[torch.Tensor], tuple[float, torch.Tensor]]
Projection = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class SolverSpec:
    """Stop when the gradient-mapping norm is below `tol`, or after `max_iter` iterations."""

    tol: float = 1e-5
    max_iter: int = 4000

    def __post_init__(self) -> None:
        _validate.positive("tol", self.tol)
        _validate.at_least("max_iter", self.max_iter, 1)


@dataclass(frozen=True)
class Solution:
    """The last iterate and how the solver got there.

    `criterion` is the gradient-mapping norm of the last iteration; `converged` whether it is
    below the tolerance (otherwise the iteration cap was hit).
    """

    params: torch.Tensor
    value: float
    iterations: int
    criterion: float
    converged: bool
    restarts: int


def project_ball(params: torch.Tensor, radius: float) -> torch.Tensor:
    """Euclidean projection of a parameter vector (any shape) onto {||params||_2 <= radius}."""
    norm = torch.linalg.vector_norm(params)
    return params * (radius / norm) if norm > radius else params


def autograd(objective: Callable[[torch.Tensor], torch.Tensor]) -> tuple[Value, ValueAndGrad]:
    """The (value, value-and-gradient) pair of a differentiable scalar objective, by autograd."""

    def value(params: torch.Tensor) -> float:
        with torch.no_grad():
            return float(objective(params))

    def value_and_grad(params: torch.Tensor) -> tuple[float, torch.Tensor]:
        point = params.detach().requires_grad_(True)
        out = objective(point)
        (grad,) = torch.autograd.grad(out, point)
        return float(out.detach()), grad

    return value, value_and_grad


def _local_lipschitz(
    value_and_grad: ValueAndGrad,
    x_next: torch.Tensor,
    step: torch.Tensor,
    f_next: float,
    f_y: float,
    g_y: torch.Tensor,
) -> float:
    """The curvature along `step` that the step 1/L must dominate: 2 (f(x+) - f(y) - <g, s>) /
    ||s||^2, or, where f(x+) - f(y) is within float rounding of f (near the optimum), the
    gradient difference ||grad f(x+) - grad f(y)|| / ||s|| (as TFOCS does)."""
    squared = float((step * step).sum())
    if squared == 0.0:
        return 0.0
    if abs(f_next - f_y) > 1e-10 * max(1.0, abs(f_y)):
        return 2.0 * (f_next - f_y - float((g_y * step).sum())) / squared
    _, g_next = value_and_grad(x_next)
    return float(torch.linalg.vector_norm(g_next - g_y)) / squared**0.5


def apg(
    value: Value,
    value_and_grad: ValueAndGrad,
    project: Projection,
    start: torch.Tensor,
    spec: SolverSpec,
    lipschitz: float = 1.0,
) -> Solution:
    """Minimise f (`value`, `value_and_grad`) over the set onto which `project` projects,
    from `start`.

    Each iteration: at the extrapolated point y, find by backtracking a step 1/L with
    f(x+) <= f(y) + <g, x+ - y> + L/2 ||x+ - y||^2 where x+ = P(y - g/L) (`_local_lipschitz`:
    a gradient test where f's differences drown in rounding); the gradient-mapping
    norm ||L (y - x+)|| is checked first, before any restart; then momentum, reset whenever
    <G(y), x+ - x> > 0 (gradient restart: no function-value comparison, which float rounding
    decides near the optimum; a momentum-free step is always taken). L is tried 10% lower at
    the next iteration, so the step adapts to the local curvature.
    Shape: start (...) any; the objective returns a scalar.
    """
    _validate.positive("lipschitz", lipschitz)
    x = project(start.detach().clone())
    f_x = value(x)
    y, t, L = x.clone(), 1.0, lipschitz
    criterion, restarts = math.inf, 0
    for iteration in range(1, spec.max_iter + 1):
        f_y, g_y = value_and_grad(y)
        while True:
            x_next = project(y - g_y / L)
            step = x_next - y
            f_next = value(x_next)
            local = _local_lipschitz(value_and_grad, x_next, step, f_next, f_y, g_y)
            if local <= L or L > 1e30:
                break
            L = max(2.0 * L, local)
        criterion = L * float(torch.linalg.vector_norm(step))
        if criterion < spec.tol:
            return Solution(x_next, f_next, iteration, criterion, True, restarts)
        if float((step * (x_next - x)).sum()) < 0.0 and t > 1.0:
            # gradient restart: the momentum points uphill (the mapping G = -L step and
            # x+ - x make an acute angle), so drop it and step again from x
            restarts += 1
            t, y = 1.0, x.clone()
            L *= 0.9
            continue
        t_next = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * t * t))
        y = x_next + ((t - 1.0) / t_next) * (x_next - x)
        x, f_x, t = x_next, f_next, t_next
        L *= 0.9
    return Solution(x, f_x, spec.max_iter, criterion, False, restarts)


Precondition = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _tangent(vector: torch.Tensor, point: torch.Tensor) -> torch.Tensor:
    """The component of `vector` orthogonal to `point` (the sphere's tangent space there)."""
    return vector - (vector @ point) / (point @ point) * point


def ball_descent(
    value_and_grad: ValueAndGrad,
    start: torch.Tensor,
    radius: float,
    tol: float,
    max_steps: int,
    precondition: Precondition | None = None,
    memory: int = 10,
) -> tuple[torch.Tensor, float, int]:
    """Descend f over the ball ||x|| <= radius from `start` (flat, projected onto the ball) with
    a preconditioned direction, Barzilai-Borwein steps and a nonmonotone Armijo search; APG from
    the returned point decides (it is a refinement, not a stopping rule of its own).

    Each step takes D = precondition(x, g) (g itself without one; a descent direction whenever
    the preconditioner is positive definite) and the trial point x - s D, scaled back onto the
    sphere when it leaves the ball; except at a point of the sphere whose step D leaves the ball
    (<x, D> < 0: the constraint is active), where it moves along the sphere instead: D is the
    tangent part of precondition(x, g_t), g_t the tangent gradient (<g, D> = <g_t, P g_t>), and
    the trial radius (x - s D) / ||x - s D||. A trial is accepted when f falls below the largest
    of the last `memory` values by 10^-4 s <g, D> (halving s until it does); the next s is the
    Barzilai-Borwein ratio <dx, dx> / <dx, D+ - D> of the accepted move. Stops when the
    gradient mapping ||x - P(x - g)|| (P the ball's projection: ||g|| inside, about ||g_t||
    where the constraint is active) is below tol, when s falls below 10^-12 without a decrease,
    or after `max_steps` evaluations. Returns the last accepted point, f there and the
    evaluations spent. Shape: start (k,).
    """
    _validate.positive("radius", radius)
    _validate.positive("tol", tol)
    x = project_ball(start.detach(), radius)
    f, g = value_and_grad(x)
    evaluations, history, step = 1, [f], 1.0

    def direction(point: torch.Tensor, grad: torch.Tensor) -> tuple[torch.Tensor, bool]:
        """The step's direction at `point`, and whether it moves along the sphere."""
        scaled = grad if precondition is None else precondition(point, grad)
        on_sphere = float(torch.linalg.vector_norm(point)) >= radius * (1.0 - 1e-12)
        if not on_sphere or float(point @ scaled) >= 0.0:
            return scaled, False
        tangent = _tangent(grad, point)
        if precondition is not None:
            tangent = _tangent(precondition(point, tangent), point)
        return tangent, True

    d, along = direction(x, g)
    while evaluations < max_steps:
        if float(torch.linalg.vector_norm(x - project_ball(x - g, radius))) < tol:
            break
        slope, reference = float(g @ d), max(history[-memory:])
        while True:
            trial = x - step * d
            norm = float(torch.linalg.vector_norm(trial))
            if along or norm > radius:
                trial = trial * (radius / norm)
            f_next, g_next = value_and_grad(trial)
            evaluations += 1
            accepted = f_next <= reference - 1e-4 * step * slope
            if accepted or step < 1e-12 or evaluations >= max_steps:
                break
            step *= 0.5
        if not accepted:
            break
        d_next, along_next = direction(trial, g_next)
        moved = trial - x
        previous = _tangent(d, trial) if along_next else d
        curvature = float(moved @ (d_next - previous))
        step = float(moved @ moved) / curvature if curvature > 0.0 else 1.0
        step = min(max(step, 1e-8), 1e8)
        x, f, g, d, along = trial, f_next, g_next, d_next, along_next
        history.append(f)
    return x, f, evaluations
