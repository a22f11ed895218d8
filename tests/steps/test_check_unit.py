"""crl.steps.check_unit: units of (statement, chunk of instances), their rows and files."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from crl import checks
from crl.core.config import CheckConfig
from crl.steps import check_unit
from crl.steps.check_unit import CheckJob, Unit


def _covered(units: list[Unit], statement: str) -> list[int]:
    return [i for u in units if u.statement == statement for i in range(u.first, u.first + u.count)]


def test_plan_chunks_the_given_instances() -> None:
    cfg = CheckConfig(statements=["S2_contraction", "S1_convex"], instances=5, chunk=2)
    assert check_unit.plan(cfg) == [
        Unit("S2_contraction", 0, 2),
        Unit("S2_contraction", 2, 2),
        Unit("S2_contraction", 4, 1),
        Unit("S1_convex", 0, 2),
        Unit("S1_convex", 2, 2),
        Unit("S1_convex", 4, 1),
    ]


@pytest.mark.parametrize(("instances", "chunk"), [(1, 20), (20, 20), (21, 20), (7, 1), (6, 3)])
def test_plan_covers_every_instance_once(instances: int, chunk: int) -> None:
    cfg = CheckConfig(statements=["S1_convex"], instances=instances, chunk=chunk)
    units = check_unit.plan(cfg)
    assert _covered(units, "S1_convex") == list(range(instances))
    assert all(1 <= u.count <= chunk for u in units)
    assert len(units) == -(-instances // chunk)


def test_plan_uses_each_statements_default_count() -> None:
    cfg = CheckConfig(statements=["S1_value_at_zero", "S2_contraction"], chunk=150)
    units = check_unit.plan(cfg)
    assert units == [
        Unit("S1_value_at_zero", 0, 1),
        Unit("S2_contraction", 0, 150),
        Unit("S2_contraction", 150, 150),
        Unit("S2_contraction", 300, 100),
    ]
    assert checks.DEFAULT_INSTANCES["S2_contraction"] == 400


def test_plan_of_every_statement() -> None:
    units = check_unit.plan(CheckConfig())  # statements None: all, in registry order
    statements = list(dict.fromkeys(u.statement for u in units))
    assert statements == list(checks.STATEMENTS)
    for statement, count in checks.DEFAULT_INSTANCES.items():
        assert _covered(units, statement) == list(range(count))
    assert sum(u.count for u in units) == sum(checks.DEFAULT_INSTANCES.values())
    names = [u.name for u in units]
    assert len(set(names)) == len(names)


def test_unit_name_and_job_path(tmp_path: Path) -> None:
    unit = Unit("S3_lemma43", 40, 20)
    assert unit.name == "S3_lemma43-00040"
    job = CheckJob(0, checks.Constants(), tmp_path / "units", tmp_path / ".staging")
    assert job.path(unit) == tmp_path / "units" / "S3_lemma43-00040.parquet"


def test_constants_of_the_config() -> None:
    assert check_unit.constants_of(CheckConfig()) == checks.Constants()
    cfg = CheckConfig(constants={"contraction": 0.5, "confidence": 0.99})
    assert check_unit.constants_of(cfg) == checks.Constants(contraction=0.5, confidence=0.99)


def test_run_unit_writes_the_rows_of_its_instances(tmp_path: Path) -> None:
    job = CheckJob(3, checks.Constants(), tmp_path / "units", tmp_path / ".staging")
    unit = Unit("S1_convex", 2, 3)
    assert check_unit.run_unit(unit, job) == "S1_convex-00002"
    path = tmp_path / "units" / "S1_convex-00002.parquet"
    assert [p.name for p in (tmp_path / "units").iterdir()] == [path.name]
    assert list((tmp_path / ".staging").iterdir()) == []
    frame = pl.read_parquet(path)
    assert tuple(frame.columns) == checks.ROW_KEYS
    expected = [row for i in (2, 3, 4) for row in checks.run_instance("S1_convex", 3, i)]
    assert frame.to_dicts() == expected
    assert frame["instance"].unique().sort().to_list() == [2, 3, 4]
    assert set(frame["statement"]) == {"S1_convex"}


def test_run_unit_uses_the_jobs_constants(tmp_path: Path) -> None:
    wrong = checks.Constants(contraction=0.0)
    job = CheckJob(0, wrong, tmp_path / "units", tmp_path / ".staging")
    check_unit.run_unit(Unit("S2_contraction", 0, 3), job)
    frame = pl.read_parquet(job.path(Unit("S2_contraction", 0, 3)))
    assert frame.height == 3 and not frame["holds"].any()
    true = CheckJob(0, checks.Constants(), tmp_path / "true", tmp_path / ".staging")
    check_unit.run_unit(Unit("S2_contraction", 0, 3), true)
    assert pl.read_parquet(true.path(Unit("S2_contraction", 0, 3)))["holds"].all()
