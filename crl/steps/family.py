"""The contract of a cell family: everything the stages of `crl run` ask of one.

A family (unimodal, paired, dense, or a plugin's) is one object that answers, for a config:
whether the run has cells of it, which checks refuse the config before any work, the work of
each stage that is still to do (materialize, pretrain, embed), its cell keys, and, for the cells
stage, one context shared by its cells and one cell function of one signature:
`run_cell(key, context) -> row`; then its sections of the report. The stages
(crl.orchestration.stages), the run folder's checks and the report loop over the registry
(crl.steps.families) and name no family; a family never imports another.

Work is returned as data, so that an executor decides where it runs: `MapWork` is
`step(item, job)` for every item (Ray tasks, or this process), `WorkerWork` is
`worker(*args)(item)` on a pool of long-lived workers (an encoder loaded once per worker).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from crl.core.config import Config
from crl.steps import store
from crl.steps.pretrain import PretrainJob
from crl.steps.report_page import Page
from crl.steps.run_paths import RunPaths


class CellKey(Protocol):
    """What every family's key provides: its cell id under a config hash. Keys are frozen
    dataclasses (hashable, picklable)."""

    def cell_id(self, config_hash: str) -> str: ...


@dataclass(frozen=True)
class MapWork:
    """`step(item, job)` for every item; `label` names it in progress and errors."""

    label: str
    step: Callable[[Any, Any], Any]
    items: Sequence[Any]
    job: Any


@dataclass(frozen=True)
class WorkerWork:
    """`worker(*args)(item)` for every item, on a pool of workers."""

    label: str
    worker: type
    args: tuple
    items: Sequence[Any]


@dataclass(frozen=True)
class Pretraining:
    """One contrastive pretraining of a family: its config section (`encoder.pretrain`,
    `dense.pretrain`), the folder it keeps its files in, and its job (built on demand: it may
    read the pretraining split)."""

    section: str
    root: Path
    job: Callable[[], PretrainJob]


@dataclass(frozen=True)
class Columns:
    """What the aggregate does with a family's own columns, besides those every family shares
    (crl.steps.summary_columns, which lists the built-in families' columns): `summarised` get a
    mean, std and seed interval in the summary; `holds` are certified inequalities (booleans)
    whose share of seeds the summary gives and that every run counts in its "inequalities
    held" line."""

    summarised: tuple[str, ...] = ()
    holds: tuple[str, ...] = ()


@runtime_checkable
class Family(Protocol):
    """A family of cells. `name` is the cells table's `family` value of its rows; `columns` its
    own columns beyond the shared lists."""

    name: str
    columns: Columns

    def active(self, config: Config) -> bool:
        """Whether the run has cells of this family."""

    def check(self, config: Config) -> None:
        """Every check of the config that can fail before work starts (ConfigError, one line)."""

    def keys(self, config: Config) -> list[CellKey]:
        """Every cell of the family in the run, in order."""

    def materialize(self, config: Config, paths: RunPaths) -> list[MapWork]:
        """The data shards still to write, in order (a later one may read an earlier one's)."""

    def pretrainings(self, config: Config, paths: RunPaths) -> list[Pretraining]:
        """The family's pretrainings (none without its pretrain section)."""

    def embed(self, config: Config, paths: RunPaths) -> list[WorkerWork]:
        """The shards still to embed, once per embedded checkpoint."""

    def context(self, config: Config, paths: RunPaths) -> Any:
        """What every cell of the family shares (features, sources), read once in the driver."""

    def run_cell(self, key: Any, context: Any) -> dict:
        """One cell's row: its key's columns, `cell_id`, `family`, `dataset` and its
        measurements."""

    def report(self, summary: pl.DataFrame, fits: pl.DataFrame, page: Page) -> list[str]:
        """The family's sections of the report (HTML), from its rows of the summary and fits
        tables; figures go to `page.out` through `page.save`."""


def machine_memory() -> int:
    """This machine's physical memory in bytes: what a family's check refuses a cell beyond."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def is_complete(path: Path, rows: int | None = None) -> bool:
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
