"""One cell of a paired grid on user pairs (`paired_parquet`, CLIP-style embeddings): draw n
pairs and m negatives from the train split, fit x^T M y - y^T B y to the solver's tolerance,
and evaluate it on the test split.

- held-out LSE risk against a pool of test negatives (an estimate of Li et al.'s L(s), as for
  single-modality LSE cells), its 95% half-width over anchors; sscrl also against the shared
  training negatives (`test_loss_shared`, the conditional risk L_Y), splitting the gap;
- retrieval AUC and 1 - AUC on one seeded set of test triples (x_i, y_i, y_pi(i)) shared by every
  cell of the run (no Bayes score is known, so no excess AUC);
- the certified bounds that carry over to the linear-in-parameters class
  (crl.kernels.certified_paired): scrl gamma_lin + the LSE inner bound on L(s) - Lhat(s); sscrl
  gamma_lin at delta/2 on the outer gap L_Y - Lhat. Certified only when the sample's rows are
  distinct rows of the split (`sampling`), as for single-modality cells.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from crl.core.config import Config
from crl.kernels import certified_paired, losses, metrics, score_model, stats
from crl.kernels.seeding import generator
from crl.kernels.solver import SolverSpec
from crl.kernels.stats import within
from crl.steps import data
from crl.steps.features import Normalizer
from crl.steps.keys import CellKey
from crl.steps.paired import model_cell
from crl.steps.paired.ladder import ladder_columns
from crl.steps.signal import signal_columns

if TYPE_CHECKING:
    from pathlib import Path


DISTINCT, REUSE = "distinct_from_split", "split_with_reuse"


@dataclass(frozen=True)
class PairedSplits:
    """Both modalities of both splits scaled into the unit ball (fitted on train), and the
    evaluation triples (test rows, a seeded derangement for y'). Shape: x_* (N, px), y_* (N, py)
    float64; triple_rows, triple_negatives (K,)."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    triple_rows: torch.Tensor
    triple_negatives: torch.Tensor


def _normaliser(train: np.ndarray) -> Normalizer:
    mean = train.mean(axis=0).astype(np.float32)
    scale = float(np.linalg.norm(train - mean, axis=1).max())
    return Normalizer(mean, max(scale, 1e-12))


def load(config: Config, data_dir: Path) -> PairedSplits:
    """The materialised pairs, scaled, and the run's evaluation triples."""
    x_train, y_train = data.read_pairs(data_dir, "train")
    x_test, y_test = data.read_pairs(data_dir, "test")
    scaled = []
    for train, test in ((x_train, x_test), (y_train, y_test)):
        norm = _normaliser(train)
        scaled += [torch.from_numpy(norm.array(train)).double(), norm(torch.from_numpy(test))]
    rows = len(y_test)
    gen = generator(config.seed, "paired-eval-triples")
    count = min(config.dataset.eval_triples, rows)
    chosen = torch.randperm(rows, generator=gen)[:count]
    shift = torch.randint(1, rows, (count,), generator=gen)  # y' from another test row
    return PairedSplits(
        scaled[0],
        scaled[2],
        scaled[1].double(),
        scaled[3].double(),
        chosen,
        (chosen + shift) % rows,
    )


def draw(
    splits: PairedSplits, n: int, m: int, shared: bool, gen: torch.Generator
) -> tuple[score_model.PairedSample, str]:
    """n anchor pairs and their negatives' y, as distinct train rows when the split allows it
    (certified), else negatives uniform over the other rows with replacement (not certified)."""
    size = splits.x_train.shape[0]
    negatives = m if shared else n * m
    order = torch.randperm(size, generator=gen)
    anchors = order[:n]
    if n + negatives <= size:
        rows, sampling = order[n : n + negatives], DISTINCT
    else:
        others = order[n:]
        rows = others[torch.randint(0, len(others), (negatives,), generator=gen)]
        sampling = REUSE
    neg = splits.y_train[rows] if shared else splits.y_train[rows].reshape(n, m, -1)
    return score_model.PairedSample(splits.x_train[anchors], splits.y_train[anchors], neg), sampling


def _held_out(
    score: score_model.QuadraticScore,
    splits: PairedSplits,
    config: Config,
    gen: torch.Generator,
    shared_negatives: torch.Tensor | None,
) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """The held-out columns, and the per-anchor LSE terms (a,) of the score and of s = 0 on the
    same anchors and pool."""
    ev = config.eval
    rows = splits.x_test.shape[0]
    order = torch.randperm(rows, generator=gen)
    anchors = order[: min(ev.test_anchors, rows)]
    pool = order[torch.randperm(rows, generator=gen)[: min(ev.negative_pool, rows)]]
    x, y = splits.x_test[anchors], splits.y_test[anchors]
    return against_pool(score, x, y, splits.y_test[pool], ev.temperature, shared_negatives)


def against_pool(
    score: score_model.QuadraticScore,
    x: torch.Tensor,
    y: torch.Tensor,
    pool_y: torch.Tensor,
    T: float,
    shared_negatives: torch.Tensor | None,
) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """Held-out anchors (x, y) against one pool of negatives: the held-out columns, and the
    per-anchor LSE terms (a,) of the score and of s = 0. Shape: x (a, px), y (a, py), pool_y
    (K, py); shared_negatives (m, py) (sscrl: test_loss_shared) or None."""
    pos = score(x, y)  # (a,)
    terms = losses.lse_risk(pos, score(x[:, None, :], pool_y[None]), T, reduction="none")
    zero = score_model.QuadraticScore(torch.zeros_like(score.M), torch.zeros_like(score.B))
    trivial = losses.lse_risk(zero(x, y), zero(x[:, None, :], pool_y[None]), T, reduction="none")
    out = {
        "test_loss": float(terms.mean()),
        "test_loss_ci": float(stats.normal_half_width(terms.std(), len(terms))),
        "test_anchors": int(len(terms)),
        "test_loss_shared": None,
    }
    if shared_negatives is not None:
        shared = losses.lse_risk(pos, score(x[:, None, :], shared_negatives[None]), T)
        out["test_loss_shared"] = float(shared)
    return out, terms, trivial


def held_out_units(
    splits: PairedSplits, count: int, m: int, gen: torch.Generator
) -> score_model.PairedSample | None:
    """Held-out pairs with m negatives of their own for the ladder (crl.steps.paired.ladder):
    disjoint rows of the test split in a random order, the first `count` (at most rows // (m +
    1)) as anchor pairs, the next m per anchor as their negatives' y; None where the split has
    fewer than m + 1 rows."""
    rows = splits.x_test.shape[0]
    count = min(count, rows // (m + 1))
    if count < 1:
        return None
    order = torch.randperm(rows, generator=gen)
    anchors, negatives = order[:count], order[count : count * (m + 1)].reshape(count, m)
    return score_model.PairedSample(
        splits.x_test[anchors], splits.y_test[anchors], splits.y_test[negatives]
    )


def run_paired_split_cell(
    config: Config, key: CellKey, cell_id: str, draws: str, splits: PairedSplits
) -> dict:
    """Fit and evaluate one paired cell on user pairs; returns its row (without provenance).
    `draws` keys the cell's random draws (crl.steps.keys.draws_id: the ladder moves none)."""
    started = time.perf_counter()
    T, R, delta = config.eval.temperature, config.model.R, config.eval.delta
    gen = generator(config.seed, draws, "cell")
    shared = key.regime == "sscrl"
    sample, sampling = draw(splits, key.n, key.m, shared, gen)
    spec = SolverSpec(config.model.tol, config.model.max_iter)
    score, solution = score_model.fit(sample, R, T, spec)
    train_loss = float(score_model.empirical_risk(score.M, score.B, sample, T))
    held, terms, trivial = _held_out(
        score, splits, config, gen, sample.negatives if shared else None
    )
    gap = held["test_loss"] - train_loss
    x = splits.x_test[splits.triple_rows]
    pos = score(x, splits.y_test[splits.triple_rows])
    neg = score(x, splits.y_test[splits.triple_negatives])
    auc = float(metrics.retrieval_auc(pos, neg[:, None]))
    row = {
        **model_cell.head(cell_id, key, int(sample.x.shape[1]), R, config),
        "train_loss": train_loss,
        **held,
        "test_loss_exact": False,
        "retrieval_auc": auc,
        "auc_error": 1.0 - auc,
        "eval_triples": int(len(splits.triple_rows)),
        "sampling": sampling,
        "certified": sampling == DISTINCT,
        **bound_columns(sample, key, R, T, delta, train_loss, held),
        **signal_columns(trivial, terms, gap, held["test_loss_ci"], paired_range(key.m, R, T)),
        **model_cell.fit_columns(score, solution, R),
        "device": "cpu",
    }
    ladder_started = time.perf_counter()
    ladder_gen = generator(config.seed, draws, "ladder")
    units = held_out_units(splits, config.eval.test_anchors, key.m, ladder_gen)
    row.update(ladder_columns(row, config.eval.ladder, sample, score, units, spec, ladder_gen))
    row["ladder_seconds"] = time.perf_counter() - ladder_started
    row["wall_seconds"] = time.perf_counter() - started
    return row


def paired_range(m: int, R: float, T: float) -> float:
    """The LSE loss's range for the paired class at radius R (Table 1 at score radius S)."""
    return certified_paired.paired_constants("lse", m, R, T).B


def bound_columns(
    sample: score_model.PairedSample,
    key: CellKey,
    R: float,
    T: float,
    delta: float,
    train_loss: float,
    held: dict,
) -> dict:
    """The gaps and the certified bound columns of a paired cell whose x, y and negatives lie
    in the unit ball: gamma_lin (sscrl: on the outer gap, at delta / 2) and, in scrl, the LSE
    inner bound on L(s) - L_m(s); `held` has test_loss and test_loss_shared (sscrl)."""
    started = time.perf_counter()
    shared = key.regime == "sscrl"
    gap = held["test_loss"] - train_loss
    level = delta / 2 if shared else delta
    constants = certified_paired.paired_constants("lse", key.m, R, T)
    energy = certified_paired.difference_energy(sample.x, sample.y, sample.negatives)
    gamma = certified_paired.gamma_linear(energy, key.n, constants, R, level)
    inner = None if shared else certified_paired.paired_lse_inner_bound(key.m, R, T)
    target = held["test_loss_shared"] - train_loss if shared else gap
    best = gamma.value + (inner or 0.0)
    return {
        "gap": gap,
        "gap_outer": target if shared else None,
        "gap_inner": held["test_loss"] - held["test_loss_shared"] if shared else None,
        "score_bound": certified_paired.score_bound(R),
        "loss_min": constants.psi_lo,
        "loss_range": constants.B,
        "loss_omega": constants.omega,
        "S_D": energy,
        "bound_delta": level,
        "gamma_lin": gamma.value,
        "gamma_lin_complexity_term": gamma.complexity_term,
        "gamma_lin_concentration_term": gamma.concentration_term,
        # two-sided: -gamma <= gap <= gamma (+ the inner bound on L(s) - L_m(s) in scrl)
        "gamma_lin_holds": within(target, gamma.value, best),
        "lse_inner_bound": inner,
        "best_bound": best,
        "bound_over_gap": best / abs(target) if target else None,
        "bounds_seconds": time.perf_counter() - started,
    }
