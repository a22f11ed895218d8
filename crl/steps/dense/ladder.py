"""The certificate ladder of a dense cell beside its uniform bounds (Thms D4-D7,
crl.steps.dense.certify): the test-set certificate, the PAC-Bayes rungs (crl.steps.ladder) with
`dense.eval.ladder`, and which of them certify that the head learned.

Every rung targets the head's population loss with fresh negatives: the expected combined
objective of an image of the law (among those with a match under the cell's correspondence)
with m external negatives drawn i.i.d. from the pool's empirical law (the pool is disjoint from
the training and held-out images, so conditioning on it is legitimate; docs/theory/dense-bounds.md
section 2). Losses are scaled to [0, 1] by the loss range of Thm D4 (`loss_range_lo`,
`loss_range`).

- `cert_test_set`: the held-out images, each with m fresh pool negatives of its own, are i.i.d.
  given the head and the pool, so crl.steps.ladder.test_set_columns bounds L(f) at level delta
  (the kl bound of Langford 2005 or the empirical Bernstein bound), in both regimes (an sscrl
  cell's held-out images too get fresh negatives of their own).
- `cert_pb_free`, `cert_pb_data`: the units are the training images with their own m negatives,
  i.i.d. in scrl cells; an sscrl cell's images share one queue (reason `SHARED`). A draw scores
  a fresh Gibbs head P_R(W) on one image drawn uniformly from the n; the data-dependent prior
  is fitted by APG (the cell's tolerance, at most `prior_iterations` or the head's `max_iter`
  iterations) on the first `prior_fraction` of the training images, in the random order they
  were drawn, its pilot on the first `prior_fraction` of those (`cert_pb_ref`: that prior's
  mean as the reference head, its objective on the other images). `gibbs_test_loss` scores
  each held-out image by `test_heads` fresh heads of its own.
- `learning_certified_<rung>` (crl.steps.signal): `rademacher` is train_loss +
  `best_dense_bound` (which bounds |gap| at level delta in both regimes), the others the
  certificates above, each against the loss of f = 0.

Every rung draws from a generator of its own: the cell's other columns do not depend on
whether the ladder runs.
"""

from __future__ import annotations

import torch

from crl.core.ladder_config import PacBayesConfig
from crl.kernels import pac_bayes
from crl.kernels.solver import SolverSpec
from crl.steps import ladder as rungs
from crl.steps.dense.objective import Batch, fit, objective
from crl.steps.signal import certified_learning_columns

NOT_REQUESTED = "dense.eval.ladder is not set"
DRAW_BUDGET = 2**21  # float64 feature values gathered per chunk of draws: 16 MiB


def _terms(b: Batch, negative_set: str, T: float, lam: float) -> pac_bayes.Terms:
    """The objective of head k on image rows[k] of `b`, with its own negatives."""

    def terms(heads: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        return objective(heads, b.take(rows), negative_set, T, lam)

    return terms


def _chunk(b: Batch) -> int:
    """Draws per chunk: each gathers both views' K positions and m negatives, p values each."""
    k, p = b.phi1.shape[1], b.phi1.shape[2]
    return max(1, DRAW_BUDGET // ((2 * k + b.neg.shape[-2] + 3) * p))


def pac_bayes_columns(
    ladder: PacBayesConfig | None,
    train: Batch,
    head: torch.Tensor,
    test: Batch,
    negative_set: str,
    lam: float,
    radius: float,
    temperature: float,
    solver: SolverSpec,
    delta: float,
    scale: rungs.Scale | None,
    gen: torch.Generator,
) -> dict:
    """Both PAC-Bayes rungs of a dense cell (module docstring); `solver` is the head's fit."""
    for reason, applies in (
        (NOT_REQUESTED, ladder is not None),
        (rungs.SHARED, not train.shared),
        (rungs.NO_RANGE, scale is not None),
    ):
        if not applies:
            return rungs.not_applied(reason)
    R, T = radius, temperature

    def on(b: Batch) -> rungs.Draws:
        return rungs.draws_on(_terms(b, negative_set, T, lam), b.n, _chunk(b), R)

    def fit_prior(units: int, cap: int | None) -> rungs.Prior:
        count = rungs.prior_count(units, ladder.prior_fraction)
        prior_spec = SolverSpec(solver.tol, cap or solver.max_iter)
        prefix, rest = train.part(0, count), train.part(count, units)
        mean = fit(prefix, negative_set, lam, tuple(head.shape), R, T, prior_spec, gen).params
        mean = mean.detach()
        rest_terms = _terms(rest, negative_set, T, lam)
        reference = pac_bayes.fixed_head_losses(mean, rest.n, rest_terms, _chunk(rest))
        units = rungs.Units(rest_terms, rest.n)
        return rungs.Prior(mean, on(rest), rest.n, reference, units)

    held_terms, held_chunk = _terms(test, negative_set, T, lam), _chunk(test)

    def held_out(mean: torch.Tensor, sigma: float) -> torch.Tensor:
        return pac_bayes.unit_means(
            mean, sigma, R, test.n, ladder.test_heads, held_terms, held_chunk, gen
        )

    units = rungs.Units(_terms(train, negative_set, T, lam), train.n)
    setting = rungs.Setting(R, ladder, delta, scale)
    return rungs.pac_bayes_columns(
        head, train.n, on(train), fit_prior, held_out, setting, gen, units
    )


def certified_learning(row: dict) -> dict:
    """`learning_certified_<rung>` of a dense row (module docstring)."""
    bound = row["best_dense_bound"]
    return certified_learning_columns(
        row["trivial_loss"],
        {
            "rademacher": None if bound is None else row["train_loss"] + bound,
            "test_set": row["cert_test_set"],
            "pb_free": row["cert_pb_free"],
            "pb_data": row["cert_pb_data"],
            "pb_ref": row["cert_pb_ref"],
        },
    )
