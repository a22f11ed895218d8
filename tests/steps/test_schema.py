"""The column descriptions: equal to the README's column reference, and written as Parquet
field metadata."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from crl.core.provenance import PROVENANCE_COLUMNS
from crl.steps import schema
from tests.conftest import REPO

SECTIONS = {
    "cells": ("`tables/cells.parquet` — one row", "`tables/cells.parquet` for"),
    "frontier": ("`tables/frontier.parquet`",),
    "tracking": ("`tables/tracking.parquet`",),
    "pretrain": ("`tables/pretrain.parquet`",),
}


def _readme_columns(table: str) -> set[str]:
    """The column names in the README's tables of `table`'s sections."""
    names: set[str] = set()
    for section in (REPO / "README.md").read_text().split("\n### ")[1:]:
        if not section.startswith(SECTIONS[table]):
            continue
        for line in section.splitlines():
            if line.startswith("| `"):
                first = re.split(r"(?<!\\)\|", line)[1]
                names |= {n for n in re.findall(r"`([A-Za-z0-9_]+)`", first)}
    return names


def test_the_readme_documents_exactly_the_described_columns() -> None:
    known = schema.tables()
    assert set(known["provenance"]) == set(PROVENANCE_COLUMNS)
    for table in SECTIONS:
        documented = _readme_columns(table) - set(PROVENANCE_COLUMNS)
        described = set(known[table])
        assert documented == described, (
            table,
            sorted(documented - described),
            sorted(described - documented),
        )


def test_summary_columns_are_described_by_their_cells_column() -> None:
    text = schema.description("summary", "gap_seed_ci")
    assert text.startswith("95% Student-t half-width over seeds of `gap`")
    assert schema.description("summary", "learned_fraction").startswith("share of seeds with")
    assert schema.description("summary", "test_loss_ci_mean").startswith("mean over seeds of")
    assert schema.description("summary", "regime") == schema.description("cells", "regime")
    assert schema.description("summary", "no_such_column_mean") is None
    assert schema.undocumented("cells", ["gap", "nope"]) == ["nope"]


def test_describe_writes_the_metadata_that_pyarrow_reads_back(tmp_path: Path) -> None:
    data = pa.table({"gap": [0.1], "undocumented_thing": [1], "run_id": ["r"]})
    path = tmp_path / "cells.parquet"
    pq.write_table(schema.describe("cells", data), path)
    fields = pq.read_schema(path)
    assert fields.field("gap").metadata[schema.DESCRIPTION].decode() == schema.description(
        "cells", "gap"
    )
    assert fields.field("run_id").metadata[schema.DESCRIPTION]
    assert not fields.field("undocumented_thing").metadata
    assert pq.read_table(path).to_pylist() == data.to_pylist()
