"""Sampling a cell's training tuples and fitting f in a Frobenius-norm ball.

f(x) = W phi(x) with ||W||_F <= R and ||phi(x)|| <= 1, hence ||f(x)|| <= ||W||_op <= R for every x.
A pure function of (tables, sample, hyper-parameters, generator): no I/O, no global RNG.

The fits take the training sample as `blocks`: a sequence of (views, sample) pairs over
consecutive anchors, each small enough to hold in memory. A list of one pair is a sample held
whole; a sequence that makes block b on access streams a sample larger than memory.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from crl.kernels import losses
from crl.kernels.phased import COARSE_TOL, phased_fit
from crl.kernels.solver import (
    Solution,
    SolverSpec,
    Value,
    ValueAndGrad,
    apg,
    autograd,
    project_ball,
)

__all__ = [
    "Blocks",
    "FitSpec",
    "Sample",
    "Views",
    "block_sizes",
    "draw",
    "fit",
    "fit_to_tolerance",
    "mean_loss",
    "objective",
    "per_anchor_loss",
    "project",
    "same_class_partner",
    "scores",
]


@dataclass(frozen=True)
class Views:
    """The tables a sample's indices point into (all over one split).

    Shape: anchor, positive, negative (N, p) with ||row|| <= 1; labels (N,) latent classes.
    With same-class positives all three are the same table; with augmented positives the anchor
    is view a of an image, the positive view b of the same image, negatives view b of others.
    """

    anchor: torch.Tensor
    positive: torch.Tensor
    negative: torch.Tensor
    labels: torch.Tensor
    augmented: bool


@dataclass(frozen=True)
class Sample:
    """Indices of n anchors, their positives and m negatives (own: (n, m); shared: (m,))."""

    anchors: torch.Tensor
    positives: torch.Tensor
    negatives: torch.Tensor

    @property
    def shared(self) -> bool:
        return self.negatives.dim() == 1

    def part(self, anchors: slice) -> Sample:
        """The tuples of a slice of the anchors (shared negatives stay the one table)."""
        negatives = self.negatives if self.shared else self.negatives[anchors]
        return Sample(self.anchors[anchors], self.positives[anchors], negatives)


Blocks = Sequence[tuple[Views, Sample]]


def same_class_partner(
    labels: torch.Tensor, anchors: torch.Tensor, gen: torch.Generator
) -> torch.Tensor:
    """For each anchor, a uniformly drawn other index of the same class (itself if it is alone).

    Shape: labels (N,), anchors (n,) -> (n,).
    """
    order = torch.argsort(labels, stable=True)
    sorted_labels = labels[order]
    classes, counts = torch.unique_consecutive(sorted_labels, return_counts=True)
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.empty_like(order)
    rank[order] = torch.arange(len(order))
    group = torch.searchsorted(classes, labels[anchors])
    start, count = starts[group], counts[group]
    own = rank[anchors] - start
    others = (count - 1).clamp(min=1)
    pick = (torch.rand(len(anchors), generator=gen, dtype=torch.float64) * others).long()
    pick = torch.minimum(pick, others - 1)
    pick = torch.where(count > 1, pick + (pick >= own).long(), own)
    return order[start + pick]


def draw(views: Views, n: int, m: int, shared: bool, gen: torch.Generator) -> Sample:
    """n anchors without replacement, a positive each, and m negatives from the marginal."""
    size = views.anchor.shape[0]
    anchors = torch.randperm(size, generator=gen)[:n]
    positives = anchors if views.augmented else same_class_partner(views.labels, anchors, gen)
    shape = (m,) if shared else (n, m)
    negatives = torch.randint(0, size, shape, generator=gen)
    return Sample(anchors, positives, negatives)


def objective(
    fa: torch.Tensor,
    fp: torch.Tensor,
    fn: torch.Tensor,
    shared: bool,
    loss: str,
    temperature: float,
) -> torch.Tensor:
    """Per-anchor loss. Shape: fa, fp (c, d); fn (c, m, d) own or, `shared`, (m, d) -> (c,)."""
    if loss in losses.BINARY_LOSSES:
        return losses.k_negative(losses.k_negative_margins(fa, fp, fn), loss=loss)
    pos = (fa * fp).sum(-1)  # (c,)
    neg = losses.scores_shared(fa, fn) if shared else losses.scores_own(fa, fn)  # (c, m)
    if loss == "lse":
        return losses.lse_risk(pos, neg, temperature, reduction="none")
    return losses.info_nce(pos, neg, temperature, reduction="none")


def project(weight: torch.Tensor, radius: float) -> torch.Tensor:
    """Euclidean projection onto the Frobenius ball {W : ||W||_F <= radius}."""
    norm = torch.linalg.matrix_norm(weight)
    return weight * torch.clamp(radius / norm, max=1.0) if norm > 0 else weight


@dataclass(frozen=True)
class FitSpec:
    """The learner's hyper-parameters: W in R^{d x p} with ||W||_F <= radius, projected Adam."""

    d: int
    radius: float
    steps: int
    batch: int
    lr: float


