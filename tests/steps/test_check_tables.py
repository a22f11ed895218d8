"""crl.steps.check_tables: checks.parquet and checks_summary.parquet from the unit files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from crl import checks
from crl.steps import check_unit
from crl.steps.check_tables import summarise_checks, write_check_tables
from crl.steps.check_unit import CheckJob, Unit
from crl.steps.tables import PROVENANCE_COLUMNS

PROVENANCE = {
    "run_id": "checks-abc",
    "config_hash": "abc",
    "crl_version": "0.1.0",
    "git_commit": "deadbeef-dirty",
    "inputs": "{}",
}


@pytest.fixture(scope="module")
def units(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """S1_convex instances 0-4 in two units, and S2_contraction 8-13 in two units, all with a
    wrong constant (contraction 0.5 instead of sqrt(3): S2 instances 9 and 13 fail)."""
    root = tmp_path_factory.mktemp("checks")
    job = CheckJob(0, checks.Constants(contraction=0.5), root / "units", root / ".staging")
    for unit in (
        Unit("S2_contraction", 11, 3),
        Unit("S1_convex", 3, 2),
        Unit("S2_contraction", 8, 3),
        Unit("S1_convex", 0, 3),
    ):
        check_unit.run_unit(unit, job)
    return root


def _expected_rows() -> list[dict]:
    wrong = checks.Constants(contraction=0.5)
    rows = [r for i in range(5) for r in checks.run_instance("S1_convex", 0, i, wrong)]
    rows += [r for i in range(8, 14) for r in checks.run_instance("S2_contraction", 0, i, wrong)]
    return rows


def test_write_check_tables(units: Path, tmp_path: Path) -> None:
    out = write_check_tables(
        units / "units", tmp_path / "tables", tmp_path / ".staging", PROVENANCE
    )
    assert set(out) == {"checks", "checks_summary"}
    for name, frame in out.items():
        assert tuple(frame.columns[: len(PROVENANCE_COLUMNS)]) == PROVENANCE_COLUMNS
        for column, value in PROVENANCE.items():
            assert frame[column].to_list() == [value] * frame.height
        on_disk = pl.read_parquet(tmp_path / "tables" / f"{name}.parquet")
        assert on_disk.equals(frame)
    assert list((tmp_path / ".staging").iterdir()) == []

    frame = out["checks"]
    assert tuple(frame.columns[len(PROVENANCE_COLUMNS) :]) == checks.ROW_KEYS
    expected = sorted(
        _expected_rows(), key=lambda r: (r["statement"], r["instance"], r["quantity"])
    )
    assert frame.drop(PROVENANCE_COLUMNS).to_dicts() == expected


def test_checks_summary_counts(units: Path, tmp_path: Path) -> None:
    out = write_check_tables(
        units / "units", tmp_path / "tables", tmp_path / ".staging", PROVENANCE
    )
    summary = out["checks_summary"]
    assert summary.columns == [
        *PROVENANCE_COLUMNS,
        "statement",
        "method",
        "instances",
        "rows",
        "all_held",
        "failed_rows",
        "min_slack",
        "median_slack",
        "max_slack",
    ]
    assert summary["statement"].to_list() == ["S1_convex", "S2_contraction"]
    rows = _expected_rows()
    for record in summary.iter_rows(named=True):
        mine = [r for r in rows if r["statement"] == record["statement"]]
        slack = np.array([r["slack"] for r in mine])
        failed = sum(not r["holds"] for r in mine)
        assert record["method"] == "exact"
        assert record["instances"] == len({r["instance"] for r in mine})
        assert record["rows"] == len(mine)
        assert record["failed_rows"] == failed
        assert record["all_held"] == (failed == 0)
        assert record["min_slack"] == slack.min()
        assert record["max_slack"] == slack.max()
        assert record["median_slack"] == pytest.approx(np.median(slack), abs=0, rel=1e-12)
    s1, s2 = summary.row(0, named=True), summary.row(1, named=True)
    assert (s1["instances"], s1["rows"], s1["all_held"]) == (5, 10, True)
    assert s2["instances"] == 6 and s2["rows"] == 6
    assert (s2["failed_rows"], s2["all_held"]) == (2, False)  # contraction 0.5 < sqrt(3)


def test_summarise_checks_groups_by_statement_and_method() -> None:
    frame = pl.DataFrame(
        {
            "statement": ["B", "B", "B", "A", "A"],
            "method": ["monte_carlo", "exact", "monte_carlo", "exact", "exact"],
            "instance": [0, 1, 1, 0, 0],
            "holds": [True, True, False, True, True],
            "slack": [0.5, 2.0, -1.0, 3.0, 1.0],
        }
    )
    summary = summarise_checks(frame)
    assert summary.select(["statement", "method"]).rows() == [
        ("A", "exact"),
        ("B", "exact"),
        ("B", "monte_carlo"),
    ]
    assert summary["instances"].to_list() == [1, 1, 2]
    assert summary["rows"].to_list() == [2, 1, 2]
    assert summary["all_held"].to_list() == [True, True, False]
    assert summary["failed_rows"].to_list() == [0, 0, 1]
    assert summary["min_slack"].to_list() == [1.0, 2.0, -1.0]
    assert summary["median_slack"].to_list() == [2.0, 2.0, -0.25]
    assert summary["max_slack"].to_list() == [3.0, 2.0, 0.5]
