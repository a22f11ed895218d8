"""Pipeline benchmark (not a timed test): prints numbers against references measured in this run.

1. Quickstart wall time from command to exit: cold (fresh Prefect home, fresh output), warm
   (Prefect home kept, fresh output: every cell recomputed) and cached (same output: every cell
   done; the median of three). Targets on 2 cores, Ray and Prefect start included: cold <= 90 s,
   cached <= 12 s.
2. Grid throughput: cells per minute of `crl run conf/bench_grid.yaml` (the flow's cells stage,
   from its wall seconds by stage, and end to end) with a private Ray of 1 and of 2 CPUs
   (CRL_RAY_NUM_CPUS), against one plain process running the same cells in a loop with 1 and
   2 torch threads. Prints the flow's time over the plain process's (target <= 1.15) and the
   1 -> 2 core speed-up of each, so a regression in orchestration shows.
3. One cell with n = 1e6, m = 16, 128 features in a fresh process: wall time and peak RSS, the
   features loaded first. Target <= 1.5 GB.

Usage: .venv/bin/python bench/pipeline.py [quickstart] [throughput] [rss]   (default: all three)
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
    return _crl_run(*args, env=env)[0]


def _crl_run(*args: str, env: dict | None = None) -> tuple[float, str]:
    """Wall seconds and stdout of one `crl` command in a fresh process."""
    started = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "crl", *args, "--quiet"],
        cwd=REPO,
        check=True,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
    )
    return time.perf_counter() - started, out.stdout


def _stage_seconds(stdout: str) -> dict[str, float]:
    """The `crl: wall seconds by stage: start 3.1 | ...` line of `crl run`."""
    line = next(x for x in stdout.splitlines() if "wall seconds by stage:" in x)
    parts = line.split("wall seconds by stage:", 1)[1].split(" | ")
    return {name: float(value) for name, value in (part.split() for part in parts)}


def quickstart(tmp: Path) -> dict:
    """Cold: a fresh Prefect home (its database migrated) and a fresh output folder. Warm: the
    Prefect home kept, a fresh output folder (every cell computed). Cached: the warm run again
    (every cell done: no Ray, the report kept), three times, the median. Each command runs
    without PREFECT_API_URL, so each starts Prefect's temporary server, as on a laptop."""
    home = {"CRL_PREFECT_HOME": str(tmp / "prefect-home")}
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"} | home
    cold = _crl_bare("run", "conf/quickstart.yaml", "--out", str(tmp / "cold"), env=env)
    warm = _crl_bare("run", "conf/quickstart.yaml", "--out", str(tmp / "warm"), env=env)
    cached = sorted(
        _crl_bare("run", "conf/quickstart.yaml", "--out", str(tmp / "warm"), env=env)
        for _ in range(3)
    )
    return {
        "quickstart_cold_s": cold,
        "quickstart_warm_s": warm,
        "quickstart_cached_s": cached[1],
        "quickstart_cached_max_s": cached[2],
    }


def _crl_bare(*args: str, env: dict) -> float:
    """Wall seconds of one `crl` command in a fresh process with exactly `env`."""
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "crl", *args, "--quiet"],
        cwd=REPO,
        check=True,
        env=env,
        capture_output=True,
        text=True,
    )
    return time.perf_counter() - started


BIG = [
    "dataset.train_size=1000000",
    "dataset.test_size=20000",
    "dataset.dim=128",
    "dataset.shards=8",
    "model.steps=50",
    "eval.rademacher_draws=8",
    "eval.test_anchors=4000",
]


