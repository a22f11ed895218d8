"""One grid cell end to end: sample -> fit -> evaluate -> bound -> one row of the cells table.

`run_cell` is a function of (config, cell key, features, tau) and returns the row; the step
the executor runs, which writes the row, is crl.steps.cells.run_and_write.
Where the tuples come from is crl.steps.unimodal.sampling; the bound columns are
crl.steps.unimodal.certify.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

import torch

from crl.core.config import Config, SyntheticData
from crl.kernels import bounds, certified, learner, losses, metrics, rademacher, stats
from crl.kernels.seeding import derive_seed, generator
from crl.steps import data
from crl.steps import ladder as rungs
from crl.steps.embed import build
from crl.steps.features import Features, on_unit_sphere
from crl.steps.keys import CellKey, cell_config, draws_id
from crl.steps.signal import certified_learning_columns, signal_columns
from crl.steps.unimodal import certify, ladder, sampling
from crl.steps.unimodal.fit import fit_head


@dataclass(frozen=True)
class SamplePass:
    """What one pass over the training sample gives: every anchor's loss (n,) float64, R_S(F)
    and the bound statistics, with the seconds spent on those statistics."""

    terms: torch.Tensor
    rademacher: rademacher.SignEstimate
    stats: certified.SampleStats
    stats_seconds: float


def _sample_pass(
    draw: sampling.TrainDraw,
    weight: torch.Tensor,
    loss: str,
    temperature: float,
    radius: float,
    draws: int,
    seed: int,
    chunk: int = 16384,
) -> SamplePass:
    """One pass over the blocks of the training sample, each block made once.

    R_S(F) is over every point of the training tuples: block by block, its anchors, positives,
    then negatives. Shared negatives count once per anchor (2n + nm rows, independent signs for
    every copy): the quantity the contraction argument of the sscrl outer bound needs
    (docs/theory/bounds.md Thm 4.1).
    """
    d, p = weight.shape
    acc = rademacher.LinearAccumulator(d=d, p=p, draws=draws, seed=seed)
    stats = certify.statistics_accumulator(draw, draw.m)
    terms, stats_seconds = [], 0.0
    for views, sample in draw:
        terms.append(learner.per_anchor_loss(weight, views, sample, loss, temperature))
        started = time.perf_counter()
        certify.feed_statistics(stats, views, sample, chunk)
        stats_seconds += time.perf_counter() - started
        n = sample.anchors.shape[0]
        negatives = sample.negatives.repeat(n) if sample.shared else sample.negatives.reshape(-1)
        for table, index in (
            (views.anchor, sample.anchors),
            (views.positive, sample.positives),
            (views.negative, negatives),
        ):
            for start in range(0, index.shape[0], chunk):
                acc.update(table[index[start : start + chunk]])
    started = time.perf_counter()
    sample_stats = stats.finish()
    stats_seconds += time.perf_counter() - started
    return SamplePass(torch.cat(terms), acc.finish(radius), sample_stats, stats_seconds)


def population(
    config: Config, features: Features
) -> sampling.ModelPopulation | sampling.SplitPopulation:
    """Fresh draws from the generative model for synthetic data, the splits otherwise."""
    ds = config.dataset
    if isinstance(ds, SyntheticData):
        encoder = build(config.encoder, ds.dim)
        return sampling.ModelPopulation(
            data.synthetic_model(ds, config.seed), encoder, features.normalizer
        )
    return sampling.SplitPopulation(features.train, features.test)


@dataclass(frozen=True)
class TestLoss:
    """A head's held-out loss: the tuples it is measured on, the per-anchor terms (anchors,)
    float64, their mean and 95% half-width, and LSE's pool columns (None for other losses)."""

    views: learner.Views
    sample: learner.Sample
    terms: torch.Tensor
    mean: float
    ci: float
    anchors: int
    lse: dict


