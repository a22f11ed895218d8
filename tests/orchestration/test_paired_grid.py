"""A paired (two-modality) grid end to end: the real flow on a tiny Li et al. Gaussian grid,
its cells recomputed from first principles, m*(n) rows and the report."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch

from crl.core import config
from crl.kernels import score_model
from crl.kernels.solver import SolverSpec
from crl.steps import ladder as rungs
from crl.steps.keys import grid_keys
from crl.steps.paired import ladder as paired_ladder
from crl.steps.paired import model_cell
from tests.conftest import crl
from tests.orchestration.test_bound_grid import write_config

pytestmark = pytest.mark.slow

TINY_PAIRED = {
    "name": "tiny-paired",
    "seed": 5,
    "dataset": {"kind": "paired_gaussian", "correlations": [0.9, 0.5], "eval_triples": 4000},
    "model": {"R_times_bayes": 2.0, "solver": "apg", "tol": 1e-6},
    "grid": {
        "regimes": ["scrl", "sscrl"],
        "losses": ["lse"],
        "m": [1, 2, 4, 8, 16, 32],
        "n": [8, 16],
        "seeds": [0, 1, 2],
        "m_max_over_n": 2,
        "scrl_max_negatives": 256,
    },
    "eval": {"temperature": 0.5, "m_star": {"bootstrap": 50}},
}


@pytest.fixture(scope="module")
def paired_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    folder = tmp_path_factory.mktemp("paired")
    path = write_config(folder, TINY_PAIRED)
    done = crl("run", str(path), "--out", str(folder / "runs"), "--quiet")
    assert done.returncode == 0, done.stderr[-3000:]
    cfg = config.load(path)
    run_dir = folder / "runs" / cfg.run_id()
    tables = {n: pl.read_parquet(run_dir / "tables" / f"{n}.parquet") for n in ("cells", "fits")}
    return {"config": cfg, "dir": run_dir, **tables}


def test_every_kept_cell_is_written_with_its_exact_columns(paired_run: dict) -> None:
    cfg, cells = paired_run["config"], paired_run["cells"]
    keys = grid_keys(cfg)
    assert cells.height == len(keys)
    assert all(k.m <= 2 * k.n for k in keys)
    assert all(k.n * k.m <= 256 for k in keys if k.regime == "scrl")
    assert set(cells["family"]) == {"paired"} and cells["solver_converged"].all()
    assert cells["calibration_holds"].all()
    finite = cells.filter(pl.col("risk_finite"))
    assert (finite["excess_risk"] >= -1e-12).all()
    assert (finite["calibration_slack"] >= 0).all()
    infinite = cells.filter(~pl.col("risk_finite"))
    assert infinite["test_loss"].is_infinite().all()  # never a finite stand-in
    # one evaluation set for the whole run: AUC* is the same number in every cell
    assert cells["auc_star"].n_unique() == 1
    # the exact risk needs no certificate, and no rung applies to unbounded features
    assert (cells["cert_test_set_reason"] == paired_ladder.EXACT).all()
    assert (cells["cert_pb_free_reason"] == paired_ladder.UNBOUNDED).all()
    assert cells["learning_certified_rademacher"].is_null().all()


def test_a_cell_recomputed_from_first_principles(paired_run: dict) -> None:
    """Draw the same sample, refit, and get the same train loss, L(s) and excess AUC."""
    cfg, cells = paired_run["config"], paired_run["cells"]
    row = cells.filter((pl.col("regime") == "sscrl") & (pl.col("m") == 16)).row(0, named=True)
    source = model_cell.source(cfg)
    sample = model_cell.draw(cfg, source.model, "sscrl", 16, row["n"], row["seed"])
    radius = model_cell.radius(cfg, source.model)
    score, _ = score_model.fit(sample, radius, 0.5, SolverSpec(1e-6, 4000))
    assert row["R"] == pytest.approx(radius)
    lhat = float(score_model.empirical_risk(score.M, score.B, sample, 0.5))
    assert row["train_loss"] == pytest.approx(lhat, rel=1e-9)
    assert row["test_loss"] == pytest.approx(source.model.lse_risk(score.M, score.B, 0.5), rel=1e-9)
    s_pos = score(source.triples.x, source.triples.y)
    s_neg = score(source.triples.x, source.triples.y_neg)
    auc = float(((s_pos > s_neg).double() + 0.5 * (s_pos == s_neg).double()).mean())
    assert row["retrieval_auc"] == pytest.approx(auc, abs=1e-12)
    # the signal: L(0) = T log E exp(0) = 0 whatever the law, and the gain is exact
    assert row["trivial_loss"] == pytest.approx(0.0, abs=1e-12)
    assert row["learning_gain"] == pytest.approx(-row["test_loss"], rel=1e-12)
    assert row["learning_gain_ci"] == 0.0 and row["gap_snr"] is None
    assert row["learned"] == (row["test_loss"] < 0)


def test_m_star_rows_with_intervals_and_sensitivity(paired_run: dict) -> None:
    fits = paired_run["fits"]
    stars = fits.filter(pl.col("kind") == "m_star")
    assert set(stars["shape"]) == {"excess_auc"}
    assert set(stars["delta"]) == {0.1, 0.25, 0.5}
    assert stars.filter(pl.col("primary"))["delta"].unique().to_list() == [0.25]
    for row in stars.iter_rows(named=True):
        assert row["m_star_lo"] <= row["m_star"] <= row["m_star_hi"] or math.isnan(row["m_star_lo"])
        assert 1 <= row["m_star"] <= 2 * row["n"]
    laws = fits.filter(pl.col("kind") == "m_star_exponent")
    assert laws.height == 2 * 3  # two regimes, three deltas
    assert np.isfinite(laws["exponent"].to_numpy()).all()


def test_the_report_states_the_finding(paired_run: dict) -> None:
    report = paired_run["dir"] / "report"
    page = (report / "index.html").read_text()
    for image in ("excess_auc_vs_m.png", "m_star_excess_auc.png", "exact_gap_vs_m.png"):
        assert (report / image).stat().st_size > 5000 and image in page
    assert "Exponent of m* ~ n^a" in page and "Li et al." in page
    assert "calibration inequality" in page


def test_query_sees_the_paired_cells(paired_run: dict) -> None:
    out = crl(
        "query", str(paired_run["dir"]), "SELECT regime, count(*) AS k FROM cells GROUP BY regime"
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "scrl" in out.stdout and "sscrl" in out.stdout


@pytest.fixture(scope="module")
def pairs_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """User pairs: a Parquet of (x, y) lists drawn from a Gaussian pair model, no labels."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from crl.kernels.latent.canonical import CanonicalGaussian

    folder = tmp_path_factory.mktemp("pairs")
    model = CanonicalGaussian.make([0.9, 0.6, 0.3], True, torch.Generator().manual_seed(0))
    x, y = model.sample_pairs(1500, torch.Generator().manual_seed(1))
    pq.write_table(
        pa.table({"img": x.float().numpy().tolist(), "txt": y.float().numpy().tolist()}),
        folder / "pairs.parquet",
    )
    tree = {
        "name": "tiny-pairs",
        "dataset": {
            "kind": "paired_parquet",
            "path": str(folder / "pairs.parquet"),
            "x_column": "img",
            "y_column": "txt",
            "shards": 2,
            "eval_triples": 300,
        },
        "model": {"R": 1.0, "solver": "apg", "tol": 1e-6},
        "grid": {
            "regimes": ["scrl", "sscrl"],
            "losses": ["lse"],
            "m": [1, 4, 16, 64],
            "n": [20, 80],
            "seeds": [0, 1],
        },
        "eval": {
            "temperature": 1.0,
            "test_anchors": 200,
            "negative_pool": 200,
            "m_star": {"bootstrap": 30},
        },
    }
    path = write_config(folder, tree)
    # the local executor: paired_run takes the paired cells through Ray
    done = crl("run", str(path), "--out", str(folder / "runs"), "--quiet", "--executor", "local")
    assert done.returncode == 0, done.stderr[-3000:]
    cfg = config.load(path)
    run_dir = folder / "runs" / cfg.run_id()
    tables = {n: pl.read_parquet(run_dir / "tables" / f"{n}.parquet") for n in ("cells", "fits")}
    return {"config": cfg, "dir": run_dir, **tables}


