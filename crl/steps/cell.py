"""One grid cell end to end: sample -> fit -> evaluate -> one row of the cells table.

`run_cell` is a function of (config, cell key, features, tau) and returns the row;
`run_and_write` is the step the executor runs: it writes the row to cells/<cell_id>.parquet.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import torch

from crl.core.config import Config, objectives
from crl.kernels import bounds, learner, losses, metrics, rademacher, stats
from crl.kernels.seeding import derive_seed, generator, short_hash
from crl.steps.atomic import write_parquet_atomic
from crl.steps.features import Features


@dataclass(frozen=True)
class CellKey:
    regime: str
    loss: str
    m: int
    n: int
    seed: int

    def cell_id(self, config_hash: str) -> str:
        return short_hash(config_hash, self.regime, self.loss, self.m, self.n, self.seed)


def grid_keys(config: Config) -> list[CellKey]:
    """Every cell of the config's grid, in grid order."""
    g = config.grid
    return [
        CellKey(regime, loss, m, n, seed)
        for regime, loss in objectives(g)
        for m in g.m
        for n in g.n
        for seed in g.seeds
    ]


def _rademacher(
    views: learner.Views,
    sample: learner.Sample,
    d: int,
    radius: float,
    draws: int,
    seed: int,
    chunk: int = 65536,
) -> rademacher.SignEstimate:
    """R_S(F) over every point of the training sample: anchors, positives, then negatives."""
    acc = rademacher.LinearAccumulator(d=d, p=views.anchor.shape[1], draws=draws, seed=seed)
    for table, index in (
        (views.anchor, sample.anchors),
        (views.positive, sample.positives),
        (views.negative, sample.negatives.reshape(-1)),
    ):
        for start in range(0, index.shape[0], chunk):
            acc.update(table[index[start : start + chunk]])
    return acc.finish(radius)


def run_cell(config: Config, key: CellKey, features: Features, tau: float | None) -> dict:
    """Fit and evaluate one cell; returns the row of the cells table (without provenance)."""
    started = time.perf_counter()
    cell_id = key.cell_id(config.hash())
    ev, model = config.eval, config.model
    gen = generator(config.seed, cell_id, "cell")
    train_views, test_views = features.train.views(), features.test.views()
    shared = key.regime == "sscrl"

    sample = learner.draw(train_views, key.n, key.m, shared, gen)
    spec = learner.FitSpec(model.d, model.R, model.steps, model.batch, model.lr)
    weight = learner.fit(train_views, sample, spec, key.loss, ev.temperature, gen)
    train_terms = learner.per_anchor_loss(weight, train_views, sample, key.loss, ev.temperature)
    train_loss = float(train_terms.mean())

    # Held-out: fresh anchors from the test split. LSE's population risk has the expectation over
    # negatives inside the log, so it is estimated against a large shared pool of test negatives;
    # the other losses are expectations of the m-negative loss, estimated with fresh m per anchor.
    n_test = min(ev.test_anchors, test_views.anchor.shape[0])
    test_sample = learner.draw(test_views, n_test, key.m, False, gen)
    if key.loss == "lse":
        pool = torch.randperm(test_views.anchor.shape[0], generator=gen)[: ev.negative_pool]
        pool_sample = learner.Sample(test_sample.anchors, test_sample.positives, pool)
        test_terms = learner.per_anchor_loss(
            weight, test_views, pool_sample, key.loss, ev.temperature
        )
    else:
        test_terms = learner.per_anchor_loss(
            weight, test_views, test_sample, key.loss, ev.temperature
        )
    test_loss = float(test_terms.mean())
    test_ci = float(stats.normal_half_width(test_terms.std(), n_test)) if n_test > 1 else math.nan
    gap = test_loss - train_loss

    rad = _rademacher(
        train_views,
        sample,
        model.d,
        model.R,
        ev.rademacher_draws,
        derive_seed(config.seed, cell_id, "rademacher"),
    )
    row = {
        "cell_id": cell_id,
        "regime": key.regime,
        "loss": key.loss,
        "m": key.m,
        "n": key.n,
        "seed": key.seed,
        "d": model.d,
        "p": int(train_views.anchor.shape[1]),
        "R": model.R,
        "temperature": ev.temperature,
        "delta": ev.delta,
        "train_loss": train_loss,
        "test_loss": test_loss,
        "test_loss_ci": test_ci,
        "test_anchors": n_test,
        "gap": gap,
        "rademacher": rad.value,
        "rademacher_ci": rad.ci,
        "sign_draws": rad.draws,
        "rademacher_rows": int(sample.anchors.numel() * 2 + sample.negatives.numel()),
    }
    row.update(_saunshi(key, row, model.R, ev.delta, tau))
    row.update(
        _downstream(weight, features, test_views, test_sample, key.loss, ev.probe_points, gen)
    )
    if row["bound_transfer"] is not None:
        row["transfer_holds"] = bool(row["mean_classifier_risk"] <= row["bound_transfer"])
    row["tau"] = tau
    row["wall_seconds"] = time.perf_counter() - started
    row["device"] = str(weight.device)
    return row