def _test_loss(
    weight: torch.Tensor,
    held: sampling.HeldOut,
    key: CellKey,
    temperature: float,
    bootstrap: int,
    gen: torch.Generator,
) -> TestLoss:
    """The held-out loss on fresh anchors. LSE's population risk has the expectation over
    negatives inside the log, so it is estimated against a large shared pool of negatives; the
    other losses are expectations of the m-negative loss, estimated with fresh m negatives per
    anchor."""
    n_test = int(held.sample.anchors.shape[0])
    lse = {"test_loss_pool_ci": None, "lse_inner_est": None, "test_loss_pool_bias_est": None}
    views, sample = (
        (held.pool_views, held.pool_sample) if key.loss == "lse" else (held.views, held.sample)
    )
    terms = learner.per_anchor_loss(weight, views, sample, key.loss, temperature)
    if key.loss == "lse":
        pos, pool = certify.pool_scores(weight, held.pool_views, held.pool_sample)
        lse["test_loss_pool_ci"] = certify.pool_bootstrap_ci(pos, pool, temperature, bootstrap, gen)
        lse["lse_inner_est"] = certified.lse_inner_estimate(pool, key.m, temperature)
        lse["test_loss_pool_bias_est"] = certified.lse_inner_estimate(
            pool, pool.shape[1], temperature
        )
    ci = float(stats.normal_half_width(terms.std(), n_test)) if n_test > 1 else math.nan
    return TestLoss(views, sample, terms, float(terms.mean()), ci, n_test, lse)


def run_cell(config: Config, key: CellKey, features: Features, tau: float | None) -> dict:
    """Fit and evaluate one cell; returns the row of the cells table (without provenance).
    The key's R, temperature and normalisation replace the config's where it has them."""
    started = time.perf_counter()
    cell_id = key.cell_id(config.hash())
    draws = draws_id(config, key)
    config = cell_config(config, key)
    if key.normalisation() == "unit":
        features = on_unit_sphere(features)
    ev, model = config.eval, config.model
    gen = generator(config.seed, draws, "cell")
    source = population(config, features)
    draw = source.train(key.n, key.m, key.regime == "sscrl", gen, sampling.BLOCK_ELEMENTS)
    weight, fitted = fit_head(config, draw, key.loss, gen)
    rad_seed = derive_seed(config.seed, draws, "rademacher")
    seen = _sample_pass(
        draw, weight, key.loss, ev.temperature, model.R, ev.rademacher_draws, rad_seed
    )
    train_loss = float(seen.terms.mean())

    held = source.held_out(ev.test_anchors, key.m, ev.negative_pool, gen)
    test = _test_loss(weight, held, key, ev.temperature, ev.pool_bootstrap, gen)
    test_loss, test_ci, n_test = test.mean, test.ci, test.anchors
    gap = test_loss - train_loss
    shared = _against_shared_negatives(
        weight, draw, held, key, ev.temperature, train_loss, test_loss
    )

    rad = seen.rademacher
    n_rows = draw.n * (2 + key.m)
    row = {
        "cell_id": cell_id,
        "family": "unimodal",
        "regime": key.regime,
        "loss": key.loss,
        "m": key.m,
        "n": key.n,
        "seed": key.seed,
        "d": model.d,
        "p": int(weight.shape[1]),
        "sample_blocks": len(draw),
        "R": model.R,
        "temperature": ev.temperature,
        "normalise": key.normalisation(),
        **({} if key.encoder_epoch is None else {"encoder_epoch": key.encoder_epoch}),
        "delta": ev.delta,
        "train_loss": train_loss,
        "test_loss": test_loss,
        "test_loss_ci": test_ci,
        "test_anchors": n_test,
        "gap": gap,
        "solver": model.solver,
        **fitted,
        **shared,
        **test.lse,
        "rademacher": rad.value,
        "rademacher_ci": rad.ci,
        "sign_draws": rad.draws,
        "rademacher_rows": int(n_rows),
    }
    bounds_started = time.perf_counter()
    setting = certify.Setting(
        key.regime, key.loss, key.m, model.d, model.R, ev.temperature, ev.delta
    )
    row.update(certify.bound_columns(draw, seen.stats, setting, gap, shared["gap_outer"]))
    row["bounds_seconds"] = seen.stats_seconds + time.perf_counter() - bounds_started
    fresh = isinstance(source, sampling.ModelPopulation)
    row.update(
        _signal_and_test_set(weight, test, held, key.loss, ev.temperature, ev.delta, fresh, row)
    )
    ladder_started = time.perf_counter()
    row.update(_ladder(config, key, draws, source, draw, weight, held, row))
    row["ladder_seconds"] = time.perf_counter() - ladder_started
    row.update(_certified_learning(row))
    row.update(_transfer(key, row, tau))
    row.update(
        _downstream(weight, features, held.views, held.sample, key.loss, ev.probe_points, gen)
    )
    if row["bound_transfer"] is not None:
        row["transfer_holds"] = bool(row["mean_classifier_risk"] <= row["bound_transfer"])
    row["tau"] = tau
    if key.oracle:
        row["role"] = "oracle"
    row["wall_seconds"] = time.perf_counter() - started
    row["device"] = str(weight.device)
    return row


