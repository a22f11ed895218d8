"""`crl check` end to end: the real theorem_checks flow (Ray + Prefect) on a few instances."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from crl import checks
from tests.conftest import crl

pytestmark = pytest.mark.slow


def test_every_statement_holds(tmp_path: Path) -> None:
    out = crl("check", "--instances", "2", "--out", str(tmp_path), "--quiet")
    assert out.returncode == 0, out.stderr[-3000:]
    run_dir = next(tmp_path.iterdir())
    rows = pl.read_parquet(run_dir / "tables" / "checks.parquet")
    assert set(rows["statement"]) == set(checks.STATEMENTS)
    assert rows["holds"].all()
    for column in (*checks.ROW_KEYS, "run_id", "config_hash", "crl_version", "git_commit"):
        assert column in rows.columns
    exact = rows.filter(pl.col("method") == "exact")
    assert (exact["ci"] == 0).all()
    equality = pl.col("statement").is_in(
        ["S1_value_at_zero", "S4_decomposition", "CERT_kl_inverse", "CERT_gaussian_kl"]
    )
    inequalities = rows.filter(~equality)
    assert (inequalities["slack"] == inequalities["rhs"] - inequalities["lhs"]).all()
    equalities = rows.filter(equality)
    assert (equalities["slack"] == -(equalities["lhs"] - equalities["rhs"]).abs()).all()
    summary = pl.read_parquet(run_dir / "tables" / "checks_summary.parquet")
    assert summary["all_held"].all() and (summary["instances"] >= 1).all()
    assert (run_dir / "report" / "slack.png").read_bytes()[:4] == b"\x89PNG"
    assert "S2_contraction" in out.stdout
    from tests.schema_check import assert_described

    assert assert_described(run_dir / "tables") == ["checks", "checks_summary"]


def test_wrong_constant_fails_and_names_the_statement(tmp_path: Path) -> None:
    out = crl(
        "check",
        "--instances",
        "12",
        "--out",
        str(tmp_path),
        "--quiet",
        "--set",
        "statements=[S2_contraction]",
        "--set",
        "constants.contraction=0.5",
        "--executor",
        "local",
    )
    assert out.returncode == 1, (out.stdout, out.stderr[-2000:])
    assert "FAILED S2_contraction instance" in out.stderr


def test_bad_check_input_exit_2(tmp_path: Path) -> None:
    bad = crl("check", "--set", "statements=[S99]", "--out", str(tmp_path))
    assert bad.returncode == 2 and "statements" in bad.stderr
    zero = crl("check", "--instances", "0", "--out", str(tmp_path))
    assert zero.returncode == 2 and "--instances" in zero.stderr
    assert not any(tmp_path.iterdir())
