"""The stages of `crl run` and `crl check`: each plans what is still to do and hands it to an
executor. The steps (what a unit computes and writes) are in crl.steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from crl.core.config import CheckConfig, Config
from crl.orchestration.executor import Executor, Failure
from crl.steps import cell, check_unit, data
from crl.steps.atomic import write_parquet_atomic
from crl.steps.embed import Embedder, features_path
from crl.steps.features import load_features, tau_of
from crl.steps.runfolder import CheckPaths, RunPaths


class StageError(RuntimeError):
    """A unit of a stage that must complete (a shard, an embedding, a check unit) failed."""


def _raise_failures(stage: str, results: list) -> None:
    failures = [r for r in results if isinstance(r, Failure)]
    if failures:
        first = failures[0]
        raise StageError(
            f"{stage}: {len(failures)} of {len(results)} units failed; first ({first.item}): "
            f"{first.error}\n{first.traceback}"
        )


def materialize(config: Config, paths: RunPaths, executor: Executor) -> int:
    """Write every missing data shard. Returns shards written."""
    sizes = data.split_sizes(config.dataset)
    plan = data.shard_plan(config.dataset, sizes)
    todo = [s for s in plan if not data.shard_path(paths.data, s).exists()]
    job = data.ShardJob(config.dataset, config.seed, paths.data, paths.staging)
    results = executor.map(data.write_shard, todo, job, label="shards", progress=False)
    _raise_failures("materialize", results)
    return len(todo)


def embed(config: Config, paths: RunPaths, executor: Executor, progress: bool = True) -> int:
    """Run the frozen encoder over every shard without features. Returns shards written."""
    shards = sorted(paths.data.glob("split=*/part-*.parquet"))
    todo = [s for s in shards if not features_path(paths.data, paths.features, s).exists()]
    args = (config.encoder, paths.data, paths.features, paths.staging)
    executor.map_workers(Embedder, args, todo, label="embed", progress=progress)
    return len(todo)


@dataclass(frozen=True)
class CellsOutcome:
    """What the cells stage did, and the files of every finished cell of this config."""

    total: int
    skipped: int
    computed: int
    failures: list[dict]
    files: list[Path]


def _failure_row(failure: Failure, config_hash: str) -> dict:
    key: cell.CellKey = failure.item
    return {
        "cell_id": key.cell_id(config_hash),
        "key": key.__dict__,
        "error": failure.error,
        "traceback": failure.traceback,
    }


def run_cells(
    config: Config, paths: RunPaths, executor: Executor, progress: bool = True
) -> CellsOutcome:
    """Every cell not yet on disk; a cell that raises lands in tables/failures.parquet."""
    config_hash = config.hash()
    keys = cell.grid_keys(config)
    todo = [k for k in keys if not paths.cell(k.cell_id(config_hash)).exists()]
    failures: list[dict] = []
    if todo:
        features = load_features(paths.features)
        job = cell.CellJob(
            config, features, tau_of(config, features.train.labels), paths.cells, paths.staging
        )
        results = executor.map(
            cell.run_and_write,
            todo,
            job,
            label="cells",
            cpus=config.runtime.cell_cpus,
            progress=progress,
        )
        failures = [_failure_row(r, config_hash) for r in results if isinstance(r, Failure)]
    failures_file = paths.tables / "failures.parquet"
    if failures:
        rows = [
            {"cell_id": f["cell_id"], **f["key"], "error": f["error"], "traceback": f["traceback"]}
            for f in failures
        ]
        write_parquet_atomic(pa.Table.from_pylist(rows), failures_file, paths.staging)
    else:
        failures_file.unlink(missing_ok=True)
    files = [paths.cell(k.cell_id(config_hash)) for k in keys]
    return CellsOutcome(
        len(keys),
        len(keys) - len(todo),
        len(todo) - len(failures),
        failures,
        [f for f in files if f.exists()],
    )


def run_check_units(
    config: CheckConfig, paths: CheckPaths, executor: Executor, progress: bool = True
) -> tuple[int, int]:
    """Every check unit not yet on disk. Returns (units, computed)."""
    job = check_unit.CheckJob(
        config.seed, check_unit.constants_of(config), paths.units, paths.staging
    )
    units = check_unit.plan(config)
    todo = [u for u in units if not job.path(u).exists()]
    results = executor.map(check_unit.run_unit, todo, job, label="checks", progress=progress)
    _raise_failures("checks", results)
    return len(units), len(todo)
