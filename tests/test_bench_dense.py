"""bench/dense_loss.py runs at a tiny batch, so it cannot rot between benchmark runs."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

from tests.conftest import REPO


def test_dense_bench_prints_naive_and_crl_rows_that_agree() -> None:
    out = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "dense_loss.py"),
            "--batches",
            "1",
            "--seconds",
            "0",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        env=os.environ | {"OMP_NUM_THREADS": "1"},  # two threads on busy cores wait on each other
    )
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert [(row["B"], row["variant"]) for row in rows] == [(1, "naive"), (1, "crl")]
    for row in rows:
        assert not row["note"] and row["repeats"] >= 3, row
        assert row["seconds"] > 0 and math.isfinite(row["peak_mib"]), row
        assert row["loss_diff"] <= 1e-5 and row["grad_diff"] <= 1e-5, row
    assert rows[0]["time/naive"] == 1.0 and rows[0]["loss_diff"] == 0.0
