"""The aggregate step: every finished cell into tables/cells, summary, fits (crl.steps.tables),
frontier (crl.steps.frontier), tracking (crl.steps.tracking) and, with oracle cells, oracle; each
written atomically, and skipped when nothing they derive from changed. With dense.pretrain,
the pretraining's epochs into tables/pretrain."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import polars as pl

from crl.core.config import Config
from crl.kernels import rates, saturation, stats
from crl.kernels import tracking as ranks
from crl.steps import digest, families, frontier, oracle, schema, tables, tracking
from crl.steps.atomic import write_parquet_atomic
from crl.steps.pretrain import epoch_rows
from crl.steps.run_paths import RunPaths

GRID_TABLES = ("cells", "summary", "fits", "frontier", "tracking")
BUILT_FROM = ".built-from"  # in tables/: the digest of the cells, spec and code they came from


def write_grid_tables(
    cell_files: list[Path],
    tables_dir: Path,
    staging: Path,
    provenance: dict[str, str],
    m_star: tables.MStarSpec,
) -> dict[str, pl.DataFrame]:
    """Build and atomically write the grid's tables from the cell files; returns them."""
    cells, oracles = oracle.split_oracle(tables.collect_cells(cell_files, provenance))
    summary = tables.summarise(cells, tuple(families.summarised()), tuple(families.checked_holds()))
    fitted = tables.fits(summary, cells, m_star)
    out = {
        "cells": cells,
        "summary": summary,
        "fits": fitted,
        "frontier": frontier.frontier(summary),
        "tracking": tracking.tracking(cells, m_star.seed),
    }
    if oracles is not None:
        out["oracle"] = oracles
    for name, frame in out.items():
        described = schema.describe(name, frame.to_arrow())
        write_parquet_atomic(described, tables_dir / f"{name}.parquet", staging)
    return out


def write_grid_tables_if_changed(
    cell_files: list[Path],
    tables_dir: Path,
    staging: Path,
    provenance: dict[str, str],
    m_star: tables.MStarSpec,
) -> tuple[pl.DataFrame, bool]:
    """`write_grid_tables`, skipped when the cell files (bytes), the provenance, the m* spec and
    the code of the table modules and of the kernels they call are those the tables were last built
    from: a rerun whose cells were all done (about 2 s for the quickstart's 244 cells). Returns
    the cells table and whether the tables were rebuilt."""
    code = digest.sources(
        sys.modules[__name__], tables, oracle, frontier, tracking, rates, saturation, stats, ranks
    )
    value = digest.digest(cell_files, json.dumps(provenance, sort_keys=True), repr(m_star), code)
    stamp = tables_dir / BUILT_FROM
    outputs = [tables_dir / f"{name}.parquet" for name in GRID_TABLES]
    if digest.is_current(stamp, value, *outputs):
        return pl.read_parquet(outputs[0]), False
    digest.forget(stamp)
    cells = write_grid_tables(cell_files, tables_dir, staging, provenance, m_star)["cells"]
    digest.record(stamp, value, staging)
    return cells, True


def write_pretrain_table(
    roots: list[Path], tables_dir: Path, staging: Path, provenance: dict[str, str]
) -> pl.DataFrame | None:
    """tables/pretrain.parquet: one row per finished epoch of each pretraining whose files are
    under `roots` (crl.steps.pretrain), with the provenance columns; None (and no file) before
    the first epoch."""
    found = [rows for root in roots if (rows := epoch_rows(root)) is not None]
    if not found:
        return None
    frame = pl.concat([pl.from_arrow(rows) for rows in found], how="diagonal_relaxed")
    columns = frame.columns
    frame = frame.with_columns([pl.lit(v, dtype=pl.String).alias(k) for k, v in provenance.items()])
    frame = frame.select([*provenance, *columns])
    described = schema.describe("pretrain", frame.to_arrow())
    write_parquet_atomic(described, tables_dir / "pretrain.parquet", staging)
    return frame


def m_star_spec(config: Config) -> tables.MStarSpec:
    """The fits table's m*(n) settings of a config (eval.m_star)."""
    ms = config.eval.m_star
    return tables.MStarSpec(
        tuple(config.m_star_metrics()),
        ms.delta,
        tuple(ms.deltas),
        ms.bootstrap,
        ms.confidence,
        config.seed,
    )


def aggregate_run(
    config: Config,
    paths: RunPaths,
    cell_files: list[Path],
    provenance: dict[str, str],
    pretrain_roots: list[Path],
) -> tuple[int, int]:
    """The aggregate stage of a run: its grid tables (skipped when current), its pretrain table,
    then how many (cell, inequality) pairs were checked and how many held: every certified
    inequality of the shared lists and of the registered families' own."""
    cells_table, _ = write_grid_tables_if_changed(
        cell_files, paths.tables, paths.staging, provenance, m_star_spec(config)
    )
    if pretrain_roots:
        write_pretrain_table(pretrain_roots, paths.tables, paths.staging, provenance)
    checked_holds = [*tables.CHECKED_HOLDS, *families.checked_holds()]
    flags = [c for c in checked_holds if c in cells_table.columns]
    if not flags:
        return 0, 0
    checked = pl.concat([cells_table[c].drop_nulls().cast(pl.Int64) for c in flags])
    return checked.len(), int(checked.sum() or 0)
