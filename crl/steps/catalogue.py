"""Runs over time: the catalogue of a folder of runs, tables unioned across runs, and the
difference between two runs.

- `catalogue(out)`: one row per run folder under `out` (a folder with a config.json): `run_id`,
  `kind` (`grid` or `checks`), `config_hash`, `inputs` (JSON of the input fingerprints),
  `crl_version` and `git_commit` (of the tables, when written), `started` (config.json written)
  and `finished` (the last table written), `cells_done`, `cells_total`, `cells_failed`, and
  `status`: `complete` (every cell done, tables written), `failed` (tables written, some cells
  failed), `partial` (cells missing), `unreadable` (config.json cannot be read).
- `run_folders(path)`: the run folders a path names: itself when it holds tables, else every
  child that does (a folder of runs).
- `union(folders)`: each table name -> the table of every run that has it, concatenated
  (columns aligned, missing ones null); `run_id` tells the rows apart.
- `diff(summary_a, summary_b)`: per (dataset, regime, loss, settings, m, n), each compared
  quantity's seed mean in A and B and B - A.
- `record_flow_run(run_dir, ...)` and `previous_flow_run(out, deployment_id, ...)`: the Prefect
  flow runs that ran each folder (`flow_runs.json`), so a scheduled run is compared with the
  previous run of its own deployment, in whichever folder that one ran (an unchanged config and
  inputs give the same folder; a changed input a new one).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from crl.core.config import Config, validate
from crl.core.errors import ConfigError
from crl.steps.atomic import write_bytes_atomic
from crl.steps.cells import all_items
from crl.steps.tables import keys_of

COMPARED = [
    "train_loss",
    "test_loss",
    "gap",
    "best_bound",
    "gamma_S",
    "cert_test_set",
    "cert_pb_data",
    "cert_pb_ref",
    "learning_gain",
    "retrieval_auc",
    "linear_probe_accuracy",
    "gamma_lin",
    "excess_auc",
    "best_dense_bound",
    "mi_estimate",
]
SCHEMA = {
    "run_id": pl.String,
    "kind": pl.String,
    "config_hash": pl.String,
    "inputs": pl.String,
    "crl_version": pl.String,
    "git_commit": pl.String,
    "started": pl.String,
    "finished": pl.String,
    "cells_done": pl.Int64,
    "cells_total": pl.Int64,
    "cells_failed": pl.Int64,
    "status": pl.String,
}


def _when(path: Path) -> str | None:
    if not path.exists():
        return None
    stamp = datetime.fromtimestamp(path.stat().st_mtime, tz=UTC)
    return stamp.isoformat(timespec="seconds")


def _provenance(tables: Path) -> dict:
    """crl_version and git_commit of the run's first readable table."""
    for path in sorted(tables.glob("*.parquet")):
        try:
            row = pl.read_parquet(path, columns=["crl_version", "git_commit"], n_rows=1)
        except Exception:  # a damaged or foreign file: try the next one
            continue
        if row.height:
            return row.row(0, named=True)
    return {"crl_version": None, "git_commit": None}


def _failed(tables: Path) -> int:
    try:
        return pl.read_parquet(tables / "failures.parquet", columns=["cell_id"]).height
    except Exception:  # no failures table (or an unreadable one): none recorded
        return 0


def _entry(folder: Path) -> dict:
    """The catalogue row of one run folder."""
    tables = folder / "tables"
    row = dict.fromkeys(SCHEMA) | {"run_id": folder.name}
    row["started"] = _when(folder / "config.json")
    finished = [p for p in tables.glob("*.parquet")] if tables.is_dir() else []
    row["finished"] = max((_when(p) for p in finished), default=None)
    row |= _provenance(tables)
    try:
        record = json.loads((folder / "config.json").read_text())
        tree, row["config_hash"] = record["config"], record["hash"]
    except (OSError, ValueError, KeyError, TypeError):
        return row | {"status": "unreadable"}
    if "statements" in tree:  # a `crl check` run
        row["kind"] = "checks"
        row["status"] = "complete" if (tables / "checks.parquet").is_file() else "partial"
        return row
    row["kind"] = "grid"
    row["inputs"] = json.dumps(tree.get("inputs") or {}, sort_keys=True)
    try:
        config: Config = validate(tree)
        row["cells_total"] = len(all_items(config))
    except ConfigError:
        return row | {"status": "unreadable"}
    row["cells_done"] = len(list((folder / "cells").glob("*.parquet")))
    row["cells_failed"] = _failed(tables)
    written = (tables / "cells.parquet").is_file()
    if row["cells_done"] >= row["cells_total"] and written:
        row["status"] = "complete"
    elif row["cells_failed"] and written:
        row["status"] = "failed"
    else:
        row["status"] = "partial"
    return row


def catalogue(out: Path) -> pl.DataFrame:
    """One row per run folder under `out`, oldest first (module docstring)."""
    folders = [p for p in sorted(out.iterdir()) if (p / "config.json").is_file()]
    frame = pl.DataFrame([_entry(p) for p in folders], schema=SCHEMA)
    return frame.sort("started", nulls_last=True, maintain_order=True)


