"""crl.steps.report: PNG plots and index.html rebuilt from the tables alone."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from crl import checks
from crl.steps import aggregate, check_report, check_unit, pages, report
from crl.steps.check_tables import write_check_tables
from crl.steps.check_unit import CheckJob, Unit
from tests.steps.tables_data import PROVENANCE, cell_rows, write_cells
from tests.steps.test_tables import SPEC

PNG = b"\x89PNG\r\n\x1a\n"


def _assert_png(path: Path) -> None:
    content = path.read_bytes()
    assert content[:8] == PNG, path
    assert content[12:16] == b"IHDR" and content[-8:-4] == b"IEND"
    width, height = int.from_bytes(content[16:20], "big"), int.from_bytes(content[20:24], "big")
    assert width > 100 and height > 100


@pytest.fixture(scope="module")
def grid_tables(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("grid")
    files = write_cells(root / "cells", cell_rows())
    aggregate.write_grid_tables(files, root / "tables", root / ".staging", PROVENANCE, SPEC)
    return root


def test_build_writes_the_page_and_every_plot(grid_tables: Path) -> None:
    out = grid_tables / "report"
    page = report.build(grid_tables / "tables", out, grid_tables / ".staging")
    assert page == out / "index.html"
    pngs = ["downstream_vs_m.png", "gap_vs_m.png", "gap_vs_n.png", "m_star.png", "tightness.png"]
    pngs.append("tracking.png")  # the tables' certificates ranked by psi
    assert sorted(p.name for p in out.iterdir()) == sorted([*pngs, "index.html"])
    for name in pngs:
        _assert_png(out / name)
    html = page.read_text()
    assert html.startswith("<!doctype html>")
    assert f"crl run {PROVENANCE['run_id']}" in html
    assert f"config hash {PROVENANCE['config_hash']}" in html
    assert f"commit {PROVENANCE['git_commit']}" in html
    for name in pngs:
        assert f'<img src="{name}">' in html
    assert "<h2>Gap against the certified bounds (means over seeds)</h2>" in html
    assert "<h2>Slopes in m and n of the gap and of each bound; rate-shape fits</h2>" in html
    # 10 summary rows; 5 slopes, 4 rate, power and exponent fits; the tracking table's tau rows
    ranked = pl.read_parquet(grid_tables / "tables" / "tracking.parquet")
    ranked = ranked.filter(pl.col("statistic").is_in(["kendall_tau", "psi"])).height
    assert ranked > 0 and "<h2>Does the certificate track the gap?" in html
    assert html.count("<tr><td>") == 10 + 11 + ranked
    assert "saunshi_k" in html and "m_star_exponent" in html
    assert list((grid_tables / ".staging").iterdir()) == []


def test_build_without_m_star_rows_skips_that_plot(grid_tables: Path, tmp_path: Path) -> None:
    only_one_negative = tmp_path / "tables"
    only_one_negative.mkdir()
    summary = pl.read_parquet(grid_tables / "tables" / "summary.parquet")
    fits = pl.read_parquet(grid_tables / "tables" / "fits.parquet")
    summary.filter(pl.col("regime") == "one_negative").write_parquet(
        only_one_negative / "summary.parquet"
    )
    fits.filter(pl.col("kind") != "m_star").write_parquet(only_one_negative / "fits.parquet")
    page = report.build(only_one_negative, tmp_path / "report", tmp_path / ".staging")
    names = sorted(p.name for p in (tmp_path / "report").iterdir())
    expected = ["downstream_vs_m.png", "gap_vs_m.png", "gap_vs_n.png", "index.html"]
    assert names == [*expected, "tightness.png"]
    assert "m_star.png" not in page.read_text()


def test_report_rebuilt_only_when_the_tables_changed(grid_tables: Path, tmp_path: Path) -> None:
    tables_dir, out, staging = tmp_path / "tables", tmp_path / "report", tmp_path / ".staging"
    tables_dir.mkdir()
    for path in (grid_tables / "tables").glob("*.parquet"):
        (tables_dir / path.name).write_bytes(path.read_bytes())
    page, built = report.build_if_changed(tables_dir, out, staging)
    assert built and page == out / "index.html"
    assert (out / report.BUILT_FROM).read_text() == report._report_digest(tables_dir)
    before = page.stat().st_mtime_ns
    assert report.build_if_changed(tables_dir, out, staging) == (page, False)
    assert page.stat().st_mtime_ns == before
    summary = pl.read_parquet(tables_dir / "summary.parquet")
    summary.head(summary.height - 1).write_parquet(tables_dir / "summary.parquet")
    assert report.build_if_changed(tables_dir, out, staging)[1]  # a table changed
    page.unlink()
    assert report.build_if_changed(tables_dir, out, staging)[1]  # the page is gone
    (out / report.BUILT_FROM).write_text("a build that stopped half-way")
    assert report.build_if_changed(tables_dir, out, staging)[1]
    assert report.build_if_changed(tables_dir, out, staging)[1] is False


def test_html_table_escapes_and_truncates() -> None:
    frame = pl.DataFrame({"name": ["<b>", "a&b", "c"], "value": [1.23456789, 2.0, 3.0]})
    html = pages.html_table(frame, limit=2)
    assert "<td>&lt;b&gt;</td>" in html and "<td>a&amp;b</td>" in html
    assert "<td>1.235</td>" in html
    assert "<td>c</td>" not in html
    assert "(1 more rows in the Parquet table)" in html


@pytest.fixture(scope="module")
def check_tables(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("check")
    job = CheckJob(0, checks.Constants(contraction=0.5), root / "units", root / ".staging")
    for unit in (Unit("S1_convex", 0, 3), Unit("S2_contraction", 8, 6)):
        check_unit.run_unit(unit, job)
    write_check_tables(root / "units", root / "tables", root / ".staging", PROVENANCE)
    return root


def test_build_checks_writes_the_page_and_the_slack_plot(check_tables: Path) -> None:
    out = check_tables / "report"
    page = check_report.build_checks(check_tables / "tables", out, check_tables / ".staging")
    assert page == out / "index.html"
    assert sorted(p.name for p in out.iterdir()) == ["index.html", "slack.png"]
    _assert_png(out / "slack.png")
    html = page.read_text()
    assert f"crl check {PROVENANCE['run_id']}" in html
    assert '<img src="slack.png">' in html
    assert "<h2>Statements</h2>" in html and "<h2>Failed rows</h2>" in html
    failed = html.split("<h2>Failed rows</h2>", 1)[1].split("<h2>", 1)[0]
    # S2 instances 9 and 13 fail with contraction 0.5: both rows are listed, nothing else
    assert failed.count("<tr><td>S2_contraction</td>") == 2
    assert "<td>9</td>" in failed and "<td>13</td>" in failed
    assert "S1_convex" not in failed


def test_build_checks_when_everything_holds(tmp_path: Path) -> None:
    job = CheckJob(0, checks.Constants(), tmp_path / "units", tmp_path / ".staging")
    check_unit.run_unit(Unit("S1_value_at_zero", 0, 1), job)
    write_check_tables(tmp_path / "units", tmp_path / "tables", tmp_path / ".staging", PROVENANCE)
    page = check_report.build_checks(
        tmp_path / "tables", tmp_path / "report", tmp_path / ".staging"
    )
    html = page.read_text()
    assert "<h2>Failed rows</h2><p>none</p>" in html
    _assert_png(tmp_path / "report" / "slack.png")
