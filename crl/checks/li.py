"""Li et al. 2026 on the two-modality Gaussian (docs/theory/statements.md B): Fisher consistency
of the optimal score and the calibration inequality of Thm 3.4, with common random numbers."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from crl.checks._instances import _F64, Row, _instance_generator, _randint, _row, _uniform
from crl.checks._registry import statement
from crl.kernels import bounds, latent, losses, metrics, stats

if TYPE_CHECKING:
    from crl.checks import Constants

_CALIBRATION_STEPS = (2.0, 1.0, 0.5, 0.25, 0.125)


def _two_modality(gen: torch.Generator) -> tuple[latent.TwoModalityGaussian, dict[str, object]]:
    """Dx, Dy in [1, 3]; A = a G / sqrt(Dx) with G standard normal, a in [0.5, 1.5];
    noise s in [0.5, 1.5]; T in {0.5, 1, 2}."""
    dx, dy = _randint(gen, 1, 3), _randint(gen, 1, 3)
    amplitude, noise = _uniform(gen, 0.5, 1.5), _uniform(gen, 0.5, 1.5)
    A = amplitude * torch.randn(dy, dx, dtype=_F64, generator=gen) / math.sqrt(dx)
    model = latent.TwoModalityGaussian(A, noise)
    T = (0.5, 1.0, 2.0)[_randint(gen, 0, 2)]
    params = {
        "Dx": dx,
        "Dy": dy,
        "amplitude": amplitude,
        "noise": noise,
        "temperature": T,
        "mutual_information": model.mutual_information,
    }
    return model, params


def _paired(
    model: latent.TwoModalityGaussian, n: int, m: int, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Common random numbers: anchors x (n, Dx), positives y (n, Dy), negatives (n, m, Dy)."""
    x, y = model.sample_pairs(n, gen)
    return x, y, model.sample_negatives(n, m, gen)


@statement("LI_fisher_consistency", instances=30)
def _li_fisher_consistency(seed: int, instance: int, constants: Constants) -> list[Row]:
    """s* = T log(p+_x / p-) beats s* + eps g in AUC (higher) and LSE risk (lower).

    Directions g (y-dependent, so not of the invariant form g(x)): "bilinear" y^T B x with
    ||B||_F = 1, "linear" a^T y with ||a|| = 1, "quadratic" +-||y||^2 / Dy; eps in
    (0.5 T, T). n = 4000 anchors, m = 256 negatives each, the same draws for every score; a
    row compares one perturbed score with s* and its ci is the half-width of the paired
    per-anchor difference. The LSE estimate (log of an m-average) is biased low by O(1/m) for
    both scores; the bias difference is far below the excess risk at these eps.
    """
    statement = "LI_fisher_consistency"
    gen, instance_seed = _instance_generator(seed, statement, instance)
    model, params = _two_modality(gen)
    T = params["temperature"]
    dx, dy = model.transform.shape[1], model.transform.shape[0]
    n, m = 4000, 256
    B = torch.randn(dy, dx, dtype=_F64, generator=gen)
    B = B / B.norm()
    a = torch.randn(dy, dtype=_F64, generator=gen)
    a = a / a.norm()
    sign = 1.0 if _randint(gen, 0, 1) == 0 else -1.0
    directions: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
        "bilinear": lambda u, v: torch.einsum("...i,ij,...j->...", v, B, u),
        "linear": lambda u, v: v @ a,
        "quadratic": lambda u, v: sign * v.square().sum(-1) / dy,
    }
    x, y, y_neg = _paired(model, n, m, gen)
    x_neg = x[:, None, :].expand(n, m, dx)
    pos_star, neg_star = model.optimal_score(x, y, T), model.optimal_score(x_neg, y_neg, T)
    auc_star = metrics.retrieval_auc(pos_star, neg_star, reduction="none")  # (n,)
    lse_star = losses.lse_risk(pos_star, neg_star, T, reduction="none")  # (n,)
    params |= {"n": n, "m": m, "instance_seed": instance_seed}
    rows = []
    for direction, g in directions.items():
        g_pos, g_neg = g(x, y), g(x_neg, y_neg)  # (n,), (n, m)
        for eps in (0.5 * T, T):
            pos, neg = pos_star + eps * g_pos, neg_star + eps * g_neg
            p = params | {"direction": direction, "eps": eps}
            auc = metrics.retrieval_auc(pos, neg, reduction="none")  # (n,)
            auc_diff, auc_ci = stats.mean_ci(auc_star - auc, constants.confidence)
            rows.append(
                _row(
                    statement,
                    instance,
                    "monte_carlo",
                    f"auc/{direction}/eps={eps:g}",
                    p,
                    auc_star.mean().item() - auc_diff,
                    auc_star.mean().item(),
                    auc_ci,
                    note="lhs = E(s* + eps g), rhs = E(s*)",
                )
            )
            lse = losses.lse_risk(pos, neg, T, reduction="none")  # (n,)
            lse_diff, lse_ci = stats.mean_ci(lse - lse_star, constants.confidence)
            rows.append(
                _row(
                    statement,
                    instance,
                    "monte_carlo",
                    f"lse/{direction}/eps={eps:g}",
                    p,
                    lse_star.mean().item(),
                    lse_star.mean().item() + lse_diff,
                    lse_ci,
                    note="lhs = L(s*), rhs = L(s* + eps g); m-negative estimates",
                )
            )
    return rows


