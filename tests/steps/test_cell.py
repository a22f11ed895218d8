"""crl.steps.cell: the grid's keys, one cell end to end, and its file."""

from __future__ import annotations

import math
import re
from pathlib import Path

import polars as pl
import pytest

from crl.core.provenance import PROVENANCE_COLUMNS
from crl.kernels import bounds
from crl.steps import cell
from crl.steps.features import Features, load_features, tau_of
from tests.conftest import REPO
from tests.steps.helpers import config, materialise


def _documented_cell_columns() -> list[str]:
    """The column names of README's `tables/cells.parquet` table, in order."""
    text = (REPO / "README.md").read_text()
    section = text.split("### `tables/cells.parquet`", 1)[1].split("\n###", 1)[0]
    names: list[str] = []
    for line in section.splitlines():
        if line.startswith("| `"):
            first = line.split(" | ")[0]
            names += re.findall(r"`([A-Za-z0-9_]+)`", first)
    return names


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Features, float]:
    root = tmp_path_factory.mktemp("cell")
    cfg = config()
    features = load_features(materialise(cfg, root))
    return features, tau_of(cfg, features.train.labels)


def _without_wall(row: dict) -> dict:
    return {k: v for k, v in row.items() if k != "wall_seconds"}


def test_grid_keys_size_and_order() -> None:
    cfg = config()
    keys = cell.grid_keys(cfg)
    objectives = [
        ("one_negative", "hinge"),
        ("scrl", "hinge"),
        ("scrl", "lse"),
        ("sscrl", "hinge"),
        ("sscrl", "lse"),
    ]  # one_negative admits no lse
    assert len(keys) == len(objectives) * 2 * 2 * 2
    expected = [
        cell.CellKey(r, loss, m, n, s)
        for r, loss in objectives
        for m in (1, 3)
        for n in (10, 20)
        for s in (0, 1)
    ]
    assert keys == expected
    reordered = config(grid={"m": [3, 1], "seeds": [1]})
    assert [k.m for k in cell.grid_keys(reordered)[:4]] == [3, 3, 1, 1]  # config order


def test_cell_id_is_stable_and_distinct() -> None:
    cfg = config()
    keys = cell.grid_keys(cfg)
    ids = [k.cell_id(cfg.hash()) for k in keys]
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"[0-9a-f]{16}", i) for i in ids)
    assert ids == [k.cell_id(config().hash()) for k in cell.grid_keys(config())]
    other = config(eval={"temperature": 0.25})
    assert keys[0].cell_id(other.hash()) != ids[0]  # the config hash is part of the id
    assert cell.CellKey("scrl", "lse", 3, 10, 0).cell_id("abc") == cell.CellKey(
        "scrl", "lse", 3, 10, 0
    ).cell_id("abc")


def test_run_cell_row_has_the_documented_columns(run: tuple[Features, float]) -> None:
    features, tau = run
    cfg = config()
    key = cell.CellKey("one_negative", "hinge", 1, 20, 0)
    row = cell.run_cell(cfg, key, features, tau)
    documented = _documented_cell_columns()
    assert documented[:4] == list(PROVENANCE_COLUMNS)
    # provenance is added by the aggregate stage, `dataset` by run_and_write
    assert set(row) == set(documented) - set(PROVENANCE_COLUMNS) - {"dataset"}
    assert len(documented) == len(set(documented))


def test_run_cell_values(run: tuple[Features, float]) -> None:
    features, tau = run
    cfg = config()
    key = cell.CellKey("scrl", "hinge", 3, 20, 1)
    row = cell.run_cell(cfg, key, features, tau)
    assert row["cell_id"] == key.cell_id(cfg.hash())
    assert (row["regime"], row["loss"], row["m"], row["n"], row["seed"]) == (
        "scrl",
        "hinge",
        3,
        20,
        1,
    )
    assert (row["d"], row["p"], row["R"]) == (3, 6, 1.0)
    assert (row["temperature"], row["delta"]) == (0.5, 0.05)
    assert row["gap"] == row["test_loss"] - row["train_loss"]
    assert row["test_anchors"] == 20  # min(eval.test_anchors, 40 test rows)
    assert row["test_loss_ci"] > 0
    assert row["sign_draws"] == 4
    assert row["rademacher_rows"] == 2 * 20 + 20 * 3  # anchors, positives, own negatives
    assert row["rademacher"] > 0 and row["rademacher_ci"] >= 0
    assert row["tau"] == tau == pytest.approx(1 / 3)
    assert row["device"] == "cpu" and row["wall_seconds"] > 0
    assert row["mean_classifier_loss"] == "hinge"
    for metric in (
        "mean_classifier_accuracy",
        "top1_accuracy",
        "linear_probe_accuracy",
        "retrieval_auc",
    ):
        assert 0.0 <= row[metric] <= 1.0
    # no Gamma_M outside one-negative m = 1
    for column in (
        "bound_gamma",
        "bound_gamma_rademacher_term",
        "bound_gamma_concentration_term",
        "bound_holds",
        "bound_transfer",
        "transfer_holds",
    ):
        assert row[column] is None


