"""The bound columns of a cell (docs/theory/bounds.md section 0): certified bounds with their
terms, the data-dependent ingredients, and one holds flag per bound against the gap it bounds.

What each bound is compared with:
- one_negative, scrl: `gap` = held-out L_m estimate - train loss, |gap| <= gamma; for LSE the
  held-out target is Li et al.'s L(s) >= L_m, so the upper side adds `lse_inner_bound`
  (Cor. 3.6): -gamma <= gap <= gamma + lse_inner_bound.
- sscrl: the gamma_* columns are OUTER bounds (Thm 4.1, level delta/2, shared negatives repeated
  per anchor) on |gap_outer|, gap_outer = held-out loss against the same shared training
  negatives (an estimate of L_Y) - train loss. `sscrl_inner` (Thm 4.2, level delta/2) bounds the
  inner part for logistic, LSE and InfoNCE; `sscrl_total` = gamma_S + sscrl_inner bounds |gap|
  (Cor. 4.3). For hinge no inner bound exists (Prop. 4.4): `sscrl_inner_reason` says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from crl.kernels import certified, learner, stats
from crl.kernels.stats import within
from crl.steps import ladder as rungs
from crl.steps.unimodal.sampling import TrainDraw

HINGE_NO_INNER = "hinge: no distribution-free inner bound exists (docs/theory/bounds.md Prop. 4.4)"
NOT_SSCRL = "not sscrl: the negatives are independent per anchor"
SPLIT_REUSE = "the held-out tuples reuse test-split rows (they are not independent)"


def test_set_columns(
    terms: torch.Tensor, fresh: bool, low: float, width: float, delta: float
) -> dict:
    """The test-set certificate on the population loss L_m(f) of the fitted head
    (crl.steps.ladder.test_set_columns) from its held-out tuples' losses, each anchor with its
    own m negatives (for LSE too: L_m, not the pooled `test_loss`): i.i.d. given the head when
    every point is a fresh draw. Shape: terms (n,)."""
    if not fresh:
        return rungs.test_set_not_applied(SPLIT_REUSE)
    return rungs.test_set_columns(terms, rungs.Scale.of(low, width), delta)


def statistics_accumulator(draw: TrainDraw, m: int) -> certified.StatsAccumulator:
    """An empty accumulator of the sample's statistics (holding the shared negatives, if any)."""
    views, sample = draw[0]
    negatives = views.negative[sample.negatives] if draw.shared else None  # (m, p)
    return certified.StatsAccumulator(views.anchor.shape[1], m, negatives)


