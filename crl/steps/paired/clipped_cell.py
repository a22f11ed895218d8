"""One cell of a paired grid on the clipped Gaussian (`paired_gaussian` with `clip: r`): the
Gaussian's pairs and negatives (the same draws as the unclipped cells: a paired design across
clip radii), radially clipped to radius r and scaled into the unit ball (Q, a bounded law;
crl.kernels.latent.clipped), the score fitted to the solver's tolerance, and

- the held-out LSE risk by Monte Carlo: fresh anchors against one pool of fresh negatives, both
  from Q (an estimate, `test_loss_exact` false; no closed form for Q), with its half-width;
- retrieval AUC on the run's triples clipped into Q, and the excess over the Gaussian's Bayes
  score read in Q's units (`auc_star`, common triples, Monte Carlo standard error); Q's own
  Bayes AUC lies within 3 q_r of the Gaussian's (`bayes_auc_lo`, `bayes_auc_hi`);
- the certified bounds of the paired class (fresh i.i.d. draws from a law on the unit ball:
  certified), as for user pairs (crl.steps.paired.split_cell.bound_columns).

Q's L* and Bayes score have no closed form, so excess risk and Li et al.'s calibration are not
computed here (null), and the exact-risk cells of the unclipped law stay the reference for them.
"""

from __future__ import annotations

import time

import torch

from crl.core.config import Config
from crl.kernels import score_model
from crl.kernels.latent.canonical import CanonicalGaussian, excess_auc
from crl.kernels.latent.clipped import (
    clip_pairs,
    clipped_mass,
    radial_clip,
    scaled_reference,
)
from crl.kernels.seeding import generator
from crl.kernels.solver import SolverSpec
from crl.steps.keys import CellKey
from crl.steps.paired import model_cell
from crl.steps.paired.ladder import ladder_columns
from crl.steps.paired.split_cell import against_pool, bound_columns, paired_range
from crl.steps.signal import signal_columns

SAMPLING = "fresh_from_model"


def held_out_units(
    model: CanonicalGaussian, count: int, m: int, r: float, gen: torch.Generator
) -> score_model.PairedSample:
    """`count` fresh pairs of the clipped law with m fresh negatives of their own, for the
    ladder (crl.steps.paired.ladder)."""
    x, y = model.sample_pairs(count, gen)
    negatives = model.sample_marginal((count, m), gen)
    return clip_pairs(score_model.PairedSample(x, y, negatives), r)


def run_clipped_cell(
    config: Config, key: CellKey, cell_id: str, draws: str, paired: model_cell.PairedSource
) -> dict:
    """Fit and evaluate one clipped paired cell; returns its row (without provenance).
    `draws` keys the cell's random draws (crl.steps.keys.draws_id: the ladder moves none)."""
    started = time.perf_counter()
    model, r, ev = paired.model, config.dataset.clip, config.eval
    T, R = ev.temperature, model_cell.radius(config, model)
    shared = key.regime == "sscrl"
    raw = model_cell.draw(config, model, key.regime, key.m, key.n, key.seed)
    sample = clip_pairs(raw, r)
    spec = SolverSpec(config.model.tol, config.model.max_iter)
    score, solution = score_model.fit(sample, R, T, spec)
    train_loss = float(score_model.empirical_risk(score.M, score.B, sample, T))

    gen = generator(config.seed, draws, "clipped-held-out")
    x, y = model.sample_pairs(ev.test_anchors, gen)
    pool = model.sample_marginal((ev.negative_pool,), gen)
    held, terms, trivial = against_pool(
        score,
        radial_clip(x, r),
        radial_clip(y, r),
        radial_clip(pool, r),
        T,
        sample.negatives if shared else None,
    )
    star = scaled_reference(model.bayes_parameters(T), r)
    auc = excess_auc(model, paired.clipped, score.M, score.B, T, reference=star)
    q = clipped_mass(model.p, r)
    bounds = bound_columns(sample, key, R, T, ev.delta, train_loss, held)
    row = {
        **model_cell.head(cell_id, key, model.p, R, config),
        "mutual_information": model.mutual_information,
        "clip_radius": r,
        "clipped_mass": q,
        "train_loss": train_loss,
        **held,
        "test_loss_exact": False,
        "retrieval_auc": auc.auc,
        "auc_error": 1.0 - auc.auc,
        "auc_star": auc.auc_star,
        "excess_auc": auc.excess,
        "excess_auc_se": auc.excess_se,
        "bayes_auc_lo": paired.bayes_auc - 3.0 * q,
        "bayes_auc_hi": paired.bayes_auc + 3.0 * q,
        "eval_triples": int(paired.clipped.x.shape[0]),
        "sampling": SAMPLING,
        "certified": True,
        **bounds,
        **signal_columns(
            trivial, terms, bounds["gap"], held["test_loss_ci"], paired_range(key.m, R, T)
        ),
        **model_cell.fit_columns(score, solution, R),
        "device": "cpu",
    }
    ladder_started = time.perf_counter()
    ladder_gen = generator(config.seed, draws, "ladder")
    units = held_out_units(model, ev.test_anchors, key.m, r, ladder_gen)
    row.update(ladder_columns(row, ev.ladder, sample, score, units, spec, ladder_gen))
    row["ladder_seconds"] = time.perf_counter() - ladder_started
    row["wall_seconds"] = time.perf_counter() - started
    return row
