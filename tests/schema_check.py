"""Shared by the end-to-end tests: every column of a run's tables carries its description."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from crl.steps import schema


def assert_described(tables: Path) -> list[str]:
    """Every field of every table under `tables` has a description in its metadata; returns the
    tables checked."""
    checked = []
    for path in sorted(tables.glob("*.parquet")):
        fields = pq.read_schema(path)
        bare = [f.name for f in fields if not (f.metadata or {}).get(schema.DESCRIPTION)]
        assert not bare, f"{path.name}: undocumented columns {bare}"
        checked.append(path.stem)
    return checked
