"""Whether two runs computed the same cells: their tables/cells.parquet equal in every column but
timing, device and provenance (the run's commit, each cell's commit). The check that a change
meant to keep behaviour (a refactor) kept it: run the same config at both commits into two
folders, then compare.

Usage: .venv/bin/python bench/same_cells.py RUN_A RUN_B   (exit 0: the same; 1: what differs)
"""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl

from crl.core.provenance import PROVENANCE_COLUMNS

IGNORED = {*PROVENANCE_COLUMNS, "cell_git_commit", "device"}


def compared(columns: list[str]) -> list[str]:
    """The columns that say what a cell computed: not its time, device or provenance."""
    return [c for c in columns if c not in IGNORED and not c.endswith("seconds")]


def differences(a: pl.DataFrame, b: pl.DataFrame) -> list[str]:
    """One line per difference between two cells tables (none: the same cells)."""
    lines = []
    only = sorted(set(compared(a.columns)) ^ set(compared(b.columns)))
    if only:
        lines.append(f"columns in one table only: {only}")
    if sorted(a["cell_id"]) != sorted(b["cell_id"]):
        lines.append(f"cell ids differ: {a.height} cells against {b.height}")
        return lines
    a, b = a.sort("cell_id"), b.sort("cell_id")
    for column in compared([c for c in a.columns if c in b.columns]):
        if not a[column].equals(b[column]):
            moved = (a[column].ne_missing(b[column])).sum()
            lines.append(f"{column}: {moved} of {a.height} cells differ")
    return lines


def main(run_a: str, run_b: str) -> int:
    a, b = (pl.read_parquet(Path(r) / "tables" / "cells.parquet") for r in (run_a, run_b))
    lines = differences(a, b)
    for line in lines:
        print(line)
    if not lines:
        print(f"the same {a.height} cells in every compared column ({len(compared(a.columns))})")
    return 1 if lines else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip().splitlines()[-1])
    sys.exit(main(sys.argv[1], sys.argv[2]))
