"""The run folder of a config: runs/<name>-<hash>/ with config.json, tables, report, staging.

`prepare` and `prepare_checks` hold every check that can fail before work starts, so bad input
exits before anything is written; then they create the folder and record the config.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from crl import checks
from crl.core.config import CheckConfig, Config, is_paired
from crl.core.errors import ConfigError
from crl.core.places import resolved
from crl.kernels.encoders import square_side
from crl.steps import data, store, user_data
from crl.steps.atomic import write_bytes_atomic
from crl.steps.dense.checks import check_dense
from crl.steps.embed import features_dir_of
from crl.steps.keys import grid_keys


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


def writable(out: str | Path) -> Path:
    """`out`, created if needed, after proving a file can be written there; for a store URI
    (crl.steps.store), its local mirror, after proving an object can be written there."""
    if store.is_uri(out):
        return store.open_store(out)
    out = Path(resolved(out))  # absolute: Ray's workers and Ray Train read it (crl.core.places)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".crl-write-probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise ConfigError(f"--out {out}: cannot write there ({err.strerror})") from None
    return out


def _check_cell_memory(config: Config, width: int) -> None:
    """Refuse a grid whose largest cell cannot fit in this machine's memory (its features)."""
    n, m = max(config.grid.n), max(config.grid.m)
    features = max(width, config.encoder.out_dim if config.encoder.kind != "identity" else 0)
    needed = n * (m + 2) * features * 8  # the largest cell's tuples, float64 at worst
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if needed > total:
        raise ConfigError(
            f"config field grid.m: a cell with n={n}, m={m} holds {n * (m + 2):,} points of "
            f"{features} features, about {needed / 2**30:.0f} GiB; this machine has "
            f"{total / 2**30:.0f} GiB"
        )


def prepare(config: Config, out: str | Path, local: bool = True) -> RunPaths:
    """Every check that can fail before work starts; then the run folder and its config.json.

    `local`: the run uses this machine's CPUs (no cluster), so runtime.cell_cpus and the
    pretrainings' workers are checked against them."""
    if config.grid is not None and config.dataset.kind == "paired_parquet":
        _check_sizes(config)
    if config.grid is not None and is_paired(config.dataset):
        _check_paired_memory(config)
    elif config.grid is not None:
        _check_data(config)
    if config.dense is not None:
        check_dense(config.dense)
    if config.runtime.cell_cpus > (os.cpu_count() or 1) and local:
        raise ConfigError(
            f"config field runtime.cell_cpus: {config.runtime.cell_cpus} CPUs per cell, but this "
            f"machine has {os.cpu_count()}: no cell could ever be scheduled"
        )
    for section, pretrain in config.pretrainings().items():
        if pretrain.workers > (os.cpu_count() or 1) and local:
            raise ConfigError(
                f"config field {section}.workers: {pretrain.workers} workers of 1 CPU each, but "
                f"this machine has {os.cpu_count()}: the training could never start"
            )
    out = writable(out)
    paths = RunPaths(out / config.run_id())
    store.pull(paths.root)  # a resume from the store: its finished files
    _writable_run_folder(paths)
    if not paths.root.exists():
        store.pull(out, lambda parts: parts[1:] == ("config.json",))  # other runs' records
        note = changed_inputs(config, paths.root.parent)
        if note:
            sys.stderr.write(note + "\n")
    paths.record(config)
    return paths


