"""Pipeline benchmark (not a timed test): prints numbers against references measured in this run.

1. Quickstart wall time: cold (fresh Prefect home, fresh output) and warm (Prefect home kept,
   fresh output: every cell recomputed), plus a resume (same output: every cell skipped).
   Target: cold <= 90 s on 2 cores, Ray and Prefect start included.
2. Flow overhead: wall time of `crl run conf/bench_grid.yaml` over the wall time of the same
   cells computed in one plain process (all cores to torch). Target <= 1.15.
3. Peak RSS of one cell with n = 1e6, m = 16, 128 features, in a fresh process. Target <= 4 GB.

Usage: .venv/bin/python bench/pipeline.py [quickstart] [overhead] [rss]   (default: all three)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _crl(*args: str, env: dict | None = None) -> float:
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "crl", *args, "--quiet"],
        cwd=REPO,
        check=True,
        env={**os.environ, **(env or {})},
        capture_output=True,
    )
    return time.perf_counter() - started


def quickstart(tmp: Path) -> dict:
    home = {"CRL_PREFECT_HOME": str(tmp / "prefect-home")}
    cold = _crl("run", "conf/quickstart.yaml", "--out", str(tmp / "cold"), env=home)
    warm = _crl("run", "conf/quickstart.yaml", "--out", str(tmp / "warm"), env=home)
    resume = _crl("run", "conf/quickstart.yaml", "--out", str(tmp / "warm"), env=home)
    return {"quickstart_cold_s": cold, "quickstart_warm_s": warm, "quickstart_resume_s": resume}


PLAIN = """
import json, sys, time
import torch
from crl import config, pipeline
from crl.cells import grid_keys, run_cell
cfg = config.load("conf/bench_grid.yaml", [f"runtime.cell_cpus={torch.get_num_threads()}"])
paths = pipeline.RunPaths(__import__("pathlib").Path(sys.argv[1]))
started = time.perf_counter()
features = pipeline.load_features(paths)
tau = pipeline.tau_of(cfg, features.y_train)
for key in grid_keys(cfg):
    run_cell(cfg, key, features, tau)
print(json.dumps({"plain_s": time.perf_counter() - started, "cells": len(grid_keys(cfg))}))
"""


def overhead(tmp: Path) -> dict:
    flow_s = _crl("run", "conf/bench_grid.yaml", "--out", str(tmp / "grid"))
    run_dir = next((tmp / "grid").iterdir())
    out = subprocess.run(
        [sys.executable, "-c", PLAIN, str(run_dir)],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    )
    plain = json.loads(out.stdout.strip().splitlines()[-1])
    return {
        "grid_cells": plain["cells"],
        "grid_flow_s": flow_s,
        "grid_plain_s": plain["plain_s"],
        "flow_over_plain": flow_s / plain["plain_s"],
    }


BIG_CELL = """
import json, resource, sys, time
from pathlib import Path
from crl import config, pipeline
from crl.cells import CellKey, run_cell
cfg = config.load("conf/bench_grid.yaml", [
    "dataset.train_size=1000000", "dataset.test_size=20000", "dataset.dim=128",
    "dataset.shards=8", "model.steps=50", "eval.rademacher_draws=8", "eval.test_anchors=4000"])
paths = pipeline.RunPaths(Path(sys.argv[1]))
features = pipeline.load_features(paths)
after_load = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
started = time.perf_counter()
row = run_cell(cfg, CellKey("scrl", "lse", 16, 1_000_000, 0), features, 0.125)
print(json.dumps({"big_cell_s": time.perf_counter() - started,
                  "big_cell_rss_after_load_gb": after_load,
                  "big_cell_peak_rss_gb": resource.getrusage(0).ru_maxrss / 2**20,
                  "big_cell_rademacher_rows": row["rademacher_rows"]}))
"""


def big_cell(tmp: Path) -> dict:
    """Materialise 1e6 + 2e4 rows of 128 features with the real stages, then one cell alone."""
    prepare = f"""
from crl import config, pipeline, runtime
cfg = config.load("conf/bench_grid.yaml", [
    "dataset.train_size=1000000", "dataset.test_size=20000", "dataset.dim=128",
    "dataset.shards=8", "model.steps=50", "eval.rademacher_draws=8", "eval.test_anchors=4000"])
paths = pipeline.prepare(cfg, {str(tmp / "big")!r})
runtime.ray_init()
pipeline.materialize(cfg, paths)
pipeline.embed(cfg, paths)
print(paths.root)
"""
    out = subprocess.run(
        [sys.executable, "-c", prepare], cwd=REPO, check=True, capture_output=True, text=True
    )
    run_dir = out.stdout.strip().splitlines()[-1]
    out = subprocess.run(
        [sys.executable, "-c", BIG_CELL, run_dir],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    results: dict = {"cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="crl-bench-") as tmp_name:
        tmp = Path(tmp_name)
        chosen = sys.argv[1:] or ["quickstart", "overhead", "rss"]
        for name, part in (("quickstart", quickstart), ("overhead", overhead), ("rss", big_cell)):
            if name in chosen:
                results.update(part(tmp))
    for key, value in results.items():
        print(f"{key:32s} {value:.3f}" if isinstance(value, float) else f"{key:32s} {value}")
    print("targets: quickstart cold <= 90 s; flow_over_plain <= 1.15; big cell peak <= 4 GB")


if __name__ == "__main__":
    main()
