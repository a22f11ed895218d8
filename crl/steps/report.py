"""Plots (PNG) and one HTML page built from the tables alone, so `crl report RUN` can rebuild it."""

from __future__ import annotations

import html
import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import polars as pl  # noqa: E402

from crl.core.provenance import PROVENANCE_COLUMNS  # noqa: E402
from crl.steps.atomic import write_bytes_atomic  # noqa: E402

METRICS = ["mean_classifier_accuracy", "linear_probe_accuracy", "retrieval_auc"]


def _objectives(summary: pl.DataFrame) -> list[tuple[str, str]]:
    return [tuple(r) for r in summary.select(["regime", "loss"]).unique(maintain_order=True).rows()]


def _panels(count: int) -> tuple[plt.Figure, list]:
    cols = min(4, count)
    rows = (count + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax in flat[count:]:
        ax.set_visible(False)
    return fig, flat


def _save(fig: plt.Figure, path: Path, staging: Path) -> None:
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=110)
    plt.close(fig)
    write_bytes_atomic(png.getvalue(), path, staging)


def plot_gap_vs_n(summary: pl.DataFrame, path: Path, staging: Path) -> None:
    """Gap (and Gamma_M where defined) against n, one line per m, log axes."""
    objs = _objectives(summary)
    fig, axes = _panels(len(objs))
    for ax, (regime, loss) in zip(axes, objs, strict=False):
        sub = summary.filter((pl.col("regime") == regime) & (pl.col("loss") == loss))
        for (m,), line in sub.sort("n").group_by(["m"], maintain_order=True):
            n = line["n"].to_list()
            gap = line["gap_mean"].abs().to_list()
            shown = ax.errorbar(
                n,
                gap,
                yerr=line["gap_seed_ci"].fill_nan(0).fill_null(0).to_list(),
                marker="o",
                capsize=2,
                label=f"|gap| m={m}",
            )
            bound = line["bound_gamma_mean"]
            if bound.null_count() < len(bound):
                ax.plot(
                    n, bound.to_list(), ls="--", color=shown[0].get_color(), label=f"Gamma_M m={m}"
                )
        ax.set(
            xscale="log",
            yscale="log",
            xlabel="n (anchors)",
            ylabel="|test - train|",
            title=f"{regime} / {loss}",
        )
        ax.legend(fontsize=7)
    _save(fig, path, staging)


def plot_gap_vs_m(summary: pl.DataFrame, path: Path, staging: Path) -> None:
    objs = _objectives(summary)
    fig, axes = _panels(len(objs))
    for ax, (regime, loss) in zip(axes, objs, strict=False):
        sub = summary.filter((pl.col("regime") == regime) & (pl.col("loss") == loss))
        for (n,), line in sub.sort("m").group_by(["n"], maintain_order=True):
            ax.errorbar(
                line["m"].to_list(),
                line["gap_mean"].to_list(),
                yerr=line["gap_seed_ci"].fill_nan(0).fill_null(0).to_list(),
                marker="o",
                capsize=2,
                label=f"n={n}",
            )
        ax.axhline(0, color="grey", lw=0.5)
        ax.set(xscale="log", xlabel="m (negatives)", ylabel="gap", title=f"{regime} / {loss}")
        ax.legend(fontsize=7)
    _save(fig, path, staging)


def plot_downstream_vs_m(summary: pl.DataFrame, path: Path, staging: Path) -> None:
    objs = _objectives(summary)
    fig, axes = _panels(len(objs))
    n_max = summary["n"].max()
    for ax, (regime, loss) in zip(axes, objs, strict=False):
        sub = summary.filter(
            (pl.col("regime") == regime) & (pl.col("loss") == loss) & (pl.col("n") == n_max)
        ).sort("m")
        for metric in METRICS:
            ax.errorbar(
                sub["m"].to_list(),
                sub[f"{metric}_mean"].to_list(),
                yerr=sub[f"{metric}_seed_ci"].fill_nan(0).fill_null(0).to_list(),
                marker="o",
                capsize=2,
                label=metric,
            )
        ax.set(
            xscale="log",
            xlabel="m (negatives)",
            ylabel="downstream",
            title=f"{regime} / {loss} (n={n_max})",
        )
        ax.legend(fontsize=7)
    _save(fig, path, staging)


