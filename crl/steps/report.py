"""Plots (PNG) and one HTML page built from the tables alone, so `crl report RUN` can rebuild it."""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
from matplotlib.ticker import NullFormatter  # noqa: E402

from crl.core.provenance import PROVENANCE_COLUMNS  # noqa: E402
from crl.steps import (  # noqa: E402
    digest,
    figures,
    frontier_panel,
    ladder_panel,
    pretrain_panel,  # noqa: E402
    tracking_panel,
)
from crl.steps.atomic import write_bytes_atomic  # noqa: E402
from crl.steps.dense import report as report_dense  # noqa: E402
from crl.steps.figures import panels  # noqa: E402
from crl.steps.pages import html_table, page_html  # noqa: E402
from crl.steps.paired import report as saturation  # noqa: E402

METRICS = ["mean_classifier_accuracy", "linear_probe_accuracy", "retrieval_auc"]


def _objectives(summary: pl.DataFrame) -> list[tuple[str, str]]:
    return [tuple(r) for r in summary.select(["regime", "loss"]).unique(maintain_order=True).rows()]


_save = figures.save_png


def _log_axes(ax, x_label: str, y_label: str, title: str) -> None:
    """Log axes, or a note when the panel has no positive value to show (e.g. no bound)."""
    data = [line for line in ax.get_lines() if not line.get_label().startswith("_")]
    ys = [y for line in data for y in line.get_ydata() if y is not None and y == y and y > 0]
    ax.set(xlabel=x_label, ylabel=y_label, title=title)
    if not ys:
        ax.text(0.5, 0.5, "nothing to show", ha="center", va="center", transform=ax.transAxes)
        return
    ax.set(xscale="log", yscale="log")
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.legend(fontsize=6)


BOUND_STYLES = (("gamma_S", "--"), ("gamma_m", ":"), ("sscrl_total", "-."))


def _bounds_of(line: pl.DataFrame) -> list[tuple[str, str, list]]:
    """The bound curves a panel shows: gamma_S and gamma_m (outer for sscrl); the sscrl total;
    LSE in scrl adds its inner bound to gamma_S (the upper side of Cor. 3.6)."""
    curves = []
    for column, style in BOUND_STYLES:
        values = line[f"{column}_mean"]
        if values.null_count() == len(values):
            continue
        if column == "gamma_S" and line["lse_inner_bound_mean"].null_count() < len(values):
            values = values + line["lse_inner_bound_mean"].fill_null(0)
            column = "gamma_S + LSE inner"
        curves.append((column, style, values.fill_null(float("nan")).to_list()))
    return curves


def _gap_panel(ax, line: pl.DataFrame, axis: str, label: str) -> None:
    """|gap| with its seed CI and the certified bounds of one line, on log axes."""
    shown = ax.errorbar(
        line[axis].to_list(),
        line["gap_mean"].abs().to_list(),
        yerr=line["gap_seed_ci"].fill_nan(0).fill_null(0).to_list(),
        marker="o",
        capsize=2,
        label=f"|gap| {label}",
    )
    for name, style, values in _bounds_of(line):
        ax.plot(
            line[axis].to_list(),
            values,
            ls=style,
            color=shown[0].get_color(),
            label=f"{name} {label}",
        )


AXIS_LABELS = {"n": "n (anchors)", "m": "m (negatives)"}


def plot_gap(summary: pl.DataFrame, path: Path, staging: Path, axis: str) -> None:
    """|gap| and the certified bounds against `axis` ("n" or "m"), one colour per value of the
    other axis, on one log axis per (regime, loss)."""
    other = "m" if axis == "n" else "n"
    objs = _objectives(summary)
    fig, axes = panels(len(objs))
    for ax, (regime, loss) in zip(axes, objs, strict=False):
        sub = summary.filter((pl.col("regime") == regime) & (pl.col("loss") == loss))
        for (value,), line in sub.sort(axis).group_by([other], maintain_order=True):
            _gap_panel(ax, line, axis, f"{other}={value}")
        _log_axes(ax, AXIS_LABELS[axis], "|gap| and bounds", f"{regime} / {loss}")
    _save(fig, path, staging)


def plot_tightness(summary: pl.DataFrame, path: Path, staging: Path) -> None:
    """best certified bound / |gap| against n, one line per m (1 would be a tight bound)."""
    objs = _objectives(summary)
    fig, axes = panels(len(objs))
    for ax, (regime, loss) in zip(axes, objs, strict=False):
        sub = summary.filter((pl.col("regime") == regime) & (pl.col("loss") == loss))
        for (m,), line in sub.sort("n").group_by(["m"], maintain_order=True):
            ratio = (line["best_bound_mean"] / line["gap_mean"].abs()).fill_null(float("nan"))
            ax.plot(line["n"].to_list(), ratio.to_list(), marker="o", label=f"m={m}")
        _log_axes(ax, "n (anchors)", "best bound / |gap|", f"{regime} / {loss}")
        if ax.get_yscale() == "log":
            ax.axhline(1, color="grey", lw=0.5)
    _save(fig, path, staging)


