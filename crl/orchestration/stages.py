"""The stages of `crl run` and `crl check`: each plans what is still to do and hands it to an
executor. The steps (what a unit computes and writes) are in crl.steps.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from crl.core.config import CheckConfig, Config, is_paired
from crl.core.errors import ConfigError
from crl.orchestration import runtime
from crl.orchestration.executor import Executor, Failure, Training
from crl.orchestration.progress import Progress
from crl.steps import cells, check_unit, data, image_data, schema, store
from crl.steps import pretrain as pretrain_step
from crl.steps.atomic import write_parquet_atomic
from crl.steps.dense.embed import DenseEmbedder
from crl.steps.dense.pretrain_task import DenseTask
from crl.steps.embed import Embedder, EmbedItem, features_path
from crl.steps.runfolder import CheckPaths, RunPaths
from crl.steps.unimodal.pretrain_task import EncoderTask


class StageError(RuntimeError):
    """A unit of a stage that must complete (a shard, an embedding, a check unit) failed."""


def _complete(path: Path, rows: int | None = None) -> bool:
    """Whether `path` is a finished Parquet file (with `rows` rows); a truncated or corrupt one
    is removed, with a line on stderr, so that its unit is computed again."""
    if not path.exists():
        return False
    try:
        metadata = pq.read_metadata(path)
        if rows is None or metadata.num_rows == rows:
            return True
    except (OSError, pa.ArrowException):
        pass
    sys.stderr.write(f"crl: {path} is incomplete or corrupt; computing it again\n")
    store.remove(path)
    return False


def _raise_failures(stage: str, results: list) -> None:
    failures = [r for r in results if isinstance(r, Failure)]
    if failures:
        first = failures[0]
        raise StageError(
            f"{stage}: {len(failures)} of {len(results)} units failed; first ({first.item}): "
            f"{first.error}\n{first.traceback}"
        )


def materialize(config: Config, paths: RunPaths, executor: Executor) -> int:
    """Write every missing data shard (none for the paired Gaussian, drawn in the cells), the
    pretraining split of encoder.pretrain, and the image shards of the dense section. Returns
    shards written."""
    written = _materialize_images(config, paths, executor)
    if config.grid is None or config.dataset.kind == "paired_gaussian":
        return written
    fraction = _encoder_pretrain_fraction(config)
    sizes = data.split_sizes(config.dataset, fraction)
    plan = data.shard_plan(config.dataset, sizes)
    todo = [s for s in plan if not _complete(data.shard_path(paths.data, s), s.rows)]
    job = data.ShardJob(config.dataset, config.seed, paths.data, paths.staging, fraction)
    results = executor.map(data.write_shard, todo, job, label="shards", progress=False)
    _raise_failures("materialize", results)
    written += len(todo)
    if fraction is not None:
        target = paths.encoder_pretrain / "data" / "part-00000.parquet"
        rows = data.pretrain_rows(data.split_sizes(config.dataset)["train"], fraction)
        if not _complete(target, rows):
            table = data.make_pretrain_rows(config.dataset, config.seed, fraction)
            write_parquet_atomic(table, target, paths.staging)
            written += 1
    return written


def _encoder_pretrain_fraction(config: Config) -> float | None:
    p = config.encoder.pretrain
    return None if p is None else p.fraction


def _materialize_images(config: Config, paths: RunPaths, executor: Executor) -> int:
    """The dense section's image shards (both views and their geometry), and the pretraining
    split's source images."""
    if config.dense is None:
        return 0
    plan = image_data.shard_plan(config.dense, image_data.split_sizes(config.dense))
    todo = [s for s in plan if not _complete(image_data.shard_path(paths.dense_data, s), s.rows)]
    job = image_data.ImageShardJob(config.dense, config.seed, paths.dense_data, paths.staging)
    results = executor.map(
        image_data.write_image_shard, todo, job, label="image shards", progress=False
    )
    _raise_failures("materialize", results)
    pretrain_dir = paths.pretrain / "data"
    plan = image_data.pretrain_plan(config.dense)
    more = [
        s for s in plan if not _complete(image_data.pretrain_shard_path(pretrain_dir, s), s.rows)
    ]
    job = image_data.ImageShardJob(config.dense, config.seed, pretrain_dir, paths.staging)
    results = executor.map(
        image_data.write_pretrain_shard, more, job, label="pretraining shards", progress=False
    )
    _raise_failures("materialize", results)
    return len(todo) + len(more)


def dense_pretrain_job(config: Config, paths: RunPaths) -> pretrain_step.PretrainJob:
    task = DenseTask(config.dense, image_data.channels(config.dense))
    return pretrain_step.PretrainJob(config.dense.pretrain, task, paths.pretrain, paths.staging)


