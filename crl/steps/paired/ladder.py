"""The certificate ladder of a paired cell (Li et al.'s score model s(x, y) = x^T M y - y^T B y
with the LSE loss): the rungs that apply, each that does not with its reason, and which certify
that the head learned (crl.steps.signal).

Every rung below the Rademacher one targets L_m(s), the expected LSE loss of a pair (x, y) of
the law with m fresh negatives of its own, T log((1/m) sum_j e^{(s(x, y'_j) - s(x, y)) / T}).
Li et al.'s L(s) (the expectation inside the log) is at least L_m(s) (Jensen) and at most
`lse_inner_bound` above it (Thm 5.1); f = 0 has L_m = L = 0 (`trivial_loss`). Losses are scaled
to [0, 1] by the class's range [-2S, 2S], S = sqrt(2) R (`loss_min`, `loss_range`).

- Gaussian cells (`paired_gaussian` without `clip`): L(s) is exact (`test_loss_exact`), so
  learning is measured, not estimated (`learned`, `learning_gain` exact); no rung certifies
  anything (the features are unbounded: the loss has no finite range, A1 fails).
- `rademacher`: `train_loss + best_bound` in scrl cells whose sampling is certified (gamma_lin
  plus the LSE inner bound bounds L(s) - Lhat(s) at level delta, crl.steps.paired.split_cell);
  in sscrl cells `best_bound` bounds the outer gap L_Y - Lhat only, not L(s).
- `cert_test_set`: held-out pairs, each with m negatives of its own (`test_units` of them:
  fresh draws of the clipped law; for user pairs, disjoint rows of the test split, the anchors'
  pairs and their negatives' y, at most `eval.test_anchors`), are i.i.d. given the head, so
  crl.steps.ladder.test_set_columns bounds L_m(s) at level delta, in both regimes. (The pooled
  `test_loss` is against one pool of negatives: its terms are dependent.)
- `cert_pb_free`, `cert_pb_data` (with `eval.ladder`; crl.steps.ladder): the units are the
  training pairs with their own m negatives, i.i.d. in scrl cells drawn fresh or as distinct
  rows of the split; a Gibbs head is P_R(theta), theta ~ N(theta_hat, sigma^2 I) over
  theta = (M, B) flattened (px py + py^2 values; |s| <= S still holds on the ball for any B);
  the data-dependent prior's mean is the score fitted (APG, at most `prior_iterations`) on the
  first `prior_fraction` of the pairs (its pilot on the first `prior_fraction` of those). The
  problem is convex, so the head is not rotated onto
  the prior (the score model has no rotation symmetry). `gibbs_test_loss` scores each held-out
  unit above by `test_heads` fresh heads of its own. `cert_pb_ref`: the prior's fitted score as
  the reference head (its losses on the bound's pairs, `held_out_terms`), crl.steps.ladder.

Every rung draws from a generator of its own: the cell's other columns do not depend on
whether the ladder runs.
"""

from __future__ import annotations

import torch

from crl.core.ladder_config import PacBayesConfig
from crl.kernels import losses, pac_bayes, score_model
from crl.kernels.score_model import PairedSample, QuadraticScore
from crl.kernels.solver import SolverSpec
from crl.steps import ladder as rungs
from crl.steps.signal import RUNGS, certified_learning_columns

EXACT = "the population loss L(s) is exact here (test_loss_exact): nothing to certify"
UNBOUNDED = "Gaussian features are unbounded: the loss has no finite range (A1 fails)"
REUSED = "the training pairs' negatives reuse rows of the split (not i.i.d.)"
NO_UNITS = "the test split has fewer than m + 1 rows: no held-out pair with m negatives of its own"
DRAW_BUDGET = 2**21  # float64 values per chunk of draws: 16 MiB


def flat(score: QuadraticScore) -> torch.Tensor:
    """theta = (M, B) as one row. Shape: (1, px py + py^2) float64."""
    return torch.cat([score.M.reshape(-1), score.B.reshape(-1)]).double()[None]