def run_folders(path: Path) -> list[Path]:
    """`path` itself when it holds a tables folder, else its children that do."""
    if (path / "tables").is_dir():
        return [path]
    if not path.is_dir():
        return []
    return [p for p in sorted(path.iterdir()) if (p / "tables").is_dir()]


def union(folders: list[Path]) -> dict[str, pl.LazyFrame]:
    """Each table name -> the tables of that name in every folder, concatenated (diagonal)."""
    by_name: dict[str, list[pl.LazyFrame]] = {}
    for folder in folders:
        for path in sorted((folder / "tables").glob("*.parquet")):
            by_name.setdefault(path.stem, []).append(pl.scan_parquet(path))
    return {
        name: frames[0] if len(frames) == 1 else pl.concat(frames, how="diagonal_relaxed")
        for name, frames in by_name.items()
    }


def diff(a: pl.DataFrame, b: pl.DataFrame) -> pl.DataFrame:
    """Per summary key present in both runs: `<q>_a`, `<q>_b` and `<q>_change` = B - A of the
    seed means of the compared quantities both have (COMPARED)."""
    keys = [k for k in keys_of(a) if k in b.columns]
    quantities = [q for q in COMPARED if f"{q}_mean" in a.columns and f"{q}_mean" in b.columns]
    left = a.select(
        [*keys, *(pl.col(f"{q}_mean").cast(pl.Float64).alias(f"{q}_a") for q in quantities)]
    )
    right = b.select(
        [*keys, *(pl.col(f"{q}_mean").cast(pl.Float64).alias(f"{q}_b") for q in quantities)]
    )
    joined = left.join(right, on=keys, how="inner", nulls_equal=True)
    changes = [(pl.col(f"{q}_b") - pl.col(f"{q}_a")).alias(f"{q}_change") for q in quantities]
    ordered = [c for q in quantities for c in (f"{q}_a", f"{q}_b", f"{q}_change")]
    return joined.with_columns(changes).select([*keys, *ordered])


def previous_run(run_dir: Path) -> Path | None:
    """The latest other run of the same config name beside `run_dir` with a summary table (by
    the summary's write time): what a scheduled run is compared with."""
    name = run_dir.name.rsplit("-", 1)[0]
    others = [
        p
        for p in run_dir.parent.glob(f"{name}-*")
        if p != run_dir
        and p.name.rsplit("-", 1)[0] == name
        and (p / "tables" / "summary.parquet").is_file()
    ]
    return max(
        others, key=lambda p: (p / "tables" / "summary.parquet").stat().st_mtime, default=None
    )


FLOW_RUNS = "flow_runs.json"  # in a run folder: the Prefect flow runs that ran it, oldest first


def flow_runs(run_dir: Path) -> list[dict]:
    """The flow runs recorded in `run_dir` (none when the file is absent or unreadable)."""
    try:
        records = json.loads((run_dir / FLOW_RUNS).read_text())
    except (OSError, ValueError):
        return []
    return [r for r in records if isinstance(r, dict)] if isinstance(records, list) else []


def record_flow_run(
    run_dir: Path,
    flow_run_id: str,
    deployment_id: str | None,
    deployment: str | None,
    staging: Path,
) -> dict:
    """Add this flow run (finished now) to `run_dir`'s flow_runs.json, written atomically."""
    record = {
        "flow_run_id": flow_run_id,
        "deployment_id": deployment_id,
        "deployment": deployment,
        "finished": datetime.now(UTC).isoformat(timespec="microseconds"),
    }
    records = [*flow_runs(run_dir), record]
    write_bytes_atomic(json.dumps(records, indent=1).encode(), run_dir / FLOW_RUNS, staging)
    return record


def previous_flow_run(out: Path, deployment_id: str, flow_run_id: str) -> tuple[Path, dict] | None:
    """The latest recorded flow run of the deployment, other than `flow_run_id`, in any run
    folder under `out`: its folder and record."""
    found = [
        (folder, record)
        for folder in (p for p in out.iterdir() if (p / FLOW_RUNS).is_file())
        for record in flow_runs(folder)
        if record.get("deployment_id") == deployment_id and record.get("flow_run_id") != flow_run_id
    ]
    return max(found, key=lambda f: str(f[1].get("finished")), default=None)


def change_lines(previous: Path, current: Path) -> list[str]:
    """Markdown lines: for each compared quantity, the grid points both runs have and the
    largest move from `previous` to `current`."""
    try:
        moved = diff(
            pl.read_parquet(previous / "tables" / "summary.parquet"),
            pl.read_parquet(current / "tables" / "summary.parquet"),
        )
    except Exception as err:  # a damaged table: say so instead of failing the run
        return [f"- cannot compare with `{previous.name}`: {str(err).splitlines()[0]}"]
    lines = [f"- against `{previous.name}`: {moved.height} grid points in both"]
    for column in (c for c in moved.columns if c.endswith("_change")):
        values = moved[column].drop_nulls().drop_nans()
        if values.len():
            top = float(values.abs().max())
            lines.append(f"  - `{column.removesuffix('_change')}`: largest change {top:.4g}")
    return lines