def _part(name: str, *args: str) -> dict:
    """Run one part of this file in a fresh process (`python bench/pipeline.py --part NAME`)."""
    out = subprocess.run(
        [sys.executable, __file__, "--part", name, *args],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def plain_loop(run_dir: str, threads: str) -> dict:
    """The cells of conf/bench_grid.yaml in a plain loop in this process, `threads` torch
    threads."""
    import torch

    from crl.core import config
    from crl.steps.features import load_features, tau_of
    from crl.steps.unimodal.cell import grid_keys, run_cell

    torch.set_num_threads(int(threads))
    cfg = config.load("conf/bench_grid.yaml")
    started = time.perf_counter()
    features = load_features(Path(run_dir) / "features")
    tau = tau_of(cfg, features.train.labels)
    for key in grid_keys(cfg):
        run_cell(cfg, key, features, tau)
    return {"plain_s": time.perf_counter() - started, "cells": len(grid_keys(cfg))}


def throughput(tmp: Path) -> dict:
    out: dict = {}
    for cpus in (1, 2):
        wall, stdout = _crl_run(
            "run",
            "conf/bench_grid.yaml",
            "--out",
            str(tmp / f"grid-{cpus}"),
            env={"CRL_RAY_NUM_CPUS": str(cpus)},
        )
        out[f"flow_{cpus}cpu_total_s"] = wall
        out[f"flow_{cpus}cpu_cells_s"] = _stage_seconds(stdout)["cells"]
    run_dir = next((tmp / "grid-2").iterdir())
    for threads in (1, 2):
        plain = _part("plain", str(run_dir), str(threads))
        out[f"plain_{threads}thread_s"] = plain["plain_s"]
    cells = plain["cells"]
    per_min = {k.removesuffix("_s"): 60 * cells / v for k, v in out.items()}
    return {
        "grid_cells": cells,
        **out,
        **{f"cells_per_min_{k}": v for k, v in per_min.items()},
        "flow_over_plain_2cores": out["flow_2cpu_cells_s"] / out["plain_2thread_s"],
        "flow_total_over_plain_2cores": out["flow_2cpu_total_s"] / out["plain_2thread_s"],
        "speedup_1_to_2_flow_cells": out["flow_1cpu_cells_s"] / out["flow_2cpu_cells_s"],
        "speedup_1_to_2_plain": out["plain_1thread_s"] / out["plain_2thread_s"],
    }


def big_prepare(out: str) -> dict:
    """Materialise 1e6 + 2e4 rows of 128 features with the real stages, in this process."""
    from crl.core import config
    from crl.orchestration import stages
    from crl.orchestration.executor import LocalExecutor
    from crl.steps.runfolder import prepare

    cfg = config.load("conf/bench_grid.yaml", BIG)
    paths = prepare(cfg, out)
    executor = LocalExecutor()
    stages.materialize(cfg, paths, executor)
    stages.embed(cfg, paths, executor, progress=False)
    return {"run_dir": str(paths.root)}


def big_cell_alone(run_dir: str) -> dict:
    """One n = 1e6, m = 16 cell in this (fresh) process: wall time and peak RSS."""
    import resource

    from crl.core import config
    from crl.steps.features import load_features
    from crl.steps.unimodal.cell import CellKey, run_cell

    cfg = config.load("conf/bench_grid.yaml", BIG)
    features = load_features(Path(run_dir) / "features")
    after_load = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    started = time.perf_counter()
    row = run_cell(cfg, CellKey("scrl", "lse", 16, 1_000_000, 0), features, 0.125)
    return {
        "big_cell_s": time.perf_counter() - started,
        "big_cell_rss_after_load_gb": after_load,
        "big_cell_peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "big_cell_rademacher_rows": row["rademacher_rows"],
    }


def big_cell(tmp: Path) -> dict:
    run_dir = _part("big_prepare", str(tmp / "big"))["run_dir"]
    return _part("big_cell", run_dir)


PARTS = {"plain": plain_loop, "big_prepare": big_prepare, "big_cell": big_cell_alone}


def main() -> None:
    if sys.argv[1:2] == ["--part"]:
        print(json.dumps(PARTS[sys.argv[2]](*sys.argv[3:])))
        return
    results: dict = {"cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="crl-bench-") as tmp_name:
        tmp = Path(tmp_name)
        chosen = sys.argv[1:] or ["quickstart", "throughput", "rss"]
        parts = (("quickstart", quickstart), ("throughput", throughput), ("rss", big_cell))
        for name, part in parts:
            if name in chosen:
                results.update(part(tmp))
    for key, value in results.items():
        print(f"{key:32s} {value:.3f}" if isinstance(value, float) else f"{key:32s} {value}")
    print(
        "targets: quickstart cold <= 90 s, cached <= 12 s; flow_over_plain <= 1.15; "
        "big cell peak <= 1.5 GB"
    )


if __name__ == "__main__":
    main()