def plot_downstream_vs_m(summary: pl.DataFrame, path: Path, staging: Path) -> None:
    objs = _objectives(summary)
    fig, axes = panels(len(objs))
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
    points = fits.filter((pl.col("kind") == "m_star") & pl.col("primary").fill_null(False))
    if points.is_empty():
        return False
    fig, ax = plt.subplots(figsize=(5, 4))
    for (regime, loss, metric), sub in points.group_by(
        ["regime", "loss", "shape"], maintain_order=True
    ):
        value = sub["m_star"].to_numpy()
        below = (value - sub["m_star_lo"].to_numpy()).clip(0)
        above = (sub["m_star_hi"].to_numpy() - value).clip(0)
        ax.errorbar(
            sub["n"].to_list(),
            value,
            yerr=[np.nan_to_num(below), np.nan_to_num(above)],
            marker="o",
            capsize=3,
            label=f"{regime}/{loss} ({metric})",
        )
    delta = points["delta"][0]
    title = f"critical negatives (delta = {delta:g}, 95% bootstrap CI)"
    ax.set(xscale="log", yscale="log", xlabel="n", ylabel="m*(n)", title=title)
    ax.legend(fontsize=7)
    _save(fig, path, staging)
    return True


def paired_body(summary: pl.DataFrame, fits: pl.DataFrame, out: Path, staging: Path) -> str:
    """The paired grid's section: m*(n) figures, the generated finding, the m* and gap tables."""

    def save(fig: plt.Figure, path: Path) -> None:
        _save(fig, path, staging)

    images, findings = [], []
    metrics = fits.filter(pl.col("kind") == "m_star")["shape"].unique(maintain_order=True)
    for metric in metrics.to_list():
        saturation.plot_curves(summary, fits, metric, out / f"{metric}_vs_m.png", save)
        saturation.plot_m_star(fits, metric, out / f"m_star_{metric}.png", save)
        images += [f"{metric}_vs_m.png", f"m_star_{metric}.png"]
        findings.append(saturation.finding(fits, summary, metric))
    if "gamma_lin_mean" in summary.columns:  # user pairs: the certified bound against the gap
        saturation.plot_gap_and_bound(summary, out / "gap_and_bound_vs_m.png", save)
        images.append("gap_and_bound_vs_m.png")
    else:  # the Gaussian: the exact gap
        saturation.plot_exact_gap(summary, out / "exact_gap_vs_m.png", save)
        images.append("exact_gap_vs_m.png")
    star_view = fits.filter(pl.col("kind").is_in(["m_star", "m_star_exponent"])).select(
        [
            "regime",
            "kind",
            "shape",
            "delta",
            "n",
            "m_star",
            "m_star_lo",
            "m_star_hi",
            "exponent",
            "exponent_lo",
            "exponent_hi",
            "plateau",
            "seeds",
        ]
    )
    cells_view = summary.select([c for c in PAIRED_HEADLINE if c in summary.columns])
    return f"""<h2>Finding</h2>{"".join(findings)}
{"".join(f'<h2>{i[:-4].replace("_", " ")}</h2><img src="{i}">' for i in images)}
<h2>m*(n) and its exponent, every delta</h2>{html_table(star_view, limit=200)}
<h2>Cells (means over seeds)</h2>{html_table(cells_view, limit=400)}"""


PAIRED_HEADLINE = [
    "regime",
    "m",
    "n",
    "seeds",
    "retrieval_auc_mean",
    "auc_error_seed_ci",
    "gap_mean",
    "gamma_lin_mean",
    "lse_inner_bound_mean",
    "gamma_lin_holds_fraction",
    "certified_fraction",
    "excess_auc_mean",
    "excess_auc_seed_ci",
    "excess_auc_se_mean",
    "excess_risk_mean",
    "train_loss_mean",
    "risk_finite_fraction",
    "calibration_slack_mean",
    "calibration_holds_fraction",
    "solver_iterations_mean",
    "solver_converged_fraction",
    "on_boundary_fraction",
    "wall_seconds_mean",
]


BUILT_FROM = ".built-from"  # in report/: the digest of the tables and code of the last build


