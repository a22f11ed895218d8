"""The dense family: Dense InfoNCE and DenseCL's combined objective on feature grids of images
(crl.steps.dense.cell), with per-image and shared-queue bounds and a lower bound on the mutual
information, on a frozen backbone or each checkpoint of its pretraining (dense.pretrain)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import polars as pl
import pyarrow.parquet as pq

from crl.core.config import Config
from crl.steps import ladder_panel, pretrain_panel, scaling_panel
from crl.steps.dense import image_data
from crl.steps.dense import report as dense_report
from crl.steps.dense.cell import DenseKey, dense_keys, run_dense_cell
from crl.steps.dense.checks import check_dense
from crl.steps.dense.embed import DenseEmbedder
from crl.steps.dense.features import DenseFeatures, load_dense_features
from crl.steps.dense.pretrain_task import DenseTask
from crl.steps.embed import EmbedItem
from crl.steps.family import Columns, MapWork, Pretraining, WorkerWork, is_complete
from crl.steps.pages import html_table
from crl.steps.pretrain import PretrainJob
from crl.steps.report_page import Page
from crl.steps.run_paths import RunPaths


@dataclass(frozen=True)
class DenseContext:
    """What every dense cell shares: the config and the position features by encoder epoch
    (None: the frozen backbone)."""

    config: Config
    features: dict[int | None, DenseFeatures]


def dense_pretrain_job(config: Config, paths: RunPaths) -> PretrainJob:
    """The pretraining of the dense backbone on its pretraining split's images."""
    task = DenseTask(config.dense, image_data.channels(config.dense))
    return PretrainJob(config.dense.pretrain, task, paths.pretrain, paths.staging)


def _epochs(config: Config) -> list[int | None]:
    p = config.dense.pretrain
    return [None] if p is None else list(p.embedded)


class Dense:
    name = "dense"
    columns = Columns()  # its columns are in the shared lists (crl.steps.summary_columns)

    def active(self, config: Config) -> bool:
        return config.dense is not None

    def check(self, config: Config) -> None:
        check_dense(config.dense)

    def keys(self, config: Config) -> list[DenseKey]:
        return dense_keys(config)

    def materialize(self, config: Config, paths: RunPaths) -> list[MapWork]:
        """The image shards (both views and their geometry) and the pretraining split's
        source images."""
        dense = config.dense
        plan = image_data.shard_plan(dense, image_data.split_sizes(dense))
        todo = [
            s for s in plan if not is_complete(image_data.shard_path(paths.dense_data, s), s.rows)
        ]
        job = image_data.ImageShardJob(dense, config.seed, paths.dense_data, paths.staging)
        pretrain_dir = paths.pretrain / "data"
        more = [
            s
            for s in image_data.pretrain_plan(dense)
            if not is_complete(image_data.pretrain_shard_path(pretrain_dir, s), s.rows)
        ]
        more_job = image_data.ImageShardJob(dense, config.seed, pretrain_dir, paths.staging)
        return [
            MapWork("image shards", image_data.write_image_shard, todo, job),
            MapWork("pretraining shards", image_data.write_pretrain_shard, more, more_job),
        ]

    def pretrainings(self, config: Config, paths: RunPaths) -> list[Pretraining]:
        if config.dense.pretrain is None:
            return []
        return [
            Pretraining(
                "dense.pretrain", paths.pretrain, partial(dense_pretrain_job, config, paths)
            )
        ]

    def embed(self, config: Config, paths: RunPaths) -> list[WorkerWork]:
        """The backbone over every image shard without position features: the frozen backbone,
        or each chosen checkpoint of the pretrained one."""
        shards = sorted(paths.dense_data.glob("split=*/part-*.parquet"))
        rows = {s: pq.read_metadata(s).num_rows for s in shards}
        epochs = _epochs(config)
        todo = [
            EmbedItem(epoch, s)
            for epoch in epochs
            for s in shards
            if not is_complete(
                paths.dense_features_of(epoch) / s.relative_to(paths.dense_data), rows[s]
            )
        ]
        p = config.dense.pretrain
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
        return [WorkerWork("dense embed", DenseEmbedder, args, todo)]

    def context(self, config: Config, paths: RunPaths) -> DenseContext:
        backbone = config.dense.backbone
        features = {
            epoch: load_dense_features(
                paths.dense_features_of(epoch), backbone.grid**2, backbone.normalise
            )
            for epoch in _epochs(config)
        }
        return DenseContext(config, features)

    def run_cell(self, key: DenseKey, context: DenseContext) -> dict:
        config = context.config
        cell_id = key.cell_id(config.hash())
        row = run_dense_cell(config, key, cell_id, context.features[key.encoder_epoch])
        row["dataset"] = config.dense.images.kind
        return row

    def report(self, summary: pl.DataFrame, fits: pl.DataFrame, page: Page) -> list[str]:
        """The reference setting and the pretraining, the certificate ladder, the scaling in n,
        then the dense gap, bounds, MI and downstream panels."""
        opening, at, at_fits = page.at_reference(summary, fits, pretrain_panel.DENSE)
        ladder = ladder_panel.section(
            at, page.out, page.save, html_table, ladder_panel.DENSE_KEYS, "dense_ladder.png"
        )
        scaling = scaling_panel.section(
            at, page.out, page.save, html_table, ladder_panel.DENSE_KEYS, "dense_scaling.png"
        )
        body = dense_report.body(at, at_fits, page.out, page.save, html_table)
        return [*opening, ladder, scaling, body]


FAMILY = Dense()
