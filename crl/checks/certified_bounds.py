"""The certified bounds of docs/theory/bounds.md checked where both sides are computable exactly.

Both statements use a random discrete latent-class law on P = C S feature points phi with
||phi|| <= 1: a class c ~ rho, anchor and positive iid from the class's points, each negative an
independent draw of the marginal law. Risks of a fixed map are then finite sums: L_m(f) over all
P^m negative tuples, Li et al.'s L(f) with the inner expectation in closed form.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import torch

from crl.checks._instances import _F64, Row, _dirichlet, _instance_generator, _randint, _row
from crl.checks._registry import statement
from crl.kernels import certified, losses, stats

if TYPE_CHECKING:
    from crl.checks import Constants

_LOSSES = ("hinge", "logistic", "lse", "info_nce")
_RADII = (0.5, 1.0, 1.5)


def _law(gen: torch.Generator, p: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Points phi (P, p) with ||phi|| <= 1, pair probabilities (P, P), negative law (P,)."""
    classes, points = _randint(gen, 2, 3), _randint(gen, 2, 3)
    phi = torch.randn(classes * points, p, dtype=_F64, generator=gen)
    phi = phi / phi.norm(dim=1, keepdim=True) * torch.rand(len(phi), 1, dtype=_F64, generator=gen)
    prior = _dirichlet(gen, classes)  # (C,)
    within = _dirichlet(gen, classes, points)  # (C, S)
    marginal = (prior[:, None] * within).reshape(-1)  # (P,)
    pairs = torch.zeros(len(phi), len(phi), dtype=_F64)
    for c in range(classes):
        block = slice(c * points, (c + 1) * points)
        pairs[block, block] = prior[c] * torch.outer(within[c], within[c])
    return phi, pairs, marginal


def _psi(loss: str, v: torch.Tensor, temperature: float) -> torch.Tensor:
    """The loss of score differences v_j = t_j - t_0, through crl's kernels. Shape: (..., m)."""
    flat = v.reshape(-1, v.shape[-1])
    zero = torch.zeros(len(flat), dtype=v.dtype)
    if loss in losses.BINARY_LOSSES:
        out = losses.k_negative(-flat, loss=loss)
    elif loss == "lse":
        out = losses.lse_risk(zero, flat, temperature, reduction="none")
    else:
        out = losses.info_nce(zero, flat, temperature, reduction="none")
    return out.reshape(v.shape[:-1])


def _exact_risk(
    f: torch.Tensor,
    pairs: torch.Tensor,
    marginal: torch.Tensor,
    loss: str,
    m: int,
    temperature: float,
) -> float:
    """L_m(f) = sum over (x, y) and all P^m negative tuples. Shape: f (P, d) embeddings."""
    scores = f @ f.T  # (P, P): s(point a, point b)
    tuples = torch.tensor(list(itertools.product(range(len(f)), repeat=m)))  # (P^m, m)
    weight = marginal[tuples].prod(-1)  # (P^m,)
    t0 = scores  # (P, P): t_0 for anchor a, positive b
    neg = scores[:, tuples]  # (P, P^m, m): t_j for anchor a
    v = neg[:, None, :, :] - t0[:, :, None, None]  # (P, P, P^m, m)
    risk = (_psi(loss, v, temperature) * weight).sum(-1)  # (P, P)
    return float((pairs * risk).sum())


