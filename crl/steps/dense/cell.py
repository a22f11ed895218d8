"""One dense cell end to end (docs/theory/dense-bounds.md): draw -> fit the head -> evaluate ->
bound -> one row of the cells table, with family "dense".

A cell has n training images (the unit, Prop. D0), m external negatives per image drawn from the
pool (regime scrl) or one queue of m shared by all images (sscrl), negatives "own" or "ext", a
geometric or argmax correspondence, and the objective (1 - lam) L_global + lam L_dense. The head
W (d x p, ||W||_F <= R) is fitted by accelerated projected gradient to a tolerance.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

from crl.core.config import Config
from crl.kernels import metrics, stats
from crl.kernels.dense import image as dense_image
from crl.kernels.seeding import generator, short_hash
from crl.kernels.solver import SolverSpec
from crl.steps import ladder as rungs
from crl.steps.dense import certify as dense_certify
from crl.steps.dense import ladder as dense_ladder
from crl.steps.dense import objective as dense_objective
from crl.steps.dense.features import DenseFeatures, DenseSplit, Negatives, pool_disjoint, pool_draw
from crl.steps.keys import draws_id
from crl.steps.signal import signal_columns

F64 = torch.float64
PROBE_POSITIONS = 8192  # positions per split the dense probe is fitted and scored on


@dataclass(frozen=True)
class DenseKey:
    regime: str  # scrl: m negatives per image; sscrl: one queue of m shared by the images
    negatives: str  # own | ext
    correspondence: str  # geometric | argmax
    lam: float
    m: int
    n: int
    seed: int
    R: float | None = None  # None: dense.head.R (the grid has no R axis)
    temperature: float | None = None  # None: dense.eval.temperature
    encoder_epoch: int | None = None  # None: the frozen backbone (no dense.pretrain)

    def cell_id(self, config_hash: str) -> str:
        axes = [
            (a, v)
            for a in ("R", "temperature", "encoder_epoch")
            if (v := getattr(self, a)) is not None
        ]
        return short_hash(
            config_hash,
            "dense",
            self.regime,
            self.negatives,
            self.correspondence,
            self.lam,
            self.m,
            self.n,
            self.seed,
            *axes,
        )

    @property
    def loss(self) -> str:
        """The objective's name in the cells table's `loss` column."""
        return "dense_info_nce" if self.lam == 1.0 else f"densecl_lambda_{self.lam:g}"


def dense_keys(config: Config) -> list[DenseKey]:
    """Every dense cell of the config's dense section, in grid order."""
    g = config.dense.grid
    pretrain = config.dense.pretrain
    return [
        DenseKey(regime, neg, corr, float(lam), m, n, seed, R, temperature, epoch)
        for epoch in ([None] if pretrain is None else pretrain.embedded)
        for regime in g.regimes
        for neg in g.negatives
        for corr in g.correspondence
        for lam in g.lambdas
        for R in g.R or [None]
        for temperature in g.temperature or [None]
        for m in g.m
        for n in g.n
        for seed in g.seeds
    ]


def _held_out_ci(values: torch.Tensor) -> float:
    return (
        float(stats.normal_half_width(values.std(), values.shape[0]))
        if values.shape[0] > 1
        else math.nan
    )


def _probe(W: torch.Tensor, features: DenseFeatures, gen: torch.Generator) -> dict:
    """Per-position linear probe on f = W phi (view 1) against the cells' majority classes."""

    def positions(split: DenseSplit) -> tuple[torch.Tensor, torch.Tensor]:
        f = torch.from_numpy(split.f1).reshape(-1, features.p).to(F64) @ W.T
        y = torch.from_numpy(split.labels1).reshape(-1)
        keep = torch.nonzero(y >= 0).squeeze(1)
        keep = keep[torch.randperm(keep.numel(), generator=gen)[:PROBE_POSITIONS]]
        return f[keep], y[keep]

    f_tr, y_tr = positions(features.train)
    f_te, y_te = positions(features.test)
    if y_tr.numel() < 2 or y_te.numel() < 1 or torch.unique(y_tr).numel() < 2:
        return {"dense_probe_accuracy": None, "dense_probe_majority": None}
    majority = float((y_te == torch.mode(y_tr).values).double().mean())
    acc = metrics.linear_probe_accuracy(f_tr, y_tr, f_te, y_te)
    return {"dense_probe_accuracy": float(acc), "dense_probe_majority": majority}


