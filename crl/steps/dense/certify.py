"""The certified columns of a dense cell (docs/theory/dense-bounds.md): Thms D4-D7 with their
terms and holds flags, and Prop. D9's MI lower confidence bound with the sampling that makes it
valid.

For DenseCL's combined objective (1 - lambda) L_global + lambda L_dense with lambda < 1, each
branch is certified at delta / 2 and the bounds add with weights (1 - lambda, lambda):
sup_W |gap of the sum| <= (1 - lambda) sup |global gap| + lambda sup |dense gap| (union bound).
The global branch is the dense setting with one position per view and external negatives only.

SIMULTANEOUS: `best_dense_bound` and `queue_total` are minima over Thm D4 (D6's S-form) and
Thm D5 (its E-form), two applications of the concentration tool with events of their own; as
one statement at the cell's level, each form enters the minimum at half that level (union
bound; docs/theory/dense-bounds.md section 0). The `gamma_*`/`queue_outer_*` columns are each
at the full level.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from crl.kernels.certified import Certificate
from crl.kernels.dense import bounds as dense_bounds
from crl.kernels.dense import mi as dense_mi
from crl.kernels.dense import queue as dense_queue
from crl.kernels.stats import within


@dataclass(frozen=True)
class Branch:
    """One branch's certified inputs: its training features and correspondence, the negatives
    set ("own"/"ext"), and its weight in the objective.

    Shape: phi1, phi2 (n, K, p) float, match (n, K) int64, negatives (n, m, p) or (m, p) queue.
    """

    phi1: torch.Tensor
    phi2: torch.Tensor
    match: torch.Tensor
    negatives: torch.Tensor
    negative_set: str
    weight: float


def _stats(branch: Branch, R: float, T: float) -> dense_bounds.DenseStats:
    p = branch.phi1.shape[2]
    acc = dense_bounds.DenseStatsAccumulator(p, R, T, branch.negative_set)
    shared = branch.negatives.ndim == 2
    for i in range(branch.phi1.shape[0]):
        a = torch.nonzero(branch.match[i] >= 0).squeeze(1)
        pairs = torch.stack([a, branch.match[i, a]], dim=1)
        neg = branch.negatives if shared else branch.negatives[i]
        acc.update(branch.phi1[i], branch.phi2[i], pairs, neg)
    return acc.finish()


def _weighted(parts: list[tuple[float, Certificate]]) -> Certificate:
    """sum_b weight_b cert_b (one branch: the certificate itself)."""
    if len(parts) == 1:
        return parts[0][1]
    return Certificate(
        sum(w * c.value for w, c in parts),
        sum(w * c.complexity_term for w, c in parts),
        sum(w * c.concentration_term for w, c in parts),
        "+".join(c.route for _, c in parts),
    )


def _put(row: dict, name: str, cert: Certificate, gap: float | None, slack: float) -> None:
    row[name] = cert.value
    row[f"{name}_complexity_term"] = cert.complexity_term
    row[f"{name}_concentration_term"] = cert.concentration_term
    row[f"{name}_route"] = cert.route
    row[f"{name}_holds"] = within(gap, cert.value, cert.value + slack)


@dataclass(frozen=True)
class Setting:
    """What a dense cell's bounds depend on besides its branches: m negatives, the head's
    output width d and radius R, the temperature T and the confidence delta."""

    m: int
    d: int
    R: float
    T: float
    delta: float


def _certificates(
    br: Branch, setting: Setting, level: float, N: int, shared: bool
) -> tuple[dict[str, Certificate], dense_queue.InnerBound | None]:
    """One branch's certificates at `level`, and at level / 2 for the simultaneous minimum
    (SIMULTANEOUS): the per-image bounds (V, S, E forms), or with a shared queue its outer
    bounds (S, E forms) and its inner bound."""
    m, d, R, T = setting.m, setting.d, setting.R, setting.T
    n, k, p = br.phi1.shape[0], br.phi2.shape[1], br.phi1.shape[2]
    stats = _stats(br, R, T)
    full = bool((br.match >= 0).all())
    half = level / 2
    if shared:
        certs = {
            "queue_outer_S": dense_queue.queue_outer_S(stats, d, level, (N, N)),
            "queue_outer_E": dense_queue.queue_outer_E(
                n, k, m, p, d, R, T, level, br.negative_set, full
            ),
            "outer_S_half": dense_queue.queue_outer_S(stats, d, half, (N, N)),
            "outer_E_half": dense_queue.queue_outer_E(
                n, k, m, p, d, R, T, half, br.negative_set, full
            ),
        }
        n_in = k - 1 if br.negative_set == "own" else 0
        return certs, dense_queue.queue_inner(m, R, T, level, n_in)
    certs = {
        "gamma_dense_V": dense_bounds.gamma_dense_V(stats, d, level, (N, N)),
        "gamma_dense_S": dense_bounds.gamma_dense_S(stats, d, level, (N, N)),
        "gamma_dense_E": dense_bounds.gamma_dense_E(
            n, k, m, p, d, R, T, level, br.negative_set, full
        ),
        "S_half": dense_bounds.gamma_dense_S(stats, d, half, (N, N)),
        "E_half": dense_bounds.gamma_dense_E(n, k, m, p, d, R, T, half, br.negative_set, full),
    }
    return certs, None


def _queue_columns(
    row: dict,
    by_name: dict[str, list[tuple[float, Certificate]]],
    inner: list[tuple[float, dense_queue.InnerBound]],
    setting: Setting,
    gap: float | None,
    slack: float,
) -> None:
    """A shared queue's inner bound (weighted over branches), the total of the simultaneous
    outer bound and the inner one, and whether the held-out gap lies within it."""
    value = sum(w * b.value for w, b in inner)
    row["queue_inner"] = value
    row["queue_inner_lip"] = max(b.lip_mu for _, b in inner)
    row["queue_inner_bias"] = sum(w * b.bias for w, b in inner)
    row["queue_inner_lower"] = dense_queue.queue_inner_lower(
        max(setting.m, 2), setting.R, setting.T
    )
    halves = ("outer_S_half", "outer_E_half")
    outer = min(_weighted(by_name[name]).value for name in halves)
    row["queue_total"] = outer + value
    row["queue_total_holds"] = within(gap, row["queue_total"], row["queue_total"] + slack)
    row["best_dense_bound"] = row["queue_total"]


def bound_columns(
    branches: list[Branch],
    shared: bool,
    setting: Setting,
    gaps: dict[str, float | None],
    slack: float,
) -> dict:
    """Every certified column of a dense cell. gaps: "gap" (held-out with fresh negatives minus
    train) and, for a shared queue, "gap_outer" (held-out against the same queue minus train);
    slack: the held-out estimate's CI half-width, allowed above the bound."""
    level = setting.delta / len(branches)  # each branch at delta / 2 when lambda < 1
    row: dict = {"bound_delta": level}
    by_name: dict[str, list[tuple[float, Certificate]]] = {}
    inner: list[tuple[float, dense_queue.InnerBound]] = []
    lo_all, hi_all = 0.0, 0.0
    for br in branches:
        N = dense_bounds.negatives_count(br.phi2.shape[1], setting.m, br.negative_set)
        lo, B = dense_bounds.dense_range(N, N, setting.R, setting.T)
        lo_all, hi_all = lo_all + br.weight * lo, hi_all + br.weight * (lo + B)
        certs, inner_bound = _certificates(br, setting, level, N, shared)
        if inner_bound is not None:
            inner.append((br.weight, inner_bound))
        for name, cert in certs.items():
            by_name.setdefault(name, []).append((br.weight, cert))
    row["loss_range_lo"], row["loss_range_hi"] = lo_all, hi_all
    names = (
        ("queue_outer_S", "queue_outer_E")
        if shared
        else ("gamma_dense_V", "gamma_dense_S", "gamma_dense_E")
    )
    compared = gaps.get("gap_outer") if shared else gaps.get("gap")
    for name in names:
        _put(row, name, _weighted(by_name[name]), compared, slack)
    if shared:
        _queue_columns(row, by_name, inner, setting, gaps.get("gap"), slack)
    else:
        row["best_dense_bound"] = min(_weighted(by_name[n]).value for n in ("S_half", "E_half"))
    gap = gaps.get("gap")
    row["dense_bound_over_gap"] = (
        row["best_dense_bound"] / abs(gap) if gap is not None and gap != 0 else None
    )
    row["dense_bound_over_range"] = row["best_dense_bound"] / (hi_all - lo_all)
    return row