@statement("BOUNDS_gamma_S_coverage", instances=24)
def _gamma_s_coverage(seed: int, instance: int, constants: Constants) -> list[Row]:
    """Coverage of gamma_S (docs/theory/bounds.md Thm 3.4): P_S[sup_f |L_m(f) - Lhat(f)| <=
    gamma_scale gamma_S(S, delta)] >= 1 - delta, over F = 6 maps W_k with ||W_k||_F = R (a subset
    of the ball, so the sup over F is below the sup the theorem bounds). L_m exact by enumeration;
    100 independent samples of n = 30 tuples; one row per instance, losses and m in {1, 2}
    cycling. Row: lhs = 1 - delta, rhs = coverage, ci = Wilson upper bound minus coverage."""
    name = "BOUNDS_gamma_S_coverage"
    gen, instance_seed = _instance_generator(seed, name, instance)
    loss = _LOSSES[instance % len(_LOSSES)]
    m = 1 + (instance // len(_LOSSES)) % 2
    R = _RADII[(instance // (2 * len(_LOSSES))) % len(_RADII)]
    p, d, maps, n, samples, delta, T = 3, 2, 6, 30, 100, 0.1, 1.0
    phi, pairs, marginal = _law(gen, p)
    W = torch.randn(maps, d, p, dtype=_F64, generator=gen)
    W = W * (R / torch.linalg.matrix_norm(W))[:, None, None]  # ||W_k||_F = R
    exact = torch.tensor(
        [_exact_risk(phi @ w.T, pairs, marginal, loss, m, T) for w in W], dtype=_F64
    )  # (K,)
    consts = certified.loss_constants(loss, m, R, T)
    flat = torch.multinomial(pairs.reshape(-1), samples * n, replacement=True, generator=gen)
    anchors, positives = flat // len(phi), flat % len(phi)  # (samples n,)
    negatives = torch.multinomial(marginal, samples * n * m, replacement=True, generator=gen)
    negatives = negatives.reshape(samples, n, m)
    anchors, positives = anchors.reshape(samples, n), positives.reshape(samples, n)
    covered, gammas, deviations = 0, [], []
    for s in range(samples):
        x, y, neg = phi[anchors[s]], phi[positives[s]], phi[negatives[s]]  # (n, p), (n, m, p)
        gamma = certified.gamma_s(certified.sample_stats(x, y, neg, False), consts, d, delta)
        fx = torch.einsum("kdp,np->knd", W, x)
        t0 = (fx * torch.einsum("kdp,np->knd", W, y)).sum(-1)  # (K, n)
        tj = torch.einsum("knd,kdnj->knj", fx, torch.einsum("kdp,njp->kdnj", W, neg))
        empirical = _psi(loss, tj - t0[..., None], T).mean(-1)  # (K,)
        deviation = float((empirical - exact).abs().max())
        bound = constants.gamma_scale * gamma.value
        covered += int(deviation <= bound)
        gammas.append(bound)
        deviations.append(deviation)
    coverage = covered / samples
    ci = stats.wilson_upper(covered, samples, constants.z) - coverage
    params = {
        "loss": loss,
        "m": m,
        "R": R,
        "T": T,
        "n": n,
        "maps": maps,
        "samples": samples,
        "delta": delta,
        "P": len(phi),
        "p": p,
        "d": d,
        "gamma_scale": constants.gamma_scale,
        "instance_seed": instance_seed,
    }
    note = (
        f"covered={covered}/{samples}; median sup-deviation="
        f"{sorted(deviations)[samples // 2]:.4g}; median gamma_S={sorted(gammas)[samples // 2]:.4g}"
    )
    return [
        _row(
            name,
            instance,
            "monte_carlo",
            f"{loss}/m={m}",
            params,
            1.0 - delta,
            coverage,
            ci,
            note=note,
        )
    ]


@statement("BOUNDS_lse_inner", instances=30)
def _lse_inner(seed: int, instance: int, constants: Constants) -> list[Row]:
    """Thm 5.1 exactly: 0 <= L(f) - L_m(f) <= min(2R^2, T (e^{R^2/T} - 1)^2 / (2m)) for a map
    with ||W||_F = R on a random discrete law (L(f) with the inner expectation in closed form,
    L_m over all P^m tuples), m in {1, 2, 3}, T in {0.5, 1, 2}. Rows "lower" and "upper"."""
    name = "BOUNDS_lse_inner"
    gen, instance_seed = _instance_generator(seed, name, instance)
    m = 1 + instance % 3
    T = (0.5, 1.0, 2.0)[(instance // 3) % 3]
    R = _RADII[(instance // 9) % len(_RADII)]
    p, d = 3, 2
    phi, pairs, marginal = _law(gen, p)
    W = torch.randn(d, p, dtype=_F64, generator=gen)
    f = phi @ (W * (R / torch.linalg.matrix_norm(W))).T  # (P, d)
    scores = f @ f.T  # (P, P)
    inner = torch.logsumexp(
        (scores[:, None, :] - scores[:, :, None]) / T + marginal.log()[None, None, :], dim=-1
    )  # (P, P): log E e^{v/T}
    population = float((pairs * T * inner).sum())
    finite = _exact_risk(f, pairs, marginal, "lse", m, T)
    bound = certified.lse_inner_bound(m, R, T)
    difference = population - finite
    params = {"m": m, "T": T, "R": R, "P": len(phi), "p": p, "d": d, "instance_seed": instance_seed}
    scale = max(abs(population), abs(finite))
    return [
        _row(name, instance, "exact", "lower", params, 0.0, difference, scale=scale),
        _row(
            name,
            instance,
            "exact",
            "upper",
            params,
            difference,
            bound,
            scale=scale,
            note=f"L={population:.6g}; L_m={finite:.6g}; ratio={difference / bound:.3g}",
        ),
    ]
