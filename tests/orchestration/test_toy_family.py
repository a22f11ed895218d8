"""A new family is a module and one registry line: the toy family of tests/families/toy.py,
registered through CRL_FAMILIES, runs end to end through `crl run` (in this process and on
Ray), its rows, summary columns, certified inequality and report section included."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest

from crl.core import config
from tests.conftest import REPO, crl
from tests.orchestration.test_bound_grid import write_config

pytestmark = pytest.mark.slow

TOY = {
    "name": "toy",
    "seed": 4,
    "families": {"toy": {"n": [10, 40, 160], "seeds": [0, 1, 2], "width": 2.0, "draws": 500}},
}
PLUGIN = {"CRL_FAMILIES": "tests.families.toy:FAMILY", "PYTHONPATH": str(REPO)}


@pytest.mark.parametrize("executor", ["local", "ray"])
def test_a_family_defined_in_tests_runs_end_to_end(executor: str, tmp_path: Path) -> None:
    path = write_config(tmp_path, TOY)
    out = crl("run", str(path), "--out", str(tmp_path / "runs"), "--executor", executor, env=PLUGIN)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "9 cells (0 already done, 9 computed, 0 failed)" in out.stdout
    assert "inequalities held in 9 of 9" in out.stdout
    run = tmp_path / "runs" / config.load(path).run_id()
    cells = pl.read_parquet(run / "tables" / "cells.parquet")
    assert set(cells["family"]) == {"toy"} and cells.height == 9
    for row in cells.iter_rows(named=True):  # Hoeffding at the config's delta, in closed form
        assert row["toy_hoeffding"] == pytest.approx(2.0 * math.sqrt(math.log(40) / (2 * row["n"])))
        assert row["toy_hoeffding_holds"] == (row["gap"] <= row["toy_hoeffding"])
    summary = pl.read_parquet(run / "tables" / "summary.parquet")
    assert {"toy_hoeffding_mean", "toy_hoeffding_holds_fraction"} <= set(summary.columns)
    assert (run / "toy" / "draws.parquet").is_file()
    assert "<h1>Toy cells</h1>" in (run / "report" / "index.html").read_text()


def test_a_rerun_of_a_plugin_family_reuses_its_cells(tmp_path: Path) -> None:
    path = write_config(tmp_path, TOY)
    args = ("run", str(path), "--out", str(tmp_path / "runs"), "--executor", "local")
    assert crl(*args, env=PLUGIN).returncode == 0
    again = crl(*args, env=PLUGIN)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "9 cells (9 already done, 0 computed, 0 failed)" in again.stdout


def test_a_section_of_an_unregistered_family_exits_2_naming_it(tmp_path: Path) -> None:
    path = write_config(tmp_path, TOY)
    out = crl("run", str(path), "--out", str(tmp_path / "runs"), "--executor", "local")
    assert out.returncode == 2, out.stderr[-2000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "config field families.toy: no such family" in lines[0], lines
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_a_plugin_that_cannot_load_exits_2_naming_it(tmp_path: Path) -> None:
    path = write_config(tmp_path, TOY)
    env = {**PLUGIN, "CRL_FAMILIES": "tests.families.nowhere:FAMILY"}
    out = crl("run", str(path), "--out", str(tmp_path / "runs"), "--executor", "local", env=env)
    assert out.returncode == 2, out.stderr[-2000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "CRL_FAMILIES: cannot load the family" in lines[0], lines
