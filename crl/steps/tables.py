"""Polars aggregation: cells -> tables/cells.parquet, summary.parquet, fits.parquet.

Every table carries the provenance columns (run_id, config_hash, crl_version, git_commit).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl

from crl.core.provenance import PROVENANCE_COLUMNS
from crl.kernels import rates, stats
from crl.steps.atomic import write_parquet_atomic

KEYS = ["dataset", "regime", "loss", "m", "n"]
ORDER = [*KEYS, "seed"]
SUMMARISED = [
    "train_loss",
    "test_loss",
    "gap",
    "test_loss_shared",
    "gap_outer",
    "gap_inner",
    "rademacher",
    "gamma_m",
    "gamma_m_complexity_term",
    "gamma_m_concentration_term",
    "gamma_S",
    "gamma_S_complexity_term",
    "gamma_S_concentration_term",
    "gamma_E",
    "gamma_E_complexity_term",
    "gamma_E_concentration_term",
    "lse_inner_bound",
    "sscrl_inner",
    "sscrl_total",
    "best_bound",
    "bound_over_gap",
    "lse_inner_est",
    "bound_transfer",
    "mean_classifier_risk",
    "mean_classifier_accuracy",
    "top1_accuracy",
    "linear_probe_accuracy",
    "retrieval_auc",
    "bounds_seconds",
    "wall_seconds",
]
BOUND_HOLDS = ["gamma_m_holds", "gamma_S_holds", "gamma_E_holds", "sscrl_total_holds"]
HOLDS = [*BOUND_HOLDS, "transfer_holds", "certified"]
SLOPE_QUANTITIES = ["gap", "gamma_m", "gamma_S", "gamma_E", "best_bound"]
FITS_SCHEMA = {
    **{column: pl.String for column in PROVENANCE_COLUMNS},
    "dataset": pl.String,
    "regime": pl.String,
    "loss": pl.String,
    "kind": pl.String,
    "shape": pl.String,
    "n": pl.Int64,
    "coef_c": pl.Float64,
    "coef_a": pl.Float64,
    "coef_b": pl.Float64,
    "alpha": pl.Float64,
    "beta": pl.Float64,
    "exponent": pl.Float64,
    "m_star": pl.Float64,
    "slope_m": pl.Float64,
    "slope_n": pl.Float64,
    "r2": pl.Float64,
    "rmse": pl.Float64,
    "points": pl.Int64,
}


def with_provenance(frame: pl.DataFrame, provenance: dict[str, str]) -> pl.DataFrame:
    """`frame` with the provenance columns (PROVENANCE_COLUMNS, in order) in front."""
    prov = [pl.lit(provenance[k]).alias(k) for k in PROVENANCE_COLUMNS]
    return frame.select([*prov, pl.all()])


def collect_cells(cell_files: list[Path], provenance: dict[str, str]) -> pl.DataFrame:
    """The per-cell files, sorted by key, with provenance columns in front."""
    if not cell_files:
        raise ValueError("collect_cells: no cell files")
    frame = pl.concat([pl.read_parquet(f) for f in cell_files], how="diagonal_relaxed").sort(ORDER)
    frame = frame.select(["cell_id", "dataset", pl.all().exclude("cell_id", "dataset")])
    return with_provenance(frame, provenance)


def summarise(cells: pl.DataFrame) -> pl.DataFrame:
    """Mean, std and 95% t-interval half-width over seeds for each (dataset, regime, loss, m, n)."""
    aggs = [pl.len().alias("seeds")]
    for col in SUMMARISED:
        aggs += [
            pl.col(col).cast(pl.Float64).mean().alias(f"{col}_mean"),
            pl.col(col).cast(pl.Float64).std().alias(f"{col}_std"),
        ]
    aggs += [
        *(pl.col(h).cast(pl.Float64).mean().alias(f"{h}_fraction") for h in HOLDS),
        pl.col("sampling").first().alias("sampling"),
        pl.col("tau").first().alias("tau"),
        pl.col("test_loss_ci").mean().alias("test_loss_ci_mean"),
        pl.col("rademacher_ci").mean().alias("rademacher_ci_mean"),
        pl.col("test_loss_pool_ci").cast(pl.Float64).mean().alias("test_loss_pool_ci_mean"),
    ]
    out = cells.group_by([*PROVENANCE_COLUMNS, *KEYS], maintain_order=True).agg(aggs).sort(KEYS)
    t = pl.col("seeds").map_elements(
        lambda k: stats.t_quantile(0.95, k - 1), return_dtype=pl.Float64
    )
    return out.with_columns(
        [
            (t * pl.col(f"{c}_std") / pl.col("seeds").sqrt()).alias(f"{c}_seed_ci")
            for c in SUMMARISED
        ]
    )


def _fit_rows(group: pl.DataFrame, performance: str) -> list[dict]:
    m = group["m"].to_numpy().astype(np.float64)
    n = group["n"].to_numpy().astype(np.float64)
    gap = group["gap_mean"].to_numpy().astype(np.float64)
    rows: list[dict] = []
    for quantity in SLOPE_QUANTITIES:  # the shape in m and n of the gap and of each bound
        slopes = rates.fit_loglog_slopes(m, n, group[f"{quantity}_mean"].abs().to_numpy())
        if math.isfinite(slopes.coef_c):  # enough points for the axes that vary
            rows.append(
                {
                    "kind": "slopes",
                    "shape": quantity,
                    "coef_c": slopes.coef_c,
                    "slope_m": slopes.slope_m,
                    "slope_n": slopes.slope_n,
                    "r2": slopes.r2,
                    "points": slopes.n_points,
                }
            )
    for shape in rates.RATE_SHAPES:
        if len(gap) < 3:
            break
        fit = rates.fit_rate(shape, m, n, gap)
        rows.append(
            {
                "kind": "rate",
                "shape": shape,
                "r2": fit.r2,
                "rmse": fit.rmse,
                "points": fit.n_points,
                **{f"coef_{k}": v for k, v in fit.coefs.items()},
            }
        )
    if len(set(m)) > 1 and len(set(n)) > 1 and len(gap) >= 6:  # 5 parameters
        power = rates.fit_power(m, n, gap)
        rows.append(
            {
                "kind": "power",
                "shape": "c+a*m^-alpha+b*n^-beta",
                "r2": power.r2,
                "rmse": power.rmse,
                "points": power.n_points,
                "alpha": power.alpha,
                "beta": power.beta,
                **{f"coef_{k}": v for k, v in power.coefs.items()},
            }
        )
    per_n = []
    for (n_value,), sub in group.sort("m").group_by(["n"], maintain_order=True):
        if sub.height < 2:
            continue
        m_star = rates.critical_m(sub["m"].to_numpy(), sub[f"{performance}_mean"].to_numpy())
        per_n.append((float(n_value), m_star))
        rows.append({"kind": "m_star", "shape": performance, "n": int(n_value), "m_star": m_star})
    if len(per_n) >= 2:
        coef, exponent = rates.fit_exponent(
            np.array([p[0] for p in per_n]), np.array([p[1] for p in per_n])
        )
        rows.append(
            {
                "kind": "m_star_exponent",
                "shape": "m*=c*n^e",
                "coef_c": coef,
                "exponent": exponent,
                "points": len(per_n),
            }
        )
    return rows


def fits(summary: pl.DataFrame, performance: str) -> pl.DataFrame:
    """Rate-shape fits of mean gaps per (dataset, regime, loss), and m*(n) with its exponent."""
    prov = summary.select(PROVENANCE_COLUMNS).row(0, named=True)
    rows = []
    for (dataset, regime, loss), group in summary.group_by(
        ["dataset", "regime", "loss"], maintain_order=True
    ):
        for row in _fit_rows(group, performance):
            rows.append({**prov, "dataset": dataset, "regime": regime, "loss": loss, **row})
    return pl.from_dicts(rows, schema=FITS_SCHEMA)


def write_grid_tables(
    cell_files: list[Path],
    tables_dir: Path,
    staging: Path,
    provenance: dict[str, str],
    performance: str,
) -> dict[str, pl.DataFrame]:
    """Build and atomically write cells, summary and fits from the cell files; returns them."""
    cells = collect_cells(cell_files, provenance)
    summary = summarise(cells)
    fitted = fits(summary, performance)
    out = {"cells": cells, "summary": summary, "fits": fitted}
    for name, frame in out.items():
        write_parquet_atomic(frame.to_arrow(), tables_dir / f"{name}.parquet", staging)
    return out
