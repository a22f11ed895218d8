"""The step of the cells stage and the one place that picks a cell's family: a dense key goes to
the dense cell, a grid key to the paired cell of the job's paired source (the Gaussian, clipped
or not, or user pairs), else to the unimodal cell. A new family adds its key or source here
and a folder beside the others."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import pyarrow as pa
import torch

from crl.core.config import Config
from crl.kernels import metrics
from crl.kernels.seeding import generator
from crl.steps.atomic import write_parquet_atomic
from crl.steps.dense import cell as dense_cell
from crl.steps.dense.features import DenseFeatures, load_dense_features
from crl.steps.features import Features, load_features, tau_of
from crl.steps.keys import CellKey, cell_config, grid_keys
from crl.steps.paired import model_cell, split_cell
from crl.steps.paired.clipped_cell import run_clipped_cell
from crl.steps.runfolder import RunPaths
from crl.steps.unimodal import cell as unimodal_cell


@dataclass(frozen=True)
class CellJob:
    """What every cell of a run shares: the config, the features and tau (single-modality
    data), the paired source (paired data) or the dense features, and where rows go."""

    config: Config
    features: dict[int | None, Features] | None  # by encoder epoch (None: the frozen encoder)
    tau: float | None
    cells_dir: Path
    staging: Path
    git_commit: str = "unknown"
    paired: model_cell.PairedSource | split_cell.PairedSplits | None = None
    dense: dict[int | None, DenseFeatures] | None = None  # by encoder epoch (None: frozen)
    # with encoder.pretrain: by encoder epoch, the probe's accuracy and its 95% half-width
    encoder_probe: dict[int, tuple[float, float]] | None = None


def all_keys(config: Config) -> list[CellKey | dense_cell.DenseKey]:
    """Every cell of a run, in order: the (regime, loss, m, n, seed) grid, then the dense grid."""
    return [*grid_keys(config), *dense_cell.dense_keys(config)]


def cell_job(config: Config, paths: RunPaths, commit: str) -> CellJob:
    """The shared part of every cell: the features and tau, or the paired source; and the dense
    position features."""
    job = _grid_job(config, paths, commit)
    if config.dense is None:
        return job
    backbone = config.dense.backbone
    pretrain = config.dense.pretrain
    features = {
        epoch: load_dense_features(
            paths.dense_features_of(epoch), backbone.grid**2, backbone.normalise
        )
        for epoch in ([None] if pretrain is None else pretrain.embedded)
    }
    return replace(job, dense=features)


def _grid_job(config: Config, paths: RunPaths, commit: str) -> CellJob:
    common = (paths.cells, paths.staging, commit)
    if config.grid is None:
        return CellJob(config, None, None, *common)
    if config.dataset.kind == "paired_gaussian":
        return CellJob(config, None, None, *common, model_cell.source(config))
    if config.dataset.kind == "paired_parquet":
        return CellJob(config, None, None, *common, split_cell.load(config, paths.data))
    p = config.encoder.pretrain
    epochs = [None] if p is None else p.embedded
    features = {e: load_features(paths.features_of(e)) for e in epochs}
    labels = next(iter(features.values())).train.labels
    probes = None
    if p is not None:
        points, seed = config.eval.probe_points, config.seed
        probes = {e: encoder_probe(f, points, seed) for e, f in features.items()}
    return CellJob(config, features, tau_of(config, labels), *common, encoder_probe=probes)


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


def run_and_write(key: CellKey | dense_cell.DenseKey, job: CellJob) -> dict:
    """The step of the cells stage: compute one cell and write its row atomically, with the
    commit of the code that computed it (`cell_git_commit`)."""
    cell_id = key.cell_id(job.config.hash())
    if isinstance(key, dense_cell.DenseKey):
        row = dense_cell.run_dense_cell(job.config, key, cell_id, job.dense[key.encoder_epoch])
        row["dataset"] = job.config.dense.images.kind
    elif isinstance(job.paired, model_cell.PairedSource):
        config = cell_config(job.config, key)
        run = model_cell.run_paired_cell if job.paired.clipped is None else run_clipped_cell
        row = run(config, key, cell_id, job.paired)
    elif isinstance(job.paired, split_cell.PairedSplits):
        config = cell_config(job.config, key)
        row = split_cell.run_paired_split_cell(config, key, cell_id, job.paired)
    else:
        row = unimodal_cell.run_cell(job.config, key, job.features[key.encoder_epoch], job.tau)
        if job.encoder_probe is not None:
            accuracy, half_width = job.encoder_probe[key.encoder_epoch]
            row["encoder_probe_accuracy"], row["encoder_probe_accuracy_ci"] = accuracy, half_width
    row["cell_git_commit"] = job.git_commit
    row.setdefault("dataset", job.config.dataset.kind if job.config.dataset else None)
    path = job.cells_dir / f"{row['cell_id']}.parquet"
    write_parquet_atomic(pa.Table.from_pylist([row]), path, job.staging)
    return row
