"""S3-S5: identities of the latent-class model (docs/theory/statements.md S3, S4, S5;
Saunshi et al. 2019).

Lemma 4.3 (L_sup^mu <= L_un^!=), the decomposition L_un = tau L_un^= + (1 - tau) L_un^!= and
the collision bounds 1 <= L_un^= <= 1 + c0 s(f), on the population quantities of
`crl.kernels.latent`: exact on even instances, Monte Carlo on odd ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from crl.checks._instances import (
    _F64,
    Row,
    _bounded_tanh,
    _dirichlet,
    _instance_generator,
    _log_uniform,
    _randint,
    _row,
)
from crl.checks._registry import statement
from crl.kernels import bounds, latent, losses, stats

if TYPE_CHECKING:
    from crl.checks import Constants


@dataclass(frozen=True)
class _LatentInstance:
    """A model and a bounded f with either exact or Monte Carlo population quantities per loss."""

    method: str
    params: dict[str, object]
    tau: float
    exact: dict[str, latent.Population]
    mc: dict[str, latent.PopulationMC]


def _latent_instance(seed: int, statement: str, instance: int) -> _LatentInstance:
    """Even instance: discrete model, C in [2, 5], S in [1, 3], D in [1, 4] (support N(centre,
    spread^2), centres N(0, sep^2)), Dirichlet(1) prior and point laws. Odd instance: Gaussian
    `LatentClassModel.synthetic`, C in [2, 5], D in [1, 4], uniform or Zipf prior, 50000 Monte
    Carlo samples per quantity. Both: f(x) = R tanh(W x) / sqrt(d), d in [1, 4], R log-uniform
    in [0.3, 3], W standard normal (d, D).
    """
    gen, instance_seed = _instance_generator(seed, statement, instance)
    classes, dim, d = _randint(gen, 2, 5), _randint(gen, 1, 4), _randint(gen, 1, 4)
    R, sep = _log_uniform(gen, 0.3, 3.0), _log_uniform(gen, 0.3, 3.0)
    W = torch.randn(d, dim, dtype=_F64, generator=gen)  # (d, D)
    f = _bounded_tanh(W, R)
    params: dict[str, object] = {
        "classes": classes,
        "D": dim,
        "d": d,
        "R": R,
        "separation": sep,
        "instance_seed": instance_seed,
    }
    if instance % 2 == 0:
        points = _randint(gen, 1, 3)
        spread = _log_uniform(gen, 0.1, 2.0)
        centres = sep * torch.randn(classes, 1, dim, dtype=_F64, generator=gen)
        support = centres + spread * torch.randn(classes, points, dim, dtype=_F64, generator=gen)
        model = latent.LatentClassModel.discrete(
            _dirichlet(gen, classes), support, _dirichlet(gen, classes, points)
        )
        params |= {"model": "discrete", "S": points, "spread": spread}
        exact = {name: latent.population(model, f, name) for name in losses.BINARY_LOSSES}
        return _LatentInstance("exact", params, model.tau, exact, {})
    prior = "uniform" if _randint(gen, 0, 1) == 0 else "zipf"
    noise = _log_uniform(gen, 0.2, 2.0)
    model = latent.LatentClassModel.synthetic(classes, dim, sep, noise, gen, prior=prior)
    samples = 50000
    params |= {"model": "gaussian", "prior": prior, "noise": noise, "samples": samples}
    mc = {name: latent.population_mc(model, f, name, samples, gen) for name in losses.BINARY_LOSSES}
    return _LatentInstance("monte_carlo", params, model.tau, {}, mc)


def _ci_scale(constants: Constants) -> float:
    """Factor from `population_mc`'s 95% half-widths to half-widths at `constants.confidence`."""
    return constants.z / stats.z_value(0.95)


