"""Losing nodes of a two-node cluster on 127.0.0.1 (the cells case is in test_faults.py).

- The node that does the work, in pretraining and then in embedding: the head has no CPUs, so
  every training worker and embedding actor runs on the worker node. The node is killed
  (raylet, workers, agents) mid-pretraining; a replacement joins, as an autoscaler's would; it
  is killed in turn mid-embedding, and a third joins. The run completes, and its tables equal an
  uninterrupted run's.
- The head, mid-cells: the run fails; rerunning the command (here locally) completes it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import crl
from tests.orchestration.cluster_runs import (
    NODE_LOSS,
    assert_equals_uninterrupted,
    submit_in_background,
)
from tests.services import alive_nodes, kill_marked, stop, wait_for

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
    run = submit_in_background(cluster, STAGES, tmp_path)
    try:
        epochs = lambda: _count(run.run_dir / "pretrain", "epochs/*.parquet")  # noqa: E731
        wait_for("pretraining under way", lambda: epochs() >= 10, 300, run.proc)
        assert epochs() < 300, "the pretraining finished before the node could be lost"
        _lose_the_worker(cluster, "worker", "second")
        features = lambda: _count(run.run_dir, "features/epoch=*/split=*/*.parquet")  # noqa: E731
        wait_for("embedding under way", lambda: features() >= 2, 400, run.proc)
        assert features() < 13 * 16, "the embedding finished before the node could be lost"
        _lose_the_worker(cluster, "second", "third")
        assert run.proc.wait(timeout=600) == 0, run.log.read_text()[-4000:]
    finally:
        stop(run.proc)
    text = run.log.read_text()
    assert "SUCCEEDED" in text and "crl: 13 cells" in text, text[-3000:]
    assert_equals_uninterrupted(run, tmp_path, "cells", "pretrain")


def test_losing_the_head_fails_the_run_and_a_rerun_completes_it(
    ray_cluster: dict, tmp_path: Path
) -> None:
    """Kill the head (GCS, its raylet, the job's driver) while cells run: the run fails; the
    same command run locally reuses every finished cell and ends with an uninterrupted run's
    tables."""
    wait_for("two nodes", lambda: alive_nodes(ray_cluster) == 2, 60)
    run = submit_in_background(ray_cluster, NODE_LOSS, tmp_path)
    try:
        done = lambda: _count(run.run_dir, "cells/*.parquet")  # noqa: E731
        wait_for("cells under way", lambda: done() >= 2, 300, run.proc)
        assert done() < 12, "the grid finished before the head could be lost"
        kill_marked(str(ray_cluster["temp"] / "head"))
        assert run.proc.wait(timeout=300) == 1, run.log.read_text()[-3000:]
    finally:
        stop(run.proc)
    assert "crl: error: lost the job API at" in run.log.read_text()  # one line, no traceback
    assert not (run.run_dir / "tables" / "cells.parquet").exists()
    before = done()

    runs = run.run_dir.parent
    rerun = crl("run", str(run.config), "--out", str(runs), "--executor", "local", "--quiet")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert int(re.search(r"\((\d+) already done", rerun.stdout).group(1)) >= before
    assert_equals_uninterrupted(run, tmp_path, "cells")
