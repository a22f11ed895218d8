"""What every column of every output table means: the descriptions (crl/steps/columns.json,
kept equal to the README's column reference by a test) and the Parquet field metadata that
carries them, so that `pyarrow.parquet.read_schema(path).field(name).metadata[b"description"]`
(or DuckDB's DESCRIBE) says what a column holds.

Tables: `cells` (and `oracle`, the same columns), `summary` (each summarised cells column as
`<col>_mean`, `_std`, `_seed_ci`, flags as `<flag>_fraction`, the keys as in cells), `fits`,
`frontier`, `tracking`, `failures`, `checks`, `checks_summary`; every table has the provenance
columns.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pyarrow as pa

SUMMARY_STATISTICS = {
    "_seed_ci": "95% Student-t half-width over seeds of",
    "_mean": "mean over seeds of",
    "_std": "standard deviation over seeds of",
    "_fraction": "share of seeds with",
}
BOUND_PARTS = ("_complexity_term", "_concentration_term", "_route", "_holds")
SUMMARY_OWN = {"seeds": "seeds behind the grid point"}
TRACKING_OWN = {
    "certificate": "the certificate: a cells column, or cert_*_gap = cert_* - train_loss (a "
    "certificate on the loss read as a bound on the gap)",
}
DESCRIPTION = b"description"


@cache
def tables() -> dict[str, dict[str, str]]:
    """{table: {column: description}} as stored (provenance under "provenance")."""
    return json.loads((Path(__file__).with_name("columns.json")).read_text(encoding="utf-8"))


def description(table: str, column: str) -> str | None:
    """What `column` of `table` holds, or None when it is not documented."""
    known = tables()
    if column in known["provenance"]:
        return known["provenance"][column]
    cells = known["cells"]
    if table == "oracle":
        table = "cells"
    own = {**known.get(table, {}), **(TRACKING_OWN if table == "tracking" else {})}
    if column in own:
        return own[column]
    if table == "cells":  # a bound's parts, documented as `name` (+ `_part`, ...)
        for part in BOUND_PARTS:
            base = column.removesuffix(part)
            if base != column and base in cells and part in cells:
                return f"`{base}`'s {part[1:].replace('_', ' ')}: {cells[base]}"
    if table == "summary":
        if column in SUMMARY_OWN:
            return SUMMARY_OWN[column]
        for suffix, words in SUMMARY_STATISTICS.items():
            base = column.removesuffix(suffix)
            of_base = description("cells", base) if base != column else None
            if of_base is not None:
                return f"{words} `{base}`: {of_base}"
    if table in ("summary", "failures", "frontier", "tracking", "fits"):
        return description("cells", column)  # the keys (family, dataset, regime, loss, m, n)
    return None


def undocumented(table: str, columns: list[str]) -> list[str]:
    """The columns of `table` without a description."""
    return [c for c in columns if description(table, c) is None]


def describe(table: str, data: pa.Table) -> pa.Table:
    """`data` with each documented field's description in its metadata."""
    fields = []
    for field in data.schema:
        text = description(table, field.name)
        if text is not None:
            field = field.with_metadata({**(field.metadata or {}), DESCRIPTION: text.encode()})
        fields.append(field)
    return data.cast(pa.schema(fields, metadata=data.schema.metadata))