def plot_m_star(fits: pl.DataFrame, path: Path, staging: Path) -> bool:
    """m*(n) per (regime, loss) on log axes; False (nothing drawn) when there is no m* row."""
    points = fits.filter(pl.col("kind") == "m_star")
    if points.is_empty():
        return False
    fig, ax = plt.subplots(figsize=(5, 4))
    for (regime, loss), sub in points.group_by(["regime", "loss"], maintain_order=True):
        ax.plot(sub["n"].to_list(), sub["m_star"].to_list(), marker="o", label=f"{regime}/{loss}")
    ax.set(xscale="log", yscale="log", xlabel="n", ylabel="m*(n)", title="critical negatives")
    ax.legend(fontsize=7)
    _save(fig, path, staging)
    return True


def _html_table(frame: pl.DataFrame, limit: int = 60) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in frame.columns)
    body = []
    for row in frame.head(limit).rows():
        cells = "".join(
            f"<td>{v:.4g}</td>" if isinstance(v, float) else f"<td>{html.escape(str(v))}</td>"
            for v in row
        )
        body.append(f"<tr>{cells}</tr>")
    more = (
        f"<p>({frame.height - limit} more rows in the Parquet table)</p>"
        if frame.height > limit
        else ""
    )
    return f"<table><tr>{head}</tr>{''.join(body)}</table>{more}"


def _page(title: str, provenance: dict, body: str) -> bytes:
    """One HTML page: a title, the provenance line, then `body`."""
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse;font-size:12px}}
td,th{{border:1px solid #ccc;padding:2px 6px;text-align:right}}img{{max-width:100%}}</style></head>
<body><h1>{html.escape(title)}</h1>
<p>config hash {html.escape(provenance["config_hash"])} &middot; crl {provenance["crl_version"]}
&middot; commit {html.escape(provenance["git_commit"])}</p>
{body}
</body></html>""".encode()


def build(tables: Path, out: Path, staging: Path) -> Path:
    """Render every plot and report/index.html from tables/*.parquet. Returns the page's path."""
    summary = pl.read_parquet(tables / "summary.parquet")
    fits = pl.read_parquet(tables / "fits.parquet")
    out.mkdir(parents=True, exist_ok=True)
    plot_gap_vs_n(summary, out / "gap_vs_n.png", staging)
    plot_gap_vs_m(summary, out / "gap_vs_m.png", staging)
    plot_downstream_vs_m(summary, out / "downstream_vs_m.png", staging)
    images = ["gap_vs_n.png", "gap_vs_m.png", "downstream_vs_m.png"]
    if plot_m_star(fits, out / "m_star.png", staging):
        images.append("m_star.png")
    prov = summary.row(0, named=True)
    headline = summary.select(
        [
            "regime",
            "loss",
            "m",
            "n",
            "seeds",
            "train_loss_mean",
            "test_loss_mean",
            "gap_mean",
            "gap_seed_ci",
            "bound_gamma_mean",
            "bound_holds_fraction",
            "retrieval_auc_mean",
            "linear_probe_accuracy_mean",
            "tau",
        ]
    )
    fit_view = fits.filter(pl.col("kind").is_in(["rate", "power", "m_star_exponent"])).drop(
        PROVENANCE_COLUMNS
    )
    body = f"""{"".join(f'<h2>{i[:-4].replace("_", " ")}</h2><img src="{i}">' for i in images)}
<h2>Gap against bound (means over seeds)</h2>{_html_table(headline)}
<h2>Rate-shape fits</h2>{_html_table(fit_view)}"""
    write_bytes_atomic(_page(f"crl run {prov['run_id']}", prov, body), out / "index.html", staging)
    return out / "index.html"


def plot_slack(checks: pl.DataFrame, path: Path, staging: Path) -> None:
    """Sorted slack per statement against its quantile (symmetric-log y); failures in red."""
    statements = checks["statement"].unique(maintain_order=True).to_list()
    fig, axes = _panels(len(statements))
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
    _save(fig, path, staging)


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
    body = f"""<h2>Statements</h2>{_html_table(view)}
<h2>Failed rows</h2>{_html_table(failed) if failed.height else "<p>none</p>"}
<h2>Slack distributions</h2><img src="slack.png">"""
    page = _page(f"crl check {prov['run_id']}", prov, body)
    write_bytes_atomic(page, out / "index.html", staging)
    return out / "index.html"
