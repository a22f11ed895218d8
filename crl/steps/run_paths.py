"""The folders of a run: runs/<name>-<hash>/ with config.json, tables, report, staging; a grid
run's data, features, pretraining and cell files; a check run's units."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from crl.core.config import CheckConfig, Config
from crl.steps import store
from crl.steps.atomic import write_bytes_atomic
from crl.steps.embed import features_dir_of


@dataclass(frozen=True)
class RunFolder:
    """runs/<name>-<hash>/: tables, report, a staging folder for atomic writes, config.json."""

    root: Path

    @property
    def tables(self) -> Path:
        return self.root / "tables"

    @property
    def report(self) -> Path:
        return self.root / "report"

    @property
    def staging(self) -> Path:
        return self.root / ".staging"

    def record(self, config: Config | CheckConfig) -> None:
        """Create the folder and write the validated config with its hash (kept as it is when
        it holds the same: its time is when the run first started)."""
        self.root.mkdir(exist_ok=True)
        record = json.dumps(
            {"config": config.model_dump(mode="json"), "hash": config.hash()},
            indent=2,
            sort_keys=True,
        ).encode()
        path = self.root / "config.json"
        if not path.is_file() or path.read_bytes() != record:
            write_bytes_atomic(record, path, self.staging)

    def clean_staging(self) -> None:
        """Remove temporary files left by interrupted writes."""
        shutil.rmtree(self.staging, ignore_errors=True)

    def sync(self) -> int:
        """Download what other nodes wrote to the run's store since (crl.steps.store; nothing
        for a local run folder). Returns files downloaded."""
        return store.pull(self.root)


@dataclass(frozen=True)
class RunPaths(RunFolder):
    """A bound_grid run: data shards, features and per-cell files besides the tables."""

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def features(self) -> Path:
        return self.root / "features"

    @property
    def cells(self) -> Path:
        return self.root / "cells"

    @property
    def dense_data(self) -> Path:
        return self.root / "dense" / "data"

    @property
    def dense_features(self) -> Path:
        return self.root / "dense" / "features"

    @property
    def pretrain(self) -> Path:
        """dense/pretrain/ (dense.pretrain): data/ (the pretraining split), checkpoints/,
        epochs/, state.pt (crl.steps.pretrain)."""
        return self.root / "dense" / "pretrain"

    @property
    def encoder_pretrain(self) -> Path:
        """pretrain/ (encoder.pretrain): the same files for the grid's encoder."""
        return self.root / "pretrain"

    def features_of(self, epoch: int | None) -> Path:
        """The features of the grid's encoder after `epoch` epochs of pretraining
        (features/epoch=<e>/), or of the frozen encoder (None: features/)."""
        return features_dir_of(self.features, epoch)

    def dense_features_of(self, epoch: int | None) -> Path:
        """The position features of the encoder after `epoch` epochs of pretraining
        (dense/features/epoch=<e>/), or of the frozen backbone (None: dense/features/)."""
        return features_dir_of(self.dense_features, epoch)

    def cell(self, cell_id: str) -> Path:
        """The file of one cell's row."""
        return self.cells / f"{cell_id}.parquet"


@dataclass(frozen=True)
class CheckPaths(RunFolder):
    """A theorem_checks run: per-unit row files besides the tables."""

    @property
    def units(self) -> Path:
        return self.root / "units"