@statement("LI_calibration", instances=60)
def _li_calibration(seed: int, instance: int, constants: Constants) -> list[Row]:
    """Li et al. Thm 3.4: E* - E(s_t) <= sqrt((factor / T)(L(s_t) - L*)), s_t = s* + t g.

    g(x, y) = y^T B x with ||B||_F = 1 and t = c T for c in (2, 1, 0.5, 0.25, 0.125) (t -> 0).
    For this g the excess risk has a closed form: exp(s*(x, y') / T) = p+_x(y') / p-(y'), so
    E_{y'~p-} exp(s_t(x, y') / T) = E_{Y'~N(Ax, s^2 I)} exp(t Y'^T B x / T)
        = exp(t x^T B^T A x / T + t^2 s^2 ||B x||^2 / (2 T^2)),
    E_{p+} s_t = T I + t tr(B^T A), hence L(s_t) = -T I + t^2 s^2 ||B||_F^2 / (2 T) and
    L(s_t) - L* = t^2 s^2 / (2 T) with L* = -T I (`optimal_lse`). The rhs,
    `bounds.calibration_rhs(L(s_t), L*, T, factor)`, is therefore exact; E* - E(s_t) is a paired
    Monte Carlo difference (n = 4000 anchors, m = 64 negatives each, the same draws for s* and
    s_t).
    """
    statement = "LI_calibration"
    gen, instance_seed = _instance_generator(seed, statement, instance)
    model, params = _two_modality(gen)
    T = params["temperature"]
    dx, dy = model.transform.shape[1], model.transform.shape[0]
    n, m = 4000, 64
    B = torch.randn(dy, dx, dtype=_F64, generator=gen)
    B = B / B.norm()
    x, y, y_neg = _paired(model, n, m, gen)
    x_neg = x[:, None, :].expand(n, m, dx)
    pos_star, neg_star = model.optimal_score(x, y, T), model.optimal_score(x_neg, y_neg, T)
    auc_star = metrics.retrieval_auc(pos_star, neg_star, reduction="none")  # (n,)
    g_pos = torch.einsum("ni,ij,nj->n", y, B, x)  # (n,)
    g_neg = torch.einsum("nmi,ij,nmj->nm", y_neg, B, x_neg)  # (n, m)
    L_star = model.optimal_lse(T)
    params |= {
        "n": n,
        "m": m,
        "direction": "bilinear",
        "L_star": L_star,
        "calibration_factor": constants.calibration_factor,
        "instance_seed": instance_seed,
    }
    rows = []
    for c in _CALIBRATION_STEPS:
        t = c * T
        excess = t * t * model.noise**2 / (2.0 * T)
        auc = metrics.retrieval_auc(pos_star + t * g_pos, neg_star + t * g_neg, reduction="none")
        gap, ci = stats.mean_ci(auc_star - auc, constants.confidence)  # E* - E(s_t)
        # L(s_t) = L* + excess >= L* exactly, so no clipping (clip is for two estimates)
        rhs = bounds.calibration_rhs(
            L_star + excess, L_star, T, factor=constants.calibration_factor, clip=False
        )
        rows.append(
            _row(
                statement,
                instance,
                "monte_carlo",
                f"t={t:g}",
                params | {"t": t, "excess_risk": excess},
                gap,
                rhs,
                ci,
                note=f"E*={auc_star.mean().item():.6g}; L(s_t)-L*={excess:.6g} exact",
            )
        )
    return rows
