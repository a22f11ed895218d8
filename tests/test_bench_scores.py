"""bench/kernels_scores.py runs at a tiny size, so it cannot rot between benchmark runs."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

from tests.conftest import REPO

KERNELS = {
    "info_nce/own",
    "info_nce/shared",
    "lse_risk/own",
    "lse_risk/shared",
    "k_negative/hinge",
    "k_negative/logistic",
    "shared_negatives/info_nce",
    "shared_negatives/lse",
}


def test_scores_bench_prints_a_row_per_kernel_that_agrees_with_plain_torch() -> None:
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "kernels_scores.py"), "--sizes", "64x8", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env=os.environ | {"OMP_NUM_THREADS": "1"},  # two threads on busy cores wait on each other
    )
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert {row["kernel"] for row in rows} == KERNELS and len(rows) == len(KERNELS)
    for row in rows:
        assert (row["n"], row["m"]) == (64, 8) and not row["note"], row
        assert row["value_diff"] <= 1e-5 and row["grad_diff"] <= 1e-5, row
        assert row["crl_ms"] > 0 and row["plain_ms"] > 0 and row["repeats"] >= 3, row
        assert math.isfinite(row["crl_peak_mib"]) and math.isfinite(row["plain_peak_mib"]), row
