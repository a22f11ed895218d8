"""tables/tracking.parquet: does each certificate move with the gap across the grid?

Per (family, dataset, loss) and certificate, over the grid points (cells averaged over seeds;
the point's axes are regime, m, n, R, temperature, normalise and the dense axes, those that vary):

- `kendall_tau` (axis `all`): Kendall's tau-b between the certificate and the gap over every point;
- `granulated_tau` per axis: tau among points that differ only in that axis, averaged over those
  groups (Jiang et al. 2020), and `psi` (axis `all axes`), its mean over the axes that vary;
- `sign_error_mean` and `sign_error_worst` per axis: Dziugaite et al.'s (2020) robust sign-error
  (crl.kernels.tracking.sign_error), each pair weighted by the confidence that the two gaps
  differ (the seed-mean gap's standard error: the spread over seeds, or the held-out interval
  with one seed), its mean and worst case over the other axes' settings.

Each value carries a 95% percentile interval from a bootstrap over seeds (the same resampled
seeds for every point; `replicates` draws; none with fewer than three seeds, whose bootstrap has
at most three distinct draws). The certificates are the bounds
on the gap the cells have (`gamma_m`, `gamma_S`, `gamma_E`, `best_bound`, `gamma_lin`,
`best_dense_bound`, `sscrl_total`), the certificates on the population loss read as bounds on
the gap (`cert_test_set_gap` = cert_test_set - train_loss, `cert_pb_free_gap`,
`cert_pb_data_gap`), and `uniform_deviation_est`, the ladder's lower estimate of the uniform
deviation.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import polars as pl

from crl.core.provenance import PROVENANCE_COLUMNS
from crl.kernels import stats
from crl.kernels.tracking import AxisPairs, granulated_tau, kendall_tau, sign_error

CERTIFICATES = [
    "gamma_m",
    "gamma_S",
    "gamma_E",
    "best_bound",
    "sscrl_total",
    "gamma_lin",
    "best_dense_bound",
    "cert_test_set_gap",
    "cert_pb_free_gap",
    "cert_pb_data_gap",
    "uniform_deviation_est",
]
# certificates on a population loss, read as bounds on the gap: minus the train loss
ON_THE_LOSS = {
    "cert_test_set_gap": "cert_test_set",
    "cert_pb_free_gap": "cert_pb_free",
    "cert_pb_data_gap": "cert_pb_data",
}
AXES = [
    "regime",
    "m",
    "n",
    "R",
    "temperature",
    "normalise",
    "negatives",
    "correspondence",
    "lam",
    "encoder_epoch",
]
GROUP = ["family", "dataset", "loss"]
REPLICATES = 200
MIN_SEEDS = 3  # a bootstrap over two seeds has three distinct draws: no interval below three
SCHEMA = {
    **{column: pl.String for column in PROVENANCE_COLUMNS},
    "family": pl.String,
    "dataset": pl.String,
    "loss": pl.String,
    "certificate": pl.String,
    "statistic": pl.String,
    "axis": pl.String,
    "value": pl.Float64,
    "lo": pl.Float64,
    "hi": pl.Float64,
    "points": pl.Int64,
    "pairs": pl.Int64,
    "seeds": pl.Int64,
    "replicates": pl.Int64,
}


@functools.lru_cache(maxsize=256)
def _axis_pairs(keys: tuple[tuple, ...], axis: int) -> AxisPairs:
    """The within-group pairs of points that differ only in axis number `axis`."""
    return AxisPairs.of([key[:axis] + key[axis + 1 :] for key in keys])


def _statistics(
    cert: np.ndarray, gap: np.ndarray, se: np.ndarray, keys: list[tuple], axes: list[str]
) -> dict[tuple[str, str], tuple[float, int]]:
    """(statistic, axis) -> (value, pairs) for one set of points."""
    out = {("kendall_tau", "all"): (kendall_tau(cert, gap), len(cert) * (len(cert) - 1) // 2)}
    taus = []
    for a, axis in enumerate(axes):
        groups = _axis_pairs(tuple(keys), a)
        tau = granulated_tau(cert, gap, groups)
        err = sign_error(cert, gap, se, groups)
        out[("granulated_tau", axis)] = (tau, err.pairs)
        out[("sign_error_mean", axis)] = (err.mean, err.pairs)
        out[("sign_error_worst", axis)] = (err.worst, err.pairs)
        if math.isfinite(tau):
            taus.append(tau)
    out[("psi", "all axes")] = (float(np.mean(taus)) if taus else math.nan, len(taus))
    return out


@dataclass(frozen=True)
class _Grid:
    """One certificate's values per point and seed. Shape: cert, gap, held_se (points, seeds),
    nan where a point lacks a seed; keys: the points' axis values."""

    keys: list[tuple]
    cert: np.ndarray
    gap: np.ndarray
    held_se: np.ndarray

    @classmethod
    def of(cls, frame: pl.DataFrame, cert: str, axes: list[str], seeds: list) -> _Grid:
        z = stats.z_value(0.95)
        wide = frame.select(
            *axes,
            "seed",
            pl.col(cert).cast(pl.Float64).alias("_cert"),
            pl.col("gap").cast(pl.Float64).alias("_gap"),
            (pl.col("test_loss_ci").cast(pl.Float64) / z).alias("_se"),
        ).sort([*axes, "seed"])
        keys = list(dict.fromkeys(wide.select(axes).iter_rows()))
        index = {key: i for i, key in enumerate(keys)}
        column = {seed: k for k, seed in enumerate(seeds)}
        arrays = [np.full((len(keys), len(seeds)), np.nan) for _ in range(3)]
        for row in wide.iter_rows():
            point, seed = index[row[: len(axes)]], column[row[len(axes)]]
            for array, value in zip(arrays, row[len(axes) + 1 :], strict=True):
                array[point, seed] = np.nan if value is None else value
        return cls(keys, *arrays)

    def evaluate(self, columns: np.ndarray, axes: list[str]) -> dict:
        """The statistics on the seed means over `columns` (a bootstrap draw of seed columns)."""
        cert, gap = self.cert[:, columns], self.gap[:, columns]
        valid = np.isfinite(gap) & np.isfinite(cert)
        counts = valid.sum(axis=1)
        keep = counts > 0
        k = counts[keep]
        mean_cert = np.where(valid, cert, 0.0)[keep].sum(axis=1) / k
        mean_gap = np.where(valid, gap, 0.0)[keep].sum(axis=1) / k
        deviation = np.where(
            valid,
            gap - np.where(valid, gap, 0.0).sum(1, keepdims=True) / np.maximum(counts, 1)[:, None],
            0.0,
        )
        spread = np.sqrt((deviation[keep] ** 2).sum(axis=1) / np.maximum(k - 1, 1))
        held_sq = np.where(
            np.isfinite(self.held_se[:, columns]), self.held_se[:, columns] ** 2, 0.0
        )
        held = np.sqrt(held_sq[keep].sum(axis=1) / k)
        se = np.where(k > 1, spread, held) / np.sqrt(k)
        keys = [key for key, kept in zip(self.keys, keep, strict=True) if kept]
        return _statistics(mean_cert, mean_gap, se, keys, axes)


