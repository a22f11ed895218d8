"""The unimodal family: `f(x) = W phi(x)` on one modality (synthetic latent classes, digits,
user Parquet rows), the grid's regimes and losses (crl.steps.unimodal.cell), with an optional
contrastive pretraining of its small_cnn encoder (encoder.pretrain)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import torch

from crl.core.config import Config, is_paired
from crl.core.errors import ConfigError
from crl.kernels import metrics
from crl.kernels.seeding import generator
from crl.steps import data, grid_source, ladder_panel, pretrain_panel, scaling_panel
from crl.steps.atomic import write_parquet_atomic
from crl.steps.embed import Embedder, EmbedItem, features_path
from crl.steps.family import Columns, MapWork, Pretraining, WorkerWork, is_complete, machine_memory
from crl.steps.features import Features, load_features, tau_of
from crl.steps.keys import CellKey, grid_keys
from crl.steps.pages import html_table
from crl.steps.pretrain import PretrainJob
from crl.steps.report_page import Page
from crl.steps.run_paths import RunPaths
from crl.steps.unimodal import report as unimodal_report
from crl.steps.unimodal.cell import run_cell
from crl.steps.unimodal.pretrain_task import EncoderTask


@dataclass(frozen=True)
class UnimodalContext:
    """What every unimodal cell shares: the config, the features and tau by encoder epoch
    (None: the frozen encoder), and with encoder.pretrain the linear probe of each
    checkpoint's own features (accuracy, 95% half-width)."""

    config: Config
    features: dict[int | None, Features]
    tau: float | None
    encoder_probe: dict[int, tuple[float, float]] | None = None


@dataclass(frozen=True)
class PretrainRowsJob:
    """The pretraining split of encoder.pretrain: its source, seed, share and where it goes."""

    config: Config
    staging: Path


def write_pretrain_rows(target: Path, job: PretrainRowsJob) -> str:
    """The step that writes the pretraining split's rows (id, source_row, x; no label)."""
    ds, p = job.config.dataset, job.config.encoder.pretrain
    write_parquet_atomic(data.make_pretrain_rows(ds, job.config.seed, p), target, job.staging)
    return str(target)


def encoder_pretrain_job(config: Config, paths: RunPaths) -> PretrainJob:
    """The pretraining of the grid's encoder: its task knows the views and the range of the
    rows' values."""
    _, rows = data.pretrain_inputs(config.dataset, config.seed, config.encoder.pretrain)
    augment = config.pretrain_augment()
    task = EncoderTask(config.encoder, augment, rows.shape[1], float(rows.min()), float(rows.max()))
    root = paths.encoder_pretrain
    return PretrainJob(config.encoder.pretrain, task, root, paths.staging)


def encoder_probe(features: Features, points: int, seed: int) -> tuple[float, float]:
    """The linear probe's test accuracy on the encoder's own features (no head), up to `points`
    rows of each split drawn once per run (crl.kernels.metrics), and its 95% half-width over
    the test rows (normal approximation to the binomial: 1.96 sqrt(a (1 - a) / rows))."""
    gen = generator(seed, "encoder-probe")
    train, test = features.train, features.test
    rows_tr = torch.randperm(len(train.labels), generator=gen)[:points]
    rows_te = torch.randperm(len(test.labels), generator=gen)[:points]
    accuracy = metrics.linear_probe_accuracy(
        train.inputs()[rows_tr],
        train.label_tensor()[rows_tr],
        test.inputs()[rows_te],
        test.label_tensor()[rows_te],
    )
    return accuracy, 1.96 * math.sqrt(accuracy * (1.0 - accuracy) / len(rows_te))


def _check_cell_memory(config: Config, width: int) -> None:
    """Refuse a grid whose largest cell cannot fit in this machine's memory (its features)."""
    n, m = max(config.grid.n), max(config.grid.m)
    features = max(width, config.encoder.out_dim if config.encoder.kind != "identity" else 0)
    needed = n * (m + 2) * features * 8  # the largest cell's tuples, float64 at worst
    total = machine_memory()
    if needed > total:
        raise ConfigError(
            f"config field grid.m: a cell with n={n}, m={m} holds {n * (m + 2):,} points of "
            f"{features} features, about {needed / 2**30:.0f} GiB; this machine has "
            f"{total / 2**30:.0f} GiB"
        )