def changed_inputs(config: Config, out: Path) -> str | None:
    """One line when a run of the same config read other inputs (crl.core.fingerprints): the
    fields whose fingerprints differ and the new folder; None otherwise."""
    if config.inputs is None:
        return None
    mine = config.model_dump(mode="json")
    mine.pop("inputs")
    for record in sorted(out.glob(f"{config.name}-*/config.json")):
        try:
            theirs = json.loads(record.read_text())["config"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if not isinstance(theirs, dict):
            continue
        before = theirs.pop("inputs", None) or {}
        if theirs != mine or before == config.inputs:
            continue
        moved = ", ".join(
            f"{field} {before.get(field, 'unrecorded')} -> {value}"
            for field, value in sorted(config.inputs.items())
            if before.get(field) != value
        )
        return (
            f"crl: inputs changed since {record.parent} ({moved}); computing a new run in "
            f"{out / config.run_id()}"
        )
    return None


# float64 copies of theta = (M, B) a paired fit holds at once: the iterate, the extrapolated
# point, the candidate, the gradient and the previous iterate, and autograd's temporaries
THETA_COPIES = 8


def _check_paired_memory(config: Config) -> None:
    """Refuse a paired grid whose largest cell cannot fit: its negatives (and their weights),
    and the score model's parameters theta = (M, B), px py + py^2 values per copy."""
    ds = config.dataset
    if ds.kind == "paired_gaussian":
        px = py = len(ds.correlations)
    else:
        px, py = user_data.pair_widths(ds)
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    theta = THETA_COPIES * (px * py + py * py) * 8
    if theta > total:
        raise ConfigError(
            f"dataset: pairs of {px} and {py} values need a score model of {px * py + py * py:,} "
            f"parameters, about {theta / 2**30:.0f} GiB while fitting; this machine has "
            f"{total / 2**30:.0f} GiB (reduce the pairs' dimensions, e.g. by PCA)"
        )
    keys = grid_keys(config)
    if not keys:
        raise ConfigError("config field grid.m: no (m, n) cell is inside the grid's limits")
    p = max(px, py)
    needed = max(k.n * k.m * (p + 4) * 8 if k.regime == "scrl" else k.n * k.m * 32 for k in keys)
    if needed + theta > total:
        raise ConfigError(
            f"config field grid.m: the largest paired cell needs about "
            f"{(needed + theta) / 2**30:.0f} GiB; this machine has {total / 2**30:.0f} GiB "
            "(grid.scrl_max_negatives caps scrl cells)"
        )


def _check_data(config: Config) -> None:
    """The checks of a data source with shards: sizes, shards, cell memory, encoder input."""
    _check_sizes(config)
    _check_cell_memory(config, data.input_width(config.dataset))
    if config.encoder.kind == "small_cnn":
        width = data.input_width(config.dataset)
        try:
            square_side(width)
        except ValueError:
            raise ConfigError(
                f"config field encoder.kind: small_cnn needs square images, but the dataset's "
                f"inputs have {width} values per row"
            ) from None


def _check_sizes(config: Config) -> None:
    """n within the train split (what pretraining leaves of it), a test split, no empty shard,
    a pretraining batch within the pretraining split."""
    pretrain = config.encoder.pretrain
    fraction = None if pretrain is None else pretrain.fraction
    sizes = data.split_sizes(config.dataset, fraction)
    if max(config.grid.n) > sizes["train"]:
        left = " after encoder.pretrain.fraction" if pretrain is not None else ""
        raise ConfigError(
            f"config field grid.n: n={max(config.grid.n)} is larger than the train split "
            f"({sizes['train']} rows{left}) can serve (anchors are drawn without replacement)"
        )
    if pretrain is not None:
        rows = data.pretrain_rows(data.split_sizes(config.dataset)["train"], fraction)
        if rows < pretrain.batch:
            raise ConfigError(
                f"config field encoder.pretrain.batch: {pretrain.batch} is larger than the "
                f"pretraining split ({rows} rows; encoder.pretrain.fraction)"
            )
    if sizes["test"] < 2:
        raise ConfigError(f"dataset: the test split has {sizes['test']} rows; need at least 2")
    if config.dataset.shards > min(sizes.values()):
        raise ConfigError(
            f"config field dataset.shards: {config.dataset.shards} shards, but a split has only "
            f"{min(sizes.values())} rows"
        )


def _writable_run_folder(paths: RunFolder) -> None:
    """An existing run folder (a resume) must be writable too, not only --out."""
    if paths.root.exists() and not os.access(paths.root, os.W_OK | os.X_OK):
        raise ConfigError(f"run folder {paths.root}: exists but cannot be written (permissions)")


def prepare_checks(config: CheckConfig, out: str | Path) -> CheckPaths:
    """Statement names checked against the registry; then the run folder and its config.json."""
    unknown = [s for s in config.statements or [] if s not in checks.STATEMENTS]
    if unknown:
        raise ConfigError(
            f"config field statements: unknown statements {unknown}; "
            f"known: {sorted(checks.STATEMENTS)}"
        )
    paths = CheckPaths(writable(out) / config.run_id())
    store.pull(paths.root)
    _writable_run_folder(paths)
    paths.record(config)
    return paths