def tracking(cells: pl.DataFrame, seed: int, replicates: int = REPLICATES) -> pl.DataFrame:
    """tables/tracking.parquet from the grid's cells (module docstring)."""
    if cells.is_empty() or "gap" not in cells.columns:
        return pl.DataFrame(schema=SCHEMA)
    frame = cells
    frame = frame.with_columns(
        (pl.col(source) - pl.col("train_loss")).alias(name)
        for name, source in ON_THE_LOSS.items()
        if source in frame.columns
    )
    if "test_loss_ci" not in frame.columns:
        frame = frame.with_columns(pl.lit(None, dtype=pl.Float64).alias("test_loss_ci"))
    prov = frame.select(PROVENANCE_COLUMNS).row(0, named=True)
    gen = np.random.default_rng(seed)
    rows = []
    groups = [c for c in GROUP if c in frame.columns]
    for values, group in frame.group_by(groups, maintain_order=True):
        ident = dict(zip(groups, values, strict=True))
        finite = group.filter(pl.col("gap").cast(pl.Float64).is_finite())
        axes = [a for a in AXES if a in finite.columns and finite[a].n_unique() > 1]
        seeds = sorted(finite["seed"].unique().to_list())
        for cert in (c for c in CERTIFICATES if c in finite.columns):
            usable = finite.filter(pl.col(cert).cast(pl.Float64).is_finite())
            if usable.is_empty() or not axes:
                continue
            grid = _Grid.of(usable, cert, axes, seeds)
            if len(grid.keys) < 2:
                continue
            everything = np.arange(len(seeds))
            estimate = grid.evaluate(everything, axes)
            draws: dict[tuple[str, str], list[float]] = {k: [] for k in estimate}
            if len(seeds) >= MIN_SEEDS:
                for _ in range(replicates):
                    columns = gen.choice(everything, size=len(seeds), replace=True)
                    for k, (value, _) in grid.evaluate(columns, axes).items():
                        draws[k].append(value)
            for (statistic, axis), (value, pairs) in estimate.items():
                finite_draws = [d for d in draws[(statistic, axis)] if math.isfinite(d)]
                lo, hi = (
                    (
                        float(np.quantile(finite_draws, 0.025)),
                        float(np.quantile(finite_draws, 0.975)),
                    )
                    if len(finite_draws) >= 10
                    else (None, None)
                )
                rows.append(
                    {
                        **prov,
                        **ident,
                        "certificate": cert,
                        "statistic": statistic,
                        "axis": axis,
                        "value": value if math.isfinite(value) else None,
                        "lo": lo,
                        "hi": hi,
                        "points": len(grid.keys),
                        "pairs": pairs,
                        "seeds": len(seeds),
                        "replicates": len(draws[(statistic, axis)]),
                    }
                )
    return pl.from_dicts(rows, schema=SCHEMA) if rows else pl.DataFrame(schema=SCHEMA)
