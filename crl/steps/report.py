"""Plots (PNG) and one HTML page built from the tables alone, so `crl report RUN` can rebuild it."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import polars as pl

from crl.steps import (
    digest,
    families,
    figures,
    frontier_panel,
    ladder_panel,
    pages,
    pretrain_panel,
    report_page,
    scaling_panel,
    tracking_panel,
)
from crl.steps.atomic import write_bytes_atomic
from crl.steps.pages import html_table, page_html
from crl.steps.report_page import Page

BUILT_FROM = ".built-from"  # in report/: the digest of the tables and code of the last build


def _family_sources() -> str:
    """sha256 of the source files of every registered family's folder (its report, panels and
    the cells they draw): a family's section is drawn by its own code."""
    folders = {
        Path(inspect.getfile(sys.modules[type(f).__module__])).parent for f in families.registered()
    }
    return digest.digest([p for folder in sorted(folders) for p in sorted(folder.glob("*.py"))])


def _report_digest(tables: Path) -> str:
    code = digest.sources(
        sys.modules[__name__],
        figures,
        frontier_panel,
        ladder_panel,
        pages,
        pretrain_panel,
        report_page,
        scaling_panel,
        tracking_panel,
    )
    return digest.digest(tables.glob("*.parquet"), code, _family_sources())


def build_if_changed(
    tables: Path, out: Path, staging: Path, force: bool = False
) -> tuple[Path, bool]:
    """The report of `tables`, rebuilt only when the tables or the report's code differ from
    those of the last build (a rerun whose cells were all done writes byte-identical tables, and
    skips about 2-30 s of plotting), or with `force` (`crl report`). Returns the page and
    whether it was rebuilt."""
    page, stamp = out / "index.html", out / BUILT_FROM
    value = _report_digest(tables)
    if not force and digest.is_current(stamp, value, page):
        return page, False
    digest.forget(stamp)
    page = build(tables, out, staging)
    digest.record(stamp, value, staging)
    return page, True


def build(tables: Path, out: Path, staging: Path) -> Path:
    """Render every plot and report/index.html from tables/*.parquet. Returns the page's path.

    One section per family in the tables: the single-modality grid, the paired grid, dense."""
    summary = pl.read_parquet(tables / "summary.parquet")
    fits = pl.read_parquet(tables / "fits.parquet")
    frontier_path = tables / "frontier.parquet"
    frontier_table = pl.read_parquet(frontier_path) if frontier_path.is_file() else None
    out.mkdir(parents=True, exist_ok=True)
    sections = []
    if frontier_table is not None:
        sections.append(
            frontier_panel.section(
                summary,
                frontier_table,
                out,
                lambda f, p: figures.save_png(f, p, staging),
                html_table,
            )
        )
    if (tables / "tracking.parquet").is_file():
        sections.append(
            tracking_panel.section(
                pl.read_parquet(tables / "tracking.parquet"),
                out,
                lambda f, p: figures.save_png(f, p, staging),
                html_table,
            )
        )
    pretrain_path = tables / "pretrain.parquet"
    pretrain = pl.read_parquet(pretrain_path) if pretrain_path.is_file() else None
    page = Page(out, staging, pretrain)
    family = (  # tables written before the column: single-modality cells
        summary["family"].fill_null("unimodal")
        if "family" in summary.columns
        else pl.Series(["unimodal"] * summary.height, dtype=pl.String)
    )
    keys = ["dataset", "regime", "loss"]
    for each in families.registered():
        frame = summary.filter(family == each.name)
        if frame.height:
            own = fits.join(frame.select(keys).unique(), on=keys, how="semi")
            sections += each.report(frame, own, page)
    prov = summary.row(0, named=True)
    page = page_html(f"crl run {prov['run_id']}", prov, "\n".join(s for s in sections if s))
    write_bytes_atomic(page, out / "index.html", staging)
    return out / "index.html"
