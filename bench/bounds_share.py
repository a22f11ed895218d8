"""Share of a cell's wall time spent on its bound columns (not a timed test).

One LSE cell of the quickstart's model at n = 1e5 anchors and m = 64 negatives, scrl and sscrl,
in this process with the local executor; prints wall time, bound time and their ratio.
Usage: .venv/bin/python bench/bounds_share.py   (about a minute on 2 cores, ~5 GB peak)
"""

from __future__ import annotations

import resource
import tempfile

from crl.core import config
from crl.orchestration import stages
from crl.orchestration.executor import LocalExecutor
from crl.steps.features import load_features, tau_of
from crl.steps.keys import CellKey
from crl.steps.runfolder import prepare
from crl.steps.unimodal.cell import run_cell

OVERRIDES = ["dataset.train_size=100000", "eval.rademacher_draws=8", "eval.test_anchors=2000"]


def main() -> None:
    cfg = config.load("conf/quickstart.yaml", OVERRIDES)
    with tempfile.TemporaryDirectory(prefix="crl-bench-") as out:
        paths = prepare(cfg, out)
        executor = LocalExecutor()
        stages.materialize(cfg, paths, executor)
        stages.embed(cfg, paths, executor, progress=False)
        features = load_features(paths.features)
        tau = tau_of(cfg, features.train.labels)
        for regime in ("scrl", "sscrl"):
            row = run_cell(cfg, CellKey(regime, "lse", 64, 100_000, 0), features, tau)
            share = row["bounds_seconds"] / row["wall_seconds"]
            print(
                f"{regime:6s} n=1e5 m=64 lse: cell {row['wall_seconds']:6.2f} s, bounds "
                f"{row['bounds_seconds']:5.2f} s, share {share:.3f}; gamma_S {row['gamma_S']:.4f} "
                f"({row['gamma_S_route']}), gap {row['gap']:+.5f}"
            )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"peak RSS {peak:.2f} GB")


if __name__ == "__main__":
    main()