def encoder_pretrain_job(config: Config, paths: RunPaths) -> pretrain_step.PretrainJob:
    """The pretraining of the grid's encoder: its task knows the pixel range of the rows."""
    _, pixels = data.pretrain_inputs(config.dataset, config.seed, config.encoder.pretrain.fraction)
    task = EncoderTask(config.encoder, pixels.shape[1], float(pixels.min()), float(pixels.max()))
    root = paths.encoder_pretrain
    return pretrain_step.PretrainJob(config.encoder.pretrain, task, root, paths.staging)


def pretrain_jobs(config: Config, paths: RunPaths) -> list[tuple[str, pretrain_step.PretrainJob]]:
    """The pretrainings of a run, by config section: encoder.pretrain, dense.pretrain."""
    jobs = []
    if config.grid is not None and config.encoder.pretrain is not None:
        jobs.append(("encoder.pretrain", encoder_pretrain_job(config, paths)))
    if config.dense is not None and config.dense.pretrain is not None:
        jobs.append(("dense.pretrain", dense_pretrain_job(config, paths)))
    return jobs


def pretrain_roots(config: Config, paths: RunPaths) -> list[Path]:
    """Where the run's pretrainings keep their files, in `pretrain_jobs`' order."""
    where = {"encoder.pretrain": paths.encoder_pretrain, "dense.pretrain": paths.pretrain}
    return [where[section] for section in config.pretrainings()]


def pretrain(config: Config, paths: RunPaths, executor: Executor, progress: bool = True) -> int:
    """Run every pretraining of the run (encoder.pretrain, dense.pretrain) up to its last
    epoch, from the last finished epoch on disk; a finished pretraining is reused. Returns the
    epochs trained now."""
    paths.sync()
    return sum(
        _pretrain_one(section, job, config, paths, executor, progress)
        for section, job in pretrain_jobs(config, paths)
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


def _embed_images(config: Config, paths: RunPaths, executor: Executor, progress: bool) -> int:
    """The dense backbone over every image shard without position features: the frozen
    backbone, or each chosen checkpoint of the pretrained one."""
    if config.dense is None:
        return 0
    shards = sorted(paths.dense_data.glob("split=*/part-*.parquet"))
    rows = {s: pq.read_metadata(s).num_rows for s in shards}
    p = config.dense.pretrain
    epochs: list[int | None] = [None] if p is None else list(p.embedded)
    todo = [
        EmbedItem(epoch, s)
        for epoch in epochs
        for s in shards
        if not _complete(paths.dense_features_of(epoch) / s.relative_to(paths.dense_data), rows[s])
    ]
    job = None if p is None else dense_pretrain_job(config, paths)
    checkpoints = {} if job is None else {e: job.checkpoint(e) for e in epochs}
    args = (
        config.dense,
        image_data.channels(config.dense),
        paths.dense_data,
        paths.dense_features,
        paths.staging,
        checkpoints,
    )
    executor.map_workers(DenseEmbedder, args, todo, label="dense embed", progress=progress)
    return len(todo)


def embed(config: Config, paths: RunPaths, executor: Executor, progress: bool = True) -> int:
    """Run the frozen encoder (or each chosen checkpoint of the pretrained one) over every shard
    without features, and the dense backbone over every image shard. Returns shards written."""
    paths.sync()  # what other nodes wrote: shards, checkpoints
    written = _embed_images(config, paths, executor, progress)
    if config.grid is None or is_paired(config.dataset):
        return written
    shards = sorted(paths.data.glob("split=*/part-*.parquet"))
    rows = {s: pq.read_metadata(s).num_rows for s in shards}
    p = config.encoder.pretrain
    epochs: list[int | None] = [None] if p is None else list(p.embedded)
    todo = [
        EmbedItem(epoch, s)
        for epoch in epochs
        for s in shards
        if not _complete(features_path(paths.data, paths.features_of(epoch), s), rows[s])
    ]
    job = None if p is None else encoder_pretrain_job(config, paths)
    checkpoints = {} if job is None else {e: job.checkpoint(e) for e in epochs}
    args = (config.encoder, paths.data, paths.features, paths.staging, checkpoints)
    executor.map_workers(Embedder, args, todo, label="embed", progress=progress)
    return written + len(todo)


@dataclass(frozen=True)
class CellsOutcome:
    """What the cells stage did, and the files of every finished cell of this config."""

    total: int
    skipped: int
    computed: int
    failures: list[dict]
    files: list[Path]


def _failure_row(failure: Failure, config_hash: str) -> dict:
    key: cells.CellKey = failure.item
    return {
        "cell_id": key.cell_id(config_hash),
        "key": key.__dict__,
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
    keys = cells.all_keys(config)
    commit = runtime.git_commit()
    files = {k: paths.cell(k.cell_id(config_hash)) for k in keys}
    todo = [k for k in keys if not _complete(files[k], 1)]
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
        job = cells.cell_job(config, paths, commit)
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
    todo = [u for u in units if not _complete(job.path(u))]
    results = executor.map(check_unit.run_unit, todo, job, label="checks", progress=progress)
    _raise_failures("checks", results)
    paths.sync()  # the units that workers of other nodes wrote
    return len(units), len(todo)
