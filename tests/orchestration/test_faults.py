"""Faults with real processes and real signals: a killed driver, a dying worker, a failing cell,
a lost node of a two-node cluster."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import polars as pl
import pytest

from crl.core import config
from tests.conftest import REPO, TIMING, crl, crl_killable
from tests.orchestration.cluster_runs import (
    NODE_LOSS,
    assert_equals_uninterrupted,
    submit_in_background,
)
from tests.orchestration.test_bound_grid import TINY, write_config
from tests.services import alive_nodes, kill_marked, stop, wait_for

pytestmark = pytest.mark.slow
INJECT = str(REPO / "tests" / "fault_injection")
# the cells with m = 3, n = 60 are the ones a fault hits
FAULT_GRID = dict(TINY, grid=dict(TINY["grid"], regimes=["scrl"], losses=["lse"], n=[20, 60]))


def _without_timing(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.select([c for c in frame.columns if not c.startswith(TIMING)])


def _tables(run_dir: Path) -> dict[str, pl.DataFrame]:
    return {
        n: _without_timing(pl.read_parquet(run_dir / "tables" / f"{n}.parquet"))
        for n in ("cells", "summary", "fits")
    }


def test_driver_sigkill_then_rerun(tmp_path: Path) -> None:
    path = write_config(tmp_path, TINY)
    cfg = config.load(path)
    # the reference and the rerun in this process (local executor): the killed run's cells,
    # computed on Ray, must equal them too
    local = ("--quiet", "--executor", "local")
    reference = crl("run", str(path), "--out", str(tmp_path / "reference"), *local)
    assert reference.returncode == 0, reference.stderr[-2000:]

    out = tmp_path / "killed"
    cells_dir = out / cfg.run_id() / "cells"
    driver = crl_killable("run", str(path), "--out", str(out), "--quiet")
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and len(list(cells_dir.glob("*.parquet"))) < 8:
        assert driver.poll() is None, "the run finished before it could be killed"
        time.sleep(0.05)
    os.killpg(driver.pid, signal.SIGKILL)  # the driver and everything it started
    driver.wait()
    done_before = len(list(cells_dir.glob("*.parquet")))
    assert 8 <= done_before < 40
    assert not (out / cfg.run_id() / "tables" / "cells.parquet").exists()
    assert all(p.suffix == ".parquet" for p in cells_dir.iterdir())  # nothing half-written

    rerun = crl("run", str(path), "--out", str(out), *local)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    # Ray's own processes may finish a cell they held when the driver died: that file is
    # complete (renamed into place) and identical to a recomputation, so it is simply reused.
    already = int(re.search(r"\((\d+) already done", rerun.stdout).group(1))
    assert done_before <= already < 40
    killed = _tables(out / cfg.run_id())
    expected = _tables(tmp_path / "reference" / cfg.run_id())
    for name in expected:
        assert killed[name].equals(expected[name]), name
    assert killed["cells"]["cell_id"].n_unique() == killed["cells"].height == 40


def _run_with_fault(tmp_path: Path, fault: str, *args: str) -> subprocess.CompletedProcess:
    """`crl run` of FAULT_GRID (8 cells) with one fault injected into the cells with m=3,
    n=60."""
    env = {"PYTHONPATH": INJECT, "CRL_FAULT": fault, "CRL_FAULT_DIR": str(tmp_path)}
    path = str(write_config(tmp_path, FAULT_GRID))
    return crl("run", path, "--out", str(tmp_path / "runs"), "--quiet", *args, env=env)


def test_worker_dies_inside_a_cell_is_retried(tmp_path: Path) -> None:
    out = _run_with_fault(tmp_path, "exit:3:60")
    assert out.returncode == 0, out.stderr[-3000:]
    assert len(list(tmp_path.glob("died-*"))) >= 1  # a worker really died
    cells = pl.read_parquet(next((tmp_path / "runs").iterdir()) / "tables" / "cells.parquet")
    assert cells.height == 8 and cells["cell_id"].n_unique() == 8


def test_failing_cell_recorded_others_complete(tmp_path: Path) -> None:
    out = _run_with_fault(tmp_path, "raise:3:60", "--executor", "local")  # no Ray needed
    assert out.returncode == 1
    assert "injected failure in cell m=3 n=60" in out.stderr and "failed" in out.stderr
    run_dir = next((tmp_path / "runs").iterdir())
    failures = pl.read_parquet(run_dir / "tables" / "failures.parquet")
    assert failures.height == 2 and set(failures["m"]) == {3} and set(failures["n"]) == {60}
    assert failures["error"].str.contains("RuntimeError").all()
    cells = pl.read_parquet(run_dir / "tables" / "cells.parquet")
    assert cells.height == 6 and not ((cells["m"] == 3) & (cells["n"] == 60)).any()


def test_losing_the_worker_node_mid_run(ray_cluster: dict, tmp_path: Path) -> None:
    """Kill the worker node (its raylet, workers and agents) while cells run on both nodes:
    Ray retries the lost cells on the head, the run completes, and its cells equal an
    uninterrupted run's."""
    wait_for("two nodes", lambda: alive_nodes(ray_cluster) == 2, 60)
    run = submit_in_background(ray_cluster, NODE_LOSS, tmp_path)
    try:
        done = lambda: len(list((run.run_dir / "cells").glob("*.parquet")))  # noqa: E731
        wait_for("cells on both nodes", lambda: done() >= 2, 300, run.proc)
        assert done() < 12, "the grid finished before the node could be lost"
        kill_marked(str(ray_cluster["temp"] / "worker"))
        wait_for("the worker node dead", lambda: alive_nodes(ray_cluster) == 1, 120)
        assert run.proc.wait(timeout=600) == 0, run.log.read_text()[-4000:]
    finally:
        stop(run.proc)
    text = run.log.read_text()
    assert "SUCCEEDED" in text and "crl: 12 cells" in text
    assert_equals_uninterrupted(run, tmp_path, "cells")