def test_run_cell_shared_negatives_and_lse(run: tuple[Features, float]) -> None:
    features, tau = run
    cfg = config()
    row = cell.run_cell(cfg, cell.CellKey("sscrl", "lse", 3, 10, 0), features, tau)
    assert row["rademacher_rows"] == 2 * 10 + 3  # one shared set of 3 negatives
    assert row["mean_classifier_loss"] == "logistic"
    assert row["gap"] == row["test_loss"] - row["train_loss"]
    assert row["bound_gamma"] is None and row["transfer_holds"] is None
    # LSE is bounded by T log of the largest exp ratio: |score| <= R^2 = 1 so |loss| <= 2
    assert abs(row["train_loss"]) <= 2.0 and abs(row["test_loss"]) <= 2.0


@pytest.mark.parametrize("loss", ["hinge", "logistic"])
def test_run_cell_bounds_for_one_negative_m1(run: tuple[Features, float], loss: str) -> None:
    features, tau = run
    cfg = config(grid={"losses": ["hinge", "logistic"]})
    key = cell.CellKey("one_negative", loss, 1, 10, 0)
    row = cell.run_cell(cfg, key, features, tau)
    gamma = bounds.saunshi_gamma(row["rademacher"], 10, 1.0, 0.05, loss)
    assert row["bound_gamma"] == gamma.value
    assert row["bound_gamma_rademacher_term"] == gamma.rademacher_term
    assert row["bound_gamma_concentration_term"] == gamma.concentration_term
    assert row["bound_gamma_rademacher_term"] == pytest.approx(
        2 * math.sqrt(18) * bounds.L0 * 1.0 * row["rademacher"] / 10
    )
    assert row["bound_holds"] == (abs(row["gap"]) <= row["bound_gamma"])
    assert row["bound_transfer"] == pytest.approx(
        (row["train_loss"] + row["bound_gamma"] - tau) / (1 - tau)
    )
    assert row["transfer_holds"] == (row["mean_classifier_risk"] <= row["bound_transfer"])
    assert row["mean_classifier_loss"] == loss
    assert row["rademacher_rows"] == 3 * 10


def test_run_cell_one_negative_with_m_above_1_has_no_bound(run: tuple[Features, float]) -> None:
    features, tau = run
    row = cell.run_cell(config(), cell.CellKey("one_negative", "hinge", 3, 10, 0), features, tau)
    assert row["rademacher_rows"] == 2 * 10 + 10 * 3
    for column in ("bound_gamma", "bound_gamma_rademacher_term", "bound_holds", "bound_transfer"):
        assert row[column] is None


def test_run_cell_without_tau_has_no_transfer_bound(run: tuple[Features, float]) -> None:
    features, _ = run
    row = cell.run_cell(config(), cell.CellKey("one_negative", "hinge", 1, 10, 0), features, None)
    assert row["bound_gamma"] is not None
    assert row["bound_transfer"] is None and row["transfer_holds"] is None and row["tau"] is None


def test_run_cell_is_deterministic(run: tuple[Features, float]) -> None:
    features, tau = run
    key = cell.CellKey("one_negative", "hinge", 1, 20, 1)
    first = cell.run_cell(config(), key, features, tau)
    second = cell.run_cell(config(), key, features, tau)
    assert _without_wall(first) == _without_wall(second)
    other_seed = cell.run_cell(
        config(), cell.CellKey("one_negative", "hinge", 1, 20, 0), features, tau
    )
    assert other_seed["train_loss"] != first["train_loss"]


def test_run_and_write_writes_the_row(run: tuple[Features, float], tmp_path: Path) -> None:
    features, tau = run
    cfg = config()
    job = cell.CellJob(cfg, features, tau, tmp_path / "cells", tmp_path / ".staging")
    key = cell.CellKey("scrl", "lse", 1, 10, 1)
    row = cell.run_and_write(key, job)
    assert row["dataset"] == "synthetic"
    path = tmp_path / "cells" / f"{key.cell_id(cfg.hash())}.parquet"
    assert [p.name for p in (tmp_path / "cells").iterdir()] == [path.name]
    assert list((tmp_path / ".staging").iterdir()) == []
    back = pl.read_parquet(path)
    assert back.height == 1
    assert back.row(0, named=True) == row
    assert _without_wall(row) == _without_wall(
        {**cell.run_cell(cfg, key, features, tau), "dataset": "synthetic"}
    )
