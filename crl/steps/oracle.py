"""The oracle cells of a grid (crl.steps.keys.oracle_keys) and what they give the grid's cells:
`oracle_loss`, `oracle_loss_ci` and `excess_risk`."""

from __future__ import annotations

import polars as pl

from crl.steps.tables import SETTINGS

ORACLE_JOIN = ["dataset", "loss", *SETTINGS]
# the m an oracle stands for: its own, except for LSE, whose target L(f) is the same for every m
_ORACLE_M = pl.when(pl.col("loss") == "lse").then(None).otherwise(pl.col("m")).alias("_oracle_m")


def split_oracle(frame: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """The grid's cells with `oracle_loss`, `oracle_loss_ci` and `excess_risk` = test_loss -
    oracle_loss joined from the oracle cell of their (dataset, loss, setting, and m except for
    LSE; crl.steps.keys.oracle_keys), and the oracle cells themselves (None without any)."""
    if "role" not in frame.columns:
        return frame, None
    is_oracle = pl.col("role").eq_missing("oracle")
    oracle, cells = frame.filter(is_oracle), frame.filter(~is_oracle).drop("role")
    on = [*(c for c in ORACLE_JOIN if c in cells.columns), "_oracle_m"]
    best = oracle.with_columns(_ORACLE_M).select(
        *on,
        pl.col("test_loss").alias("oracle_loss"),
        pl.col("test_loss_ci").alias("oracle_loss_ci"),
    )
    cells = cells.with_columns(_ORACLE_M).join(
        best, on=on, how="left", nulls_equal=True, maintain_order="left"
    )
    cells = cells.drop("_oracle_m").with_columns(
        (pl.col("test_loss") - pl.col("oracle_loss")).alias("excess_risk")
    )
    return cells, oracle.drop("role")