def test_user_pairs_cells_hold_their_certified_bounds(pairs_run: dict) -> None:
    cells = pairs_run["cells"]
    assert cells.height == 2 * 4 * 2 * 2 and set(cells["family"]) == {"paired"}
    assert cells["solver_converged"].all() and not cells["test_loss_exact"].any()
    # 1050 train rows: scrl n = 80, m = 64 needs 5200 distinct rows, so it reuses (not certified)
    reused = cells.filter(pl.col("sampling") == "split_with_reuse")
    assert ("scrl", 64, 80) in set(reused.select(["regime", "m", "n"]).rows())
    assert not reused["certified"].any()
    assert cells.filter(pl.col("certified"))["gamma_lin_holds"].all()
    for row in cells.iter_rows(named=True):  # gamma_lin from the row's own columns
        complexity = 2 * math.sqrt(2 * row["loss_omega"]) * row["R"] * math.sqrt(row["S_D"])
        complexity /= row["n"]
        concentration = (
            3 * row["loss_range"] * math.sqrt(math.log(4 / row["bound_delta"]) / (2 * row["n"]))
        )
        assert row["gamma_lin"] == pytest.approx(complexity + concentration, rel=1e-12)
        assert row["loss_range"] == pytest.approx(4 * math.sqrt(2) * row["R"])
        assert 0.0 <= row["retrieval_auc"] <= 1.0
        assert row["auc_error"] == pytest.approx(1 - row["retrieval_auc"])
        # s = 0 scores every pair alike: its LSE terms are T log mean exp(0) = 0
        assert row["trivial_loss"] == 0.0
        assert row["learning_gain"] == pytest.approx(-row["test_loss"], rel=1e-12)
        assert row["learning_gain_rel"] == pytest.approx(row["learning_gain"] / row["loss_range"])
        assert row["learned"] == (row["learning_gain"] - row["learning_gain_ci"] > 0)
        # the test-set rung: disjoint test rows, each pair with m negatives of its own
        assert row["cert_test_set_n"] == min(200, 450 // (row["m"] + 1))
        assert row["loss_min"] < row["cert_test_set"] < row["loss_min"] + row["loss_range"]
        assert row["learning_certified_test_set"] == (row["cert_test_set"] < 0.0)
        assert row["cert_pb_data_reason"] == rungs.NOT_REQUESTED
        if row["regime"] == "sscrl":
            assert row["bound_delta"] == 0.025 and row["lse_inner_bound"] is None
            assert row["gap_outer"] + row["gap_inner"] == pytest.approx(row["gap"])
        else:
            assert row["best_bound"] == pytest.approx(row["gamma_lin"] + row["lse_inner_bound"])
    stars = pairs_run["fits"].filter(pl.col("kind") == "m_star")
    assert set(stars["shape"]) == {"auc_error"}
    page = (pairs_run["dir"] / "report" / "index.html").read_text()
    assert "gap_and_bound_vs_m.png" in page and "auc_error" in page


def test_user_pairs_with_a_missing_column_exit_2_naming_it(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"x": [[1.0, 2.0]] * 10, "z": [[0.0, 1.0]] * 10}), tmp_path / "p.pq")
    tree = {
        "name": "bad-pairs",
        "dataset": {"kind": "paired_parquet", "path": str(tmp_path / "p.pq"), "shards": 1},
        "model": {"solver": "apg"},
        "grid": {"regimes": ["scrl"], "losses": ["lse"], "m": [1], "n": [2]},
    }
    done = crl("run", str(write_config(tmp_path, tree)), "--out", str(tmp_path / "runs"))
    assert done.returncode == 2
    assert "dataset.y_column 'y'" in done.stderr and not (tmp_path / "runs").exists()


def _documented_paired_columns() -> set[str]:
    """The columns a paired cell may have (docs/tables.md, from crl/steps/columns.json): the
    provenance, the columns shared with unimodal cells and those only paired cells have (no
    dense cell's)."""
    from crl.steps import schema

    blocks = schema.cell_columns()
    return {*schema.tables()["provenance"], *blocks["unimodal"], *blocks["paired"]}


def test_every_paired_column_is_documented(paired_run: dict, pairs_run: dict) -> None:
    documented = _documented_paired_columns()
    for run in (paired_run, pairs_run):
        assert set(run["cells"].columns) <= documented, set(run["cells"].columns) - documented


def test_every_column_of_every_table_is_described(paired_run: dict) -> None:
    from tests.schema_check import assert_described

    assert {"cells", "summary", "fits"} <= set(assert_described(paired_run["dir"] / "tables"))
