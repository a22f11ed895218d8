"""The cell's head fitted by the config's learner (crl.kernels.learner): Adam steps, or APG to
the solver's tolerance, with how the solver ended."""

from __future__ import annotations

import torch

from crl.core.config import Config
from crl.kernels import learner
from crl.kernels.solver import SolverSpec


def fit_head(
    config: Config, blocks: learner.Blocks, loss: str, gen: torch.Generator
) -> tuple[torch.Tensor, dict]:
    """W (d, p) and the solver columns (`solver_iterations`, `solver_criterion`,
    `solver_converged`; the last two None for Adam)."""
    model, temperature = config.model, config.eval.temperature
    spec = learner.FitSpec(model.d, model.R, model.steps, model.batch, model.lr)
    if model.solver != "apg":
        weight = learner.fit(blocks, spec, loss, temperature, gen)
        return weight, {
            "solver_iterations": model.steps,
            "solver_criterion": None,
            "solver_converged": None,
        }
    solver = SolverSpec(model.tol, model.max_iter)
    weight, solution = learner.fit_to_tolerance(blocks, spec, loss, temperature, gen, solver)
    return weight, {
        "solver_iterations": solution.iterations,
        "solver_criterion": solution.criterion,
        "solver_converged": solution.converged,
    }
