"""The column descriptions: written as Parquet field metadata, and rendered as the column
reference of docs/tables.md (whose staleness tests/test_docs.py checks)."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from crl.core.provenance import PROVENANCE_COLUMNS
from crl.steps import schema


def _reference_columns(markdown: str) -> dict[str, list[str]]:
    """{table: the column names in the first cells of its `| column | meaning |` tables, in
    order} of the generated reference (headings `tables/<name>.parquet`; "provenance" first)."""
    found: dict[str, list[str]] = {}
    table, in_columns = None, False
    for line in markdown.splitlines():
        heading = re.match(r"^### (?:`tables/(\w+)\.parquet`|Provenance)", line)
        if heading:
            table = heading.group(1) or "provenance"
            found[table] = []
        in_columns = line == "| column | meaning |" or (in_columns and line.startswith("|"))
        if table and in_columns and line.startswith("| `"):
            first = re.split(r"(?<!\\)\|", line)[1]
            found[table] += re.findall(r"`([A-Za-z0-9_]+)`", first)
    return found


def test_the_provenance_columns_are_described_in_order() -> None:
    assert list(schema.tables()["provenance"]) == list(PROVENANCE_COLUMNS)


def test_the_reference_lists_every_described_column_once_in_order() -> None:
    known = schema.tables()
    listed = _reference_columns(schema.markdown())
    for table, columns in known.items():
        extra = list(schema.TRACKING_OWN) if table == "tracking" else []
        assert listed[table] == [*extra, *columns], table
    assert listed["oracle"] == []  # the columns of a unimodal cell, said in prose
    blocks = schema.cell_columns()
    assert [c for block in blocks.values() for c in block] == list(known["cells"])
    assert "mutual_information" in blocks["paired"] and "mi_lcb" in blocks["dense"]
    assert "gap" in blocks["unimodal"] and "encoder_epoch" in blocks["unimodal"]


def test_the_reference_groups_and_escapes_descriptions() -> None:
    text = schema.columns_table({"a": "x | y *z*", "b": "x | y *z*", "c": "`||W||` <R>"})
    assert text.splitlines()[2:] == [
        "| `a`, `b` | x \\| y \\*z\\* |",
        "| `c` | `\\|\\|W\\|\\|` &lt;R&gt; |",
    ]
    family = schema.columns_table({"p": "one; paired: two; dense: three"})
    assert family.splitlines()[2] == "| `p` | one<br>*paired:* two<br>*dense:* three |"


def test_update_page_rewrites_only_the_marked_region(tmp_path: Path) -> None:
    page = tmp_path / "tables.md"
    page.write_text(f"# Prose\n\n{schema.BEGIN}\nold\n{schema.END}\n\nmore prose\n")
    assert schema.update_page(page, check=True)
    assert "old" in page.read_text()  # --check changes nothing
    assert schema.update_page(page)
    text = page.read_text()
    assert text.startswith("# Prose\n\n") and text.endswith(f"{schema.END}\n\nmore prose\n")
    assert schema.generated_part(text) == schema.markdown().strip("\n")
    assert not schema.update_page(page, check=True)
    page.write_text("no markers\n")
    with pytest.raises(ValueError, match="columns:begin"):
        schema.update_page(page)


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
