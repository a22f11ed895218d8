"""What every column of every output table means: the descriptions (crl/steps/columns.json),
the Parquet field metadata that carries them, so that
`pyarrow.parquet.read_schema(path).field(name).metadata[b"description"]` (or DuckDB's DESCRIBE)
says what a column holds, and the column reference of docs/tables.md generated from them
(`markdown`, `update_page`: `crl docs tables`; a test fails when the page is stale).

Tables: `cells` (and `oracle`, the same columns), `summary` (each summarised cells column as
`<col>_mean`, `_std`, `_seed_ci`, flags as `<flag>_fraction`, the keys as in cells), `fits`,
`frontier`, `tracking`, `failures`, `checks`, `checks_summary`; every table has the provenance
columns.
"""

from __future__ import annotations

import json
import re
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


# docs/tables.md: the column reference, generated between BEGIN and END (`crl docs tables`)
BEGIN = "<!-- columns:begin -->"
END = "<!-- columns:end -->"
# columns.json lists each cells column once: a unimodal cell's columns first (paired and dense
# cells share most of them; a description's "paired:" and "dense:" parts say how they differ),
# then the columns only paired cells have, from the one named here, then only dense cells' ones
FAMILY_ONLY_FROM = {"paired": "mutual_information", "dense": "negatives"}
_FAMILY_PART = re.compile(r"; (paired|dense): ")
_CODE_SPAN = re.compile(r"(`[^`]*`)")
# per table of the page, after the provenance columns: its heading and what its rows are
PAGE_TABLES: dict[str, tuple[str, str]] = {
    "cells": (
        "one row per cell",
        "One row per cell, of every family (`family`); a column that a family does not compute "
        "is null in its rows. `cells/<cell_id>.parquet` holds each cell's own row (the aggregate "
        "step adds the provenance and oracle columns). "
        "The first table has the columns of a unimodal cell, most of which paired and dense "
        "cells share: where a column means something else for them, *paired:* and *dense:* say "
        "what. The columns that only paired cells or only dense cells have follow.",
    ),
    "summary": (
        "one row per grid point",
        "One row per grid point: per (@KEYS@), and for dense cells also per (@DENSE_KEYS@); the "
        "cells of a grid point are its seeds. The keys are the cells' ones (the settings that "
        "the cells have); every other column summarises a cells column over the seeds, and its "
        "Parquet description is that of the cells column after the statistic's. A column that "
        "the cells do not have is not summarised.",
    ),
    "fits": (
        "per (dataset, regime, loss, R, temperature, normalise, encoder_epoch)",
        "The laws fitted over the summary's grid points of each setting (dense points also per "
        "negatives, correspondence, lam), one `kind` of row each:\n\n"
        "| `kind` | rows |\n"
        "|---|---|\n"
        "| `slopes` | `shape` in @SLOPES@: "
        r"`log \|y\| = coef_c + slope_m log m + slope_n log n` over the cells' means "
        "(`slope_*` null when the grid has one value of that axis), `slope_m_ci`, "
        "`slope_n_ci` their 95% t half-widths, `r2`, `points`; the shape of each bound next to "
        "that of the measured gap, and of each certificate's excess over the held-out loss it "
        "certifies (`cert_test_set - test_loss`, `cert_pb_data - gibbs_test_loss`, "
        "`cert_pb_free - cert_pb_free_gibbs_test`: @EXCESS@) |\n"
        "| `rate` | `shape` in `scrl` (`c + a/m + b/sqrt n`), `sscrl` (`c + a/sqrt m + b/sqrt "
        "n`), `lei` (`c + a log(m+1)/sqrt n`), `saunshi_k` (`c + a m/sqrt n`): least-squares "
        "fits of `gap_mean` with slopes >= 0: `coef_c`, `coef_a`, `coef_b`, `r2`, `rmse`, "
        "`points` |\n"
        "| `power` | `c + a m^-alpha + b n^-beta`: `coef_*`, `alpha`, `beta`, `r2`, `rmse` "
        "(needs >= 6 points) |\n"
        "| `m_star` | per `n`, metric (`shape`) and `delta`: `m_star`, the smallest m after "
        "which the seed-mean metric (lower is better) stays within `(1 + delta)` of its plateau "
        "(the mean at the two largest m), by log-linear interpolation; `m_star_lo`, "
        "`m_star_hi` its percentile bootstrap interval over seeds (a seed's whole curve "
        "resampled together; `eval.m_star.bootstrap` replicates); `plateau`, `seeds`, "
        "`points`; `primary` marks `eval.m_star.delta`, the other rows are the sensitivity "
        "over `eval.m_star.deltas`. An m where some seed's metric is not finite is left out; "
        "fewer than three m left: no row |\n"
        "| `m_star_exponent` | per metric and `delta`: `m* ~ coef_c n^exponent` by log-log "
        "least squares over the n, with `exponent_lo`, `exponent_hi` from the same bootstrap "
        "(the fit redone in every replicate) |",
    ),
    "frontier": (
        "per (family, dataset, regime, loss, n, encoder_epoch): learning against certification",
        "Two rows (`kind`) per group, over the summary's grid points (one setting of R, "
        "temperature and normalise and one m, seeds averaged; dense points also per negatives, "
        "correspondence, lam); the keys `family`, `dataset`, `regime`, `loss`, `n`, "
        "`encoder_epoch` are the cells' ones (with a pretraining, a pair of rows per "
        "checkpoint). A point is *learned* when its head beat f = 0 in every seed "
        "(`learned_fraction` = 1) and *certified* when its sampling is certified in every seed "
        "and its best certified bound on the gap is below the loss range (`bound_rel` < 1).",
    ),
    "tracking": (
        "does a certificate move with the gap?",
        "Per (`family`, `dataset`, `loss`) and certificate (`gamma_m`, `gamma_S`, `gamma_E`, "
        "`best_bound`, `sscrl_total`, `gamma_lin`, `best_dense_bound`; the certificates on the "
        "loss read as bounds on the gap, `cert_test_set_gap` = `cert_test_set - train_loss`, "
        "`cert_pb_free_gap`, `cert_pb_data_gap`; and `uniform_deviation_est`), over the grid "
        "points (seed means; axes: regime, m, n, R, temperature, normalise and the dense axes, "
        "those that vary). `crl/steps/tracking.py`, statistics in `crl/kernels/tracking.py`.",
    ),
    "oracle": (
        "with `eval.oracle_anchors`: the oracle cells",
        "One row per (loss, m, setting) (LSE: per setting), with the columns of a unimodal cell "
        "(the first table of `tables/cells.parquet`): a head fitted on `eval.oracle_anchors` "
        "fresh anchors (seed 0), hinge, logistic and InfoNCE with m own negatives each (their "
        "target `L_m` is every regime's), LSE against one shared pool of `eval.negative_pool` "
        "negatives (its target, Li et al.'s `L`, does not depend on m; a head fitted with m "
        "negatives minimises `L_m` instead). Its `test_loss` is the `oracle_loss` of the grid's "
        "cells with that (loss, m, setting).",
    ),
    "pretrain": (
        "with `encoder.pretrain` or `dense.pretrain`: one row per epoch of pretraining",
        "",
    ),
    "failures": (
        "only when a cell raised",
        "One row per failed cell: `cell_id` and the cell's key columns (as in cells), then:",
    ),
    "checks": (
        "`crl check`: one row per (statement, instance, quantity)",
        "A check run's tables (`crl check`). A Monte Carlo row fails only beyond its `ci`; for "
        "the equalities (S1 l(0)=1, S4, CERT_kl_inverse and CERT_gaussian_kl) `slack` is "
        "`-|lhs - rhs|`.",
    ),
    "checks_summary": ("`crl check`: one row per (statement, method)", ""),
}


