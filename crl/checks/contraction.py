"""S2: the vector contraction inequality with the constant sqrt(3), exactly
(docs/theory/statements.md S2)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from crl.checks._instances import (
    _F64,
    Row,
    _instance_generator,
    _log_uniform,
    _randint,
    _row,
    _uniform,
)
from crl.checks._registry import statement
from crl.kernels import rademacher

if TYPE_CHECKING:
    from crl.checks import Constants


@statement("S2_contraction", instances=400)
def _s2_contraction(seed: int, instance: int, constants: Constants) -> list[Row]:
    """E sup_v sum_i eps_i h_i(v_i) <= contraction * L * E sup_v sum_it eta_it v_it, exactly.

    V: K in [2, 12] points of (R^d)^m with m in [1, 4], m d <= 12, entries N(0, scale^2),
    scale log-uniform in [0.3, 3]; L uniform in [0.5, 2]. Even instances: h_i(v) =
    L tanh(a_i^T v + b_i) with ||a_i|| = 1; odd: h_i(v) = L ||v - c_i||. Both L-Lipschitz,
    neither zero at 0. Both sides by `rademacher.vector_contraction` (exhaustive signs); the
    rhs rescales its sqrt(3) side to `constants.contraction`.
    """
    statement = "S2_contraction"
    gen, instance_seed = _instance_generator(seed, statement, instance)
    K, m = _randint(gen, 2, 12), _randint(gen, 1, 4)
    d = _randint(gen, 1, 12 // m)
    scale, L = _log_uniform(gen, 0.3, 3.0), _uniform(gen, 0.5, 2.0)
    V = scale * torch.randn(K, m, d, dtype=_F64, generator=gen)  # (K, m, d)
    family = "tanh" if instance % 2 == 0 else "distance"
    if family == "tanh":
        a = torch.randn(m, d, dtype=_F64, generator=gen)
        a = a / a.norm(dim=1, keepdim=True)  # (m, d), unit rows
        b = torch.randn(m, dtype=_F64, generator=gen)  # (m,)

        def h(v: torch.Tensor) -> torch.Tensor:
            return L * torch.tanh(torch.einsum("kmd,md->km", v, a) + b)
    else:
        c = scale * torch.randn(m, d, dtype=_F64, generator=gen)  # (m, d)

        def h(v: torch.Tensor) -> torch.Tensor:
            return L * (v - c).norm(dim=-1)

    sides = rademacher.vector_contraction(V, h, L)
    sup = sides.rhs_sqrt3 / math.sqrt(3.0)  # L E sup <eta, v>
    params = {
        "K": K,
        "m": m,
        "d": d,
        "scale": scale,
        "L": L,
        "h": family,
        "instance_seed": instance_seed,
    }
    maurer = sides.lhs / sides.rhs_maurer if sides.rhs_maurer > 0 else 0.0
    note = (
        f"ratio={sides.ratio:.6g} (lhs / (L E sup)); lhs/maurer_rhs={maurer:.6g}; "
        f"maurer_rhs={sides.rhs_maurer:.6g}"
    )
    return [
        _row(
            statement,
            instance,
            "exact",
            family,
            params,
            sides.lhs,
            constants.contraction * sup,
            note=note,
        )
    ]