def unit_terms(sample: PairedSample, temperature: float) -> pac_bayes.Terms:
    """The LSE loss of head k (theta, flattened as `flat`) on pair rows[k] of the sample with its
    own negatives, in float64 (differentiable in the heads). Shape: sample.negatives (n, m, py)."""
    x, y, neg = sample.x.double(), sample.y.double(), sample.negatives.double()
    px, py = x.shape[1], y.shape[1]

    def terms(heads: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        theta = heads.reshape(heads.shape[0], -1)  # (c, px py + py^2)
        M = theta[:, : px * py].reshape(-1, px, py)
        B = theta[:, px * py :].reshape(-1, py, py)
        ys = torch.cat([y[rows, None], neg[rows]], dim=1)  # (c, m + 1, py): positive first
        xm = torch.bmm(x[rows, None], M)  # (c, 1, py)
        s = (ys * xm).sum(-1) - (torch.bmm(ys, B) * ys).sum(-1)  # (c, m + 1)
        return losses.lse_risk(s[:, 0], s[:, 1:], temperature, reduction="none", path="plain")

    return terms


def _chunk(sample: PairedSample) -> int:
    """Draws per chunk: each holds a head and its pair's m + 1 rows twice."""
    m, py = sample.negatives.shape[1], sample.y.shape[1]
    k = sample.x.shape[1] * py + py * py
    return max(1, DRAW_BUDGET // (k + 2 * (m + 1) * py))


def _part(sample: PairedSample, start: int, stop: int) -> PairedSample:
    return PairedSample(sample.x[start:stop], sample.y[start:stop], sample.negatives[start:stop])


def held_out_terms(score: QuadraticScore, units: PairedSample, temperature: float) -> torch.Tensor:
    """Each held-out pair's LSE loss with its own negatives. Shape: (N,) float64."""
    return score_model.empirical_risk(
        score.M.double(), score.B.double(), units, temperature, reduction="none"
    ).double()


def pac_bayes_columns(
    ladder: PacBayesConfig | None,
    sample: PairedSample,
    score: QuadraticScore,
    held: PairedSample | None,
    iid: bool,
    radius: float,
    temperature: float,
    solver: SolverSpec,
    delta: float,
    scale: rungs.Scale | None,
    gen: torch.Generator,
) -> dict:
    """Both PAC-Bayes rungs of a bounded paired cell (module docstring); `solver` is the
    score's fit, `iid` whether the training pairs with their negatives are i.i.d."""
    for reason, applies in (
        (rungs.NOT_REQUESTED, ladder is not None),
        (rungs.SHARED, not sample.shared),
        (REUSED, iid),
        (rungs.NO_RANGE, scale is not None),
        (NO_UNITS, held is not None),
    ):
        if not applies:
            return rungs.not_applied(reason)
    R, T, n = radius, temperature, int(sample.x.shape[0])

    def on(part: PairedSample) -> rungs.Draws:
        return rungs.draws_on(unit_terms(part, T), int(part.x.shape[0]), _chunk(part), R)

    def units(part: PairedSample) -> rungs.Units:
        return rungs.Units(unit_terms(part, T), int(part.x.shape[0]))

    def fit_prior(within: int, cap: int | None) -> rungs.Prior:
        count = rungs.prior_count(within, ladder.prior_fraction)
        prefix, rest = _part(sample, 0, count), _part(sample, count, within)
        spec = SolverSpec(solver.tol, cap or solver.max_iter)
        prior, _ = score_model.fit(prefix, R, T, spec)
        reference = held_out_terms(prior, rest, T)
        return rungs.Prior(flat(prior), on(rest), within - count, reference, units(rest))

    held_terms, held_chunk, held_n = unit_terms(held, T), _chunk(held), int(held.x.shape[0])

    def held_out(mean: torch.Tensor, sigma: float) -> torch.Tensor:
        return pac_bayes.unit_means(
            mean, sigma, R, held_n, ladder.test_heads, held_terms, held_chunk, gen
        )

    setting = rungs.Setting(R, ladder, delta, scale)
    return rungs.pac_bayes_columns(
        flat(score), n, on(sample), fit_prior, held_out, setting, gen, units(sample), False
    )


def exact_columns(row: dict) -> dict:
    """The ladder's columns of an unclipped Gaussian cell: every rung with its reason."""
    out = rungs.test_set_not_applied(EXACT) | rungs.not_applied(UNBOUNDED)
    out |= {"test_loss_m": None, "test_loss_m_ci": None}
    rungs_none = dict.fromkeys(RUNGS)
    return out | certified_learning_columns(row["trivial_loss"], rungs_none)


def ladder_columns(
    row: dict,
    ladder: PacBayesConfig | None,
    sample: PairedSample,
    score: QuadraticScore,
    held: PairedSample | None,
    solver: SolverSpec,
    gen: torch.Generator,
) -> dict:
    """The ladder's columns of a bounded paired cell (clipped Gaussian, user pairs), with
    `learning_certified_<rung>` (module docstring). `row` has the cell's `regime`, `certified`,
    `train_loss`, `trivial_loss`, `best_bound`, `loss_min`, `loss_range`, `R`, `temperature`
    and `delta`; `held`: the held-out pairs with their own negatives (None: too few rows)."""
    scale = rungs.Scale.of(row["loss_min"], row["loss_range"])
    T, delta = row["temperature"], row["delta"]
    if held is None:
        out = rungs.test_set_not_applied(NO_UNITS) | {"test_loss_m": None, "test_loss_m_ci": None}
    else:
        terms = held_out_terms(score, held, T)
        out = rungs.test_set_columns(terms, scale, delta) | rungs.own_negatives_columns(terms)
    out |= pac_bayes_columns(
        ladder, sample, score, held, row["certified"], row["R"], T, solver, delta, scale, gen
    )
    bound = row.get("best_bound")
    scrl = row["regime"] != "sscrl"
    certified = scrl and row["certified"] and bound is not None
    candidates = {
        "rademacher": row["train_loss"] + bound if certified else None,
        "test_set": out["cert_test_set"],
        "pb_free": out["cert_pb_free"],
        "pb_data": out["cert_pb_data"],
        "pb_ref": out["cert_pb_ref"],
    }
    return out | certified_learning_columns(row["trivial_loss"], candidates)
