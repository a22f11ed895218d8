"""The stages of `crl check`: (statement, instance chunk) units fanned out over Ray, then tables.

Each unit writes checks/units/<statement>-<first instance>.parquet atomically and is skipped
when present, so an interrupted check resumes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pyarrow as pa

from crl import checks
from crl.config import CheckConfig
from crl.io import write_parquet_atomic
from crl.pipeline import RunFolder, progress_line, writable


@dataclass(frozen=True)
class Unit:
    statement: str
    first: int
    count: int

    @property
    def name(self) -> str:
        return f"{self.statement}-{self.first:05d}"


@dataclass(frozen=True)
class CheckPaths(RunFolder):
    """A theorem_checks run: per-unit row files besides the tables."""

    @property
    def units(self) -> Path:
        return self.root / "units"


def prepare(config: CheckConfig, out: str | Path) -> CheckPaths:
    paths = CheckPaths(writable(out) / config.run_id())
    paths.record(config)
    return paths


def plan(config: CheckConfig) -> list[Unit]:
    statements = config.statements or list(checks.STATEMENTS)
    units = []
    for statement in statements:
        count = config.instances or checks.default_instances[statement]
        for first in range(0, count, config.chunk):
            units.append(Unit(statement, first, min(config.chunk, count - first)))
    return units


def _run_unit(unit: Unit, seed: int, constants: checks.Constants) -> list[dict]:
    import torch

    torch.set_num_threads(1)  # small tensors: one thread per worker is faster on shared cores
    rows = []
    for instance in range(unit.first, unit.first + unit.count):
        rows.extend(checks.run_instance(unit.statement, seed, instance, constants))
    return rows


def run_units(
    config: CheckConfig, paths: CheckPaths, constants: checks.Constants, progress: bool = True
) -> tuple[int, int]:
    """Compute every unit not yet on disk with Ray tasks. Returns (units, computed)."""
    import ray

    units = plan(config)
    todo = [u for u in units if not (paths.units / f"{u.name}.parquet").exists()]

    @ray.remote(num_cpus=1, max_retries=3)
    def unit_task(unit: Unit) -> str:
        rows = _run_unit(unit, config.seed, constants)
        table = pa.Table.from_pylist(rows)
        write_parquet_atomic(table, paths.units / f"{unit.name}.parquet", paths.staging)
        return unit.name

    pending = [unit_task.remote(u) for u in todo]
    started, done = time.perf_counter(), 0
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        ray.get(ready[0])
        done += 1
        if progress:
            progress_line("checks", done, len(todo), started)
    return len(units), len(todo)


def write_tables(paths: CheckPaths, provenance: dict[str, str]) -> dict[str, pl.DataFrame]:
    """checks.parquet (one row per statement, instance, quantity) and checks_summary.parquet."""
    files = sorted(paths.units.glob("*.parquet"))
    frame = pl.concat([pl.read_parquet(f) for f in files], how="diagonal_relaxed")
    frame = frame.sort(["statement", "instance", "quantity"])
    frame = frame.select([*(pl.lit(v).alias(k) for k, v in provenance.items()), pl.all()])
    summary = (
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
    summary = summary.select([*(pl.lit(v).alias(k) for k, v in provenance.items()), pl.all()])
    for name, table in (("checks", frame), ("checks_summary", summary)):
        write_parquet_atomic(table.to_arrow(), paths.tables / f"{name}.parquet", paths.staging)
    return {"checks": frame, "checks_summary": summary}
