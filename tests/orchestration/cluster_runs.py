"""Runs submitted to the test clusters (tests.services.two_node_ray_cluster) while a node is
lost, and the uninterrupted local run their tables are compared with."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import yaml

from crl.core import config
from tests.conftest import crl
from tests.services import start

# hinge cells run to the APG cap (about 2 ms an iteration): long enough to lose a node mid-run
NODE_LOSS = {
    "name": "node-loss",
    "seed": 0,
    "dataset": {
        "kind": "synthetic",
        "classes": 3,
        "dim": 6,
        "train_size": 600,
        "test_size": 300,
        "shards": 2,
    },
    "model": {"d": 3, "solver": "apg", "tol": 1e-12, "max_iter": 1500},
    "grid": {
        "regimes": ["scrl"],
        "losses": ["hinge"],
        "m": [2, 4],
        "n": [100, 200],
        "seeds": [0, 1, 2],
    },
    "eval": {"test_anchors": 100, "negative_pool": 64, "probe_points": 100, "rademacher_draws": 8},
}


@dataclass(frozen=True)
class Submitted:
    """`crl submit --wait` running in the background: its process, config file, run folder and
    log."""

    proc: subprocess.Popen
    config: Path
    run_dir: Path
    log: Path


def submit_in_background(cluster: dict, tree: dict, folder: Path) -> Submitted:
    """Submit the config `tree` to `cluster` with --out `folder`/runs, following its logs."""
    path, runs = folder / f"{tree['name']}.yaml", folder / "runs"
    path.write_text(yaml.safe_dump(tree))
    run_dir = runs / config.load(path).run_id()  # load: with the inputs' fingerprints
    log = folder / "submit.log"
    args = ["submit", str(path), "--address", cluster["address"], "--out", str(runs), "--wait"]
    env = {**cluster["env"], "PYTHONUNBUFFERED": "1"}
    return Submitted(start([sys.executable, "-m", "crl", *args], env, log), path, run_dir, log)


def assert_equals_uninterrupted(run: Submitted, folder: Path, *tables: str) -> None:
    """The run's `tables` equal those of the same config run locally without a fault, but for
    the timing and device columns."""
    whole_runs = folder / "uninterrupted"
    again = crl("run", str(run.config), "--out", str(whole_runs), "--executor", "local", "--quiet")
    assert again.returncode == 0, again.stderr[-3000:]
    for name in tables:
        got = pl.read_parquet(run.run_dir / "tables" / f"{name}.parquet")
        whole = pl.read_parquet(whole_runs / run.run_dir.name / "tables" / f"{name}.parquet")
        timing = [c for c in got.columns if "second" in c or c == "device"]
        assert got.height == whole.height
        got, whole = got.drop(timing), whole.drop(timing)
        moved = [c for c in got.columns if not got[c].equals(whole[c])]
        assert not moved and got.columns == whole.columns, (
            name,
            moved,
            _first_moved(got, whole, moved),
        )


def _first_moved(got: pl.DataFrame, whole: pl.DataFrame, moved: list[str]) -> dict:
    """For a failure's message: the first differing row of each moved column, both values."""
    out = {}
    for column in moved[:8]:
        diff = [
            i for i, (a, b) in enumerate(zip(got[column], whole[column], strict=True)) if a != b
        ]
        if diff:
            out[column] = (diff[0], got[column][diff[0]], whole[column][diff[0]], len(diff))
    return out
