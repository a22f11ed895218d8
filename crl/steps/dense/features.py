"""A run's dense position features read back for the cells, and the draws of a cell.

Normalisation (D1: every position feature in the unit ball): centred on the mean of the train
positions of both views, then ("scale") divided by the largest centred norm over all splits
(times 1 + 1e-6), or ("unit") each divided by its own norm (times 1 + 1e-6), so ||phi_k|| <= 1
on every row the cells see. The pooled (global) feature of a view is the mean of its position
features, so its norm is <= 1 too.

External negatives come from the pool split, disjoint from train and test. One negative is a
position of a pool image drawn like the positive's key b: a uniform matched position a of that
image and b = its correspondent (p_V of Prop. D9 when the pool image is used once); its pooled
view-2 feature is the global branch's negative.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from crl.steps.data import list_to_numpy

SPLITS = ("train", "test", "pool")


@dataclass(frozen=True)
class DenseSplit:
    """One split. Shape: f1, f2 (N, K, p) float32 normalised; geometric, argmax (N, K) int64
    correspondences (-1: no match); labels1 (N, K) int64 cell classes (-1: none)."""

    f1: np.ndarray
    f2: np.ndarray
    geometric: np.ndarray
    argmax: np.ndarray
    labels1: np.ndarray

    def match(self, correspondence: str) -> np.ndarray:
        return self.geometric if correspondence == "geometric" else self.argmax

    def kept(self, correspondence: str) -> np.ndarray:
        """Indices of the images with a matched position (D3: the others are discarded)."""
        return np.flatnonzero((self.match(correspondence) >= 0).any(axis=1))


@dataclass(frozen=True)
class DenseFeatures:
    train: DenseSplit
    test: DenseSplit
    pool: DenseSplit
    positions: int  # K = grid^2
    p: int


def _read(root: Path, split: str) -> pa.Table:
    files = sorted((root / f"split={split}").glob("part-*.parquet"))
    if not files:
        raise FileNotFoundError(f"{root / f'split={split}'}: no shards")
    return pa.concat_tables([pq.read_table(f) for f in files]).sort_by("id")


def argmax_match(f1: np.ndarray, f2: np.ndarray) -> np.ndarray:
    """DenseCL's correspondence on frozen features: for each view-1 position, the view-2
    position of largest cosine. Shape: (N, K, p), (N, K, p) -> (N, K) int64."""
    a = torch.nn.functional.normalize(torch.from_numpy(f1), dim=2)
    b = torch.nn.functional.normalize(torch.from_numpy(f2), dim=2)
    return (a @ b.transpose(1, 2)).argmax(dim=2).numpy().astype(np.int64)


def load_dense_features(
    features_dir: Path, positions: int, normalise: str = "scale"
) -> DenseFeatures:
    """Every split, normalised into the unit ball (D1), with both correspondences."""
    tables = {s: _read(features_dir, s) for s in SPLITS}
    raw = {
        s: [list_to_numpy(t.column(c)).reshape(len(t), positions, -1) for c in ("f1", "f2")]
        for s, t in tables.items()
    }
    p = raw["train"][0].shape[2]
    mean = np.concatenate([x.reshape(-1, p) for x in raw["train"]]).mean(axis=0, dtype=np.float64)
    mean = mean.astype(np.float32)
    scale = max(
        float(np.linalg.norm(x.reshape(-1, p) - mean, axis=1).max())
        for v in raw.values()
        for x in v
    )
    scale = (scale or 1.0) * (1 + 1e-6)

    def put(x: np.ndarray) -> np.ndarray:
        x = x - mean
        if normalise == "scale":
            return x / np.float32(scale)
        norms = np.linalg.norm(x, axis=2, keepdims=True) * np.float32(1 + 1e-6)
        return x / np.maximum(norms, np.float32(1e-12))

    def split(name: str) -> DenseSplit:
        f1, f2 = (put(x) for x in raw[name])
        t = tables[name]
        return DenseSplit(
            np.ascontiguousarray(f1),
            np.ascontiguousarray(f2),
            list_to_numpy(t.column("match"), np.int64),
            argmax_match(f1, f2),
            list_to_numpy(t.column("labels1"), np.int64),
        )

    return DenseFeatures(split("train"), split("test"), split("pool"), positions, p)


@dataclass(frozen=True)
class Negatives:
    """Drawn external negatives. Shape: dense (..., p) position features, pooled (..., p) the
    pooled view-2 features of the same pool images; images (...,) their pool indices."""

    dense: torch.Tensor
    pooled: torch.Tensor
    images: torch.Tensor


def draw_negatives(
    pool: DenseSplit,
    correspondence: str,
    images: torch.Tensor,
    gen: torch.Generator,
) -> Negatives:
    """For the pool images `images` (any shape), a matched position of each drawn uniformly, its
    correspondent's view-2 feature, and the pooled view-2 feature."""
    match = torch.from_numpy(pool.match(correspondence))  # (P, K)
    f2 = torch.from_numpy(pool.f2)  # (P, K, p)
    flat = images.reshape(-1)
    valid = (match[flat] >= 0).double()  # (r, K)
    a = torch.multinomial(valid, 1, generator=gen).squeeze(1)  # (r,) uniform over A_j
    b = match[flat, a]
    shape = (*images.shape, f2.shape[2])
    return Negatives(f2[flat, b].reshape(shape), f2[flat].mean(dim=1).reshape(shape), images)


def pool_draw(pool: DenseSplit, correspondence: str, shape: tuple[int, ...], gen: torch.Generator):
    """Pool images i.i.d. uniform over the kept pool images (with replacement), then
    `draw_negatives`: the law p^- of the bounds is the pool's empirical law."""
    kept = torch.from_numpy(pool.kept(correspondence))
    pick = kept[torch.randint(kept.numel(), shape, generator=gen)]
    return draw_negatives(pool, correspondence, pick, gen)


def pool_disjoint(
    pool: DenseSplit, correspondence: str, count: int, m: int, gen: torch.Generator
) -> Negatives | None:
    """`count` blocks of m pool images, no image used twice (Prop. D9: i.i.d. from p_V and
    independent across held-out images); None when the pool has fewer than count * m images."""
    kept = torch.from_numpy(pool.kept(correspondence))
    if kept.numel() < count * m:
        return None
    pick = kept[torch.randperm(kept.numel(), generator=gen)[: count * m]].reshape(count, m)
    return draw_negatives(pool, correspondence, pick, gen)