def cell_columns() -> dict[str, list[str]]:
    """The cells columns of columns.json in order, by block: "unimodal" (a unimodal cell's
    columns, most of them shared by the other families), "paired" (those only paired cells
    have), "dense" (those only dense cells have)."""
    names = list(tables()["cells"])
    paired, dense = (names.index(FAMILY_ONLY_FROM[f]) for f in ("paired", "dense"))
    return {"unimodal": names[:paired], "paired": names[paired:dense], "dense": names[dense:]}


def _cell(text: str) -> str:
    """`text` inside a Markdown table cell: `|` escaped; `*`, `<` and `>` outside code spans."""
    parts = _CODE_SPAN.split(" ".join(text.split()))
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("*", r"\*").replace("<", "&lt;").replace(">", "&gt;")
    return "".join(parts).replace("|", r"\|")


def _meaning(description: str) -> str:
    """A description as a cell: its "; paired: ..." and "; dense: ..." parts on lines of their
    own."""
    first, *rest = _FAMILY_PART.split(description)
    pairs = zip(rest[::2], rest[1::2], strict=True)
    lines = [_cell(first), *(f"*{family}:* {_cell(part)}" for family, part in pairs)]
    return "<br>".join(lines)


def _code(names: list[str]) -> str:
    return ", ".join(f"`{name}`" for name in names)


def columns_table(described: dict[str, str]) -> str:
    """A `| column | meaning |` table, in order, consecutive columns of one description in one
    row."""
    lines = ["| column | meaning |", "|---|---|"]
    items = list(described.items())
    names: list[str] = []
    for i, (name, text) in enumerate(items):
        names.append(name)
        if i + 1 == len(items) or items[i + 1][1] != text:
            lines.append(f"| {_code(names)} | {_meaning(text)} |")
            names = []
    return "\n".join(lines)


