"""S1: facts about the hinge and logistic losses of `crl.kernels.losses`
(docs/theory/statements.md S1).

Convexity, monotonicity, the common Lipschitz constant L0, l(0) = 1 and the oscillation
0 < B_{l,R} <= 4 L0 R^2, each checked on the loss kernels themselves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from crl.checks._instances import _F64, Row, _instance_generator, _log_uniform, _row
from crl.checks._registry import statement
from crl.kernels import bounds, losses

if TYPE_CHECKING:
    from crl.checks import Constants


def _s1_instance(
    seed: int, statement: str, instance: int
) -> tuple[dict[str, object], torch.Tensor, float, torch.Generator]:
    """R log-uniform in [0.05, 10]; grid t (20001,) on [-2R^2 - 1, 2R^2 + 1] (the scores
    |q| <= 2R^2 and a margin); the generator for further draws."""
    gen, instance_seed = _instance_generator(seed, statement, instance)
    R = _log_uniform(gen, 0.05, 10.0)
    reach = 2.0 * R * R + 1.0
    params = {"R": R, "t_range": [-reach, reach], "instance_seed": instance_seed}
    return params, torch.linspace(-reach, reach, 20001, dtype=_F64), R, gen


@statement("S1_convex", instances=64)
def _s1_convex(seed: int, instance: int, constants: Constants) -> list[Row]:
    """Jensen: max over 20000 random (x, y, lam), x, y uniform on the t range, of
    l(lam x + (1 - lam) y) - lam l(x) - (1 - lam) l(y) <= 0."""
    statement = "S1_convex"
    params, t, _, gen = _s1_instance(seed, statement, instance)
    reach = t[-1].item()
    x, y = ((2 * torch.rand(20000, dtype=_F64, generator=gen) - 1) * reach for _ in range(2))
    lam = torch.rand(20000, dtype=_F64, generator=gen)
    params |= {"triples": 20000}
    rows = []
    for name in losses.BINARY_LOSSES:
        ell = losses.binary(name)
        lx, ly = ell(x), ell(y)  # (20000,) each
        gap = ell(lam * x + (1 - lam) * y) - (lam * lx + (1 - lam) * ly)  # (20000,)
        rows.append(
            _row(
                statement,
                instance,
                "exact",
                name,
                params | {"loss": name},
                gap.max().item(),
                0.0,
                note="lhs = max Jensen gap over the triples",
                scale=max(lx.abs().max().item(), ly.abs().max().item()),
            )
        )
    return rows


@statement("S1_monotone", instances=64)
def _s1_monotone(seed: int, instance: int, constants: Constants) -> list[Row]:
    """max_k l(t_k) - l(t_{k+1}) <= 0 on the grid."""
    statement = "S1_monotone"
    params, t, _, _ = _s1_instance(seed, statement, instance)
    rows = []
    for name in losses.BINARY_LOSSES:
        values = losses.binary(name)(t)  # (20001,)
        drop = (values[:-1] - values[1:]).max().item()
        rows.append(
            _row(
                statement,
                instance,
                "exact",
                name,
                params | {"loss": name},
                drop,
                0.0,
                note="lhs = largest decrease between neighbouring grid points",
                scale=values.abs().max().item(),
            )
        )
    return rows


@statement("S1_lipschitz", instances=64)
def _s1_lipschitz(seed: int, instance: int, constants: Constants) -> list[Row]:
    """max_k |l(t_{k+1}) - l(t_k)| / (t_{k+1} - t_k) <= L0 on the grid."""
    statement = "S1_lipschitz"
    params, t, _, _ = _s1_instance(seed, statement, instance)
    rows = []
    for name in losses.BINARY_LOSSES:
        values = losses.binary(name)(t)  # (20001,)
        slope = ((values[1:] - values[:-1]).abs() / (t[1:] - t[:-1])).max().item()
        rows.append(
            _row(
                statement,
                instance,
                "exact",
                name,
                params | {"loss": name},
                slope,
                bounds.L0,
                note="lhs = largest grid slope; rhs = L0 = 1 + 1/ln 2",
            )
        )
    return rows


@statement("S1_value_at_zero", instances=1)
def _s1_value_at_zero(seed: int, instance: int, constants: Constants) -> list[Row]:
    """l(0) = 1 (the instance carries no randomness)."""
    statement = "S1_value_at_zero"
    zero = torch.zeros(1, dtype=_F64)
    return [
        _row(
            statement,
            instance,
            "exact",
            name,
            {"loss": name},
            losses.binary(name)(zero).item(),
            1.0,
            kind="eq",
        )
        for name in losses.BINARY_LOSSES
    ]


@statement("S1_oscillation", instances=64)
def _s1_oscillation(seed: int, instance: int, constants: Constants) -> list[Row]:
    """0 < B_{l,R} = l(2R^2) - l(-2R^2) <= 4 L0 R^2, B from the loss kernels (the closed form
    `bounds.oscillation` goes in the note)."""
    statement = "S1_oscillation"
    params, _, R, _ = _s1_instance(seed, statement, instance)
    a = torch.tensor([2.0 * R * R, -2.0 * R * R], dtype=_F64)
    rows = []
    for name in losses.BINARY_LOSSES:
        ends = losses.binary(name)(a)  # (2,)
        B = (ends[0] - ends[1]).item()
        note = f"bounds.oscillation={bounds.oscillation(name, R)!r}"
        p = params | {"loss": name}
        rows.append(
            _row(statement, instance, "exact", f"{name}/positive", p, 0.0, B, note=note, kind="lt")
        )
        rows.append(
            _row(
                statement,
                instance,
                "exact",
                f"{name}/upper",
                p,
                B,
                4.0 * bounds.L0 * R * R,
                note=note,
            )
        )
    return rows
