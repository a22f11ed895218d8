"""The step of the cells stage: one cell of any family, computed by its family
(crl.steps.families) and written atomically as one row."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from crl.core.config import Config
from crl.steps import families
from crl.steps.atomic import write_parquet_atomic
from crl.steps.family import CellKey, Family
from crl.steps.run_paths import RunPaths


@dataclass(frozen=True)
class CellItem:
    """One cell: its family's name and its key."""

    family: str
    key: CellKey

    def cell_id(self, config_hash: str) -> str:
        return self.key.cell_id(config_hash)


@dataclass(frozen=True)
class CellJob:
    """What every cell of a run shares: each active family with its context, where rows go
    and the commit of the code that computes them."""

    families: dict[str, tuple[Family, Any]]
    cells_dir: Path
    staging: Path
    git_commit: str = "unknown"


def all_items(config: Config) -> list[CellItem]:
    """Every cell of a run, in order: family by family in registry order."""
    return [CellItem(family.name, key) for family, key in families.cell_keys(config)]


def cell_job(config: Config, paths: RunPaths, commit: str, needed: set[str]) -> CellJob:
    """The shared part of the cells of the families in `needed` (their contexts, read once)."""
    contexts = {
        family.name: (family, family.context(config, paths))
        for family in families.active(config)
        if family.name in needed
    }
    return CellJob(contexts, paths.cells, paths.staging, commit)


def run_and_write(item: CellItem, job: CellJob) -> dict:
    """The step of the cells stage: compute one cell and write its row atomically, with the
    commit of the code that computed it (`cell_git_commit`)."""
    family, context = job.families[item.family]
    row = family.run_cell(item.key, context)
    row["cell_git_commit"] = job.git_commit
    path = job.cells_dir / f"{row['cell_id']}.parquet"
    write_parquet_atomic(pa.Table.from_pylist([row]), path, job.staging)
    return row