def _retrieval(W: torch.Tensor, split: DenseSplit, count: int) -> float:
    """Share of geometrically matched view-1 positions, on the first `count` held-out images
    with a geometric match, whose best view-2 key (largest score under the head) is their
    geometric correspondent (whatever correspondence the cell trains with)."""
    rows = torch.from_numpy(split.kept("geometric"))[:count]
    phi1, phi2 = (torch.from_numpy(f)[rows].to(F64) for f in (split.f1, split.f2))
    match = torch.from_numpy(split.geometric)[rows]  # (n, K)
    best = ((phi1 @ W.T) @ (phi2 @ W.T).transpose(1, 2)).argmax(dim=2)  # (n, K)
    valid = match >= 0
    return float((best == match)[valid].double().mean())


def draw_train(
    config: Config, key: DenseKey, features: DenseFeatures
) -> tuple[dense_objective.Batch, Negatives, torch.Generator]:
    """The cell's n training images and their negatives (or queue), and the cell's generator
    in the state that follows (it goes on to draw the head's start and the held-out negatives).
    The draws are keyed by `draws_id`: the same at every encoder epoch."""
    gen = generator(config.seed, draws_id(config, key), "dense")
    corr = key.correspondence
    kept = torch.from_numpy(features.train.kept(corr))
    if kept.numel() < key.n:
        raise ValueError(
            f"dense cell n={key.n}: only {kept.numel()} train images have a {corr} match "
            "(dense.images sizes or views.scale)"
        )
    rows = kept[torch.randperm(kept.numel(), generator=gen)[: key.n]]
    shape = (key.m,) if key.regime == "sscrl" else (key.n, key.m)
    neg = pool_draw(features.pool, corr, shape, gen)
    return dense_objective.batch(features.train, rows, corr, neg), neg, gen


