"""Where a cell's tuples come from, and whether the draw is the one the theorems assume.

docs/theory/bounds.md (A3) needs i.i.d. tuples: anchor, positive and every negative independent
draws from the data law (sscrl: one shared set of negatives, independent of the pairs). Two
populations:

- `ModelPopulation` (synthetic data): every point of the training sample and of the held-out
  evaluation is a fresh draw from the generative model, passed through the frozen encoder and
  the run's normalisation. Sampling `fresh_from_model`; certified.
- `SplitPopulation` (digits, user Parquet): the splits are i.i.d. samples of the data law, so
  points drawn from the train split WITHOUT replacement are i.i.d. draws of it. When the train
  split holds all n (m + 2) points of a cell (2n + m with shared negatives) as distinct rows,
  sampling is `distinct_from_split` (certified); otherwise points are reused (negatives with
  replacement, same-class positives from the whole split), sampling `split_with_reuse`, and the
  cell's bounds are not certified. The held-out loss uses the test split.

A training sample arrives as a `TrainDraw`: blocks of consecutive anchors, each a (views,
sample) pair whose tuples hold at most BLOCK_ELEMENTS feature values, so a cell of any n streams
through memory one block at a time. A sample that fits one block is drawn exactly as a whole
(by the cell's generator); a larger model sample draws block b from its own generator, seeded by
the cell's generator, the first time it is needed and writes its float32 tables to a scratch
file (`ScratchBlocks`: n (m + 2) p x 4 bytes of disk, unlinked from the start), from which every
later pass reads it back bit for bit (making a block again costs ten times its loss's
evaluation); a larger split sample gathers each block's rows of the split into tables of their
own.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch

from crl.kernels import learner
from crl.kernels.latent import LatentClassModel
from crl.steps.features import Normalizer, SphereNormalizer, SplitArrays

FRESH = "fresh_from_model"
DISTINCT = "distinct_from_split"
REUSE = "split_with_reuse"
CERTIFIED = {FRESH: True, DISTINCT: True, REUSE: False}
BLOCK_ELEMENTS = 2**23  # feature values of one block's tuples: 32 MiB in float32

Block = tuple[learner.Views, learner.Sample]


def block_anchors(m: int, shared: bool, p: int, block_elements: int) -> int:
    """Anchors per block: each brings an anchor, a positive and (own negatives) m negatives of
    p values; shared negatives are one table for every block and do not count."""
    per_anchor = (2 if shared else 2 + m) * p
    return max(1, block_elements // per_anchor)


class TrainDraw:
    """A cell's training sample as blocks of consecutive anchors, with how it was drawn.

    `draw[b]` is block b, a (views, sample) pair indexing its own tables; iteration yields the
    blocks in order. The last block accessed is kept; another one is made again by `make`, so
    at most one block is in memory (two while the next one is made). Shared negatives are the
    same table in every block.
    """

    def __init__(
        self, sampling: str, sizes: list[int], m: int, shared: bool, make: Callable[[int], Block]
    ) -> None:
        self.sampling, self.sizes, self.m, self.shared = sampling, sizes, m, shared
        self._make = make
        self._kept: tuple[int, Block] | None = None

    @classmethod
    def whole(cls, views: learner.Views, sample: learner.Sample, sampling: str) -> TrainDraw:
        """A sample held as one block."""
        m = sample.negatives.shape[-1]
        return cls(
            sampling, [int(sample.anchors.shape[0])], m, sample.shared, lambda _: (views, sample)
        )

    @property
    def certified(self) -> bool:
        return CERTIFIED[self.sampling]

    @property
    def n(self) -> int:
        return sum(self.sizes)

    def __len__(self) -> int:
        return len(self.sizes)

    def __getitem__(self, b: int) -> Block:
        if not 0 <= b < len(self.sizes):
            raise IndexError(f"block {b}: the draw has {len(self.sizes)} blocks")
        if self._kept is None or self._kept[0] != b:
            self._kept = None  # release the kept block before making the next one
            self._kept = (b, self._make(b))
        return self._kept[1]

    def __iter__(self) -> Iterator[Block]:
        return (self[b] for b in range(len(self.sizes)))


class ScratchBlocks:
    """`make` with memory on disk: block b is made the first time it is asked for and its
    tables (float32 tables, int64 labels, as made) are appended to one scratch file; later calls
    read them back, bit for bit. The file is unlinked as it is created (`tempfile.TemporaryFile`),
    so its space goes back when the object or the process goes, however the process ends. Only
    the tables are stored: the block's sample indexes them in order (`_identity`)."""

    TABLES = ("anchor", "positive", "negative", "labels")

    def __init__(self, make: Callable[[int], Block], identity: Callable[[int], learner.Sample]):
        self._make, self._identity = make, identity
        self.file = tempfile.TemporaryFile(prefix="crl-sample-")
        self._where: dict[int, list[tuple[int, np.dtype, tuple[int, ...]]]] = {}

    def __call__(self, b: int) -> Block:
        if b in self._where:
            tables = {}
            for table, (offset, dtype, shape) in zip(self.TABLES, self._where[b], strict=True):
                self.file.seek(offset)
                count = int(np.prod(shape))
                tables[table] = torch.from_numpy(
                    np.fromfile(self.file, dtype=dtype, count=count).reshape(shape)
                )
            return learner.Views(**tables, augmented=True), self._identity(b)
        views, sample = self._make(b)
        self.file.seek(0, 2)  # append
        where = []
        for table in self.TABLES:
            array = np.ascontiguousarray(getattr(views, table).numpy())
            where.append((self.file.tell(), array.dtype, array.shape))
            array.tofile(self.file)
        self._where[b] = where
        return views, sample


