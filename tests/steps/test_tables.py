"""crl.steps.tables: cells -> cells, summary and fits tables, on hand-made cells."""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from scipy import stats as scipy_stats

from crl.core.provenance import PROVENANCE_COLUMNS
from crl.kernels import rates
from crl.steps import aggregate, tables
from crl.steps.tables import FIRST, FITS_SCHEMA, HOLDS, SUMMARISED, keys_of
from tests.steps.tables_data import AUC_A, PROVENANCE, cell_rows, gap_a, write_cells


@pytest.fixture(scope="module")
def cell_files(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    paths = write_cells(tmp_path_factory.mktemp("cells") / "cells", cell_rows())
    random.Random(0).shuffle(paths)  # the stage globs files in any order
    return paths


@pytest.fixture(scope="module")
def cells(cell_files: list[Path]) -> pl.DataFrame:
    return tables.collect_cells(cell_files, PROVENANCE)


@pytest.fixture(scope="module")
def summary(cells: pl.DataFrame) -> pl.DataFrame:
    return tables.summarise(cells)


def _group(rows: list[dict], regime: str, loss: str, m: int, n: int) -> list[dict]:
    return [r for r in rows if (r["regime"], r["loss"], r["m"], r["n"]) == (regime, loss, m, n)]


def test_with_provenance_puts_the_columns_first() -> None:
    frame = tables.with_provenance(pl.DataFrame({"b": [1, 2], "a": ["x", "y"]}), PROVENANCE)
    assert frame.columns == [*PROVENANCE_COLUMNS, "b", "a"]
    assert frame.row(1) == (*PROVENANCE.values(), 2, "y")


def test_collect_cells_puts_provenance_first_and_sorts_by_key(
    cells: pl.DataFrame, cell_files: list[Path]
) -> None:
    assert cells.columns[: len(PROVENANCE_COLUMNS) + 2] == [
        *PROVENANCE_COLUMNS,
        "cell_id",
        "dataset",
    ]
    assert cells.height == len(cell_files) == len(cell_rows())
    assert set(cells.columns) == {*PROVENANCE_COLUMNS, *cell_rows()[0]}
    keys = cells.select([*keys_of(cells), "seed"]).rows()
    assert keys == sorted(keys)
    assert cells["run_id"].to_list() == [PROVENANCE["run_id"]] * cells.height
    assert cells.schema["sscrl_inner"] == pl.Float64  # null in most files, float in some
    by_id = {r["cell_id"]: r for r in cell_rows()}
    for record in cells.iter_rows(named=True):
        assert {k: record[k] for k in by_id[record["cell_id"]]} == by_id[record["cell_id"]]


def test_collect_cells_without_files() -> None:
    with pytest.raises(ValueError, match="no cell files"):
        tables.collect_cells([], PROVENANCE)


def test_summarise_mean_std_and_seed_ci(summary: pl.DataFrame) -> None:
    rows = cell_rows()
    keys = keys_of(summary)
    assert summary.select(keys).rows() == sorted(summary.select(keys).rows())
    assert summary.height == 6 + 2 + 2
    assert summary.columns[: len(PROVENANCE_COLUMNS)] == list(PROVENANCE_COLUMNS)
    for record in summary.iter_rows(named=True):
        group = _group(rows, record["regime"], record["loss"], record["m"], record["n"])
        k = len(group)
        assert record["seeds"] == k
        for column in [c for c in SUMMARISED if c in group[0]]:
            values = [r[column] for r in group]
            if values[0] is None:
                assert record[f"{column}_mean"] is None and record[f"{column}_std"] is None
                continue
            values = np.array(values, dtype=np.float64)
            assert record[f"{column}_mean"] == pytest.approx(values.mean(), rel=1e-12)
            if k == 1:
                assert record[f"{column}_std"] is None
                assert record[f"{column}_seed_ci"] is None  # null with one seed
                continue
            std = values.std(ddof=1)
            half = scipy_stats.t.ppf(0.975, k - 1) * std / math.sqrt(k)
            assert record[f"{column}_std"] == pytest.approx(std, rel=1e-9, abs=1e-15)
            assert record[f"{column}_seed_ci"] == pytest.approx(half, rel=1e-9, abs=1e-15)
        assert record["tau"] == 1 / 3
        ci = np.mean([r["test_loss_ci"] for r in group])
        assert record["test_loss_ci_mean"] == pytest.approx(ci)


def test_summarise_exact_values_of_one_group(summary: pl.DataFrame) -> None:
    record = summary.filter(
        (pl.col("regime") == "scrl") & (pl.col("m") == 4) & (pl.col("n") == 200)
    ).row(0, named=True)
    gaps = np.array([gap_a(4, 200) - 0.01, gap_a(4, 200), gap_a(4, 200) + 0.01])
    assert record["gap_mean"] == pytest.approx(gap_a(4, 200), rel=1e-14)
    assert record["gap_std"] == pytest.approx(0.01, rel=1e-9)
    assert record["gap_seed_ci"] == pytest.approx(4.302652729911275 * 0.01 / math.sqrt(3))
    assert record["gap_seed_ci"] == pytest.approx(
        scipy_stats.t.ppf(0.975, 2) * gaps.std(ddof=1) / math.sqrt(3)
    )
    assert record["train_loss_mean"] == pytest.approx(1.1)
    assert record["retrieval_auc_mean"] == pytest.approx(AUC_A[4, 200])
    assert record["retrieval_auc_std"] == 0.0 and record["retrieval_auc_seed_ci"] == 0.0


def test_summarise_fractions(summary: pl.DataFrame) -> None:
    one = summary.filter(pl.col("regime") == "one_negative").sort("n")
    assert one["gamma_S_holds_fraction"].to_list() == [0.5, 1.0]
    assert one["gamma_m_holds_fraction"].to_list() == [1.0, 1.0]
    assert one["transfer_holds_fraction"].to_list() == [0.5, 1.0]
    assert one["certified_fraction"].to_list() == [1.0, 1.0]
    assert one["gamma_m_mean"].to_list() == pytest.approx(
        [0.55 * math.sqrt(3), 0.5 * math.sqrt(3) / 2]
    )
    scrl = summary.filter(pl.col("regime") == "scrl")
    assert scrl["sscrl_total_holds_fraction"].null_count() == scrl.height  # undefined: null


def test_summary_has_the_documented_columns(summary: pl.DataFrame) -> None:
    """docs/tables.md, `tables/summary.parquet`: seeds, <col>_mean/_std/_seed_ci, the holds
    fractions, tau, test_loss_ci_mean and rademacher_ci_mean."""
    present = set(cell_rows()[0])
    expected = {*PROVENANCE_COLUMNS, *keys_of(summary), "seeds"}
    expected |= {c for c in FIRST if c in present}
    expected |= {f"{c}_{s}" for c in SUMMARISED if c in present for s in ("mean", "std", "seed_ci")}
    expected |= {f"{h}_fraction" for h in HOLDS if h in present}
    expected |= {"test_loss_ci_mean", "rademacher_ci_mean", "test_loss_pool_ci_mean"}
    assert sorted(expected - set(summary.columns)) == []
    assert sorted(set(summary.columns) - expected) == []


SPEC = tables.MStarSpec(("auc_error",), 0.25, (0.25,), 50, 0.95, 0)


def test_fits_rows(summary: pl.DataFrame, cells: pl.DataFrame) -> None:
    fitted = tables.fits(summary, cells, SPEC)
    assert dict(fitted.schema) == tables.fits_schema(summary)
    at = fitted.columns.index("loss")
    assert fitted.columns[at + 1 : at + 3] == ["R", "temperature"]  # the cells' settings
    assert set(fitted.columns) - {"R", "temperature"} == set(FITS_SCHEMA)
    assert fitted["run_id"].to_list() == [PROVENANCE["run_id"]] * fitted.height
    kinds = fitted.select(["regime", "loss", "kind"]).rows()
    assert kinds == [
        *[("scrl", "hinge", "slopes")] * 5,  # gap, gamma_m, gamma_S, gamma_E, best_bound
        *[("scrl", "hinge", "rate")] * 4,
        ("scrl", "hinge", "power"),
        ("scrl", "hinge", "m_star"),
        ("scrl", "hinge", "m_star"),
        ("scrl", "hinge", "m_star_exponent"),
    ]  # one_negative: one m per n; sscrl: two m values, fewer than the rule's three
    slopes = fitted.filter(pl.col("kind") == "slopes")
    assert slopes["shape"].to_list() == ["gap", "gamma_m", "gamma_S", "gamma_E", "best_bound"]
    bound = slopes.filter(pl.col("shape") == "gamma_S").row(0, named=True)
    # the hand-made gamma_S is c sqrt(m + 2) / sqrt(n): log-log slopes near 0.3 in m, -1/2 in n
    assert bound["slope_n"] == pytest.approx(-0.5, abs=1e-9)
    assert 0.2 < bound["slope_m"] < 0.5

    rate = fitted.filter(pl.col("kind") == "rate")
    assert rate["shape"].to_list() == list(rates.RATE_SHAPES)
    grid = [(m, n) for m in (1, 4, 16) for n in (50, 200)]
    m = np.array([g[0] for g in grid], dtype=np.float64)
    n = np.array([g[1] for g in grid], dtype=np.float64)
    gap = np.array([gap_a(*g) for g in grid])
    scrl = rate.row(0, named=True)
    assert scrl["coef_c"] == pytest.approx(0.1, abs=1e-9)
    assert scrl["coef_a"] == pytest.approx(0.5, abs=1e-9)
    assert scrl["coef_b"] == pytest.approx(2.0, abs=1e-8)
    assert scrl["r2"] == pytest.approx(1.0, abs=1e-12) and scrl["rmse"] < 1e-9
    assert scrl["points"] == 6 and scrl["n"] is None and scrl["alpha"] is None
    for record in rate.iter_rows(named=True):
        expected = rates.fit_rate(record["shape"], m, n, gap)
        assert record["r2"] == pytest.approx(expected.r2, rel=1e-9, abs=1e-12)
        for name, value in expected.coefs.items():
            assert record[f"coef_{name}"] == pytest.approx(value, rel=1e-9, abs=1e-9)
        if "b" not in expected.coefs:
            assert record["coef_b"] is None

    assert all(record["slope_n_ci"] >= 0 for record in slopes.iter_rows(named=True))
    power = fitted.filter(pl.col("kind") == "power").row(0, named=True)
    assert power["shape"] == "c+a*m^-alpha+b*n^-beta" and power["points"] == 6
    assert power["alpha"] == pytest.approx(1.0, abs=1e-4)
    assert power["coef_a"] == pytest.approx(0.5, abs=1e-4)
    assert power["r2"] == pytest.approx(1.0, abs=1e-9)

    # the m* rule (crl.kernels.saturation) on 1 - AUC, by hand: n = 50 has errors 0.5, 0.1, 0.1
    # at m = 1, 4, 16, plateau 0.1, threshold 0.125, crossed at log-fraction 0.9375 of [1, 4];
    # n = 200 has 0.5, 0.2, 0.1, plateau 0.15, threshold 0.1875, crossed at 0.125 of [4, 16]
    m_star = fitted.filter(pl.col("kind") == "m_star")
    expected = {50: 4**0.9375, 200: 4 * 4**0.125}
    assert m_star.select(["regime", "shape", "n"]).rows() == [
        ("scrl", "auc_error", 50),
        ("scrl", "auc_error", 200),
    ]
    for row in m_star.iter_rows(named=True):
        assert row["m_star"] == pytest.approx(expected[row["n"]], rel=1e-12)
        # every seed has the same AUC: the bootstrap interval collapses onto the value
        assert row["m_star_lo"] == pytest.approx(row["m_star"]) == row["m_star_hi"]
        assert row["delta"] == 0.25 and row["primary"] and row["seeds"] == 3
    exponent = fitted.filter(pl.col("kind") == "m_star_exponent").row(0, named=True)
    assert exponent["shape"] == "auc_error" and exponent["points"] == 2
    slope = math.log(expected[200] / expected[50]) / math.log(4)
    assert exponent["exponent"] == pytest.approx(slope, rel=1e-12)
    assert exponent["exponent_lo"] == pytest.approx(slope) == exponent["exponent_hi"]


def test_m_star_for_every_metric_and_delta(summary: pl.DataFrame, cells: pl.DataFrame) -> None:
    spec = tables.MStarSpec(("probe_error", "auc_error"), 0.25, (0.1, 0.5), 20, 0.95, 0)
    stars = tables.fits(summary, cells, spec).filter(pl.col("kind") == "m_star")
    assert set(stars["shape"]) == {"probe_error", "auc_error"}
    assert sorted(set(stars["delta"])) == [0.1, 0.25, 0.5]
    assert stars.filter(pl.col("primary"))["delta"].unique().to_list() == [0.25]
    # a metric whose columns the cells lack (paired excess AUC here) is skipped, not an error
    paired_only = tables.MStarSpec(("excess_auc",), 0.25, (), 20, 0.95, 0)
    assert tables.fits(summary, cells, paired_only).filter(pl.col("kind") == "m_star").is_empty()


def test_an_infinite_metric_drops_its_m_column(cells: pl.DataFrame) -> None:
    """An m where some seed's metric is not finite (an infinite L(s)) leaves the curve whole."""
    frame = cells.filter(pl.col("regime") == "scrl").with_columns(
        pl.when((pl.col("m") == 1) & (pl.col("seed") == 0))
        .then(float("inf"))
        .otherwise(1.0 / pl.col("m"))
        .alias("excess_risk")
    )
    spec = tables.MStarSpec(("excess_risk",), 0.25, (), 20, 0.95, 0)
    assert tables.m_star_rows(frame, spec) == []  # two m values left: fewer than three


def test_fits_with_nothing_to_fit_is_empty_with_the_schema(
    summary: pl.DataFrame, cells: pl.DataFrame
) -> None:
    fitted = tables.fits(summary.filter(pl.col("regime") == "one_negative"), cells, SPEC)
    assert fitted.height == 0
    assert dict(fitted.schema) == tables.fits_schema(summary)


def test_write_grid_tables(cell_files: list[Path], tmp_path: Path) -> None:
    out = aggregate.write_grid_tables(
        cell_files, tmp_path / "tables", tmp_path / ".staging", PROVENANCE, SPEC
    )
    assert sorted(p.name for p in (tmp_path / "tables").iterdir()) == [
        "cells.parquet",
        "fits.parquet",
        "frontier.parquet",
        "summary.parquet",
        "tracking.parquet",
    ]
    assert list((tmp_path / ".staging").iterdir()) == []
    for name, frame in out.items():
        back = pl.read_parquet(tmp_path / "tables" / f"{name}.parquet")
        assert back.equals(frame, null_equal=True)
        assert back.columns[: len(PROVENANCE_COLUMNS)] == list(PROVENANCE_COLUMNS)
    assert out["cells"].equals(tables.collect_cells(cell_files, PROVENANCE))
    # the same cells give byte-identical tables (a resumed run equals an uninterrupted one)
    again = tmp_path / "again"
    aggregate.write_grid_tables(
        list(reversed(cell_files)), again, tmp_path / ".staging", PROVENANCE, SPEC
    )
    for name in ("cells", "summary", "fits"):
        first = (tmp_path / "tables" / f"{name}.parquet").read_bytes()
        assert (again / f"{name}.parquet").read_bytes() == first


def test_tables_rebuilt_only_when_cells_provenance_or_spec_changed(
    cell_files: list[Path], tmp_path: Path
) -> None:
    """A rerun whose cells were all done skips the aggregation; any change rebuilds."""
    out, staging = tmp_path / "tables", tmp_path / ".staging"
    cells_dir = tmp_path / "cells"
    cells_dir.mkdir()
    files = []
    for path in cell_files:
        files.append(cells_dir / path.name)
        files[-1].write_bytes(path.read_bytes())

    def build(files: list[Path], prov: dict = PROVENANCE, spec=SPEC) -> bool:
        cells, rebuilt = aggregate.write_grid_tables_if_changed(files, out, staging, prov, spec)
        assert cells.equals(pl.read_parquet(out / "cells.parquet"), null_equal=True)
        return rebuilt

    assert build(files)
    stamp = (out / aggregate.BUILT_FROM).read_text()
    written = {p.name: p.stat().st_mtime_ns for p in out.glob("*.parquet")}
    assert not build(list(reversed(files)))  # the same cells in another order
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("*.parquet")} == written
    assert build(files, {**PROVENANCE, "git_commit": "other"})  # a new commit
    assert build(files)
    assert build(files, spec=tables.MStarSpec(**{**SPEC.__dict__, "replicates": 7}))
    assert build(files)
    assert (out / aggregate.BUILT_FROM).read_text() == stamp
    assert build(files[:-1])  # a cell fewer
    assert build(files)
    files[0].write_bytes(files[1].read_bytes())  # a cell recomputed with other values
    assert build(files)
    (out / "fits.parquet").unlink()  # a table lost
    assert build(files)
    assert not build(files)


