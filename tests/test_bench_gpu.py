"""The prepared device benchmark runs at tiny sizes on the CPU, so it cannot rot between GPUs."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO


def test_gpu_bench_runs_small_on_cpu_and_agrees_with_its_references() -> None:
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "gpu.py"), "--small", "--device", "cpu"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    benches = {row["bench"] for row in rows}
    assert benches == {
        "nt_xent",
        "info_nce",
        "lse_risk",
        "dense_info_nce",
        "rademacher.linear",
        "random_conv embed",
        "pretrain densecl",
    }
    for row in rows:
        assert row["device"] == "cpu" and not row.get("note"), row
        if "max_abs_diff" in row:
            assert row["max_abs_diff"] <= 1e-5, row
        for key in ("crl_ms", "ref_ms", "images_per_s", "ratio_to_peak"):
            if key in row:
                assert row[key] > 0, row