class Unimodal:
    name = "unimodal"
    columns = Columns()  # its columns are in the shared lists (crl.steps.summary_columns)

    def active(self, config: Config) -> bool:
        return config.grid is not None and not is_paired(config.dataset)

    def check(self, config: Config) -> None:
        """Sizes and shards, the largest cell's memory, square inputs for small_cnn and for
        image views."""
        grid_source.check_sizes(config)
        width = data.input_width(config.dataset)
        _check_cell_memory(config, width)
        square = math.isqrt(width) ** 2 == width
        if config.encoder.kind == "small_cnn" and not square:
            raise ConfigError(
                f"config field encoder.kind: small_cnn needs square images, but the "
                f"dataset's inputs have {width} values per row"
            )
        if config.encoder.pretrain is not None and not square:
            augment = config.pretrain_augment()
            if augment != "mask":
                raise ConfigError(
                    f"config field encoder.pretrain.augment: {augment} views need square "
                    f"images, but the dataset's inputs have {width} values per row"
                )

    def keys(self, config: Config) -> list[CellKey]:
        return grid_keys(config)

    def materialize(self, config: Config, paths: RunPaths) -> list[MapWork]:
        """The data shards, and encoder.pretrain's split of the train rows."""
        work = [grid_source.shard_work(config, paths)]
        p = config.encoder.pretrain
        if p is not None:
            target = paths.encoder_pretrain / "data" / "part-00000.parquet"
            rows = data.pretrain_count(config.dataset, p)
            todo = [] if is_complete(target, rows) else [target]
            job = PretrainRowsJob(config, paths.staging)
            work.append(MapWork("pretraining rows", write_pretrain_rows, todo, job))
        return work

    def pretrainings(self, config: Config, paths: RunPaths) -> list[Pretraining]:
        if config.encoder.pretrain is None:
            return []
        job = partial(encoder_pretrain_job, config, paths)
        return [Pretraining("encoder.pretrain", paths.encoder_pretrain, job)]

    def embed(self, config: Config, paths: RunPaths) -> list[WorkerWork]:
        """Every shard without features under the frozen encoder, or under each chosen
        checkpoint of the pretrained one."""
        shards = sorted(paths.data.glob("split=*/part-*.parquet"))
        rows = {s: pq.read_metadata(s).num_rows for s in shards}
        p = config.encoder.pretrain
        epochs: list[int | None] = [None] if p is None else list(p.embedded)
        todo = [
            EmbedItem(epoch, s)
            for epoch in epochs
            for s in shards
            if not is_complete(features_path(paths.data, paths.features_of(epoch), s), rows[s])
        ]
        job = None if p is None else encoder_pretrain_job(config, paths)
        checkpoints = {} if job is None else {e: job.checkpoint(e) for e in epochs}
        args = (config.encoder, paths.data, paths.features, paths.staging, checkpoints)
        return [WorkerWork("embed", Embedder, args, todo)]

    def context(self, config: Config, paths: RunPaths) -> UnimodalContext:
        p = config.encoder.pretrain
        epochs = [None] if p is None else p.embedded
        features = {e: load_features(paths.features_of(e)) for e in epochs}
        labels = next(iter(features.values())).train.labels
        probes = None
        if p is not None:
            points, seed = config.eval.probe_points, config.seed
            probes = {e: encoder_probe(f, points, seed) for e, f in features.items()}
        return UnimodalContext(config, features, tau_of(config, labels), probes)

    def run_cell(self, key: CellKey, context: UnimodalContext) -> dict:
        row = run_cell(context.config, key, context.features[key.encoder_epoch], context.tau)
        if context.encoder_probe is not None:
            accuracy, half_width = context.encoder_probe[key.encoder_epoch]
            row["encoder_probe_accuracy"], row["encoder_probe_accuracy_ci"] = accuracy, half_width
        row["dataset"] = context.config.dataset.kind
        return row

    def report(self, summary: pl.DataFrame, fits: pl.DataFrame, page: Page) -> list[str]:
        """The reference setting and the pretraining, the certificate ladder, the scaling in n,
        then the gap and the bounds against n and m."""
        opening, at, at_fits = page.at_reference(summary, fits, pretrain_panel.UNIMODAL)
        ladder = ladder_panel.section(at, page.out, page.save, html_table)
        scaling = scaling_panel.section(
            at, page.out, page.save, html_table, ladder_panel.UNIMODAL_KEYS, "scaling.png"
        )
        body = unimodal_report.body(at, at_fits, page.out, page.save)
        return [*opening, ladder, scaling, body]


FAMILY = Unimodal()
