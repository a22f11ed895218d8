"""The page of a `crl check` run: slack plots and the statements' table, from its tables alone."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import polars as pl  # noqa: E402

from crl.core.provenance import PROVENANCE_COLUMNS  # noqa: E402
from crl.steps.atomic import write_bytes_atomic  # noqa: E402
from crl.steps.figures import panels, save_png  # noqa: E402
from crl.steps.pages import html_table, page_html  # noqa: E402


def plot_slack(checks: pl.DataFrame, path: Path, staging: Path) -> None:
    """Sorted slack per statement against its quantile (symmetric-log y); failures in red."""
    statements = checks["statement"].unique(maintain_order=True).to_list()
    fig, axes = panels(len(statements))
    for ax, statement in zip(axes, statements, strict=False):
        sub = checks.filter(pl.col("statement") == statement).sort("slack")
        quantile = [(i + 0.5) / sub.height for i in range(sub.height)]
        colours = ["tab:blue" if held else "tab:red" for held in sub["holds"].to_list()]
        ax.scatter(quantile, sub["slack"].to_list(), c=colours, s=6)
        ax.axhline(0, color="black", lw=0.7)
        ax.set_yscale("symlog", linthresh=1e-6)
        failed = int((~sub["holds"]).sum())
        ax.set(
            title=f"{statement} ({sub.height} rows, {failed} failed)",
            xlabel="quantile",
            ylabel="slack (rhs - lhs)",
        )
    save_png(fig, path, staging)


def build_checks(tables: Path, out: Path, staging: Path) -> Path:
    """Slack plots and report/index.html of a `crl check` run, from its tables alone."""
    checks = pl.read_parquet(tables / "checks.parquet")
    summary = pl.read_parquet(tables / "checks_summary.parquet")
    out.mkdir(parents=True, exist_ok=True)
    plot_slack(checks, out / "slack.png", staging)
    prov = summary.row(0, named=True)
    failed = checks.filter(~pl.col("holds")).select(
        ["statement", "instance", "quantity", "method", "lhs", "rhs", "slack", "ci", "params"]
    )
    view = summary.drop(PROVENANCE_COLUMNS)
    body = f"""<h2>Statements</h2>{html_table(view)}
<h2>Failed rows</h2>{html_table(failed) if failed.height else "<p>none</p>"}
<h2>Slack distributions</h2><img src="slack.png">"""
    page = page_html(f"crl check {prov['run_id']}", prov, body)
    write_bytes_atomic(page, out / "index.html", staging)
    return out / "index.html"
