"""The dense section of the report: gap and certified bounds against n and m, the MI lower
bound against log(1 + m), dense downstream metrics against m; from the summary table alone."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
from matplotlib.ticker import NullFormatter  # noqa: E402

from crl.steps.figures import panels  # noqa: E402

OBJECTIVE = ["regime", "negatives", "correspondence", "lam", "encoder_epoch"]
HEADLINE = [
    *OBJECTIVE,
    "m",
    "n",
    "seeds",
    "train_loss_mean",
    "test_loss_mean",
    "gap_mean",
    "gap_seed_ci",
    "gamma_dense_V_mean",
    "gamma_dense_S_mean",
    "gamma_dense_E_mean",
    "queue_total_mean",
    "best_dense_bound_mean",
    "dense_bound_over_range_mean",
    "gamma_dense_S_holds_fraction",
    "gamma_dense_E_holds_fraction",
    "queue_total_holds_fraction",
    "mi_estimate_mean",
    "mi_lcb_mean",
    "mi_log1p_m_mean",
    "dense_probe_accuracy_mean",
    "dense_probe_majority_mean",
    "correspondence_top1_mean",
    "solver_converged_fraction",
]
Save = Callable[[plt.Figure, Path], None]


def _title(key: dict) -> str:
    queue = "queue" if key["regime"] == "sscrl" else "per-image"
    lam, epoch = key["lam"], key.get("encoder_epoch")
    return (
        f"{queue} {key['negatives']} {key['correspondence']}"
        + ("" if lam == 1.0 else f" lambda={lam:g}")
        + ("" if epoch is None else f" encoder epoch {epoch}")
    )


def _groups(summary: pl.DataFrame) -> list[tuple[dict, pl.DataFrame]]:
    """The summary's curves, one per objective (and encoder epoch, where there is one)."""
    keys = [c for c in OBJECTIVE if c in summary.columns]
    return [
        (dict(zip(keys, k, strict=True)), g) for k, g in summary.group_by(keys, maintain_order=True)
    ]


def _column(frame: pl.DataFrame, name: str) -> np.ndarray:
    if name not in frame.columns:
        return np.full(frame.height, np.nan)
    return frame[name].cast(pl.Float64).fill_null(np.nan).to_numpy()


def _log_axis(ax, values: np.ndarray) -> None:
    """A log x axis labelled at the grid's own values only."""
    ticks = sorted({float(v) for v in values})
    ax.set_xscale("log")
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.xaxis.set_minor_formatter(NullFormatter())


def plot_gap(summary: pl.DataFrame, path: Path, save: Save, axis: str) -> None:
    """|gap| (seed CI) and the best certified bound against `axis`, a line per other value."""
    other = "m" if axis == "n" else "n"
    groups = _groups(summary)
    fig, axes = panels(len(groups))
    for ax, (key, group) in zip(axes, groups, strict=False):
        for i, (value, line) in enumerate(group.sort(axis).group_by([other], maintain_order=True)):
            colour = f"C{i}"
            x = _column(line, axis)
            ax.errorbar(
                x,
                np.abs(_column(line, "gap_mean")),
                yerr=_column(line, "gap_seed_ci"),
                color=colour,
                marker="o",
                ms=3,
                label=f"|gap| {other}={value[0]}",
            )
            bound = _column(line, "best_dense_bound_mean")
            ax.plot(x, bound, "--", color=colour, label=f"best bound {other}={value[0]}")
        _log_axis(ax, _column(group, axis))
        ax.set(yscale="log", xlabel=axis, ylabel="nats", title=_title(key))
        ax.legend(fontsize=6)
    save(fig, path)


def plot_mi(summary: pl.DataFrame, path: Path, save: Save) -> None:
    """MI estimate and its lower confidence bound against m at the largest n, with log(1 + m)
    and the ceiling log N - psi_lo."""
    groups = _groups(summary)
    fig, axes = panels(len(groups))
    for ax, (key, group) in zip(axes, groups, strict=False):
        top = group.filter(pl.col("n") == group["n"].max()).sort("m")
        m = _column(top, "m")
        ax.plot(m, _column(top, "mi_estimate_mean"), "o-", label="estimate")
        ax.plot(m, _column(top, "mi_lcb_mean"), "s-", label="certified LCB")
        ax.plot(m, np.log1p(m), "k:", label="log(1+m)")
        ax.plot(m, _column(top, "mi_ceiling_mean"), "k--", lw=0.7, label="ceiling")
        _log_axis(ax, m)
        ax.set(xlabel="m", ylabel="nats", title=f"{_title(key)}, n={top['n'][0]}")
        ax.legend(fontsize=6)
    save(fig, path)


def plot_downstream(summary: pl.DataFrame, path: Path, save: Save) -> None:
    """Dense probe accuracy and correspondence retrieval against m at the largest n."""
    fig, axes = panels(2)
    for ax, metric in zip(axes, ("dense_probe_accuracy", "correspondence_top1"), strict=True):
        if not np.isfinite(_column(summary, f"{metric}_mean")).any():
            # the probe needs per-pixel labels, which user images may not have
            ax.text(
                0.5,
                0.5,
                f"no {metric.replace('_', ' ')} in these cells\n(no pixel labels)",
                ha="center",
                va="center",
                transform=ax.transAxes,
            )
            ax.set(title=metric, xticks=[], yticks=[])
            continue
        for i, (key, group) in enumerate(_groups(summary)):
            top = group.filter(pl.col("n") == group["n"].max()).sort("m")
            ax.plot(
                _column(top, "m"),
                _column(top, f"{metric}_mean"),
                "o-",
                color=f"C{i % 10}",
                label=_title(key),
            )
        if metric == "dense_probe_accuracy" and "dense_probe_majority_mean" in summary.columns:
            ax.axhline(
                float(summary["dense_probe_majority_mean"].mean() or 0),
                color="k",
                ls=":",
                lw=0.8,
                label="majority class",
            )
        _log_axis(ax, _column(summary, "m"))
        ax.set(xlabel="m", ylabel=metric.replace("_", " "), title=metric)
        ax.legend(fontsize=5)
    save(fig, path)


def body(
    summary: pl.DataFrame,
    fits: pl.DataFrame,
    out: Path,
    save: Save,
    table: Callable[..., str],
) -> str:
    """The dense section of the page: four figures, the cells and the slope fits."""
    plot_gap(summary, out / "dense_gap_vs_n.png", save, "n")
    plot_gap(summary, out / "dense_gap_vs_m.png", save, "m")
    plot_mi(summary, out / "dense_mi_vs_m.png", save)
    plot_downstream(summary, out / "dense_downstream_vs_m.png", save)
    images = [
        "dense_gap_vs_n.png",
        "dense_gap_vs_m.png",
        "dense_mi_vs_m.png",
        "dense_downstream_vs_m.png",
    ]
    view = summary.select([c for c in HEADLINE if c in summary.columns])
    slopes = fits.filter(pl.col("kind") == "slopes") if fits.height else fits
    keep = [
        c
        for c in (*OBJECTIVE, "loss", "shape", "coef_c", "slope_m", "slope_n", "r2", "points")
        if c in slopes.columns
    ]
    return f"""<h1>Dense contrastive cells</h1>
{"".join(f'<h2>{i[:-4].replace("_", " ")}</h2><img src="{i}">' for i in images)}
<h2>Dense gap against the certified bounds (means over seeds)</h2>{table(view, limit=400)}
<h2>Dense slopes in m and n of the gap and of each bound</h2>{table(slopes.select(keep))}"""