def test_slope_intervals_cover_the_true_exponent() -> None:
    """log y = 1 - 0.5 log n + 0.2 log m + Gaussian noise (sd 0.1) on a 3 x 6 grid: over 400
    draws the 95% t-intervals of slope_n and slope_m cover their values in 92-98% of them."""
    rng = np.random.default_rng(0)
    m, n = (
        a.ravel().astype(float) for a in np.meshgrid([1, 4, 16], [50, 200, 800, 3200, 12800, 51200])
    )
    covered = {"n": 0, "m": 0}
    for _ in range(400):
        y = np.exp(1 - 0.5 * np.log(n) + 0.2 * np.log(m) + rng.normal(0, 0.1, size=n.size))
        fit = rates.fit_loglog_slopes(m, n, y)
        covered["n"] += abs(fit.slope_n + 0.5) <= fit.slope_n_ci
        covered["m"] += abs(fit.slope_m - 0.2) <= fit.slope_m_ci
    assert all(0.92 <= c / 400 <= 0.98 for c in covered.values())
    few = rates.fit_loglog_slopes([1, 1], [10, 100], [1.0, 0.1])  # a fit needs a spare point
    assert math.isnan(few.slope_n) and math.isnan(few.slope_n_ci)


def test_each_certificate_excess_is_fitted_over_its_own_held_out_loss() -> None:
    group = pl.DataFrame(
        {
            "m": [16, 16, 16, 16],
            "n": [256, 1024, 4096, 16384],
            "gap_mean": [0.2, 0.1, 0.05, 0.025],
            "cert_test_set_mean": [2.4, 2.2, 2.1, 2.05],
            "test_loss_m_mean": [2.0, 2.0, 2.0, 2.0],
            "cert_pb_data_mean": [3.0, None, 2.5, 2.2],
            "gibbs_test_loss_mean": [2.1, 2.1, 2.1, 2.1],
        }
    )
    values = tables._slope_values(group)
    assert set(values) == {"gap", "cert_test_set_excess", "cert_pb_data_excess"}
    assert values["cert_test_set_excess"] == pytest.approx([0.4, 0.2, 0.1, 0.05])
    assert values["cert_pb_data_excess"][0] == pytest.approx(0.9)
    assert math.isnan(values["cert_pb_data_excess"][1])
    slopes = {r["shape"]: r for r in tables._fit_rows(group) if r["kind"] == "slopes"}
    assert slopes["cert_test_set_excess"]["slope_n"] == pytest.approx(-0.5)
    assert slopes["cert_pb_data_excess"]["points"] == 3  # the null mean is left out
    assert slopes["cert_test_set_excess"]["slope_n_ci"] == pytest.approx(0.0, abs=1e-9)
