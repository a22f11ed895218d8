"""A dense cell's objective (docs/theory/dense-bounds.md): its images with their negatives as
the loss takes them (`Batch`), the per-image losses of one head or of a batch of heads each on
its own image, and the head's fit.

The objective is DenseCL's (1 - lam) L_global + lam L_dense per image; the global branch takes
the pooled features, one position matched to itself, and external negatives.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from crl.kernels.dense import image as dense_image
from crl.kernels.solver import Solution, SolverSpec, apg, autograd, project_ball
from crl.steps.dense.features import DenseSplit, Negatives

F64 = torch.float64


@dataclass(frozen=True)
class Batch:
    """Images with their negatives, as the loss takes them. Shape: phi1, phi2 (n, K, p),
    match (n, K), neg (n, m, p) or (m, p); pooled1, pooled2 (n, 1, p), pooled_neg like neg."""

    phi1: torch.Tensor
    phi2: torch.Tensor
    match: torch.Tensor
    neg: torch.Tensor
    pooled1: torch.Tensor
    pooled2: torch.Tensor
    pooled_neg: torch.Tensor

    @property
    def n(self) -> int:
        return int(self.phi1.shape[0])

    @property
    def shared(self) -> bool:
        """One queue of negatives shared by the images (sscrl)."""
        return self.neg.ndim == 2

    def take(self, rows: torch.Tensor) -> Batch:
        """The images `rows` (with repeats) with their own negatives (a shared queue stays).
        Shape: rows (c,) int64."""

        def own(x: torch.Tensor) -> torch.Tensor:
            return x if x.ndim == 2 else x[rows]

        return Batch(
            self.phi1[rows],
            self.phi2[rows],
            self.match[rows],
            own(self.neg),
            self.pooled1[rows],
            self.pooled2[rows],
            own(self.pooled_neg),
        )

    def part(self, start: int, stop: int) -> Batch:
        """The images start..stop - 1 with their negatives."""
        return self.take(torch.arange(start, stop))


def batch(split: DenseSplit, rows: torch.Tensor, corr: str, negatives: Negatives) -> Batch:
    """The split's images `rows` under the correspondence `corr`, with `negatives`."""
    phi1 = torch.from_numpy(split.f1)[rows].to(F64)
    phi2 = torch.from_numpy(split.f2)[rows].to(F64)
    match = torch.from_numpy(split.match(corr))[rows]
    return Batch(
        phi1,
        phi2,
        match,
        negatives.dense.to(F64),
        phi1.mean(dim=1, keepdim=True),
        phi2.mean(dim=1, keepdim=True),
        negatives.pooled.to(F64),
    )


def branch_losses(
    W: torch.Tensor, b: Batch, negative_set: str, T: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(dense, global) per-image losses; global is None when lam = 1. W (d, p) is one head for
    every image; W (n, d, p) gives image i the head W[i] (its negatives must be its own)."""
    if W.ndim == 3 and b.shared:
        raise ValueError("a head per image needs each image's own negatives, not a shared queue")

    def emb(x: torch.Tensor) -> torch.Tensor:  # the head on the last axis: (.., p) -> (.., d)
        return x @ W.mT

    dense = dense_image.image_losses(emb(b.phi1), emb(b.phi2), emb(b.neg), b.match, negative_set, T)
    if lam == 1.0:
        return dense, None
    zero = torch.zeros(b.n, 1, dtype=torch.int64)
    glob = dense_image.image_losses(
        emb(b.pooled1), emb(b.pooled2), emb(b.pooled_neg), zero, "ext", T
    )
    return dense, glob


def objective(W: torch.Tensor, b: Batch, negative_set: str, T: float, lam: float) -> torch.Tensor:
    """The combined objective per image (n,), W as in `branch_losses`."""
    dense, glob = branch_losses(W, b, negative_set, T, lam)
    return dense_image.combined_loss(dense, glob, lam)


def fit(
    train: Batch,
    negatives: str,
    lam: float,
    shape: tuple[int, int],
    R: float,
    T: float,
    solver: SolverSpec,
    gen: torch.Generator,
) -> Solution:
    """The head W (d x p) in the ball ||W||_F <= R minimising the training objective, by
    accelerated projected gradient from a random start at half the radius."""
    start = torch.randn(*shape, generator=gen, dtype=F64)
    start = start * (0.5 * R / float(start.norm()))
    value, value_and_grad = autograd(lambda W: objective(W, train, negatives, T, lam).mean())
    return apg(value, value_and_grad, lambda W: project_ball(W, R), start, solver)
