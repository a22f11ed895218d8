"""Does a certificate move with the gap? Rank statistics of Jiang et al. (2020) and Dziugaite et
al. (2020), on arrays of grid points.

- `kendall_tau(a, b)`: Kendall's tau-b between two sequences (ties in either count as neither
  concordant nor discordant, and shrink the denominator); nan with fewer than two distinct values.
- `granulated_tau(a, b, groups)`: Jiang et al.'s granulated tau along one axis: tau within each
  group of points that differ only in that axis (the other axes fixed), averaged over the groups
  that have two points or more.
- `sign_error(a, b, b_se, groups)`: Dziugaite et al.'s robust sign-error along one axis: over the
  pairs within a group, the share of pairs where sign(a_i - a_j) disagrees with sign(b_i - b_j),
  each pair weighted by the confidence that the two gaps differ in that direction,
  2 Phi(|b_i - b_j| / sqrt(se_i^2 + se_j^2)) - 1 (a difference inside the noise weighs ~0);
  the weighted mean per group, then its mean and its worst (largest) value over groups.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["AxisPairs", "SignError", "granulated_tau", "kendall_tau", "sign_error"]


def kendall_tau(a: Sequence[float], b: Sequence[float]) -> float:
    """Kendall's tau-b of (a, b) by the pair count (O(k^2), k = len(a))."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"a and b must be 1-d of one length, got {x.shape} and {y.shape}")
    i, j = np.triu_indices(len(x), k=1)
    dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
    concordance = float((dx * dy).sum())
    untied_x, untied_y = float((dx != 0).sum()), float((dy != 0).sum())
    if untied_x == 0 or untied_y == 0:
        return math.nan
    return concordance / math.sqrt(untied_x * untied_y)


@dataclass(frozen=True)
class AxisPairs:
    """Every pair of points within a group, once: pair ends i < j and the pair's group index.
    Fixed for a set of groups, so statistics over many draws of the values reuse it."""

    i: np.ndarray
    j: np.ndarray
    group: np.ndarray
    groups: int

    @classmethod
    def of(cls, groups: Sequence[object]) -> AxisPairs:
        keys: dict[object, list[int]] = {}
        for index, key in enumerate(groups):
            keys.setdefault(key, []).append(index)
        ii, jj, gg = [], [], []
        members = [np.asarray(v) for v in keys.values() if len(v) >= 2]
        for g, member in enumerate(members):
            a, b = np.triu_indices(len(member), k=1)
            ii.append(member[a])
            jj.append(member[b])
            gg.append(np.full(len(a), g))
        if not members:
            empty = np.zeros(0, dtype=np.int64)
            return cls(empty, empty, empty, 0)
        return cls(np.concatenate(ii), np.concatenate(jj), np.concatenate(gg), len(members))


def granulated_tau(
    a: Sequence[float], b: Sequence[float], groups: Sequence[object] | AxisPairs
) -> float:
    """Mean over groups (of two points or more) of kendall_tau within the group; nan if none."""
    pairs = groups if isinstance(groups, AxisPairs) else AxisPairs.of(groups)
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    dx, dy = np.sign(x[pairs.i] - x[pairs.j]), np.sign(y[pairs.i] - y[pairs.j])
    concordance = np.bincount(pairs.group, dx * dy, minlength=pairs.groups)
    untied = np.bincount(pairs.group, (dx != 0) * 1.0, minlength=pairs.groups) * np.bincount(
        pairs.group, (dy != 0) * 1.0, minlength=pairs.groups
    )
    defined = untied > 0
    if not defined.any():
        return math.nan
    return float(np.mean(concordance[defined] / np.sqrt(untied[defined])))


@dataclass(frozen=True)
class SignError:
    """The weighted sign-error's mean and largest value over groups, and the pairs weighed."""

    mean: float
    worst: float
    pairs: int


def sign_error(
    a: Sequence[float],
    b: Sequence[float],
    b_se: Sequence[float],
    groups: Sequence[object] | AxisPairs,
) -> SignError:
    """The robust sign-error of measure a against gaps b with standard errors b_se (module
    docstring); nan (and 0 pairs) when no group has a pair with positive weight."""
    from scipy.special import ndtr

    pairs = groups if isinstance(groups, AxisPairs) else AxisPairs.of(groups)
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    se = np.asarray(b_se, dtype=np.float64)
    i, j = pairs.i, pairs.j
    scale = np.sqrt(se[i] ** 2 + se[j] ** 2)
    diff = np.abs(y[i] - y[j])
    z = np.divide(diff, scale, out=np.full_like(diff, np.inf), where=scale > 0)
    weight = np.where(diff > 0, 2.0 * ndtr(z) - 1.0, 0.0)
    wrong = (np.sign(x[i] - x[j]) != np.sign(y[i] - y[j])) * 1.0
    total = np.bincount(pairs.group, weight, minlength=pairs.groups)
    missed = np.bincount(pairs.group, weight * wrong, minlength=pairs.groups)
    used = total > 0
    if not used.any():
        return SignError(math.nan, math.nan, 0)
    errors = missed[used] / total[used]
    return SignError(float(errors.mean()), float(errors.max()), int((weight > 0).sum()))
