"""One cell of a paired (two-modality) grid: draw n pairs and m negatives from Li et al.'s
Gaussian, fit the score model x^T M y - y^T B y to the solver's tolerance, and evaluate it
exactly where the model allows (docs/theory/m-star.md):

- excess AUC E* - E(s) on one seeded evaluation set shared by every cell of the run (common
  random numbers), with its Monte Carlo standard error;
- the population LSE risk L(s) in closed form, +inf when I + 2B/T is not positive definite
  (never replaced by a finite pool estimate), the excess risk L(s) - L* and the generalisation
  gap L(s) - Lhat(s);
- Li et al.'s calibration inequality E* - E(s) <= sqrt((2/T)(L(s) - L*)) with its slack.

Pairs are drawn from (run seed, n, seed) only, so a seed's positives are the same for every m and
both regimes (a paired design across m); negatives from (run seed, regime, m, n, seed).

The certified bounds of docs/theory/bounds.md need a bounded feature map (A1, ||phi|| <= 1); the
Gaussian's psi(x, y) = (x y^T, -y y^T) is unbounded, so no gamma column is computed for these
cells (the `bounds_note` column says so).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

from crl.core.config import Config
from crl.kernels import bounds, score_model, stats
from crl.kernels.latent.canonical import CanonicalGaussian, Triples, excess_auc, sample_triples
from crl.kernels.latent.clipped import clip_triples, scaled_reference
from crl.kernels.seeding import generator
from crl.kernels.solver import Solution, SolverSpec
from crl.steps.keys import CellKey
from crl.steps.paired.ladder import exact_columns
from crl.steps.signal import exact_signal_columns

BOUNDS_NOTE = "not certified: Gaussian features are unbounded (docs/theory/bounds.md A1 fails)"


@dataclass(frozen=True)
class PairedSource:
    """What every paired cell of a run shares: the model and the evaluation triples, and with
    `dataset.clip` the same triples clipped into the unit ball (crl.kernels.latent.clipped)."""

    model: CanonicalGaussian
    triples: Triples
    clipped: Triples | None = None
    # with the clip: the Gaussian's Bayes AUC E* on `triples`, once per run (s* = T log ratio,
    # so its ranking, hence E*, is the same at every temperature)
    bayes_auc: float | None = None


def source(config: Config) -> PairedSource:
    """The run's model (its rotations drawn from the run seed) and the evaluation triples every
    cell is scored on (common random numbers)."""
    ds = config.dataset
    model = CanonicalGaussian.make(
        ds.correlations, ds.rotate, generator(config.seed, "paired-model")
    )
    gen = generator(config.seed, "paired-eval-triples")
    triples = sample_triples(model, ds.eval_triples, gen)
    if ds.clip is None:
        return PairedSource(model, triples)
    star = model.bayes_parameters(config.eval.temperature)
    bayes_auc = excess_auc(model, triples, *star, config.eval.temperature).auc_star
    return PairedSource(model, triples, clip_triples(triples, ds.clip), bayes_auc)


def radius(config: Config, model: CanonicalGaussian) -> float:
    """model.R, or R_times_bayes times ||theta*||_F at the run's temperature (in the clipped
    law's units, r^2 ||theta*||_F, with `dataset.clip` = r)."""
    if config.model.R_times_bayes is None:
        return config.model.R
    M, B = model.bayes_parameters(config.eval.temperature)
    if config.dataset.clip is not None:
        M, B = scaled_reference((M, B), config.dataset.clip)
    return config.model.R_times_bayes * score_model.QuadraticScore(M, B).norm


def draw(
    config: Config, model: CanonicalGaussian, regime: str, m: int, n: int, seed: int
) -> score_model.PairedSample:
    x, y = model.sample_pairs(n, generator(config.seed, "paired-pairs", n, seed))
    neg_gen = generator(config.seed, "paired-negatives", regime, m, n, seed)
    shape = (m,) if regime == "sscrl" else (n, m)
    return score_model.PairedSample(x, y, model.sample_marginal(shape, neg_gen))


def head(cell_id: str, key: CellKey, p: int, R: float, config: Config) -> dict:
    """The key columns every paired cell row starts with."""
    return {
        "cell_id": cell_id,
        "family": "paired",
        "regime": key.regime,
        "loss": key.loss,
        "m": key.m,
        "n": key.n,
        "seed": key.seed,
        "p": p,
        "R": R,
        "temperature": config.eval.temperature,
        "delta": config.eval.delta,
    }


def fit_columns(score: score_model.QuadraticScore, solution: Solution, R: float) -> dict:
    """How the solver ended and where the fitted score sits in the ball."""
    return {
        "solver_iterations": solution.iterations,
        "solver_criterion": solution.criterion,
        "solver_converged": solution.converged,
        "solver_restarts": solution.restarts,
        "theta_norm": score.norm,
        "on_boundary": bool(score.norm >= R * (1 - 1e-6)),
    }


def run_paired_cell(config: Config, key: CellKey, cell_id: str, paired: PairedSource) -> dict:
    """Fit and evaluate one paired cell; returns its row (without provenance)."""
    started = time.perf_counter()
    model, triples = paired.model, paired.triples
    T, R = config.eval.temperature, radius(config, model)
    sample = draw(config, model, key.regime, key.m, key.n, key.seed)
    spec = SolverSpec(config.model.tol, config.model.max_iter)
    score, solution = score_model.fit(sample, R, T, spec)
    train_loss = float(score_model.empirical_risk(score.M, score.B, sample, T))
    risk = model.lse_risk(score.M, score.B, T)
    risk_star = model.lse_risk_star(T)
    trivial = model.lse_risk(torch.zeros_like(score.M), torch.zeros_like(score.B), T)
    auc = excess_auc(model, triples, score.M, score.B, T)
    finite = math.isfinite(risk)
    rhs = bounds.calibration_rhs(risk, risk_star, T, clip=True) if finite else math.inf
    z = stats.z_value(0.95)
    row = {
        **head(cell_id, key, model.p, R, config),
        "mutual_information": model.mutual_information,
        "train_loss": train_loss,
        "test_loss": risk,
        "test_loss_exact": True,
        "risk_finite": finite,
        "risk_star": risk_star,
        "excess_risk": risk - risk_star,
        "gap": risk - train_loss,
        "retrieval_auc": auc.auc,
        "auc_star": auc.auc_star,
        "excess_auc": auc.excess,
        "excess_auc_se": auc.excess_se,
        "eval_triples": int(triples.x.shape[0]),
        "calibration_rhs": rhs,
        "calibration_slack": rhs - auc.excess,
        "calibration_holds": bool(auc.excess - z * auc.excess_se <= rhs),
        **exact_signal_columns(trivial, risk, None),
        **fit_columns(score, solution, R),
        "bounds_note": BOUNDS_NOTE,
        "device": "cpu",
    }
    row.update(exact_columns(row))
    row["wall_seconds"] = time.perf_counter() - started
    return row