def split_anchors(draw: TrainDraw, count: int) -> tuple[TrainDraw, TrainDraw]:
    """The draw's first anchors and the rest, two disjoint samples of the same law (own
    negatives only: shared negatives belong to both). A sample of one block splits after
    `count` anchors; a sample of several at the block boundary nearest to `count`, keeping at
    least one block on each side."""
    if draw.shared:
        raise ValueError("split_anchors: shared negatives belong to every anchor")
    if len(draw) == 1:
        if not 1 <= count < draw.n:
            raise ValueError(f"split_anchors: count={count} must lie in [1, {draw.n - 1}]")
        views, sample = draw[0]
        head, tail = (sample.part(part) for part in (slice(None, count), slice(count, None)))
        return TrainDraw.whole(views, head, draw.sampling), TrainDraw.whole(
            views, tail, draw.sampling
        )
    ends = torch.tensor(draw.sizes).cumsum(0).tolist()
    cut = min(range(1, len(ends)), key=lambda b: abs(ends[b - 1] - count))
    head = TrainDraw(draw.sampling, draw.sizes[:cut], draw.m, False, lambda b: draw[b])
    tail = TrainDraw(draw.sampling, draw.sizes[cut:], draw.m, False, lambda b: draw[cut + b])
    return head, tail


def first_anchors(draw: TrainDraw, count: int) -> TrainDraw:
    """The draw's first min(count, n) anchors, as one block (within the first block: the whole
    draw if it is held whole and has at most `count`)."""
    views, sample = draw[0]
    size = int(sample.anchors.shape[0])
    if len(draw) == 1 and size <= count:
        return draw
    return TrainDraw.whole(views, sample.part(slice(min(count, size))), draw.sampling)


