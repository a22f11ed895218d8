"""bench/same_cells.py: two cells tables are the same when they differ only in timing, device
and provenance; any other column that moved is named."""

from __future__ import annotations

import polars as pl

from bench.same_cells import differences

A = pl.DataFrame(
    {
        "cell_id": ["b", "a"],
        "git_commit": ["1", "1"],
        "cell_git_commit": ["1", "1"],
        "wall_seconds": [0.5, 0.7],
        "device": ["cpu", "cpu"],
        "gap": [0.1, 0.2],
        "gamma_S": [1.0, None],
    }
)


def test_timing_device_and_provenance_do_not_count_and_row_order_does_not_matter() -> None:
    b = A.reverse().with_columns(
        pl.lit("2").alias("git_commit"),
        pl.lit("2").alias("cell_git_commit"),
        pl.col("wall_seconds") * 3,
        pl.lit("cuda").alias("device"),
    )
    assert differences(A, b) == []


def test_a_moved_column_a_missing_column_and_other_cells_are_named() -> None:
    assert differences(A, A.with_columns(pl.col("gap") + 1e-12)) == ["gap: 2 of 2 cells differ"]
    filled = A.with_columns(pl.col("gamma_S").fill_null(2.0))  # a null that became a value
    assert differences(A, filled) == ["gamma_S: 1 of 2 cells differ"]
    assert differences(A, A.drop("gamma_S")) == ["columns in one table only: ['gamma_S']"]
    other = A.with_columns(pl.Series("cell_id", ["b", "c"]))
    assert differences(A, other) == ["cell ids differ: 2 cells against 2"]
