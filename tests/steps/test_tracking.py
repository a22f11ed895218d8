"""tables/tracking.parquet: rank statistics of certificates against gaps over the grid."""

from __future__ import annotations

import itertools

import numpy as np
import polars as pl
import pytest

from crl.core.provenance import PROVENANCE_COLUMNS
from crl.steps import tracking

PROV = dict.fromkeys(PROVENANCE_COLUMNS, "x")


def _cells(seeds: int, noise: float = 0.0) -> pl.DataFrame:
    """Gaps falling in n and rising in m; gamma_S tracks the gap exactly, best_bound against it,
    gamma_m only along n (flat in m)."""
    rng = np.random.default_rng(0)
    rows = []
    for regime, m, n, seed in itertools.product(
        ["scrl", "sscrl"], [1, 4, 16], [50, 200, 800], range(seeds)
    ):
        gap = 0.1 * m / np.sqrt(n) + (0.05 if regime == "sscrl" else 0.0)
        gap += noise * rng.standard_normal()
        rows.append(
            {
                **PROV,
                "family": "unimodal",
                "dataset": "synthetic",
                "loss": "lse",
                "regime": regime,
                "m": m,
                "n": n,
                "seed": seed,
                "R": 1.0,
                "gap": gap,
                "train_loss": 0.5,
                "test_loss_ci": 0.001,
                "gamma_S": 2 * gap,
                "best_bound": -gap,
                "gamma_m": 1 / np.sqrt(n),
            }
        )
    return pl.from_dicts(rows)


def _value(table: pl.DataFrame, cert: str, statistic: str, axis: str) -> dict:
    return table.filter(
        (pl.col("certificate") == cert)
        & (pl.col("statistic") == statistic)
        & (pl.col("axis") == axis)
    ).row(0, named=True)


def test_a_certificate_equal_to_the_gap_tracks_it_perfectly() -> None:
    table = tracking.tracking(_cells(seeds=3), seed=0, replicates=50)
    assert table.columns == list(tracking.SCHEMA)
    assert _value(table, "gamma_S", "kendall_tau", "all")["value"] == pytest.approx(1.0)
    assert _value(table, "gamma_S", "psi", "all axes")["value"] == pytest.approx(1.0)
    assert _value(table, "best_bound", "kendall_tau", "all")["value"] == pytest.approx(-1.0)
    assert _value(table, "gamma_S", "sign_error_mean", "m")["value"] == 0.0
    assert _value(table, "best_bound", "sign_error_worst", "n")["value"] == 1.0
    # gamma_m is flat in m: no pair along m is ordered, so its tau along m is undefined (null)
    assert _value(table, "gamma_m", "granulated_tau", "m")["value"] is None
    assert _value(table, "gamma_m", "granulated_tau", "n")["value"] == pytest.approx(1.0)
    axes = set(table["axis"]) - {"all", "all axes"}
    assert axes == {"regime", "m", "n"}  # R does not vary
    row = _value(table, "gamma_S", "kendall_tau", "all")
    assert (row["points"], row["seeds"], row["replicates"]) == (18, 3, 50)
    assert row["lo"] == pytest.approx(1.0) and row["hi"] == pytest.approx(1.0)


def test_intervals_need_three_seeds() -> None:
    two = tracking.tracking(_cells(seeds=2, noise=0.01), seed=0, replicates=50)
    assert two["lo"].null_count() == two.height and set(two["replicates"]) == {0}
    three = tracking.tracking(_cells(seeds=3, noise=0.01), seed=0, replicates=50)
    tau = _value(three, "gamma_m", "kendall_tau", "all")
    assert tau["replicates"] == 50 and tau["lo"] <= tau["hi"]


def test_the_statistics_are_reproducible_from_the_seed() -> None:
    a = tracking.tracking(_cells(seeds=3, noise=0.02), seed=7, replicates=30)
    b = tracking.tracking(_cells(seeds=3, noise=0.02), seed=7, replicates=30)
    assert a.equals(b, null_equal=True)


def test_certificates_on_the_loss_are_read_as_bounds_on_the_gap() -> None:
    """cert_* - train_loss: a PAC-Bayes certificate that is the held-out loss plus a constant
    tracks the gap perfectly; one that is flat does not."""
    cells = _cells(seeds=3).with_columns(
        (pl.col("train_loss") + pl.col("gap") + 0.3).alias("cert_pb_data"),
        pl.lit(2.0).alias("cert_pb_free"),
        (pl.col("gap") * 0.5).alias("uniform_deviation_est"),
    )
    table = tracking.tracking(cells, seed=0, replicates=20)
    assert _value(table, "cert_pb_data_gap", "kendall_tau", "all")["value"] == pytest.approx(1.0)
    assert _value(table, "uniform_deviation_est", "psi", "all axes")["value"] == pytest.approx(1.0)
    flat = table.filter(pl.col("certificate") == "cert_pb_free_gap")
    assert flat.filter(pl.col("statistic") == "kendall_tau")["value"].is_null().all() or (
        abs(_value(table, "cert_pb_free_gap", "kendall_tau", "all")["value"]) < 1e-12
    )
