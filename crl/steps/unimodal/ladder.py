"""The certificate ladder of a single-modality cell beyond the test-set certificate
(`eval.ladder`, crl.core.ladder_config): the PAC-Bayes-kl certificates (crl.steps.ladder, whose
docstring states them) on the cell's anchors, and the uniform deviation.

Every rung targets L_m(f), the expected m-negative loss of a tuple with fresh negatives, for
every loss: for LSE that is the per-anchor loss with m negatives (Li et al.'s L(s) is at most
`lse_inner_bound` above it), not the pooled `test_loss`.

- The units are the anchors' tuples (an anchor, its positive, its m negatives), i.i.d. in
  one_negative and scrl cells drawn from the law or from the split without reuse; a draw scores
  a fresh Gibbs head on one tuple drawn uniformly from the sample
  (crl.kernels.pac_bayes.gibbs_draws, one tuple per draw whatever n is). The data-dependent
  prior is fitted by the cell's solver on the first `prior_fraction` of the anchors (its pilot
  on the first `prior_fraction` of those); its mean is `cert_pb_ref`'s reference head (its
  losses on the other anchors, block by block). A streamed sample splits at the block boundary
  nearest to the share (crl.steps.unimodal.sampling.split_anchors).
- `gibbs_test_loss` scores each held-out anchor by `test_heads` fresh heads of its own
  (crl.kernels.pac_bayes.gibbs_anchor_means).
- `uniform_deviation_est` (`_ci`): a lower estimate of sup_W (L_m(W) - Lhat_S(W)) over the ball:
  W* maximises Lhat_search(W) - Lhat_A(W) by projected gradient ascent from the fitted head and
  `ascent_starts` - 1 random points of norm R (search: the cell's held-out tuples; A: the first
  `ascent_anchors` training anchors, i.i.d. like the rest), then L_m(W*) - Lhat_S(W*) is
  measured with every training anchor and L_m(W*) on fresh tuples (95% normal half-width):
  any W* gives a lower estimate, so the search may use a part of S; needs fresh draws of the
  law.

A rung that does not apply gives None and its `_reason`.
"""

from __future__ import annotations

import math

import torch

from crl.core.config import Config
from crl.core.ladder_config import LadderConfig
from crl.kernels import learner, pac_bayes, stats
from crl.kernels.solver import SolverSpec, apg, project_ball
from crl.steps import ladder as rungs
from crl.steps.keys import CellKey
from crl.steps.unimodal import sampling
from crl.steps.unimodal.fit import fit_head

NOT_REQUESTED = rungs.NOT_REQUESTED
SHARED = rungs.SHARED
REUSED = "the training tuples reuse rows of the split (not i.i.d.)"
NOT_FRESH = "needs fresh draws of the law (synthetic data)"

PB_COLUMNS = rungs.PB_COLUMNS
UD_COLUMNS = ("uniform_deviation_est", "uniform_deviation_est_ci", "uniform_deviation_reason")

Block = tuple[learner.Views, learner.Sample]


def _pac_bayes_reason(
    ladder: LadderConfig | None, draw: sampling.TrainDraw, scale: rungs.Scale | None
) -> str | None:
    """Why the PAC-Bayes rungs do not apply to the cell, or None."""
    for reason, applies in (
        (NOT_REQUESTED, ladder is not None),
        (SHARED, not draw.shared),
        (REUSED, draw.certified),
        (rungs.NO_RANGE, scale is not None),
    ):
        if not applies:
            return reason
    return None


