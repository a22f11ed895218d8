"""The report's tracking section: per (family, loss), the certificates ranked by how well they
track the gap across the grid (psi, the granulated Kendall tau averaged over the axes, with its
bootstrap interval), and the tracking table's tau and psi rows."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import polars as pl  # noqa: E402

from crl.steps.figures import panels  # noqa: E402

Save = Callable[[plt.Figure, Path], None]


def plot(table: pl.DataFrame, path: Path, save: Save) -> None:
    """One panel per (family, loss): psi per certificate, best first, with its interval."""
    psi = table.filter(pl.col("statistic") == "psi").drop_nulls("value")
    groups = list(psi.group_by(["family", "loss"], maintain_order=True))
    fig, axes = panels(len(groups))
    for ax, ((family, loss), rows) in zip(axes, groups, strict=False):
        rows = rows.sort("value")
        y = list(range(rows.height))
        value = rows["value"].to_list()
        lo = [v - (low if low is not None else v) for v, low in zip(value, rows["lo"], strict=True)]
        hi = [
            (high if high is not None else v) - v for v, high in zip(value, rows["hi"], strict=True)
        ]
        ax.barh(y, value, xerr=[lo, hi], color="tab:blue", alpha=0.7, capsize=2)
        ax.set_yticks(y, rows["certificate"].to_list(), fontsize=7)
        ax.axvline(0, color="black", lw=0.6)
        ax.set(xlim=(-1, 1), xlabel="psi (granulated Kendall tau with the gap)")
        ax.set_title(f"{family} / {loss}", fontsize=9)
    save(fig, path)


def section(table: pl.DataFrame, out: Path, save: Save, html_table: Callable[..., str]) -> str:
    """The tracking section ("" when the table is empty)."""
    if table.is_empty() or table.filter(pl.col("statistic") == "psi")["value"].null_count() == (
        table.filter(pl.col("statistic") == "psi").height
    ):
        return ""
    plot(table, out / "tracking.png", save)
    view = table.filter(pl.col("statistic").is_in(["kendall_tau", "psi"])).select(
        ["family", "loss", "certificate", "statistic", "value", "lo", "hi", "points", "seeds"]
    )
    return f"""<h2>Does the certificate track the gap? (tables/tracking.parquet)</h2>
<p>psi: Kendall's tau between certificate and gap among grid points that differ in one axis,
averaged over the axes (Jiang et al. 2020); the table also has the robust sign-error per axis
(Dziugaite et al. 2020). Intervals: a bootstrap over seeds (three seeds or more).</p>
<img src="tracking.png">{html_table(view, limit=200)}"""
