"""Hand-made cell rows for the tables and report tests: known gaps, metrics and seeds.

Group A  synthetic/scrl/hinge, m in {1, 4, 16} x n in {50, 200}, seeds 0-2: mean gap exactly
         0.1 + 0.5/m + 2/sqrt(n); retrieval_auc saturates at m* = 4 (n = 50), 16 (n = 200).
Group B  synthetic/one_negative/hinge, m = 1: n = 50 with seeds 0, 1 (Gamma_M present, one
         holds), n = 200 with seed 0 only (no seed spread: std and seed_ci are null).
Group C  synthetic/sscrl/lse, m in {1, 4}, n = 50, seeds 0, 1: two points, m* = 1.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

PROVENANCE = {
    "run_id": "tiny-0123456789ab",
    "config_hash": "0123456789ab",
    "crl_version": "0.1.0",
    "git_commit": "abcdef0",
}
AUC_A = {(1, 50): 0.5, (4, 50): 0.9, (16, 50): 0.9, (1, 200): 0.5, (4, 200): 0.8, (16, 200): 0.9}
AUC_C = {1: 0.7, 4: 0.6}


def gap_a(m: int, n: int) -> float:
    return 0.1 + 0.5 / m + 2.0 / math.sqrt(n)


def _row(regime: str, loss: str, m: int, n: int, seed: int, gap: float, auc: float) -> dict:
    rng = np.random.default_rng([m, n, seed, len(regime), len(loss)])
    train = 1.0 + 0.1 * seed
    one_negative = regime == "one_negative"
    bound = 0.5 + 0.1 * seed if one_negative else None
    return {
        "cell_id": f"{regime[:2]}{loss[:2]}{m:02d}{n:03d}{seed}",
        "dataset": "synthetic",
        "regime": regime,
        "loss": loss,
        "m": m,
        "n": n,
        "seed": seed,
        "d": 3,
        "p": 6,
        "R": 1.0,
        "temperature": 0.5,
        "delta": 0.05,
        "train_loss": train,
        "test_loss": train + gap,
        "test_loss_ci": 0.01 * (seed + 1),
        "test_anchors": 20,
        "gap": gap,
        "rademacher": float(5.0 + seed + m),
        "rademacher_ci": 0.5 * (seed + 1),
        "sign_draws": 4,
        "rademacher_rows": 2 * n + n * m,
        "bound_gamma": bound,
        "bound_gamma_rademacher_term": 0.2 if one_negative else None,
        "bound_gamma_concentration_term": bound - 0.2 if one_negative else None,
        "bound_holds": (abs(gap) <= bound) if one_negative else None,
        "bound_transfer": 1.5 + seed if one_negative else None,
        "transfer_holds": (seed == 0) if one_negative else None,
        "mean_classifier_loss": loss if loss in ("hinge", "logistic") else "logistic",
        "mean_classifier_risk": float(rng.uniform(0.2, 0.8)),
        "mean_classifier_accuracy": float(rng.uniform(0.5, 1.0)),
        "top1_accuracy": float(rng.uniform(0.3, 1.0)),
        "linear_probe_accuracy": 0.75,
        "retrieval_auc": auc,
        "tau": 1 / 3,
        "wall_seconds": 0.1 * (seed + 1) + 0.01 * m,
        "device": "cpu",
    }


def cell_rows() -> list[dict]:
    rows = []
    for m in (1, 4, 16):
        for n in (50, 200):
            for seed, offset in ((0, -0.01), (1, 0.0), (2, 0.01)):
                rows.append(_row("scrl", "hinge", m, n, seed, gap_a(m, n) + offset, AUC_A[m, n]))
    rows.append(_row("one_negative", "hinge", 1, 50, 0, 0.3, 0.6))
    rows.append(_row("one_negative", "hinge", 1, 50, 1, 0.9, 0.62))
    rows.append(_row("one_negative", "hinge", 1, 200, 0, 0.2, 0.7))
    for m in (1, 4):
        for seed in (0, 1):
            rows.append(_row("sscrl", "lse", m, 50, seed, 0.05 * m + 0.01 * seed, AUC_C[m]))
    return rows


def write_cells(folder: Path, rows: list[dict]) -> list[Path]:
    """One Parquet file per row, as run_and_write leaves them (all-null columns stay null)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for row in rows:
        path = folder / f"{row['cell_id']}.parquet"
        pq.write_table(pa.Table.from_pylist([row]), path)
        paths.append(path)
    return paths
