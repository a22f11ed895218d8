"""The unit of `crl check`: the rows of a chunk of instances of one statement, in one file.

Each unit writes units/<statement>-<first instance>.parquet atomically; a unit whose file exists
is skipped, so an interrupted check resumes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from crl import checks
from crl.core.config import CheckConfig
from crl.steps.atomic import write_parquet_atomic


@dataclass(frozen=True)
class Unit:
    """Instances first .. first + count - 1 of one statement."""

    statement: str
    first: int
    count: int

    @property
    def name(self) -> str:
        return f"{self.statement}-{self.first:05d}"


@dataclass(frozen=True)
class CheckJob:
    """What every unit of a check run shares: the seed, the constants and where rows go."""

    seed: int
    constants: checks.Constants
    units_dir: Path
    staging: Path

    def path(self, unit: Unit) -> Path:
        return self.units_dir / f"{unit.name}.parquet"


def constants_of(config: CheckConfig) -> checks.Constants:
    """The statements' constants: the true ones, except those the config sets."""
    given = {k: v for k, v in config.constants.model_dump().items() if v is not None}
    return checks.Constants(**given)


def plan(config: CheckConfig) -> list[Unit]:
    """Every unit of the config: chunks of `config.chunk` instances per statement."""
    units = []
    for statement in config.statements or list(checks.STATEMENTS):
        count = config.instances or checks.DEFAULT_INSTANCES[statement]
        for first in range(0, count, config.chunk):
            units.append(Unit(statement, first, min(config.chunk, count - first)))
    return units


def run_unit(unit: Unit, job: CheckJob) -> str:
    """The step of the check stage: compute the unit's rows and write them atomically."""
    rows = []
    for instance in range(unit.first, unit.first + unit.count):
        rows.extend(checks.run_instance(unit.statement, job.seed, instance, job.constants))
    write_parquet_atomic(pa.Table.from_pylist(rows), job.path(unit), job.staging)
    return unit.name