def mi_columns(
    losses: torch.Tensor | None, m: int, R: float, T: float, delta: float, why: str
) -> dict:
    """Prop. D9 on held-out images with disjoint marginal negatives, or nulls with the reason."""
    row = {"mi_log1p_m": math.log1p(m)}
    if losses is None:
        return {
            **row,
            **dict.fromkeys(
                ("mi_estimate", "mi_lcb", "mi_margin", "mi_lo", "mi_hi", "mi_ceiling"), None
            ),
            "mi_saturated": None,
            "mi_images": 0,
            "mi_target": None,
            "mi_sampling": why,
            "mi_within_log1p_m": None,
        }
    bound = dense_mi.mi_lcb(losses, m, R, T, delta, negatives="marginal")
    return {
        **row,
        "mi_estimate": bound.estimate,
        "mi_lcb": bound.lcb,
        "mi_margin": bound.margin,
        "mi_lo": bound.interval[0],
        "mi_hi": bound.interval[1],
        "mi_ceiling": bound.ceiling,
        "mi_saturated": bound.saturated,
        "mi_images": int(losses.shape[0]),
        "mi_target": bound.target,
        "mi_sampling": bound.sampling,
        "mi_within_log1p_m": bool(bound.estimate <= math.log1p(m) and bound.lcb <= math.log1p(m)),
    }
