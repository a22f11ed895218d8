"""The stages of `crl run`, each fanning out over Ray: materialize, embed, cells.

Flows (flows/bound_grid.py) call these; this module owns where work runs, crl.data/encoders/
cells own what it does. Every unit writes its own file atomically and is skipped when present.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from crl import data, encoders, runtime
from crl.cells import CellKey, Features, grid_keys, run_cell
from crl.config import CheckConfig, Config, ConfigError, DigitsData, ParquetData, SyntheticData
from crl.io import write_bytes_atomic, write_parquet_atomic


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
        """Create the folder and write the validated config with its hash."""
        self.root.mkdir(exist_ok=True)
        record = json.dumps(
            {"config": config.model_dump(mode="json"), "hash": config.hash()},
            indent=2,
            sort_keys=True,
        )
        write_bytes_atomic(record.encode(), self.root / "config.json", self.staging)


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


def prepare(config: Config, out: str | Path) -> RunPaths:
    """Every check that can fail before work starts; then the run folder and its config.json."""
    sizes = data.split_sizes(config.dataset)
    if max(config.grid.n) > sizes["train"]:
        raise ConfigError(
            f"config field grid.n: n={max(config.grid.n)} is larger than the train split "
            f"({sizes['train']} rows) can serve (anchors are drawn without replacement)"
        )
    if sizes["test"] < 2:
        raise ConfigError(f"dataset: the test split has {sizes['test']} rows; need at least 2")
    paths = RunPaths(writable(out) / config.run_id())
    paths.record(config)
    return paths


def writable(out: str | Path) -> Path:
    """`out`, created if needed, after proving a file can be written there."""
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".crl-write-probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise ConfigError(f"--out {out}: cannot write there ({err.strerror})") from None
    return out


def tau_of(config: Config, labels: np.ndarray) -> float | None:
    """Class-collision probability: exact for the synthetic model, label frequencies otherwise."""
    if isinstance(config.dataset, SyntheticData):
        return float(data.synthetic_model(config.dataset, config.seed).tau)
    if isinstance(config.dataset, (DigitsData, ParquetData)):
        freq = np.bincount(labels) / len(labels)
        return float((freq**2).sum())
    return None


def progress_line(label: str, done: int, total: int, started: float) -> None:
    if (
        total == 0
        or not sys.stderr.isatty()
        and done not in (total,)
        and done % max(1, total // 10)
    ):
        return
    elapsed = time.perf_counter() - started
    eta = elapsed / done * (total - done) if done else float("nan")
    width = 30
    bar = "#" * int(width * done / total) + "-" * (width - int(width * done / total))
    end = "\n" if done == total else ("\r" if sys.stderr.isatty() else "\n")
    print(
        f"{label} [{bar}] {done}/{total}  {elapsed:5.1f}s elapsed  eta {eta:5.1f}s",
        end=end,
        file=sys.stderr,
        flush=True,
    )


def materialize(config: Config, paths: RunPaths) -> int:
    """Write every missing data shard, one Ray task per shard. Returns shards written."""
    import ray

    sizes = data.split_sizes(config.dataset)
    todo = [
        s
        for s in data.shard_plan(config.dataset, sizes)
        if not data.shard_path(paths.data, s).exists()
    ]

    @ray.remote(num_cpus=1, max_retries=3)
    def write_shard(spec: data.ShardSpec) -> None:
        table = data.make_shard(config.dataset, config.seed, spec)
        write_parquet_atomic(table, data.shard_path(paths.data, spec), paths.staging)

    ray.get([write_shard.remote(spec) for spec in todo])
    return len(todo)


def embed(config: Config, paths: RunPaths) -> int:
    """Run the frozen encoder over each shard with a Ray actor pool; returns shards written."""
    import ray
    from ray.util import ActorPool

    shards = sorted(paths.data.glob("split=*/part-*.parquet"))
    todo = [s for s in shards if not (paths.features / s.relative_to(paths.data)).exists()]
    if not todo:
        return 0
    gpus = runtime.gpus_available()
    if gpus >= 1:
        size, options = int(gpus), {"num_gpus": 1, "num_cpus": 1}
    else:  # leave a CPU to the readers: an actor pool that takes every CPU deadlocks them
        size, options = max(1, int(runtime.cpus_available()) - 1), {"num_cpus": 1}
    size = min(size, len(todo))

    @ray.remote(max_restarts=2, max_task_retries=2)
    class Embedder:
        def __init__(self) -> None:
            import torch

            self.device = "cuda" if torch.cuda.is_available() else "cpu"
            self.modules: dict[int, object] = {}

        def run(self, source: str) -> str:
            table = pq.read_table(source)
            columns = {"id": table.column("id"), "label": table.column("label")}
            for name in ("x", "view_a", "view_b"):
                if name not in table.column_names:
                    continue
                x = data.list_to_numpy(table.column(name))
                module = self.modules.get(x.shape[1]) or encoders.build(config.encoder, x.shape[1])
                self.modules[x.shape[1]] = module
                phi = encoders.embed(module, x, config.encoder.batch_rows, self.device)
                columns[name] = data.list_column(phi)
            target = paths.features / Path(source).relative_to(paths.data)
            write_parquet_atomic(pa.table(columns), target, paths.staging)
            return str(target)

    pool = ActorPool([Embedder.options(**options).remote() for _ in range(size)])
    written = list(pool.map_unordered(lambda actor, s: actor.run.remote(str(s)), todo))
    return len(written)


def load_features(paths: RunPaths) -> Features:
    """Features of both splits, centred on the train mean and scaled so every ||row|| <= 1."""
    tr = data.read_split(paths.features, "train")
    te = data.read_split(paths.features, "test")
    mean = tr.x.mean(axis=0, dtype=np.float64).astype(np.float32)
    tables = [t for t in (tr.x, te.x, tr.view_a, tr.view_b, te.view_a, te.view_b) if t is not None]
    scale = max(float(np.linalg.norm(t - mean, axis=1).max()) for t in tables) or 1.0

    def norm(t: np.ndarray | None) -> np.ndarray | None:
        return (
            None if t is None else np.ascontiguousarray((t - mean) / np.float32(scale * (1 + 1e-6)))
        )

    return Features(
        norm(tr.x),
        tr.labels,
        norm(te.x),
        te.labels,
        norm(tr.view_a),
        norm(tr.view_b),
        norm(te.view_a),
        norm(te.view_b),
    )


@dataclass(frozen=True)
class CellsOutcome:
    total: int
    skipped: int
    computed: int
    failures: list[dict]


def cell_path(paths: RunPaths, cell_id: str) -> Path:
    return paths.cells / f"{cell_id}.parquet"


def run_cells(
    config: Config, paths: RunPaths, features: Features, progress: bool = True
) -> CellsOutcome:
    """One Ray task per cell not yet on disk; each writes its own row atomically."""
    import ray

    keys = grid_keys(config)
    config_hash = config.hash()
    todo = [k for k in keys if not cell_path(paths, k.cell_id(config_hash)).exists()]
    tau = tau_of(config, features.y_train)
    shared = ray.put(features)

    @ray.remote(num_cpus=config.runtime.cell_cpus, max_retries=3)
    def cell_task(key: CellKey, feats: Features) -> dict:
        try:
            row = run_cell(config, key, feats, tau)
        except Exception as err:  # an application error: recorded, the other cells go on
            return {
                "cell_id": key.cell_id(config_hash),
                "key": key.__dict__,
                "error": f"{type(err).__name__}: {err}",
                "traceback": traceback.format_exc(),
            }
        row["dataset"] = config.dataset.kind
        write_parquet_atomic(
            pa.Table.from_pylist([row]), cell_path(paths, row["cell_id"]), paths.staging
        )
        return row

    pending = [cell_task.remote(k, shared) for k in todo]
    failures, started, done = [], time.perf_counter(), 0
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        result = ray.get(ready[0])
        if "error" in result:
            failures.append(result)
        done += 1
        if progress:
            progress_line("cells", done, len(todo), started)
    if failures:
        rows = [
            {"cell_id": f["cell_id"], **f["key"], "error": f["error"], "traceback": f["traceback"]}
            for f in failures
        ]
        write_parquet_atomic(
            pa.Table.from_pylist(rows), paths.tables / "failures.parquet", paths.staging
        )
    elif (paths.tables / "failures.parquet").exists():
        (paths.tables / "failures.parquet").unlink()
    return CellsOutcome(len(keys), len(keys) - len(todo), len(todo) - len(failures), failures)


def clean_staging(paths: RunFolder) -> None:
    shutil.rmtree(paths.staging, ignore_errors=True)
