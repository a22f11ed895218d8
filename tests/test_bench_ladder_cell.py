"""bench/ladder_cell.py: one small cell with and without the ladder, in child processes, prints
both walls, their ratio, the ladder's parts and the rungs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.slow
def test_the_ladder_bench_runs_a_small_cell_both_ways() -> None:
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "ladder_cell.py"), "--n", "300"],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    header = next(line for line in lines if line.startswith("n "))
    for column in ("without_s", "with_s", "ratio", "peak_mib", "gibbs_draws_s", "fit_head_s"):
        assert column in header
    row = lines[lines.index(header) + 1].split()
    assert row[0] == "300" and float(row[3]) > 1.0  # the ladder costs something
    assert any(line.startswith("n ") and "cert_pb_data" in line for line in lines)
