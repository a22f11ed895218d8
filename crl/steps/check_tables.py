"""The tables of `crl check`: checks.parquet (one row per statement, instance, quantity) and
checks_summary.parquet (per statement and method: instances, rows, failures, slack quantiles).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from crl.steps import schema
from crl.steps.atomic import write_parquet_atomic
from crl.steps.tables import with_provenance


def summarise_checks(frame: pl.DataFrame) -> pl.DataFrame:
    """Per (statement, method): instances, rows, all_held, failed_rows and the slack range."""
    return (
        frame.group_by(["statement", "method"], maintain_order=True)
        .agg(
            pl.col("instance").n_unique().alias("instances"),
            pl.len().alias("rows"),
            pl.col("holds").all().alias("all_held"),
            (~pl.col("holds")).sum().alias("failed_rows"),
            pl.col("slack").min().alias("min_slack"),
            pl.col("slack").median().alias("median_slack"),
            pl.col("slack").max().alias("max_slack"),
        )
        .sort(["statement", "method"])
    )


def write_check_tables(
    units_dir: Path, tables_dir: Path, staging: Path, provenance: dict[str, str]
) -> dict[str, pl.DataFrame]:
    """Build and atomically write checks and checks_summary from the unit files; returns them."""
    files = sorted(units_dir.glob("*.parquet"))
    frame = pl.concat([pl.read_parquet(f) for f in files], how="diagonal_relaxed")
    frame = frame.sort(["statement", "instance", "quantity"])
    out = {
        "checks": with_provenance(frame, provenance),
        "checks_summary": with_provenance(summarise_checks(frame), provenance),
    }
    for name, table in out.items():
        described = schema.describe(name, table.to_arrow())
        write_parquet_atomic(described, tables_dir / f"{name}.parquet", staging)
    return out