def _sizes(n: int, per_block: int) -> list[int]:
    return [min(per_block, n - start) for start in range(0, n, per_block)]


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
        self,
        model: LatentClassModel,
        encoder: torch.nn.Module,
        normalizer: Normalizer | SphereNormalizer,
    ) -> None:
        self.model, self.encoder, self.normalizer = model, encoder.eval(), normalizer

    @torch.no_grad()
    def _points(self, classes: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        x = self.model.sample_inputs(classes.reshape(-1), gen).to(torch.float32)  # (k, D)
        return self.normalizer(self.encoder(x))  # (k, p)

    def _tuples(
        self,
        n: int,
        m: int,
        shared: bool,
        gen: torch.Generator,
        negative: torch.Tensor | None = None,
    ) -> Block:
        """n fresh tuples; `negative` (m, p) is a shared table drawn before, if any."""
        classes = self.model.sample_classes(n, gen)  # (n,)
        anchor = self._points(classes, gen)
        positive = self._points(classes, gen)
        if negative is None:
            negative = self._points(self.model.sample_classes(m if shared else n * m, gen), gen)
        return _tables(anchor, positive, negative, classes), _identity(n, m, shared)

    def tuples(self, n: int, m: int, gen: torch.Generator) -> Block:
        """n fresh tuples with m fresh negatives each, as one block."""
        return self._tuples(n, m, False, gen)

    def train(
        self,
        n: int,
        m: int,
        shared: bool,
        gen: torch.Generator,
        block_elements: int = BLOCK_ELEMENTS,
    ) -> TrainDraw:
        """n fresh training tuples: one block drawn by `gen`, or (above block_elements) shared
        negatives drawn by `gen`, then block b by a generator seeded from `gen`."""
        per_block = block_anchors(m, shared, self.normalizer.mean.shape[0], block_elements)
        if n <= per_block:
            return TrainDraw.whole(*self._tuples(n, m, shared, gen), FRESH)
        sizes = _sizes(n, per_block)
        negative = self._points(self.model.sample_classes(m, gen), gen) if shared else None
        seeds = torch.randint(0, 2**62, (len(sizes),), generator=gen).tolist()

        def make(b: int) -> Block:
            block_gen = torch.Generator().manual_seed(seeds[b])
            return self._tuples(sizes[b], m, shared, block_gen, negative)

        store = ScratchBlocks(make, lambda b: _identity(sizes[b], m, shared))
        return TrainDraw(FRESH, sizes, m, shared, store)

    def held_out(self, n: int, m: int, pool: int, gen: torch.Generator) -> HeldOut:
        views, sample = self._tuples(n, m, False, gen)
        pool_points = self._points(self.model.sample_classes(pool, gen), gen)
        pool_views = dataclasses.replace(views, negative=pool_points)
        pool_sample = learner.Sample(sample.anchors, sample.positives, torch.arange(pool))
        return HeldOut(views, sample, pool_views, pool_sample)


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

    def train(
        self,
        n: int,
        m: int,
        shared: bool,
        gen: torch.Generator,
        block_elements: int = BLOCK_ELEMENTS,
    ) -> TrainDraw:
        """The sample as indices into the split's tables (one block), or above block_elements
        in blocks of consecutive anchors, each block's rows gathered into tables of its own."""
        views = self.train_views
        sample = _distinct(views, n, m, shared, gen)
        how = DISTINCT
        if sample is None:
            sample, how = learner.draw(views, n, m, shared, gen), REUSE
        per_block = block_anchors(m, shared, views.anchor.shape[1], block_elements)
        if n <= per_block:
            return TrainDraw.whole(views, sample, how)
        sizes = _sizes(n, per_block)
        shared_rows = views.negative[sample.negatives] if shared else None  # (m, p)

        def make(b: int) -> Block:
            """Block b's rows gathered into tables of its own (at most block_elements values),
            so that what reads a block never touches the whole split."""
            rows = slice(b * per_block, b * per_block + sizes[b])
            anchors = sample.anchors[rows]
            negative = (
                shared_rows if shared else views.negative[sample.negatives[rows].reshape(-1)]
            )  # (m, p) shared, (c m, p) own
            tables = learner.Views(
                views.anchor[anchors],
                views.positive[sample.positives[rows]],
                negative,
                views.labels[anchors],
                views.augmented,
            )
            return tables, _identity(sizes[b], m, shared)

        return TrainDraw(how, sizes, m, shared, make)

    def held_out(self, n: int, m: int, pool: int, gen: torch.Generator) -> HeldOut:
        views = self.test_views
        n = min(n, views.anchor.shape[0])
        sample = learner.draw(views, n, m, False, gen)
        rows = torch.randperm(views.anchor.shape[0], generator=gen)[:pool]
        return HeldOut(views, sample, views, learner.Sample(sample.anchors, sample.positives, rows))


Population = ModelPopulation | SplitPopulation