def _mi_losses(
    W: torch.Tensor,
    features: DenseFeatures,
    corr: str,
    m: int,
    T: float,
    images: int,
    gen: torch.Generator,
) -> tuple[torch.Tensor | None, str]:
    """The dense InfoNCE losses of up to `images` held-out images, each against m external
    negatives disjoint from every other image's (the MI estimate's sample), or None and why."""
    kept = torch.from_numpy(features.test.kept(corr))[:images]
    count = min(kept.numel(), features.pool.kept(corr).size // m)
    why = (
        f"not computed: the pool has {features.pool.kept(corr).size} images, fewer than "
        f"2 x m = {2 * m} needed for two held-out images with disjoint negatives"
    )
    if count < 2:
        return None, why
    negatives = pool_disjoint(features.pool, corr, count, m, gen)
    held = dense_objective.batch(features.test, kept[:count], corr, negatives)
    return dense_objective.branch_losses(W, held, "ext", T, 1.0)[0], why


def _branches(train: dense_objective.Batch, key: DenseKey) -> list[dense_certify.Branch]:
    """The objective's branches as the bounds take them: the dense one, and with lam < 1 the
    global one (pooled features, one position matched to itself, external negatives)."""
    branches = [
        dense_certify.Branch(train.phi1, train.phi2, train.match, train.neg, key.negatives, key.lam)
    ]
    if key.lam < 1.0:
        zero = torch.zeros(key.n, 1, dtype=torch.int64)
        branches.append(
            dense_certify.Branch(
                train.pooled1, train.pooled2, zero, train.pooled_neg, "ext", 1 - key.lam
            )
        )
    return branches


def _shared_gaps(
    W: torch.Tensor,
    same: dense_objective.Batch,
    key: DenseKey,
    T: float,
    train_loss: float,
    test_loss: float,
) -> dict:
    """sscrl: the held-out loss against the training queue itself (test_loss_shared), and the
    gap's outer part (against the same queue) and inner part (a fresh queue against it)."""
    loss_y = float(dense_objective.objective(W, same, key.negatives, T, key.lam).mean())
    return {
        "test_loss_shared": loss_y,
        "gap_outer": loss_y - train_loss,
        "gap_inner": test_loss - loss_y,
    }


def _key_columns(key: DenseKey, cell_id: str, d: int, features: DenseFeatures) -> dict:
    """The columns that name a dense cell: its key, and the head's and features' widths."""
    return {
        "cell_id": cell_id,
        "family": "dense",
        "regime": key.regime,
        "loss": key.loss,
        "negatives": key.negatives,
        "correspondence": key.correspondence,
        "lam": key.lam,
        "m": key.m,
        "n": key.n,
        "seed": key.seed,
        "encoder_epoch": key.encoder_epoch,
        "d": d,
        "p": features.p,
        "positions": features.positions,
    }


def run_dense_cell(config: Config, key: DenseKey, cell_id: str, features: DenseFeatures) -> dict:
    """Fit and evaluate one dense cell; returns its row (without provenance)."""
    started = time.perf_counter()
    dense = config.dense
    head, ev = dense.head, dense.eval
    T = ev.temperature if key.temperature is None else key.temperature
    R = head.R if key.R is None else key.R
    d, m, lam = head.d, key.m, key.lam
    corr, shared = key.correspondence, key.regime == "sscrl"
    train, neg, gen = draw_train(config, key, features)

    solver = SolverSpec(head.tol, head.max_iter)
    solution = dense_objective.fit(train, key.negatives, lam, (d, features.p), R, T, solver, gen)
    W = solution.params.detach()
    with torch.no_grad():
        train_dense, train_glob = dense_objective.branch_losses(W, train, key.negatives, T, lam)
        train_terms = dense_image.combined_loss(train_dense, train_glob, lam)

        test_kept = torch.from_numpy(features.test.kept(corr))[: ev.test_images]
        fresh = pool_draw(features.pool, corr, (test_kept.numel(), m), gen)
        test = dense_objective.batch(features.test, test_kept, corr, fresh)
        test_dense, test_glob = dense_objective.branch_losses(W, test, key.negatives, T, lam)
        test_terms = dense_image.combined_loss(test_dense, test_glob, lam)
        trivial_terms = dense_objective.objective(torch.zeros_like(W), test, key.negatives, T, lam)
        train_loss, test_loss = float(train_terms.mean()), float(test_terms.mean())
        gap = test_loss - train_loss
        ci = _held_out_ci(test_terms)
        shared_cols = {"test_loss_shared": None, "gap_outer": None, "gap_inner": None}
        if shared:
            same = dense_objective.batch(features.test, test_kept, corr, neg)
            shared_cols = _shared_gaps(W, same, key, T, train_loss, test_loss)
        gaps = {"gap": gap, **({"gap_outer": shared_cols["gap_outer"]} if shared else {})}

        mi_losses, why = _mi_losses(W, features, corr, m, T, ev.mi_images, gen)

    branches = _branches(train, key)
    bounds_started = time.perf_counter()
    setting = dense_certify.Setting(m, d, R, T, ev.delta)
    bound_cols = dense_certify.bound_columns(branches, shared, setting, gaps, ci)
    bounds_seconds = time.perf_counter() - bounds_started
    low = bound_cols["loss_range_lo"]
    loss_range = bound_cols["loss_range_hi"] - low
    scale = rungs.Scale.of(low, loss_range)
    ladder_started = time.perf_counter()
    ladder_gen = generator(config.seed, draws_id(config, key), "dense", "ladder")
    ladder_cols = {
        **rungs.test_set_columns(test_terms, scale, ev.delta),
        **rungs.own_negatives_columns(test_terms),
        **dense_ladder.pac_bayes_columns(
            ev.ladder,
            train,
            W,
            test,
            key.negatives,
            lam,
            R,
            T,
            solver,
            ev.delta,
            scale,
            ladder_gen,
        ),
    }
    ladder_seconds = time.perf_counter() - ladder_started
    row = {
        **_key_columns(key, cell_id, d, features),
        "R": R,
        "temperature": T,
        "delta": ev.delta,
        "train_loss": train_loss,
        "test_loss": test_loss,
        "test_loss_ci": ci,
        "test_anchors": int(test_kept.numel()),
        "gap": gap,
        "train_dense_loss": float(train_dense.mean()),
        "test_dense_loss": float(test_dense.mean()),
        **shared_cols,
        "head": W.flatten().tolist(),  # W (d x p) row-major: the fitted head, to recompute
        "solver": "apg",
        "solver_iterations": solution.iterations,
        "solver_criterion": solution.criterion,
        "solver_converged": solution.converged,
        "sampling": (
            f"{key.n} i.i.d. train images, negatives from a disjoint pool of "
            f"{features.pool.kept(corr).size} images, "
            + ("one queue shared by the images" if shared else "fresh per image (with replacement)")
        ),
        **bound_cols,
        "loss_min": low,
        "loss_range": loss_range,
        "bounds_seconds": bounds_seconds,
        **signal_columns(trivial_terms, test_terms, gap, ci, loss_range),
        **ladder_cols,
        "ladder_seconds": ladder_seconds,
        **dense_certify.mi_columns(mi_losses, m, R, T, ev.delta, why),
        **_probe(W, features, gen),
        "correspondence_top1": _retrieval(W, features.test, ev.test_images),
        "correspondence_chance": 1.0 / features.positions,
        "wall_seconds": time.perf_counter() - started,
        "device": "cpu",
    }
    row.update(dense_ladder.certified_learning(row))
    return row
