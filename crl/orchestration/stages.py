"""The stages of `crl run` and `crl check`: each plans what is still to do and hands it to an
executor. The steps (what a unit computes and writes) are in crl.steps.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from crl.core.config import CheckConfig, Config
from crl.core.errors import ConfigError
from crl.orchestration import runtime
from crl.orchestration.executor import Executor, Failure, Training
from crl.orchestration.progress import Progress
from crl.steps import cells, check_unit, families, schema, store
from crl.steps import pretrain as pretrain_step
from crl.steps.atomic import write_parquet_atomic
from crl.steps.family import Pretraining, is_complete
from crl.steps.run_paths import CheckPaths, RunPaths


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
    """Write every missing data shard of every family of the run. Returns shards written."""
    written = 0
    for family in families.active(config):
        for work in family.materialize(config, paths):
            results = executor.map(
                work.step, work.items, work.job, label=work.label, progress=False
            )
            _raise_failures("materialize", results)
            written += len(work.items)
    return written


def pretrainings(config: Config, paths: RunPaths) -> list[Pretraining]:
    """The run's contrastive pretrainings, family by family."""
    return [p for family in families.active(config) for p in family.pretrainings(config, paths)]


def pretrain(config: Config, paths: RunPaths, executor: Executor, progress: bool = True) -> int:
    """Run every pretraining of the run (encoder.pretrain, dense.pretrain) up to its last
    epoch, from the last finished epoch on disk; a finished pretraining is reused. Returns the
    epochs trained now."""
    paths.sync()
    return sum(
        _pretrain_one(p.section, p.job(), config, paths, executor, progress)
        for p in pretrainings(config, paths)
    )


def _pretrain_one(
    section: str,
    job: pretrain_step.PretrainJob,
    config: Config,
    paths: RunPaths,
    executor: Executor,
    progress: bool,
) -> int:
    p = job.pretrain
    pretrain_step.write_missing_row(job)  # a kill between an epoch's state and its row
    if pretrain_step.is_done(job):
        return 0
    start = pretrain_step.finished_epochs(job)
    if start >= p.epochs:  # every epoch ran, but a chosen checkpoint is gone: train again
        sys.stderr.write(
            f"crl: a checkpoint of {job.root} is missing; pretraining again from the start\n"
        )
        store.remove(job.state)
        start = 0
    if start:
        sys.stderr.write(f"crl: {section} continues after epoch {start} of {p.epochs}\n")
    bar = Progress(f"pretrain {job.task.family} ({p.objective})", p.epochs - start, progress)

    def watch() -> None:  # an epoch's row is written once the epoch is over (on any node)
        while store.fetch(job.epoch_row(start + bar.done + 1)).exists():
            row = pq.read_table(job.epoch_row(start + bar.done + 1)).to_pylist()[0]
            bar.advance(f"loss {row['loss']:.4f}  {row['images_per_second']:.0f} images/s")

    training = Training(
        p.workers,
        p.use_gpu,
        paths.staging / "ray-train",
        f"pretrain-{job.task.family}-{config.run_id()}",
        pretrain_step.SingleProcess,
        watch,
        section,
    )
    try:
        executor.train(pretrain_step.train, job, training)
    except ConfigError:
        raise
    except (RuntimeError, ValueError) as err:
        raise StageError(f"pretrain ({section}): {err}") from None
    return p.epochs - start


def embed(config: Config, paths: RunPaths, executor: Executor, progress: bool = True) -> int:
    """Run each family's encoders (the frozen one, or each chosen checkpoint of a pretrained
    one) over every shard without features. Returns shards written."""
    paths.sync()  # what other nodes wrote: shards, checkpoints
    written = 0
    for family in families.active(config):
        for work in family.embed(config, paths):
            executor.map_workers(
                work.worker, work.args, work.items, label=work.label, progress=progress
            )
            written += len(work.items)
    return written


@dataclass(frozen=True)
class CellsOutcome:
    """What the cells stage did, and the files of every finished cell of this config."""

    total: int
    skipped: int
    computed: int
    failures: list[dict]
    files: list[Path]


def _failure_row(failure: Failure, config_hash: str) -> dict:
    item: cells.CellItem = failure.item
    return {
        "cell_id": item.cell_id(config_hash),
        "key": item.key.__dict__,
        "error": failure.error,
        "traceback": failure.traceback,
    }


def _other_commit(path: Path, commit: str) -> bool:
    """Whether the finished cell at `path` was computed by code at another (or no recorded)
    commit."""
    try:
        written = pq.read_table(path, columns=["cell_git_commit"]).column(0)[0].as_py()
    except (KeyError, pa.ArrowException):
        return True
    return written != commit


def run_cells(
    config: Config,
    paths: RunPaths,
    executor: Executor,
    progress: bool = True,
    recompute_stale: bool = False,
) -> CellsOutcome:
    """Every cell not yet on disk; a cell that raises lands in tables/failures.parquet.

    Cells computed at another git commit are reused and counted on stderr, or recomputed with
    `recompute_stale`; each row keeps its own `cell_git_commit`."""
    paths.sync()
    config_hash = config.hash()
    keys = cells.all_items(config)
    commit = runtime.git_commit()
    files = {k: paths.cell(k.cell_id(config_hash)) for k in keys}
    todo = [k for k in keys if not is_complete(files[k], 1)]
    missing = set(todo)
    done = [k for k in keys if k not in missing]
    stale = [k for k in done if _other_commit(files[k], commit)]
    if stale and recompute_stale:
        todo += stale
        sys.stderr.write(f"crl: recomputing {len(stale)} cells computed at another commit\n")
    elif stale:
        sys.stderr.write(
            f"crl: reusing {len(stale)} of {len(done)} finished cells computed at another commit "
            f"than {commit} (see cell_git_commit; --recompute-stale recomputes them)\n"
        )
    failures: list[dict] = []
    if todo:
        job = cells.cell_job(config, paths, commit, {item.family for item in todo})
        results = executor.map(
            cells.run_and_write,
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
        table = schema.describe("failures", pa.Table.from_pylist(rows))
        write_parquet_atomic(table, failures_file, paths.staging)
    else:
        store.remove(failures_file)
    paths.sync()  # the cells that workers of other nodes wrote
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
    todo = [u for u in units if not is_complete(job.path(u))]
    results = executor.map(check_unit.run_unit, todo, job, label="checks", progress=progress)
    _raise_failures("checks", results)
    paths.sync()  # the units that workers of other nodes wrote
    return len(units), len(todo)