def _saunshi(key: CellKey, row: dict, radius: float, delta: float, tau: float | None) -> dict:
    """Gamma_M with both terms for one-negative hinge/logistic cells, and the transfer bound."""
    empty = {
        "bound_gamma": None,
        "bound_gamma_rademacher_term": None,
        "bound_gamma_concentration_term": None,
        "bound_holds": None,
        "bound_transfer": None,
        "transfer_holds": None,
    }
    if key.regime != "one_negative" or key.m != 1 or key.loss not in losses.BINARY_LOSSES:
        return empty
    gamma = bounds.saunshi_gamma(row["rademacher"], key.n, radius, delta, key.loss)
    out = dict(empty)
    out.update(
        bound_gamma=gamma.value,
        bound_gamma_rademacher_term=gamma.rademacher_term,
        bound_gamma_concentration_term=gamma.concentration_term,
        bound_holds=bool(abs(row["gap"]) <= gamma.value),
    )
    if tau is not None and tau < 1:
        # Saunshi Thm 4.1: L_sup^mu <= (L_un - tau)/(1 - tau) <= (Lhat_un + Gamma - tau)/(1 - tau)
        out["bound_transfer"] = bounds.transfer(row["train_loss"] + gamma.value, tau)
    return out


def _downstream(
    weight: torch.Tensor,
    features: Features,
    test_views: learner.Views,
    test_sample: learner.Sample,
    loss: str,
    probe_points: int,
    gen: torch.Generator,
) -> dict:
    """Mean classifier, linear probe (on f of the clean inputs) and retrieval AUC."""
    f_train = features.train.inputs() @ weight.T
    f_test = features.test.inputs() @ weight.T
    y_train, y_test = features.train.label_tensor(), features.test.label_tensor()
    mc_loss = loss if loss in losses.BINARY_LOSSES else "logistic"
    mc = metrics.mean_classifier(f_train, y_train, f_test, y_test, loss=mc_loss)
    sub_tr = torch.randperm(len(y_train), generator=gen)[:probe_points]
    sub_te = torch.randperm(len(y_test), generator=gen)[:probe_points]
    probe = metrics.linear_probe_accuracy(
        f_train[sub_tr], y_train[sub_tr], f_test[sub_te], y_test[sub_te]
    )
    pos, neg = learner.scores(weight, test_views, test_sample)
    return {
        "mean_classifier_loss": mc_loss,
        "mean_classifier_risk": float(mc.risk),
        "mean_classifier_accuracy": float(mc.accuracy),
        "top1_accuracy": float(mc.top1),
        "linear_probe_accuracy": float(probe),
        "retrieval_auc": float(metrics.retrieval_auc(pos, neg)),
    }


@dataclass(frozen=True)
class CellJob:
    """What every cell of a run shares: the config, the features, tau and where rows go."""

    config: Config
    features: Features
    tau: float | None
    cells_dir: Path
    staging: Path


def run_and_write(key: CellKey, job: CellJob) -> dict:
    """The step of the cells stage: compute one cell and write its row atomically."""
    row = run_cell(job.config, key, job.features, job.tau)
    row["dataset"] = job.config.dataset.kind
    path = job.cells_dir / f"{row['cell_id']}.parquet"
    write_parquet_atomic(pa.Table.from_pylist([row]), path, job.staging)
    return row