def feed_statistics(
    acc: certified.StatsAccumulator,
    views: learner.Views,
    sample: learner.Sample,
    chunk: int = 65536,
) -> None:
    """One block's tuples into `acc`, in chunks of about `chunk` rows."""
    rows = max(1, chunk // acc.m)
    for start in range(0, sample.anchors.shape[0], rows):
        part = slice(start, start + rows)
        own = None if sample.shared else views.negative[sample.negatives[part]]  # (b, m, p)
        acc.update(views.anchor[sample.anchors[part]], views.positive[sample.positives[part]], own)


def simultaneous_best(
    stats: certified.SampleStats, consts: certified.LossConstants, m: int, d: int, level: float
) -> float:
    """The smallest of gamma_m, gamma_S and gamma_E as one statement at `level` (`best_bound`).
    gamma_m and gamma_S bound the same empirical Rademacher complexity on one event of T1's
    S-form, so their minimum costs nothing; gamma_E is T1's E-form, another event. The minimum
    of bounds each at `level` would hold only at 2 `level` (union bound), so each form is taken
    at `level` / 2 here (docs/theory/bounds.md section 0, "Reading several columns together")."""
    half = level / 2
    return min(
        certified.gamma_m(stats, consts, d, half).value,
        certified.gamma_s(stats, consts, d, half).value,
        certified.gamma_e(stats.n, m, stats.p, consts, d, half).value,
    )


@dataclass(frozen=True)
class Setting:
    """What a cell's bounds depend on besides its sample: the key's regime, loss and m, the
    head's output width d and radius R, the loss's temperature and the confidence delta."""

    regime: str
    loss: str
    m: int
    d: int
    R: float
    temperature: float
    delta: float


def bound_columns(
    draw: TrainDraw,
    stats: certified.SampleStats,
    setting: Setting,
    gap: float,
    gap_outer: float | None,
) -> dict:
    """Every bound column of the cell, its terms, ingredients and holds flags; `stats` are the
    sample's (`statistics_accumulator` fed every block by `feed_statistics`)."""
    regime, loss, m, d = setting.regime, setting.loss, setting.m, setting.d
    R, temperature, delta = setting.R, setting.temperature, setting.delta
    consts = certified.loss_constants(loss, m, R, temperature)
    shared = regime == "sscrl"
    level = delta / 2 if shared else delta  # Cor. 4.3 splits delta between outer and inner
    g_m = certified.gamma_m(stats, consts, d, level)
    g_s = certified.gamma_s(stats, consts, d, level)
    g_e = certified.gamma_e(stats.n, m, stats.p, consts, d, level)
    # LSE in one_negative/scrl: Li et al.'s L(s) exceeds L_m by at most this (Thm 5.1); in sscrl
    # the inner part is sscrl_inner, which targets L(s) directly
    lse_scrl = loss == "lse" and not shared
    inner_lse = certified.lse_inner_bound(m, R, temperature) if lse_scrl else None
    inner_sscrl = certified.sscrl_inner(consts, level) if shared else None
    if shared:
        compared, upper_extra = gap_outer, 0.0
    else:
        compared, upper_extra = gap, inner_lse or 0.0
    row = {
        "certified": draw.certified,
        "sampling": draw.sampling,
        "loss_min": consts.psi_lo,
        "loss_range": consts.B,
        "loss_lipschitz": consts.L,
        "loss_lipschitz_seed": consts.L_seed,
        "loss_omega": consts.omega,
        "S2": stats.S2,
        "S_pairs": stats.S_pairs,
        "S_neg": stats.S_neg,
        "v_A": stats.v_A,
        "v_0": stats.v_0,
        "v_N": stats.v_N,
        "bound_delta": level,
    }
    for name, cert in (("gamma_m", g_m), ("gamma_S", g_s), ("gamma_E", g_e)):
        row[name] = cert.value
        row[f"{name}_complexity_term"] = cert.complexity_term
        row[f"{name}_concentration_term"] = cert.concentration_term
        row[f"{name}_holds"] = within(compared, cert.value, cert.value + upper_extra)
    row["gamma_S_route"], row["gamma_E_route"] = g_s.route, g_e.route
    row["lse_inner_bound"] = inner_lse
    row["sscrl_inner"] = inner_sscrl
    row["sscrl_inner_reason"] = (
        NOT_SSCRL if not shared else (HINGE_NO_INNER if inner_sscrl is None else None)
    )
    total = g_s.value + inner_sscrl if inner_sscrl is not None else None
    row["sscrl_total"] = total
    row["sscrl_total_holds"] = within(gap, total, total) if total is not None else None
    best = simultaneous_best(stats, consts, m, d, level)
    if shared:
        best = None if inner_sscrl is None else best + inner_sscrl
    elif inner_lse is not None:
        best = best + inner_lse
    row["best_bound"] = best
    row["bound_over_gap"] = best / abs(gap) if best is not None and gap != 0 else None
    return row


@torch.no_grad()
def pool_scores(
    weight: torch.Tensor, views: learner.Views, sample: learner.Sample
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores of held-out anchors against a shared pool: pos (N,), pool (N, K), float64."""
    fa = views.anchor[sample.anchors] @ weight.T  # (N, d)
    fp = views.positive[sample.positives] @ weight.T  # (N, d)
    fk = views.negative[sample.negatives] @ weight.T  # (K, d)
    return (fa * fp).sum(-1).double(), (fa @ fk.T).double()


@torch.no_grad()
def pool_bootstrap_ci(
    pos: torch.Tensor, pool: torch.Tensor, temperature: float, draws: int, gen: torch.Generator
) -> float:
    """95% normal half-width of the pooled LSE estimate over a bootstrap of the pool elements.

    The pool is shared by every held-out anchor, so the anchors' t-interval misses its
    variability (docs/theory/bounds.md 5.4). Resampling pool columns with replacement is a matmul
    of multinomial counts with e^{(s - max)/T}. Shape: pos (N,), pool (N, K); nan if draws < 2.
    """
    if draws < 2:
        return math.nan
    k = pool.shape[1]
    z = (pool - pos[:, None]).div_(temperature)  # (N, K); one buffer, then in place
    top = z.max(dim=1, keepdim=True).values  # (N, 1)
    e = z.sub_(top).exp_()  # (N, K) in (0, 1]
    picks = torch.randint(0, k, (draws, k), generator=gen)
    counts = torch.zeros(draws, k, dtype=torch.float64).scatter_add_(
        1, picks, torch.ones(draws, k, dtype=torch.float64)
    )  # (B, K)
    means = counts @ e.T / k  # (B, N): resampled pool means per anchor
    risk = temperature * (torch.log(means) + top.T).mean(dim=1)  # (B,) pooled LSE risks
    return stats.z_value() * float(risk.std(correction=1))