def _report_digest(tables: Path) -> str:
    code = digest.sources(
        sys.modules[__name__],
        figures,
        frontier_panel,
        ladder_panel,
        tracking_panel,
        report_dense,
        pretrain_panel,
        saturation,
    )
    return digest.digest(tables.glob("*.parquet"), code)


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
                summary, frontier_table, out, lambda f, p: _save(f, p, staging), html_table
            )
        )
    if (tables / "tracking.parquet").is_file():
        sections.append(
            tracking_panel.section(
                pl.read_parquet(tables / "tracking.parquet"),
                out,
                lambda f, p: _save(f, p, staging),
                html_table,
            )
        )
    family = (
        summary["family"]
        if "family" in summary.columns
        else pl.Series([None] * summary.height, dtype=pl.String)
    )
    dense = summary.filter(family == "dense")
    rest = summary.filter(family.ne_missing("dense"))
    paired = rest.height > 0 and family.filter(family.ne_missing("dense"))[0] == "paired"
    is_dense = pl.col("loss").str.starts_with("dense")
    pretrain_path = tables / "pretrain.parquet"
    pretrain = pl.read_parquet(pretrain_path) if pretrain_path.is_file() else None

    def pretrained(frame: pl.DataFrame, setting: dict, family: pretrain_panel.Family) -> str:
        """The family's pretraining section: every encoder epoch, the other settings fixed."""
        others = {k: v for k, v in setting.items() if k != "encoder_epoch"}
        at = frontier_panel.at_setting(frame, others)
        return pretrain_panel.section(
            pretrain, at, family, out, lambda f, p: _save(f, p, staging), html_table
        )

    if rest.height:  # the panels at one setting of the grid's optional axes
        setting = frontier_panel.reference_setting(rest)
        sections.append(frontier_panel.setting_note(setting))
        sections.append(pretrained(rest, setting, pretrain_panel.UNIMODAL))
        rest = frontier_panel.at_setting(rest, setting)
        rest_fits = frontier_panel.at_setting(fits.filter(~is_dense), setting)
        if not paired:
            sections.append(
                ladder_panel.section(rest, out, lambda f, p: _save(f, p, staging), html_table)
            )
        body = paired_body if paired else unimodal_body
        sections.append(body(rest, rest_fits, out, staging))
    if dense.height:
        setting = frontier_panel.reference_setting(dense)
        sections.append(frontier_panel.setting_note(setting))
        sections.append(pretrained(dense, setting, pretrain_panel.DENSE))
        dense_fits = frontier_panel.at_setting(fits.filter(is_dense), setting)
        sections.append(
            report_dense.body(
                frontier_panel.at_setting(dense, setting),
                dense_fits,
                out,
                lambda f, p: _save(f, p, staging),
                html_table,
            )
        )
    prov = summary.row(0, named=True)
    page = page_html(f"crl run {prov['run_id']}", prov, "\n".join(s for s in sections if s))
    write_bytes_atomic(page, out / "index.html", staging)
    return out / "index.html"


HEADLINE = [
    "regime",
    "loss",
    "m",
    "n",
    "seeds",
    "train_loss_mean",
    "test_loss_mean",
    "gap_mean",
    "gap_seed_ci",
    "gamma_m_mean",
    "gamma_S_mean",
    "gamma_E_mean",
    "best_bound_mean",
    "gamma_S_holds_fraction",
    "certified_fraction",
    "retrieval_auc_mean",
    "linear_probe_accuracy_mean",
    "learning_gain_rel_mean",
    "learned_fraction",
    "tau",
]


def unimodal_body(summary: pl.DataFrame, fits: pl.DataFrame, out: Path, staging: Path) -> str:
    """The single-modality grid's section: gap and bounds against n and m, downstream."""
    plot_gap(summary, out / "gap_vs_n.png", staging, "n")
    plot_gap(summary, out / "gap_vs_m.png", staging, "m")
    plot_tightness(summary, out / "tightness.png", staging)
    plot_downstream_vs_m(summary, out / "downstream_vs_m.png", staging)
    images = ["gap_vs_n.png", "gap_vs_m.png", "tightness.png", "downstream_vs_m.png"]
    if plot_m_star(fits, out / "m_star.png", staging):
        images.append("m_star.png")
    headline = summary.select([c for c in HEADLINE if c in summary.columns])
    fit_view = fits.filter(
        pl.col("kind").is_in(["slopes", "rate", "power", "m_star_exponent"])
    ).drop(PROVENANCE_COLUMNS)
    return f"""{"".join(f'<h2>{i[:-4].replace("_", " ")}</h2><img src="{i}">' for i in images)}
<h2>Gap against the certified bounds (means over seeds)</h2>{html_table(headline)}
<h2>Slopes in m and n of the gap and of each bound; rate-shape fits</h2>
{html_table(fit_view)}"""
