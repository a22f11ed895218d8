"""The unimodal family's section of the report: the gap and the certified bounds against n and
m, their ratio, downstream metrics against m, and m*(n), drawn from the summary and fits."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
from matplotlib.ticker import NullFormatter  # noqa: E402

from crl.core.provenance import PROVENANCE_COLUMNS  # noqa: E402
from crl.steps.figures import Save, panels  # noqa: E402
from crl.steps.pages import html_table  # noqa: E402

METRICS = ["mean_classifier_accuracy", "linear_probe_accuracy", "retrieval_auc"]


def _objectives(summary: pl.DataFrame) -> list[tuple[str, str]]:
    return [tuple(r) for r in summary.select(["regime", "loss"]).unique(maintain_order=True).rows()]


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


def plot_gap(summary: pl.DataFrame, path: Path, save: Save, axis: str) -> None:
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
    save(fig, path)


def plot_tightness(summary: pl.DataFrame, path: Path, save: Save) -> None:
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
    save(fig, path)


def plot_downstream_vs_m(summary: pl.DataFrame, path: Path, save: Save) -> None:
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
    save(fig, path)


def plot_m_star(fits: pl.DataFrame, path: Path, save: Save) -> bool:
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
    save(fig, path)
    return True


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


def body(summary: pl.DataFrame, fits: pl.DataFrame, out: Path, save: Save) -> str:
    """The single-modality grid's section: gap and bounds against n and m, downstream."""
    plot_gap(summary, out / "gap_vs_n.png", save, "n")
    plot_gap(summary, out / "gap_vs_m.png", save, "m")
    plot_tightness(summary, out / "tightness.png", save)
    plot_downstream_vs_m(summary, out / "downstream_vs_m.png", save)
    images = ["gap_vs_n.png", "gap_vs_m.png", "tightness.png", "downstream_vs_m.png"]
    if plot_m_star(fits, out / "m_star.png", save):
        images.append("m_star.png")
    headline = summary.select([c for c in HEADLINE if c in summary.columns])
    fit_view = fits.filter(
        pl.col("kind").is_in(["slopes", "rate", "power", "m_star_exponent"])
    ).drop(PROVENANCE_COLUMNS)
    return f"""{"".join(f'<h2>{i[:-4].replace("_", " ")}</h2><img src="{i}">' for i in images)}
<h2>Gap against the certified bounds (means over seeds)</h2>{html_table(headline)}
<h2>Slopes in m and n of the gap and of each bound; rate-shape fits</h2>
{html_table(fit_view)}"""