@statement("S3_lemma43", instances=80)
def _s3_lemma43(seed: int, instance: int, constants: Constants) -> list[Row]:
    """Lemma 4.3: L_sup^mu(f) <= L_un^!=(f) (tau < 1 by construction: C >= 2, rho > 0)."""
    statement = "S3_lemma43"
    inst = _latent_instance(seed, statement, instance)
    rows = []
    for name in losses.BINARY_LOSSES:
        p = inst.params | {"loss": name}
        if inst.method == "exact":
            pop = inst.exact[name]
            rows.append(_row(statement, instance, "exact", name, p, pop.L_sup_mu, pop.L_un_neq))
        else:
            mc = inst.mc[name]
            ci = _ci_scale(constants) * math.hypot(mc.L_sup_mu_ci, mc.L_un_neq_ci)
            rows.append(
                _row(
                    statement,
                    instance,
                    "monte_carlo",
                    name,
                    p,
                    mc.L_sup_mu,
                    mc.L_un_neq,
                    ci,
                    note="L_sup^mu is a batch plug-in estimate",
                )
            )
    return rows


@statement("S4_decomposition", instances=80)
def _s4_decomposition(seed: int, instance: int, constants: Constants) -> list[Row]:
    """L_un = tau L_un^= + (1 - tau) L_un^!= (equality; tau exact from the prior).

    Exact rows recombine the conditional risks of `population`, which divides class-restricted
    sums by tau and 1 - tau: a check of that arithmetic. Monte Carlo rows estimate the three
    risks from independent samples: a genuine test of the identity.
    """
    statement = "S4_decomposition"
    inst = _latent_instance(seed, statement, instance)
    tau = inst.tau
    rows = []
    for name in losses.BINARY_LOSSES:
        p = inst.params | {"loss": name, "tau": tau}
        if inst.method == "exact":
            pop = inst.exact[name]
            rhs = tau * pop.L_un_eq + (1 - tau) * pop.L_un_neq
            rows.append(_row(statement, instance, "exact", name, p, pop.L_un, rhs, kind="eq"))
        else:
            mc = inst.mc[name]
            rhs = tau * mc.L_un_eq + (1 - tau) * mc.L_un_neq
            ci = _ci_scale(constants) * math.sqrt(
                mc.L_un_ci**2 + (tau * mc.L_un_eq_ci) ** 2 + ((1 - tau) * mc.L_un_neq_ci) ** 2
            )
            rows.append(
                _row(statement, instance, "monte_carlo", name, p, mc.L_un, rhs, ci, kind="eq")
            )
    return rows


@statement("S5_collision", instances=80)
def _s5_collision(seed: int, instance: int, constants: Constants) -> list[Row]:
    """1 <= L_un^= <= 1 + c0 s(f): rows "<loss>/lower" and "<loss>/upper" (tau > 0 always).

    The upper end is `bounds.collision_upper(s(f), constant=constants.collision_c0)`.
    """
    statement = "S5_collision"
    inst = _latent_instance(seed, statement, instance)
    c0 = constants.collision_c0
    rows = []
    for name in losses.BINARY_LOSSES:
        p = inst.params | {"loss": name, "c0": c0}
        if inst.method == "exact":
            pop = inst.exact[name]
            note = f"s_f={pop.s_f!r}"
            upper = bounds.collision_upper(pop.s_f, constant=c0)
            rows.append(
                _row(statement, instance, "exact", f"{name}/lower", p, 1.0, pop.L_un_eq, note=note)
            )
            rows.append(
                _row(
                    statement, instance, "exact", f"{name}/upper", p, pop.L_un_eq, upper, note=note
                )
            )
        else:
            mc = inst.mc[name]
            scale = _ci_scale(constants)
            note = f"s_f={mc.s_f!r} (batch plug-in estimate)"
            upper = bounds.collision_upper(mc.s_f, constant=c0)
            upper_ci = scale * math.hypot(mc.L_un_eq_ci, c0 * mc.s_f_ci)
            rows.append(
                _row(
                    statement,
                    instance,
                    "monte_carlo",
                    f"{name}/lower",
                    p,
                    1.0,
                    mc.L_un_eq,
                    scale * mc.L_un_eq_ci,
                    note=note,
                )
            )
            rows.append(
                _row(
                    statement,
                    instance,
                    "monte_carlo",
                    f"{name}/upper",
                    p,
                    mc.L_un_eq,
                    upper,
                    upper_ci,
                    note=note,
                )
            )
    return rows