def _summary_table() -> tuple[str, str]:
    """The summary's intro (its keys filled in) and its table, from the summary's own lists."""
    from crl.steps import summary_columns as sc
    from crl.steps.tables import DENSE_KEYS, OBJECTIVE, SETTINGS

    intro = PAGE_TABLES["summary"][1].replace("@DENSE_KEYS@", ", ".join(DENSE_KEYS))
    intro = intro.replace("@KEYS@", ", ".join([*OBJECTIVE, *SETTINGS, "m", "n"]))
    rows = [("`seeds`", _cell(SUMMARY_OWN["seeds"]))]
    for suffix in ("_mean", "_std", "_seed_ci"):
        note = " (null with one seed)" if suffix == "_seed_ci" else ""
        rows.append((f"`<col>{suffix}`", f"{SUMMARY_STATISTICS[suffix]} `<col>`{note}"))
    rows += [
        ("`<flag>_fraction`", f"{SUMMARY_STATISTICS['_fraction']} `<flag>` true"),
        (_code(sc.FIRST), "as in cells: the same in every seed of a grid point"),
        (_code([f"{c}_mean" for c in sc.MEANS]), "the mean over seeds of a within-cell interval"),
    ]
    table = "\n".join(["| column | meaning |", "|---|---|", *(f"| {n} | {m} |" for n, m in rows)])
    lists = (
        f"`<col>` is each of {_code(sc.SUMMARISED)}.\n\n"
        f"`<flag>` is each of {_code(sc.HOLDS)} (`learned_fraction`: the share of seeds whose "
        "head learned)."
    )
    return intro, f"{table}\n\n{lists}"


def markdown() -> str:
    """The generated part of docs/tables.md: the provenance columns, then per table a heading,
    what its rows are and its `| column | meaning |` table, from crl/steps/columns.json (and
    the summary's columns from crl/steps/summary_columns.py)."""
    known = tables()
    out = [
        "<!-- generated by `crl docs tables` (make docs) from crl/steps/columns.json and "
        "crl/steps/summary_columns.py: edit those, not this part -->",
        "### Provenance: the first columns of every table",
        columns_table(known["provenance"]),
    ]
    for table, (title, intro) in PAGE_TABLES.items():
        out.append(f"### `tables/{table}.parquet` — {title}")
        if table == "summary":
            intro, body = _summary_table()
        elif table == "oracle":
            body = ""
        elif table == "fits":
            from crl.steps.tables import EXCESS_QUANTITIES, SLOPE_QUANTITIES

            intro = intro.replace("@SLOPES@", _code(SLOPE_QUANTITIES))
            intro = intro.replace("@EXCESS@", _code(list(EXCESS_QUANTITIES)))
            body = columns_table(known[table])
        elif table == "cells":
            blocks = cell_columns()
            body = "\n\n".join(
                [
                    columns_table({c: known["cells"][c] for c in blocks["unimodal"]}),
                    "#### Only paired cells (`paired_gaussian`, `paired_parquet`)",
                    "The Gaussian's cells have their population quantities in closed form; "
                    "user pairs (`paired_parquet`) and the clipped Gaussian (`dataset.clip`) "
                    "estimate them on held-out pairs and carry certified bounds (the "
                    "descriptions that start with *user pairs*).",
                    columns_table({c: known["cells"][c] for c in blocks["paired"]}),
                    "#### Only dense cells (`family` = `dense`)",
                    "A name that starts with `_` is a suffix of the bounds of its row: "
                    "`gamma_dense_S_complexity_term` is `gamma_dense_S`'s complexity term, "
                    "`queue_outer_S_holds` whether the gap lies within `queue_outer_S`.",
                    columns_table({c: known["cells"][c] for c in blocks["dense"]}),
                ]
            )
        else:
            own = TRACKING_OWN if table == "tracking" else {}
            body = columns_table({**own, **known[table]})
        out += [part for part in (intro, body) if part]
    return "\n\n".join(out) + "\n"


def generated_part(page: str) -> str:
    """The text of `page` between BEGIN and END, without the blank lines around it.
    ValueError when the page does not have each marker once, BEGIN first."""
    if page.count(BEGIN) != 1 or page.count(END) != 1 or page.index(BEGIN) > page.index(END):
        raise ValueError(f"expected one {BEGIN} and, after it, one {END}")
    return page.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n")


def update_page(path: Path, check: bool = False) -> bool:
    """Put `markdown()` between BEGIN and END of the page at `path` (with `check`, leave the
    page as it is); returns whether the page was stale. ValueError: no such region."""
    page = path.read_text(encoding="utf-8")
    fresh = markdown().strip("\n")
    stale = generated_part(page) != fresh
    if stale and not check:
        head, rest = page.split(BEGIN, 1)
        path.write_text(f"{head}{BEGIN}\n\n{fresh}\n\n{END}{rest.split(END, 1)[1]}", "utf-8")
    return stale