def pac_bayes_columns(
    config: Config,
    key: CellKey,
    draw: sampling.TrainDraw,
    weight: torch.Tensor,
    held: Block,
    scale: rungs.Scale | None,
    gen: torch.Generator,
) -> dict:
    """Both PAC-Bayes rungs of the cell, the Gibbs heads' held-out risks and the excess ratio."""
    ladder, ev = config.eval.ladder, config.eval
    reason = _pac_bayes_reason(ladder, draw, scale)
    if reason is not None:
        return rungs.not_applied(reason)
    R, T = config.model.R, ev.temperature

    def on(blocks: learner.Blocks) -> rungs.Draws:
        def draws(
            mean: torch.Tensor, sigma: float, count: int, g: torch.Generator
        ) -> tuple[torch.Tensor, torch.Tensor]:
            return pac_bayes.gibbs_draws(mean, sigma, R, blocks, count, key.loss, T, g)

        return draws

    def units(blocks: sampling.TrainDraw) -> rungs.Units | None:
        """The sample's first block, for the posterior's optimisation (None without one)."""
        if ladder.posterior_steps == 0:
            return None
        views, sample = blocks[0]
        terms = pac_bayes.tuple_terms(views, sample, key.loss, T)
        return rungs.Units(terms, int(sample.anchors.shape[0]))

    def fit_prior(count: int, cap: int | None) -> rungs.Prior:
        part = draw if count >= draw.n else sampling.split_anchors(draw, count)[0]
        prior_draw, rest = sampling.split_anchors(
            part, rungs.prior_count(part.n, ladder.prior_fraction)
        )
        prior = fit_head(_prior_config(config, cap), prior_draw, key.loss, gen)[0].double()
        reference = pac_bayes.block_reference_losses(prior, rest, key.loss, T)
        return rungs.Prior(prior, on(rest), rest.n, reference, units(rest))

    def held_out(mean: torch.Tensor, sigma: float) -> torch.Tensor:
        return pac_bayes.gibbs_anchor_means(
            mean, sigma, R, held, ladder.test_heads, key.loss, T, gen
        )

    setting = rungs.Setting(R, ladder, ev.delta, scale)
    return rungs.pac_bayes_columns(
        weight, draw.n, on(draw), fit_prior, held_out, setting, gen, units(draw)
    )


def _prior_config(config: Config, cap: int | None) -> Config:
    """The config a data-dependent prior (or its pilot) is fitted with: the model's, its
    iteration cap replaced by `cap` where set."""
    if cap is None:
        return config
    model = config.model.model_copy(update={"max_iter": cap, "steps": cap})
    return config.model_copy(update={"model": model})


def uniform_deviation_columns(
    draw: sampling.TrainDraw,
    weight: torch.Tensor,
    search: Block,
    fresh: Block | None,
    loss: str,
    temperature: float,
    radius: float,
    ladder: LadderConfig | None,
    gen: torch.Generator,
) -> dict:
    """The uniform deviation estimate (module docstring); `fresh` None: not fresh draws."""
    reason = NOT_REQUESTED if ladder is None or ladder.ascent_starts == 0 else None
    reason = reason or (NOT_FRESH if fresh is None else None)
    if reason is not None:
        return {name: None for name in UD_COLUMNS[:-1]} | {"uniform_deviation_reason": reason}
    d, p = weight.shape
    part = sampling.first_anchors(draw, ladder.ascent_anchors)
    train_value, train_grad = learner.mean_loss(part, d, loss, temperature)
    search_value, search_grad = learner.mean_loss([search], d, loss, temperature)

    def value(flat: torch.Tensor) -> float:
        return train_value(flat) - search_value(flat)

    def value_and_grad(flat: torch.Tensor) -> tuple[float, torch.Tensor]:
        (a, ga), (b, gb) = train_grad(flat), search_grad(flat)
        return a - b, ga - gb

    starts = [weight.double().reshape(-1)]
    for _ in range(ladder.ascent_starts - 1):
        direction = torch.randn(d * p, generator=gen, dtype=torch.float64)
        starts.append(radius * direction / torch.linalg.vector_norm(direction))
    solver = SolverSpec(tol=1e-7, max_iter=ladder.ascent_iterations)
    solutions = [
        apg(value, value_and_grad, lambda x: project_ball(x, radius), s, solver) for s in starts
    ]
    # the ascent need not end above its start: the fitted head itself is a candidate
    candidates = [(value(starts[0]), starts[0])] + [(s.value, s.params) for s in solutions]
    _, best = min(candidates, key=lambda candidate: candidate[0])
    top = best.reshape(d, p).to(weight.dtype)
    train_terms = [learner.per_anchor_loss(top, *block, loss, temperature) for block in draw]
    train_loss = float(torch.cat(train_terms).mean())
    held = learner.per_anchor_loss(top, *fresh, loss, temperature)  # (N,)
    n = held.shape[0]
    return {
        "uniform_deviation_est": float(held.mean()) - train_loss,
        "uniform_deviation_est_ci": (
            float(stats.normal_half_width(held.std(), n)) if n > 1 else math.nan
        ),
        "uniform_deviation_reason": None,
    }
