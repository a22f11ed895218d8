"""S7: coverage of the generalization gap Gamma_M(S, delta) (docs/theory/statements.md S7, the
seed theorem)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from crl.checks._instances import _F64, Row, _dirichlet, _instance_generator, _randint, _row
from crl.checks._registry import statement
from crl.kernels import bounds, latent, losses, rademacher, stats
from crl.kernels.seeding import derive_seed

if TYPE_CHECKING:
    from crl.checks import Constants

_S7_RADII = (0.5, 1.0, 2.0)
_S7_DELTAS = (0.05, 0.1, 0.5)


def _sup_deviation(
    model: latent.LatentClassModel, W: torch.Tensor, q: torch.Tensor, name: str
) -> torch.Tensor:
    """Per sample, sup_k |Lhat_un(f_k) - L_un(f_k)| over the K maps W (K, d, D), the empirical
    losses from the triplet scores q (K, N, M); exact L_un from `latent.population`. Shape (N,)."""
    exact = torch.tensor(
        [latent.population(model, lambda z, w=w: z @ w.T, name).L_un for w in W], dtype=_F64
    )  # (K,)
    empirical = losses.binary(name)(q).mean(-1)  # (K, N)
    return (empirical - exact[:, None]).abs().amax(0)


@statement("S7_coverage", instances=54)
def _s7_coverage(seed: int, instance: int, constants: Constants) -> list[Row]:
    """Coverage of Gamma_M: P_S[sup_f |L_un(f) - Lhat_un(f)| <= gamma_scale Gamma_M(S, delta)].

    F = K = 8 linear maps f_k(x) = W_k x on a random discrete model (C in [2, 4], S in [2, 3],
    D in [2, 3], d = 2), jointly scaled so that R = max_k max_x ||W_k x|| is a target from
    (0.5, 1, 2). L_un(f_k) exact from `population`; 200 independent samples S of M = 40
    triplets; per sample, sup_k |L_un - Lhat_un| exactly over the class and
    R_S(F) = E_eps max_k sum eps f_k(outputs) by `rademacher.finite` (256 sign draws; its Monte
    Carlo error, ~1% of R_S, is ignored). Row per loss, method "monte_carlo" (the coverage is a
    frequency over samples): lhs = 1 - delta, rhs = coverage, ci = Wilson upper bound minus
    coverage, so it fails when coverage < 1 - delta beyond the interval.
    """
    statement = "S7_coverage"
    gen, instance_seed = _instance_generator(seed, statement, instance)
    classes, points, dim = _randint(gen, 2, 4), _randint(gen, 2, 3), _randint(gen, 2, 3)
    maps, d, M, samples, draws = 8, 2, 40, 200, 256
    R_target = _S7_RADII[instance % len(_S7_RADII)]
    delta = _S7_DELTAS[(instance // len(_S7_RADII)) % len(_S7_DELTAS)]
    support = torch.randn(classes, points, dim, dtype=_F64, generator=gen)  # (C, S, D)
    model = latent.LatentClassModel.discrete(
        _dirichlet(gen, classes), support, _dirichlet(gen, classes, points)
    )
    W = torch.randn(maps, d, dim, dtype=_F64, generator=gen)  # (K, d, D)
    W = W * (R_target / torch.einsum("kej,caj->kcae", W, support).norm(dim=-1).max().item())
    R = torch.einsum("kej,caj->kcae", W, support).norm(dim=-1).max().item()
    trip = model.sample_triplets(samples * M, gen)
    x = torch.stack([trip.x, trip.x_pos, trip.x_neg]).reshape(3, samples, M, dim)
    feats = torch.einsum("kej,rsmj->krsme", W, x)  # (K, 3, N, M, d)
    fx, fpos, fneg = (feats[:, r].reshape(-1, d) for r in range(3))  # (K N M, d) each
    q = losses.triplet_score(fx, fpos, fneg).reshape(maps, samples, M)  # (K, N, M)
    values = feats.permute(2, 0, 1, 3, 4).reshape(samples, maps, 3 * M, d)  # (N, K, 3M, d)
    rs = [
        rademacher.finite(values[s], draws, derive_seed(instance_seed, "signs", s)).value
        for s in range(samples)
    ]
    params = {
        "classes": classes,
        "S": points,
        "D": dim,
        "d": d,
        "maps": maps,
        "M": M,
        "samples": samples,
        "R": R,
        "delta": delta,
        "gamma_scale": constants.gamma_scale,
        "sign_draws": draws,
        "instance_seed": instance_seed,
    }
    rows = []
    for name in losses.BINARY_LOSSES:
        deviation = _sup_deviation(model, W, q, name)  # (N,)
        gamma = torch.tensor(
            [bounds.saunshi_gamma(r, M, R, delta, name).value for r in rs], dtype=_F64
        )  # (N,)
        gamma = gamma * constants.gamma_scale
        covered = int((deviation <= gamma).sum())
        coverage = covered / samples
        ci = stats.wilson_upper(covered, samples, constants.z) - coverage
        note = (
            f"covered={covered}/{samples}; median sup-deviation="
            f"{deviation.median().item():.4g}; median Gamma={gamma.median().item():.4g}"
        )
        rows.append(
            _row(
                statement,
                instance,
                "monte_carlo",
                name,
                params | {"loss": name},
                1.0 - delta,
                coverage,
                ci,
                note=note,
            )
        )
    return rows