def _signal_and_test_set(
    weight: torch.Tensor,
    test: TestLoss,
    held: sampling.HeldOut,
    loss: str,
    temperature: float,
    delta: float,
    fresh: bool,
    row: dict,
) -> dict:
    """The signal columns (against the held-out loss of f = 0) and the test-set certificate of
    the head on L_m, from its held-out terms (LSE: those of the held-out anchors with their own
    m negatives, not the pooled ones) and the bound columns of `row`."""
    trivial = learner.per_anchor_loss(
        torch.zeros_like(weight), test.views, test.sample, loss, temperature
    )
    gap = row["gap"]
    out = signal_columns(trivial, test.terms, gap, test.ci, row.get("loss_range"))
    own = test.terms
    if loss == "lse":
        own = learner.per_anchor_loss(weight, held.views, held.sample, loss, temperature)
    out |= rungs.own_negatives_columns(own)
    low, width = row["loss_min"], row["loss_range"]
    out.update(certify.test_set_columns(own, fresh, low, width, delta))
    return out


def _ladder(
    config: Config,
    key: CellKey,
    draws: str,
    source: sampling.ModelPopulation | sampling.SplitPopulation,
    draw: sampling.TrainDraw,
    weight: torch.Tensor,
    held: sampling.HeldOut,
    row: dict,
) -> dict:
    """The PAC-Bayes and uniform-deviation rungs (crl.steps.unimodal.ladder), from a generator
    of their own, so that the cell's other columns do not depend on whether they run."""
    ladder_config, ev = config.eval.ladder, config.eval
    gen = generator(config.seed, draws, "ladder")
    width = row["loss_range"]
    scale = rungs.Scale.of(row["loss_min"], width)
    search = (held.views, held.sample)
    fresh = None
    if ladder_config is not None and isinstance(source, sampling.ModelPopulation):
        fresh = source.tuples(ev.test_anchors, key.m, gen)
    return {
        **ladder.pac_bayes_columns(config, key, draw, weight, search, scale, gen),
        **ladder.uniform_deviation_columns(
            draw,
            weight,
            search,
            fresh,
            key.loss,
            ev.temperature,
            config.model.R,
            ladder_config,
            gen,
        ),
    }


def _certified_learning(row: dict) -> dict:
    """Which rungs certify that the head learned (crl.steps.signal): the Rademacher certificate
    train_loss + best_bound where the sampling is certified, the test-set and the PAC-Bayes
    certificates where the cell has them."""
    bound = row["best_bound"]
    rademacher = row["train_loss"] + bound if row["certified"] and bound is not None else None
    return certified_learning_columns(
        row["trivial_loss"],
        {
            "rademacher": rademacher,
            "test_set": row["cert_test_set"],
            "pb_free": row.get("cert_pb_free"),
            "pb_data": row.get("cert_pb_data"),
            "pb_ref": row.get("cert_pb_ref"),
        },
    )


def _against_shared_negatives(
    weight: torch.Tensor,
    draw: sampling.TrainDraw,
    held: sampling.HeldOut,
    key: CellKey,
    temperature: float,
    train_loss: float,
    test_loss: float,
) -> dict:
    """sscrl: the held-out anchors against the SAME shared training negatives (an estimate of
    the conditional risk L_Y), so the outer and inner parts of the gap appear separately:
    gap = gap_outer + gap_inner."""
    if not draw.shared:
        return {"test_loss_shared": None, "gap_outer": None, "gap_inner": None}
    train_views, train_sample = draw[0]  # every block holds the same shared negatives
    views = dataclasses.replace(held.views, negative=train_views.negative)
    sample = learner.Sample(held.sample.anchors, held.sample.positives, train_sample.negatives)
    loss_y = float(learner.per_anchor_loss(weight, views, sample, key.loss, temperature).mean())
    return {
        "test_loss_shared": loss_y,
        "gap_outer": loss_y - train_loss,
        "gap_inner": test_loss - loss_y,
    }


def _transfer(key: CellKey, row: dict, tau: float | None) -> dict:
    """Saunshi Thm 4.1 form for one-negative hinge/logistic cells with m = 1, with the
    certified gamma_m: L_sup^mu <= (L_un - tau)/(1 - tau) <= (Lhat_un + gamma_m - tau)/(1 - tau)."""
    out = {"bound_transfer": None, "transfer_holds": None}
    one_negative = key.regime == "one_negative" and key.m == 1
    if one_negative and key.loss in losses.BINARY_LOSSES and tau is not None and tau < 1:
        out["bound_transfer"] = bounds.transfer(row["train_loss"] + row["gamma_m"], tau)
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
