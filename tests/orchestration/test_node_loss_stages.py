"""Losing nodes of a two-node cluster on 127.0.0.1 (the cells case is in test_faults.py).

- The node that does the work, in pretraining and then in embedding: the head has no CPUs, so
  every training worker and embedding actor runs on the worker node. The node is killed
  (raylet, workers, agents) mid-pretraining; a replacement joins, as an autoscaler's would; it
  is killed in turn mid-embedding, and a third joins. The run completes, and its tables equal an
  uninterrupted run's.
- The head, mid-cells: the run fails; rerunning the command (here locally) completes it."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import polars as pl
import pytest
import yaml

from crl.core import config
from tests.conftest import crl
from tests.orchestration.test_faults import NODE_LOSS
from tests.services import alive_nodes, kill_marked, start, stop, wait_for

pytestmark = pytest.mark.slow

# digits through a small CNN pretrained for 300 epochs, embedded at 13 checkpoints over 8 shards
# a split: long enough in both stages to lose a node in each
STAGES = {
    "name": "stage-loss",
    "seed": 0,
    "dataset": {"kind": "digits", "positives": "augmented", "test_fraction": 0.3, "shards": 8},
    "encoder": {
        "kind": "small_cnn",
        "out_dim": 16,
        "pretrain": {
            "objective": "nt_xent",
            "epochs": 300,
            "checkpoints": list(range(0, 301, 25)),
            "fraction": 0.18,
            "batch": 64,
        },
    },
    "model": {"d": 4, "R": 2.0, "steps": 20, "batch": 32},
    "grid": {"regimes": ["scrl"], "losses": ["lse"], "m": [4], "n": [64], "seeds": [0]},
    "eval": {"test_anchors": 100, "negative_pool": 64, "probe_points": 100, "rademacher_draws": 8},
}


def _count(folder: Path, pattern: str) -> int:
    return len(list(folder.glob(pattern)))


def _lose_the_worker(cluster: dict, name: str, replacement: str) -> None:
    kill_marked(str(cluster["temp"] / name))
    wait_for(f"node {name} dead", lambda: alive_nodes(cluster) == 1, 120)
    cluster["add_worker"](replacement)


def test_losing_the_working_node_in_pretraining_and_in_embedding(
    replaceable_ray_cluster: dict, tmp_path: Path
) -> None:
    cluster = replaceable_ray_cluster
    wait_for("two nodes", lambda: alive_nodes(cluster) == 2, 60)
    path, runs = tmp_path / "stages.yaml", tmp_path / "runs"
    path.write_text(yaml.safe_dump(STAGES))
    run_dir = runs / config.load(path).run_id()  # with the digits version in `inputs`
    log = tmp_path / "submit.log"
    args = ["submit", str(path), "--address", cluster["address"], "--out", str(runs), "--wait"]
    submitted = start([sys.executable, "-m", "crl", *args], cluster["env"], log)
    try:
        epochs = lambda: _count(run_dir / "pretrain", "epochs/*.parquet")  # noqa: E731
        wait_for("pretraining under way", lambda: epochs() >= 10, 300, submitted)
        assert epochs() < 300, "the pretraining finished before the node could be lost"
        _lose_the_worker(cluster, "worker", "second")
        features = lambda: _count(run_dir, "features/epoch=*/split=*/*.parquet")  # noqa: E731
        wait_for("embedding under way", lambda: features() >= 2, 400, submitted)
        assert features() < 13 * 16, "the embedding finished before the node could be lost"
        _lose_the_worker(cluster, "second", "third")
        assert submitted.wait(timeout=600) == 0, log.read_text()[-4000:]
    finally:
        stop(submitted)
    text = log.read_text()
    assert "SUCCEEDED" in text and "crl: 13 cells" in text, text[-3000:]

    whole_runs = tmp_path / "uninterrupted"
    again = crl("run", str(path), "--out", str(whole_runs), "--executor", "local", "--quiet")
    assert again.returncode == 0, again.stderr[-3000:]
    for name in ("cells", "pretrain"):
        lost = pl.read_parquet(run_dir / "tables" / f"{name}.parquet")
        whole = pl.read_parquet(whole_runs / run_dir.name / "tables" / f"{name}.parquet")
        timing = [c for c in lost.columns if "second" in c or c == "device"]
        assert lost.height == whole.height
        assert lost.drop(timing).equals(whole.drop(timing)), name


def test_losing_the_head_fails_the_run_and_a_rerun_completes_it(
    ray_cluster: dict, tmp_path: Path
) -> None:
    """Kill the head (GCS, its raylet, the job's driver) while cells run: the run fails; the
    same command run locally reuses every finished cell and ends with an uninterrupted run's
    tables."""
    wait_for("two nodes", lambda: alive_nodes(ray_cluster) == 2, 60)
    path, runs = tmp_path / "head-loss.yaml", tmp_path / "runs"
    path.write_text(yaml.safe_dump(NODE_LOSS))
    run_dir = runs / config.load(path).run_id()
    log = tmp_path / "submit.log"
    args = ["submit", str(path), "--address", ray_cluster["address"], "--out", str(runs), "--wait"]
    submitted = start([sys.executable, "-m", "crl", *args], ray_cluster["env"], log)
    try:
        done = lambda: _count(run_dir, "cells/*.parquet")  # noqa: E731
        wait_for("cells under way", lambda: done() >= 2, 300, submitted)
        assert done() < 12, "the grid finished before the head could be lost"
        kill_marked(str(ray_cluster["temp"] / "head"))
        assert submitted.wait(timeout=300) == 1, log.read_text()[-3000:]
    finally:
        stop(submitted)
    assert "crl: error: lost the job API at" in log.read_text()  # one line, no traceback
    assert not (run_dir / "tables" / "cells.parquet").exists()
    before = done()

    local = ("--executor", "local", "--quiet")
    rerun = crl("run", str(path), "--out", str(runs), *local)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert int(re.search(r"\((\d+) already done", rerun.stdout).group(1)) >= before
    whole_runs = tmp_path / "uninterrupted"
    again = crl("run", str(path), "--out", str(whole_runs), *local)
    assert again.returncode == 0, again.stderr[-3000:]
    resumed = pl.read_parquet(run_dir / "tables" / "cells.parquet")
    whole = pl.read_parquet(whole_runs / run_dir.name / "tables" / "cells.parquet")
    timing = [c for c in resumed.columns if c.endswith("seconds") or c == "device"]
    assert resumed.height == whole.height == 12
    assert resumed.drop(timing).equals(whole.drop(timing))
