"""Dense cells end to end: the real flow (Ray + Prefect + Parquet) on a tiny config that holds a
unimodal grid and a dense section side by side."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest
import torch

from crl.steps.dense.cell import DenseKey, dense_keys, draw_train
from crl.steps.dense.features import load_dense_features
from tests.orchestration.test_bound_grid import run_twice
from tests.steps.helpers import naive_dense_loss

pytestmark = pytest.mark.slow

TINY = {
    "name": "tiny-dense",
    "seed": 2,
    "dataset": {"kind": "synthetic", "classes": 3, "dim": 6, "train_size": 200, "test_size": 100},
    "model": {"d": 4, "R": 1.0, "steps": 10, "batch": 16},
    "grid": {"regimes": ["scrl"], "losses": ["lse"], "m": [2], "n": [30], "seeds": [0]},
    "eval": {"test_anchors": 50, "negative_pool": 40, "probe_points": 50, "rademacher_draws": 4},
    "dense": {
        "images": {
            "kind": "shapes",
            "size": 24,
            "classes": 3,
            "train_size": 24,
            "test_size": 16,
            "pool_size": 48,
        },
        "views": {"size": 16},
        "backbone": {"channels": 8, "layers": 2, "downsample": 1, "grid": 3},
        "head": {"d": 4, "tol": 1e-5, "max_iter": 200},
        "grid": {
            "regimes": ["scrl", "sscrl"],
            "negatives": ["own", "ext"],
            "lambdas": [1.0, 0.5],
            "m": [3],
            "n": [6, 12],
        },
        "eval": {"temperature": 1.0, "test_images": 16, "mi_images": 16},
    },
}


@pytest.fixture(scope="module")
def dense_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    run = run_twice(tmp_path_factory.mktemp("dense"), TINY)
    return run | {"cells": pl.read_parquet(run["dir"] / "tables" / "cells.parquet")}


def test_dense_and_unimodal_cells_share_the_tables(dense_run: dict) -> None:
    cells, cfg = dense_run["cells"], dense_run["config"]
    dense = cells.filter(pl.col("family") == "dense")
    keys = dense_keys(cfg)
    assert dense.height == len(keys) == 2 * 2 * 2 * 2
    assert cells.height == len(keys) + 1
    assert set(dense["dataset"]) == {"shapes"}
    assert set(zip(dense["regime"], dense["negatives"], dense["lam"], dense["n"], strict=True)) == {
        (k.regime, k.negatives, k.lam, k.n) for k in keys
    }
    assert dense["cell_id"].n_unique() == dense.height
    for col in ("run_id", "config_hash", "git_commit"):
        assert cells[col].n_unique() == 1
    assert "held in" in dense_run["first"].stdout


def test_every_dense_inequality_holds(dense_run: dict) -> None:
    dense = dense_run["cells"].filter(pl.col("family") == "dense")
    holds = [c for c in dense.columns if c.endswith("_holds")]
    assert "gamma_dense_S_holds" in holds and "queue_total_holds" in holds
    for row in dense.iter_rows(named=True):
        for col in holds:
            assert row[col] is not False, (col, row["cell_id"])
        assert row["mi_estimate"] <= math.log(1 + row["m"]) + 1e-12
        assert row["solver_converged"]


def test_train_loss_recomputed_from_the_stored_head(dense_run: dict) -> None:
    """The head column and the run's features give back each cell's train loss by loops."""
    cfg, run_dir = dense_run["config"], dense_run["dir"]
    backbone = cfg.dense.backbone
    features = load_dense_features(
        run_dir / "dense" / "features", backbone.grid**2, backbone.normalise
    )
    dense = dense_run["cells"].filter(pl.col("family") == "dense")
    T = cfg.dense.eval.temperature
    for row in dense.iter_rows(named=True):
        key = DenseKey(
            row["regime"],
            row["negatives"],
            row["correspondence"],
            row["lam"],
            row["m"],
            row["n"],
            row["seed"],
        )
        assert key.cell_id(cfg.hash()) == row["cell_id"]
        batch, _, _ = draw_train(cfg, key, features)
        W = torch.tensor(row["head"], dtype=torch.float64).reshape(row["d"], row["p"])
        loss = naive_dense_loss(W, batch.phi1, batch.phi2, batch.match, batch.neg, key.negatives, T)
        if key.lam < 1:
            zero = torch.zeros(key.n, 1, dtype=torch.int64)
            glob = naive_dense_loss(
                W, batch.pooled1, batch.pooled2, zero, batch.pooled_neg, "ext", T
            )
            loss = key.lam * loss + (1 - key.lam) * glob
        assert row["train_loss"] == pytest.approx(loss, rel=1e-9)


def test_summary_report_and_rerun(dense_run: dict) -> None:
    run_dir: Path = dense_run["dir"]
    summary = pl.read_parquet(run_dir / "tables" / "summary.parquet")
    dense = summary.filter(pl.col("family") == "dense")
    assert dense.height == 16 and (dense["seeds"] == 1).all()
    page = (run_dir / "report" / "index.html").read_text()
    assert "Dense contrastive cells" in page
    for name in ("dense_gap_vs_n.png", "dense_mi_vs_m.png"):
        assert (run_dir / "report" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    after = {p.name: p.read_bytes() for p in (run_dir / "tables").glob("*.parquet")}
    assert after.keys() == dense_run["before"].keys()
    assert "(17 already done, 0 computed" in dense_run["second"].stdout


def test_every_column_of_every_table_is_described(dense_run: dict) -> None:
    from tests.schema_check import assert_described

    assert "cells" in assert_described(dense_run["dir"] / "tables")
