"""Where a cell's tuples come from, and whether the draw is the one the theorems assume.

BOUNDS.md (A3) needs i.i.d. tuples: anchor, positive and every negative independent draws from
the data law (sscrl: one shared set of negatives, independent of the pairs). Two populations:

- `ModelPopulation` (synthetic data): every point of the training sample and of the held-out
  evaluation is a fresh draw from the generative model, passed through the frozen encoder and
  the run's normalisation. Sampling `fresh_from_model`; certified.
- `SplitPopulation` (digits, user Parquet): the splits are i.i.d. samples of the data law, so
  points drawn from the train split WITHOUT replacement are i.i.d. draws of it. When the train
  split holds all n (m + 2) points of a cell (2n + m with shared negatives) as distinct rows,
  sampling is `distinct_from_split` (certified); otherwise points are reused (negatives with
  replacement, same-class positives from the whole split), sampling `split_with_reuse`, and the
  cell's bounds are not certified. The held-out loss uses the test split.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from crl.kernels import learner
from crl.kernels.latent import LatentClassModel
from crl.steps.features import Normalizer, SplitArrays

FRESH = "fresh_from_model"
DISTINCT = "distinct_from_split"
REUSE = "split_with_reuse"
CERTIFIED = {FRESH: True, DISTINCT: True, REUSE: False}


@dataclass(frozen=True)
class Draw:
    """A sample and the tables its indices point into, with how it was drawn."""

    views: learner.Views
    sample: learner.Sample
    sampling: str

    @property
    def certified(self) -> bool:
        return CERTIFIED[self.sampling]


@dataclass(frozen=True)
class HeldOut:
    """Fresh held-out anchors: with m fresh negatives each (`sample`), and the same anchors
    against one shared pool of negatives (`pool_views`, `pool_sample`) for LSE's L(s)."""

    views: learner.Views
    sample: learner.Sample
    pool_views: learner.Views
    pool_sample: learner.Sample


def _tables(
    anchor: torch.Tensor, positive: torch.Tensor, negative: torch.Tensor, labels: torch.Tensor
) -> learner.Views:
    return learner.Views(anchor, positive, negative, labels, augmented=True)


def _identity(n: int, m: int, shared: bool) -> learner.Sample:
    negatives = torch.arange(m) if shared else torch.arange(n * m).reshape(n, m)
    return learner.Sample(torch.arange(n), torch.arange(n), negatives)


class ModelPopulation:
    """Fresh draws from the latent-class model: x -> normalise(encoder(x)), ||phi|| <= 1."""

    def __init__(
        self, model: LatentClassModel, encoder: torch.nn.Module, normalizer: Normalizer
    ) -> None:
        self.model, self.encoder, self.normalizer = model, encoder.eval(), normalizer

    @torch.no_grad()
    def _points(self, classes: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        x = self.model.sample_inputs(classes.reshape(-1), gen).to(torch.float32)  # (k, D)
        return self.normalizer(self.encoder(x))  # (k, p)

    def _tuples(self, n: int, m: int, shared: bool, gen: torch.Generator) -> Draw:
        classes = self.model.sample_classes(n, gen)  # (n,)
        anchor = self._points(classes, gen)
        positive = self._points(classes, gen)
        negative = self._points(self.model.sample_classes(m if shared else n * m, gen), gen)
        views = _tables(anchor, positive, negative, classes)
        return Draw(views, _identity(n, m, shared), FRESH)

    def train(self, n: int, m: int, shared: bool, gen: torch.Generator) -> Draw:
        return self._tuples(n, m, shared, gen)

    def held_out(self, n: int, m: int, pool: int, gen: torch.Generator) -> HeldOut:
        draw = self._tuples(n, m, False, gen)
        pool_points = self._points(self.model.sample_classes(pool, gen), gen)
        pool_views = dataclasses.replace(draw.views, negative=pool_points)
        pool_sample = learner.Sample(draw.sample.anchors, draw.sample.positives, torch.arange(pool))
        return HeldOut(draw.views, draw.sample, pool_views, pool_sample)


def _distinct(
    views: learner.Views, n: int, m: int, shared: bool, gen: torch.Generator
) -> learner.Sample | None:
    """n anchors, their positives and the negatives as distinct rows of the split, or None."""
    size = views.anchor.shape[0]
    negatives = m if shared else n * m
    needed = n + negatives + (0 if views.augmented else n)
    if needed > size:
        return None
    order = torch.randperm(size, generator=gen)
    anchors = order[:n]
    neg = order[n : n + negatives]
    if views.augmented:  # the positive is the other view of the anchor's own image
        positives = anchors
    else:  # a distinct unused point of the anchor's class
        rest = order[n + negatives :]
        positives = torch.empty(n, dtype=torch.long)
        labels = views.labels
        for label in torch.unique(labels[anchors]).tolist():
            mine = (labels[anchors] == label).nonzero().flatten()
            pool = rest[labels[rest] == label]
            if len(pool) < len(mine):
                return None
            positives[mine] = pool[: len(mine)]
    return learner.Sample(anchors, positives, neg if shared else neg.reshape(n, m))


class SplitPopulation:
    """Draws from the materialised splits: the train split for the sample, the test split for
    the held-out evaluation."""

    def __init__(self, train: SplitArrays, test: SplitArrays) -> None:
        self.train_views, self.test_views = train.views(), test.views()

    def train(self, n: int, m: int, shared: bool, gen: torch.Generator) -> Draw:
        sample = _distinct(self.train_views, n, m, shared, gen)
        if sample is not None:
            return Draw(self.train_views, sample, DISTINCT)
        return Draw(self.train_views, learner.draw(self.train_views, n, m, shared, gen), REUSE)

    def held_out(self, n: int, m: int, pool: int, gen: torch.Generator) -> HeldOut:
        views = self.test_views
        n = min(n, views.anchor.shape[0])
        sample = learner.draw(views, n, m, False, gen)
        rows = torch.randperm(views.anchor.shape[0], generator=gen)[:pool]
        return HeldOut(views, sample, views, learner.Sample(sample.anchors, sample.positives, rows))


Population = ModelPopulation | SplitPopulation
