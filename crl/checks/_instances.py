"""Rows and random instance parameters shared by every statement module.

`_row` is the one definition of a result row (its keys are `ROW_KEYS`); the `_uniform`, ...
helpers draw instance parameters from the per-instance generator of `_instance_generator`.
"""

from __future__ import annotations

import json
import math

import torch

from crl.kernels import latent
from crl.kernels.seeding import derive_seed

_F64 = torch.float64
_REL_TOL = 1e-9
Row = dict[str, object]


def _row(
    statement: str,
    instance: int,
    method: str,
    quantity: str,
    params: dict[str, object],
    lhs: float,
    rhs: float,
    ci: float = 0.0,
    note: str = "",
    kind: str = "le",
    scale: float = 0.0,
) -> Row:
    """One result row; `kind` is "le" (lhs <= rhs), "eq" (lhs = rhs) or "lt" (lhs < rhs).

    `scale` is the magnitude of the values that lhs and rhs were computed from (e.g. the loss
    values inside a Jensen gap), so that the rounding tolerance is relative to them.
    """
    lhs, rhs, ci = float(lhs), float(rhs), float(ci)
    tol = _REL_TOL * max(1.0, abs(lhs), abs(rhs), scale)
    if kind == "eq":
        slack = -abs(lhs - rhs)
        holds = abs(lhs - rhs) <= ci + tol
    elif kind == "lt":
        slack = rhs - lhs
        holds = slack > tol
    else:
        slack = rhs - lhs
        holds = lhs - rhs <= ci + tol
    return {
        "statement": statement,
        "instance": instance,
        "method": method,
        "quantity": quantity,
        "params": json.dumps(params, sort_keys=True),
        "lhs": lhs,
        "rhs": rhs,
        "slack": slack,
        "holds": bool(holds) and math.isfinite(slack),
        "ci": ci,
        "note": note,
    }


# The keys of every row, in order: those `_row` writes.
ROW_KEYS: tuple[str, ...] = tuple(_row("", 0, "exact", "", {}, 0.0, 0.0))


def _instance_generator(seed: int, statement: str, instance: int) -> tuple[torch.Generator, int]:
    """The generator of one (seed, statement, instance) and its seed (reported in params)."""
    instance_seed = derive_seed(seed, "check", statement, instance)
    return torch.Generator().manual_seed(instance_seed), instance_seed


def _uniform(gen: torch.Generator, low: float, high: float) -> float:
    return low + (high - low) * torch.rand((), dtype=_F64, generator=gen).item()


def _log_uniform(gen: torch.Generator, low: float, high: float) -> float:
    return math.exp(_uniform(gen, math.log(low), math.log(high)))


def _randint(gen: torch.Generator, low: int, high: int) -> int:
    """Uniform integer in [low, high] (both ends included)."""
    return int(torch.randint(low, high + 1, (), generator=gen))


def _dirichlet(gen: torch.Generator, *shape: int) -> torch.Tensor:
    """Rows uniform on the simplex (Dirichlet(1) as normalised exponentials).  Shape: shape."""
    e = -torch.log1p(-torch.rand(*shape, dtype=_F64, generator=gen))
    return e / e.sum(-1, keepdim=True)


def _bounded_tanh(W: torch.Tensor, R: float) -> latent.Representation:
    """f(x) = R tanh(W x) / sqrt(d): every coordinate is below R / sqrt(d), so ||f(x)|| < R.

    Shape: W (d, D); f maps (..., D) -> (..., d).
    """
    scale = R / math.sqrt(W.shape[0])
    return lambda x: scale * torch.tanh(x @ W.T)
