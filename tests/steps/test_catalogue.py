"""The run catalogue's pure parts: a folder of runs, unions, diffs, the previous run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import polars as pl
import pytest

from crl.steps import catalogue
from tests.steps.helpers import config


def _summary(gap: float) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "dataset": ["synthetic"] * 2,
            "regime": ["scrl"] * 2,
            "loss": ["hinge"] * 2,
            "m": [1, 4],
            "n": [20, 20],
            "gap_mean": [gap, 2 * gap],
            "best_bound_mean": [1.0, 1.5],
            "run_id": ["x", "x"],
        }
    )


def _run(root: Path, name: str, gap: float, age: float) -> Path:
    folder = root / name
    (folder / "tables").mkdir(parents=True)
    cfg = config()
    record = {"config": cfg.model_dump(mode="json"), "hash": cfg.hash()}
    (folder / "config.json").write_text(json.dumps(record))
    summary = folder / "tables" / "summary.parquet"
    _summary(gap).with_columns(pl.lit(name).alias("run_id")).write_parquet(summary)
    os.utime(summary, (age, age))
    return folder


def test_diff_pairs_the_grid_points_and_subtracts() -> None:
    moved = catalogue.diff(_summary(0.1), _summary(0.3))
    assert moved.height == 2
    assert moved["gap_change"].to_list() == pytest.approx([0.2, 0.4])
    assert moved["best_bound_change"].to_list() == [0.0, 0.0]
    assert "retrieval_auc_a" not in moved.columns  # neither run has it


def test_union_and_previous_run_and_changes(tmp_path: Path) -> None:
    old = _run(tmp_path, "tiny-aaaaaaaaaaaa", 0.1, 1_000_000)
    new = _run(tmp_path, "tiny-bbbbbbbbbbbb", 0.3, 2_000_000)
    _run(tmp_path, "other-cccccccccccc", 0.5, 3_000_000)
    assert catalogue.run_folders(tmp_path) == sorted(tmp_path.iterdir())
    assert catalogue.run_folders(old) == [old]
    union = catalogue.union(catalogue.run_folders(tmp_path))["summary"].collect()
    assert union.height == 6 and union["run_id"].n_unique() == 3
    assert catalogue.previous_run(new) == old
    assert catalogue.previous_run(old) == new  # the latest other run of the name
    lines = catalogue.change_lines(old, new)
    assert "2 grid points" in lines[0]
    assert any("`gap`: largest change 0.4" in line for line in lines)


def test_catalogue_reads_status_from_the_folder(tmp_path: Path) -> None:
    run = _run(tmp_path, "tiny-aaaaaaaaaaaa", 0.1, 1_000_000)
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text("{not json")
    rows = {r["run_id"]: r for r in catalogue.catalogue(tmp_path).iter_rows(named=True)}
    assert rows["broken"]["status"] == "unreadable"
    entry = rows[run.name]
    assert entry["kind"] == "grid" and entry["status"] == "partial"  # no cells computed
    assert entry["cells_done"] == 0 and entry["cells_total"] > 0


def test_a_deployments_previous_run_is_found_in_any_folder(tmp_path: Path) -> None:
    """A deployment's runs are compared with its own previous run: in the same folder when
    nothing changed, in another when an input did; runs by hand and other deployments are not
    its previous runs."""
    first = _run(tmp_path, "tiny-aaaaaaaaaaaa", 0.1, 1_000_000)
    second = _run(tmp_path, "tiny-bbbbbbbbbbbb", 0.3, 2_000_000)
    staging = tmp_path / ".staging"
    assert catalogue.previous_flow_run(tmp_path, "dep-1", "run-1") is None
    catalogue.record_flow_run(first, "run-1", "dep-1", "bound_grid/nightly", staging)
    catalogue.record_flow_run(first, "run-2", None, None, staging)  # by hand
    catalogue.record_flow_run(second, "run-3", "dep-2", "bound_grid/other", staging)
    folder, record = catalogue.previous_flow_run(tmp_path, "dep-1", "run-4")
    assert (folder, record["flow_run_id"]) == (first, "run-1")
    catalogue.record_flow_run(first, "run-4", "dep-1", "bound_grid/nightly", staging)
    folder, record = catalogue.previous_flow_run(tmp_path, "dep-1", "run-5")
    assert (folder, record["flow_run_id"]) == (first, "run-4")  # the latest of the deployment
    catalogue.record_flow_run(second, "run-5", "dep-1", "bound_grid/nightly", staging)
    folder, record = catalogue.previous_flow_run(tmp_path, "dep-1", "run-6")
    assert (folder, record["flow_run_id"]) == (second, "run-5")  # moved to a new folder
    assert [r["flow_run_id"] for r in catalogue.flow_runs(first)] == ["run-1", "run-2", "run-4"]
    (second / catalogue.FLOW_RUNS).write_text("{damaged")
    folder, record = catalogue.previous_flow_run(tmp_path, "dep-1", "run-6")
    assert record["flow_run_id"] == "run-4"  # an unreadable record is skipped, not fatal


def test_the_artifact_names_the_deployments_previous_run(tmp_path: Path) -> None:
    from crl.orchestration.artifacts import FlowRun, change_section

    first = _run(tmp_path, "tiny-aaaaaaaaaaaa", 0.1, 1_000_000)
    second = _run(tmp_path, "tiny-bbbbbbbbbbbb", 0.3, 2_000_000)
    result = {"cells_skipped": 4, "cells_computed": 0}
    nightly = FlowRun("run-2", "dep-1", "bound_grid/nightly")
    assert change_section(first, result, nightly) == [
        f"- no earlier run of deployment `bound_grid/nightly` under `{tmp_path}`"
    ]
    catalogue.record_flow_run(first, "run-1", "dep-1", "bound_grid/nightly", tmp_path / ".st")
    same = change_section(first, result, nightly)
    assert "flow run `run-1`" in same[0] and "in this run folder" in same[0]
    assert same[1] == "  - 4 cells reused, 0 computed"
    moved = change_section(second, result, nightly)
    assert f"in `{first.name}`" in moved[0]
    assert any("`gap`: largest change 0.4" in line for line in moved)
    by_hand = change_section(second, result, FlowRun("run-3", None, None))
    assert "2 grid points" in by_hand[0]  # the latest other run of the config name
