"""The report of a paired grid: the m*(n) figure people cite (Li et al. 2026's critical number of
negatives), built from the tables alone.

- excess AUC against m per n on log-log axes, with seed-CI bands and m*(n) marked;
- m*(n) with bootstrap CIs against the sqrt(n), 0.4 n and n reference lines, and the exponent;
- the exact generalisation gap L(s) - Lhat(s) against m (finite cells only);
- a generated paragraph stating the finding next to the paper's and the design note's numbers.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from crl.steps.figures import Save  # noqa: E402
from crl.steps.pages import html_table  # noqa: E402

# What the sources report, quoted in the generated paragraph (docs/theory/m-star.md, Li et al.
# 2026).
PAPER = "Li et al. (CLIP runs): m* ~ 0.4 n, fitted m* ~ n^0.94, no seeds or intervals"
DESIGN_NOTE = {
    "sscrl": "design note (float64 prototype, delta = 0.25): exponent 0.73 [0.60, 0.87]",
    "scrl": "design note (float64 prototype, delta = 0.25): exponent 0.15 [0.06, 0.32]",
}


def _primary(fits: pl.DataFrame, kind: str, metric: str) -> pl.DataFrame:
    return fits.filter(
        (pl.col("kind") == kind) & (pl.col("shape") == metric) & pl.col("primary").fill_null(False)
    )


def plot_curves(summary: pl.DataFrame, fits: pl.DataFrame, metric: str, path, save) -> None:
    """The metric's seed mean against m, one line per n with its seed-CI band, one panel per
    regime; a dot on each line at its m*(n)."""
    regimes = summary["regime"].unique(maintain_order=True).to_list()
    fig, axes = plt.subplots(1, len(regimes), figsize=(5.2 * len(regimes), 4.2), squeeze=False)
    stars = _primary(fits, "m_star", metric)
    column = metric
    for ax, regime in zip(axes[0], regimes, strict=True):
        sub = summary.filter(pl.col("regime") == regime)
        for (n,), line in sub.sort("m").group_by(["n"], maintain_order=True):
            m = line["m"].to_numpy().astype(float)
            mean = line[f"{column}_mean"].to_numpy().astype(float)
            ci = line[f"{column}_seed_ci"].fill_null(0).fill_nan(0).to_numpy().astype(float)
            shown = ax.plot(m, mean, marker=".", label=f"n={n}")[0]
            low = np.clip(mean - ci, mean * 1e-3, None)
            ax.fill_between(m, low, mean + ci, color=shown.get_color(), alpha=0.15)
            star = stars.filter((pl.col("regime") == regime) & (pl.col("n") == n))
            if star.height and math.isfinite(star["m_star"][0]):
                ax.axvline(star["m_star"][0], color=shown.get_color(), lw=0.6, ls=":")
        ax.set(xscale="log", yscale="log", xlabel="m (negatives)", ylabel=f"{metric} (seed mean)")
        ax.set_title(f"{regime}: {metric} against m (dotted: m*(n))")
        ax.legend(fontsize=7)
    save(fig, path)


def plot_m_star(fits: pl.DataFrame, metric: str, path, save) -> None:
    """m*(n) with its bootstrap CI per regime, and the sqrt(n), 0.4 n and n reference lines."""
    points = _primary(fits, "m_star", metric)
    laws = _primary(fits, "m_star_exponent", metric)
    fig, ax = plt.subplots(figsize=(7.5, 5))
    n_all = points["n"].to_numpy().astype(float)
    grid = np.geomspace(n_all.min(), n_all.max(), 50)
    for label, values, style in (
        ("sqrt(n)", np.sqrt(grid), ":"),
        ("0.4 n", 0.4 * grid, "--"),
        ("n", grid, "-."),
    ):
        ax.plot(grid, values, color="grey", ls=style, lw=0.8, label=label)
    for (regime,), sub in points.sort("n").group_by(["regime"], maintain_order=True):
        n = sub["n"].to_numpy().astype(float)
        value = sub["m_star"].to_numpy().astype(float)
        lo = np.nan_to_num(value - sub["m_star_lo"].to_numpy().astype(float))
        hi = np.nan_to_num(sub["m_star_hi"].to_numpy().astype(float) - value)
        law = laws.filter(pl.col("regime") == regime)
        tag = ""
        if law.height:
            row = law.row(0, named=True)
            tag = (
                f", a = {row['exponent']:.2f} [{row['exponent_lo']:.2f}, {row['exponent_hi']:.2f}]"
            )
        ax.errorbar(n, value, yerr=[lo, hi], marker="o", capsize=3, label=f"{regime}{tag}")
    delta = points["delta"][0] if points.height else float("nan")
    ax.set(xscale="log", yscale="log", xlabel="n (anchors)", ylabel="m*(n)")
    ax.set_title(f"critical negatives m*(n), {metric}, delta = {delta:g}, 95% bootstrap CI")
    ax.legend(fontsize=7)
    save(fig, path)


def plot_exact_gap(summary: pl.DataFrame, path, save) -> None:
    """The exact gap L(s) - Lhat(s) against m per n (cells with an infinite L(s) left out)."""
    regimes = summary["regime"].unique(maintain_order=True).to_list()
    fig, axes = plt.subplots(1, len(regimes), figsize=(5.2 * len(regimes), 4.2), squeeze=False)
    for ax, regime in zip(axes[0], regimes, strict=True):
        sub = summary.filter((pl.col("regime") == regime) & pl.col("gap_mean").is_finite())
        for (n,), line in sub.sort("m").group_by(["n"], maintain_order=True):
            ax.plot(
                line["m"].to_list(), line["gap_mean"].abs().to_list(), marker=".", label=f"n={n}"
            )
        ax.set(xscale="log", yscale="log", xlabel="m (negatives)", ylabel="|L(s) - Lhat(s)|")
        ax.set_title(f"{regime}: exact generalisation gap (finite cells)")
        if ax.get_lines():
            ax.legend(fontsize=7)
    save(fig, path)


def plot_gap_and_bound(summary: pl.DataFrame, path, save) -> None:
    """|gap| (the held-out estimate; the outer gap for sscrl) and the certified gamma_lin (plus
    the LSE inner bound in scrl) against m, one colour per n, one panel per regime."""
    regimes = summary["regime"].unique(maintain_order=True).to_list()
    fig, axes = plt.subplots(1, len(regimes), figsize=(5.2 * len(regimes), 4.2), squeeze=False)
    for ax, regime in zip(axes[0], regimes, strict=True):
        sub = summary.filter(pl.col("regime") == regime)
        gap = "gap_outer_mean" if regime == "sscrl" else "gap_mean"
        for (n,), line in sub.sort("m").group_by(["n"], maintain_order=True):
            m = line["m"].to_list()
            shown = ax.plot(m, line[gap].abs().to_list(), marker=".", label=f"|gap| n={n}")[0]
            ax.plot(m, line["best_bound_mean"].to_list(), ls="--", color=shown.get_color())
        ax.set(xscale="log", yscale="log", xlabel="m (negatives)", ylabel="|gap|, bound (dashed)")
        ax.set_title(f"{regime}: gap and certified bound")
        ax.legend(fontsize=7)
    save(fig, path)


def _covers(row: dict, value: float) -> str:
    inside = row["exponent_lo"] <= value <= row["exponent_hi"]
    return "inside" if inside else "outside"


def finding(fits: pl.DataFrame, summary: pl.DataFrame, metric: str) -> str:
    """One paragraph per regime stating m*(n), its growth and the exponent against the sources."""
    points = _primary(fits, "m_star", metric)
    laws = _primary(fits, "m_star_exponent", metric)
    if points.is_empty():
        return "No m*(n) could be computed (fewer than three m values with finite metrics per n)."
    delta = points["delta"][0]
    parts = []
    for (regime,), sub in points.sort("n").group_by(["regime"], maintain_order=True):
        rows = sub.rows(named=True)
        listed = "; ".join(
            f"n = {r['n']}: {r['m_star']:.0f} [{r['m_star_lo']:.0f}, {r['m_star_hi']:.0f}] "
            f"({r['m_star'] / r['n']:.2f} n)"
            for r in rows
        )
        seeds = rows[0]["seeds"]
        text = f"<b>{regime}</b> ({metric}, delta = {delta:g}, {seeds} seeds): m*(n) = {listed}."
        law = laws.filter(pl.col("regime") == regime)
        if law.height:
            row = law.row(0, named=True)
            text += (
                f" Exponent of m* ~ n^a: a = {row['exponent']:.2f} "
                f"[{row['exponent_lo']:.2f}, {row['exponent_hi']:.2f}]; the sqrt(n) law (a = 0.5) "
                f"is {_covers(row, 0.5)} the interval, the linear law (a = 1) "
                f"{_covers(row, 1.0)} it, the paper's 0.94 {_covers(row, 0.94)} it."
            )
        sens = fits.filter(
            (pl.col("kind") == "m_star_exponent")
            & (pl.col("shape") == metric)
            & (pl.col("regime") == regime)
        ).sort("delta")
        if sens.height > 1:
            text += (
                " Sensitivity: "
                + ", ".join(
                    f"delta = {r['delta']:g}: {r['exponent']:.2f} [{r['exponent_lo']:.2f}, "
                    f"{r['exponent_hi']:.2f}]"
                    for r in sens.rows(named=True)
                )
                + "."
            )
        if regime in DESIGN_NOTE:
            text += f" Compare: {PAPER}; {DESIGN_NOTE[regime]}."
        parts.append(f"<p>{text}</p>")
    if "calibration_holds_fraction" in summary.columns:
        holds = summary["calibration_holds_fraction"].mean()
        finite = summary["risk_finite_fraction"].mean()
        converged = summary["solver_converged_fraction"].mean()
        parts.append(
            f"<p>Li et al.'s calibration inequality E* - E(s) &le; sqrt((2/T)(L(s) - L*)) held in "
            f"{holds:.1%} of cells (mean over (m, n) of the per-seed fraction); L(s) was finite in "
            f"{finite:.1%} (an infinite L(s) is reported as inf, never replaced by an estimate); "
            f"the solver reached its tolerance in {converged:.1%}.</p>"
        )
    return "".join(parts)


def body(summary: pl.DataFrame, fits: pl.DataFrame, out: Path, save: Save) -> str:
    """The paired grid's section: m*(n) figures, the generated finding, the m* and gap tables."""
    images, findings = [], []
    metrics = fits.filter(pl.col("kind") == "m_star")["shape"].unique(maintain_order=True)
    for metric in metrics.to_list():
        plot_curves(summary, fits, metric, out / f"{metric}_vs_m.png", save)
        plot_m_star(fits, metric, out / f"m_star_{metric}.png", save)
        images += [f"{metric}_vs_m.png", f"m_star_{metric}.png"]
        findings.append(finding(fits, summary, metric))
    if "gamma_lin_mean" in summary.columns:  # user pairs: the certified bound against the gap
        plot_gap_and_bound(summary, out / "gap_and_bound_vs_m.png", save)
        images.append("gap_and_bound_vs_m.png")
    else:  # the Gaussian: the exact gap
        plot_exact_gap(summary, out / "exact_gap_vs_m.png", save)
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