def fit(
    blocks: Blocks,
    spec: FitSpec,
    loss: str,
    temperature: float,
    gen: torch.Generator,
) -> torch.Tensor:
    """Projected Adam steps on minibatches of the training sample. Returns W (d, p).

    Each minibatch draws `batch` rows with replacement from one block; a sample of several
    blocks spends ceil(rows / batch) steps on a block, then moves to the next (cyclically).
    """
    views = blocks[0][0]
    p = views.anchor.shape[1]
    init = 0.1 * torch.randn(spec.d, p, generator=gen, dtype=views.anchor.dtype)
    weight = project(init, spec.radius)
    weight.requires_grad_(True)
    optimizer = torch.optim.Adam([weight], lr=spec.lr)
    block, left = 0, 0
    for _ in range(spec.steps):
        views, sample = blocks[block]
        n = sample.anchors.shape[0]
        left = left or -(-n // spec.batch)
        rows = torch.randint(0, n, (min(spec.batch, n),), generator=gen)
        fa = views.anchor[sample.anchors[rows]] @ weight.T  # (b, d)
        fp = views.positive[sample.positives[rows]] @ weight.T  # (b, d)
        neg = sample.negatives if sample.shared else sample.negatives[rows]
        fn = views.negative[neg] @ weight.T  # (m, d) shared or (b, m, d) own
        value = objective(fa, fp, fn, sample.shared, loss, temperature).mean()
        optimizer.zero_grad(set_to_none=True)
        value.backward()
        optimizer.step()
        with torch.no_grad():
            weight.copy_(project(weight, spec.radius))
        left -= 1
        if left == 0:
            block = (block + 1) % len(blocks)
    return weight.detach()


def _block_rows(views: Views, sample: Sample) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A block's tuples in float64: anchors, positives (c, p); negatives (m, p) or (c, m, p)."""
    return (
        _rows(views.anchor, sample.anchors),
        _rows(views.positive, sample.positives),
        _rows(views.negative, sample.negatives),
    )


def _rows(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """table[index] in float64, without the gather where index lists every row in order (a
    block made as its own tables: crl.steps.unimodal.sampling). Shape: (N, p), index (...) ->
    (..., p)."""
    flat = index.reshape(-1)
    if flat.numel() == table.shape[0] and torch.equal(flat, torch.arange(flat.numel())):
        return table.double().reshape(*index.shape, table.shape[1])
    return table[index].double()


HOLD_VALUES = 2**25  # float64 feature values of a sample held whole by `mean_loss`: 256 MiB


def fit_to_tolerance(
    blocks: Blocks,
    spec: FitSpec,
    loss: str,
    temperature: float,
    gen: torch.Generator,
    solver: SolverSpec,
    hold: int = HOLD_VALUES,
) -> tuple[torch.Tensor, Solution]:
    """Accelerated projected gradient on the whole sample's mean loss until the gradient-mapping
    norm is below `solver.tol` (crl.kernels.solver): the training budget does not depend on n.

    f(x)^T f(y) is not convex in W and W = 0 is a stationary point, so the start is the same
    seeded random W as `fit`'s; the result is a constrained stationary point. A sample of at
    most `hold` feature values is held in float64 throughout; a larger one is made again
    block by block at every evaluation (memory of one block, time of a pass over the sample),
    and, each pass being dear, fitted in three phases (crl.kernels.phased.phased_fit: APG to
    COARSE_TOL, a preconditioned descent over the ball, APG to `solver.tol`, whose stopping
    rule decides as for a held sample).
    Returns W (d, p).
    """
    views = blocks[0][0]
    p = views.anchor.shape[1]
    init = 0.1 * torch.randn(spec.d, p, generator=gen, dtype=torch.float64)
    value, value_and_grad = mean_loss(blocks, spec.d, loss, temperature, hold)
    ball = lambda flat: project_ball(flat, spec.radius)  # noqa: E731
    if _held(blocks, hold) or solver.tol >= COARSE_TOL:
        solution = apg(value, value_and_grad, ball, init.reshape(-1), solver)
    else:
        solution = phased_fit(value, value_and_grad, init.reshape(-1), spec.d, spec.radius, solver)
    weight = solution.params.reshape(spec.d, p).to(views.anchor.dtype)
    return weight, solution


def _held(blocks: Blocks, hold: int) -> bool:
    """Whether `mean_loss` holds the sample whole (one block, or at most `hold` values)."""
    return len(blocks) == 1 or _values(blocks) <= hold


def mean_loss(
    blocks: Blocks, d: int, loss: str, temperature: float, hold: int = HOLD_VALUES
) -> tuple[Value, ValueAndGrad]:
    """The sample's mean loss as a function of the flattened W (d p,) in float64, and its value
    and gradient: a sample of at most `hold` feature values is gathered once into float64 rows
    (block after block) and held, a larger one streamed block by block at every evaluation."""
    p = blocks[0][0].anchor.shape[1]
    shared = blocks[0][1].shared

    def block_terms(flat: torch.Tensor, rows: tuple[torch.Tensor, ...]) -> torch.Tensor:
        weight = flat.reshape(d, p)
        fa, fp, fn = (table @ weight.T for table in rows)
        return objective(fa, fp, fn, shared, loss, temperature)  # (c,)

    if _held(blocks, hold):
        rows = _held_rows(blocks)
        return autograd(lambda flat: block_terms(flat, rows).mean())
    return _streamed(blocks, block_terms)


def block_sizes(blocks: Blocks) -> list[int]:
    """Anchors per block, without making a block where the sequence knows them."""
    sizes = getattr(blocks, "sizes", None)
    return list(sizes) if sizes is not None else [int(s.anchors.shape[0]) for _, s in blocks]


def _values(blocks: Blocks) -> int:
    """Feature values of the sample's tuples (shared negatives once)."""
    views, sample = blocks[0]
    n = sum(block_sizes(blocks))
    m, p = sample.negatives.shape[-1], views.anchor.shape[1]
    return (2 * n + m) * p if sample.shared else (2 + m) * n * p


def _held_rows(blocks: Blocks) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every block's tuples in float64, concatenated (shared negatives: the one table)."""
    parts = [_block_rows(*block) for block in blocks]
    if len(parts) == 1:
        return parts[0]
    negatives = parts[0][2] if blocks[0][1].shared else torch.cat([part[2] for part in parts])
    return torch.cat([part[0] for part in parts]), torch.cat([part[1] for part in parts]), negatives


def _streamed(
    blocks: Blocks, block_terms: Callable[[torch.Tensor, tuple], torch.Tensor]
) -> tuple[Value, ValueAndGrad]:
    """The mean loss over every block and its gradient, one block in memory at a time (each
    evaluation is one pass over the blocks, counting their anchors as it goes)."""

    def value(flat: torch.Tensor) -> float:
        total, n = 0.0, 0
        with torch.no_grad():
            for block in blocks:
                terms = block_terms(flat, _block_rows(*block))
                total, n = total + float(terms.sum()), n + terms.shape[0]
        return total / n

    def value_and_grad(flat: torch.Tensor) -> tuple[float, torch.Tensor]:
        total, n, grad = 0.0, 0, torch.zeros_like(flat)
        for block in blocks:
            point = flat.detach().requires_grad_(True)
            terms = block_terms(point, _block_rows(*block))
            block_sum = terms.sum()
            (part,) = torch.autograd.grad(block_sum, point)
            total, n, grad = total + float(block_sum.detach()), n + terms.shape[0], grad + part
        return total / n, grad / n

    return value, value_and_grad


@torch.no_grad()
def per_anchor_loss(
    weight: torch.Tensor,
    views: Views,
    sample: Sample,
    loss: str,
    temperature: float,
    chunk: int = 8192,
) -> torch.Tensor:
    """The loss of every anchor of `sample` under f = W phi, in chunks. Returns (n,) float64."""
    fa_all = views.anchor @ weight.T  # (N, d)
    fp_all = fa_all if views.positive is views.anchor else views.positive @ weight.T
    fn_all = fa_all if views.negative is views.anchor else views.negative @ weight.T
    shared = fn_all[sample.negatives] if sample.shared else None  # (m, d)
    out = []
    for start in range(0, sample.anchors.shape[0], chunk):
        sl = slice(start, start + chunk)
        fn = shared if shared is not None else fn_all[sample.negatives[sl]]
        out.append(
            objective(
                fa_all[sample.anchors[sl]],
                fp_all[sample.positives[sl]],
                fn,
                sample.shared,
                loss,
                temperature,
            )
        )
    return torch.cat(out).double()


@torch.no_grad()
def scores(weight: torch.Tensor, views: Views, sample: Sample) -> tuple[torch.Tensor, torch.Tensor]:
    """Positive scores (n,) and negative scores (n, m) of s(x, y) = f(x)^T f(y)."""
    fa = views.anchor[sample.anchors] @ weight.T  # (n, d)
    fp = views.positive[sample.positives] @ weight.T  # (n, d)
    fn = views.negative[sample.negatives] @ weight.T  # (m, d) shared or (n, m, d) own
    pos = (fa * fp).sum(-1)  # (n,)
    neg = losses.scores_shared(fa, fn) if sample.shared else losses.scores_own(fa, fn)
    return pos, neg
