"""A run's features read back for the cells: both splits, normalised so every ||row|| <= 1.

The normalisation ("scale") is phi(x) = (x - mean) / max(scale, ||x - mean||) (times 1 - 1e-6):
centred on the train mean, scaled by the largest norm on the two splits, and clipped radially,
so that ||phi(x)|| <= 1 holds for every x (docs/theory/bounds.md (A1)), not only for the rows of
the splits, where the clip changes nothing. A cell of the "unit" normalisation projects those
features onto the unit sphere (`on_unit_sphere`): phi(x) / ||phi(x)|| (times 1 - 1e-6; the centre
stays 0), the same as centring and then projecting, since the scale does not change a direction.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from crl.core.config import Config, SyntheticData
from crl.kernels.learner import Views
from crl.steps import data


def _tensor(array: np.ndarray) -> torch.Tensor:
    """Zero-copy view; arrays from Ray's object store are read-only and nothing writes to them."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(np.asarray(array))


@dataclass(frozen=True)
class Normalizer:
    """x -> (x - mean) / max(scale, ||x - mean||) / (1 + 1e-6). Shape: mean (p,)."""

    mean: np.ndarray
    scale: float

    def array(self, x: np.ndarray) -> np.ndarray:
        """Shape: x (N, p) float32 -> (N, p) float32, C-contiguous."""
        centred = x - self.mean
        norms = np.linalg.norm(centred, axis=1, keepdims=True)
        denominator = np.maximum(np.float32(self.scale * (1 + 1e-6)), norms * np.float32(1 + 1e-6))
        return np.ascontiguousarray(centred / denominator)

    def in_place(self, x: np.ndarray, rows: int = 65536) -> np.ndarray:
        """`array(x)` written over x (N, p) float32, `rows` rows at a time; returns x."""
        for start in range(0, len(x), rows):
            x[start : start + rows] = self.array(x[start : start + rows])
        return x

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """Shape: x (N, p) -> (N, p) float32."""
        centred = x.to(torch.float32) - torch.from_numpy(self.mean)
        norms = centred.norm(dim=1, keepdim=True)
        scale = torch.tensor(self.scale * (1 + 1e-6), dtype=torch.float32)
        return centred / torch.maximum(scale, norms * (1 + 1e-6))


_SHRINK = 1 + 1e-6  # every projected norm is 1/_SHRINK < 1, whatever float32 rounding does


def _unit_rows(x: np.ndarray) -> np.ndarray:
    """Each row of x (N, p) divided by its norm (times 1 - 1e-6); a zero row stays 0."""
    norms = np.linalg.norm(x, axis=1, keepdims=True) * np.float32(_SHRINK)
    return np.ascontiguousarray(np.divide(x, norms, out=np.zeros_like(x), where=norms > 0))


@dataclass(frozen=True)
class SphereNormalizer:
    """x -> inner(x) / ||inner(x)||: the run's normalisation, then onto the unit sphere."""

    inner: Normalizer

    @property
    def mean(self) -> np.ndarray:
        return self.inner.mean

    def array(self, x: np.ndarray) -> np.ndarray:
        """Shape: x (N, p) float32 -> (N, p) float32."""
        return _unit_rows(self.inner.array(x))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """Shape: x (N, p) -> (N, p) float32."""
        inner = self.inner(x)
        norms = inner.norm(dim=1, keepdim=True) * _SHRINK
        return torch.where(norms > 0, inner / norms.clamp_min(1e-30), torch.zeros_like(inner))


@dataclass(frozen=True)
class SplitArrays:
    """One split's normalised features and latent labels.

    Shape: x (N, p) clean inputs for downstream metrics; labels (N,); view_a, view_b (N, p) the
    two augmented views, or None when positives share a class instead.
    """

    x: np.ndarray
    labels: np.ndarray
    view_a: np.ndarray | None = None
    view_b: np.ndarray | None = None

    def inputs(self) -> torch.Tensor:
        """x as a tensor (N, p)."""
        return _tensor(self.x)

    def label_tensor(self) -> torch.Tensor:
        """labels as int64 (N,)."""
        return torch.from_numpy(np.asarray(self.labels, dtype=np.int64))

    def views(self) -> Views:
        """The tables a sample indexes: x three times, or view a / view b / view b."""
        if self.view_a is None:
            x = self.inputs()
            return Views(x, x, x, self.label_tensor(), augmented=False)
        b = _tensor(self.view_b)
        return Views(_tensor(self.view_a), b, b, self.label_tensor(), augmented=True)


@dataclass(frozen=True)
class Features:
    """Both splits of a run's features and the normalisation that produced them."""

    train: SplitArrays
    test: SplitArrays
    normalizer: Normalizer | SphereNormalizer


def on_unit_sphere(features: Features) -> Features:
    """The "unit" normalisation of a run's features: every row (and view) projected onto the
    unit sphere, in new arrays."""

    def split(s: SplitArrays) -> SplitArrays:
        views = [None if v is None else _unit_rows(np.asarray(v)) for v in (s.view_a, s.view_b)]
        return SplitArrays(_unit_rows(np.asarray(s.x)), s.labels, *views)

    return Features(
        split(features.train), split(features.test), SphereNormalizer(features.normalizer)
    )


def _largest_norm(table: np.ndarray, mean: np.ndarray, rows: int = 65536) -> float:
    """max_i ||table_i - mean||, `rows` rows at a time."""
    return max(
        float(np.linalg.norm(table[start : start + rows] - mean, axis=1).max())
        for start in range(0, len(table), rows)
    )


def load_features(features_dir: Path) -> Features:
    """Features of both splits, centred on the train mean and scaled so every ||row|| <= 1.

    Normalised in place, in chunks: the peak memory is the splits' arrays and one chunk.
    """
    tr = data.read_split(features_dir, "train")
    te = data.read_split(features_dir, "test")
    mean = tr.x.mean(axis=0, dtype=np.float64).astype(np.float32)
    tables = [t for t in (tr.x, te.x, tr.view_a, tr.view_b, te.view_a, te.view_b) if t is not None]
    scale = max(_largest_norm(t, mean) for t in tables) or 1.0
    normalizer = Normalizer(mean, scale)

    def norm(t: np.ndarray | None) -> np.ndarray | None:
        return None if t is None else normalizer.in_place(t)

    return Features(
        SplitArrays(norm(tr.x), tr.labels, norm(tr.view_a), norm(tr.view_b)),
        SplitArrays(norm(te.x), te.labels, norm(te.view_a), norm(te.view_b)),
        normalizer,
    )


def tau_of(config: Config, labels: np.ndarray) -> float:
    """Class-collision probability: exact for the synthetic model, label frequencies otherwise."""
    if isinstance(config.dataset, SyntheticData):
        return float(data.synthetic_model(config.dataset, config.seed).tau)
    freq = np.bincount(labels) / len(labels)
    return float((freq**2).sum())
