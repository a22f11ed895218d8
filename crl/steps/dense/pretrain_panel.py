"""The report's pretraining section: the training curve (tables/pretrain.parquet) and how the
dense cells move with the encoder's epoch (the summary's encoder_epoch axis) at the grid's
largest m and n: MI estimate, correspondence top-1, dense probe, gap and best bound."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from crl.steps.figures import panels  # noqa: E402

Save = Callable[[plt.Figure, Path], None]
CURVE = ["regime", "negatives", "correspondence", "lam"]
METRICS = [
    ("mi_estimate", "MI estimate (nats)", None),
    ("correspondence_top1", "correspondence top-1", "correspondence_chance"),
    ("dense_probe_accuracy", "dense probe accuracy", "dense_probe_majority"),
    ("gap", "gap (nats)", None),
    ("best_dense_bound", "best certified bound (nats)", None),
]
TABLE = [
    *CURVE,
    "encoder_epoch",
    "m",
    "n",
    "seeds",
    "mi_estimate_mean",
    "mi_estimate_seed_ci",
    "mi_lcb_mean",
    "correspondence_top1_mean",
    "correspondence_chance_mean",
    "dense_probe_accuracy_mean",
    "dense_probe_majority_mean",
    "test_loss_mean",
    "gap_mean",
    "best_dense_bound_mean",
    "learning_gain_rel_mean",
]


def _values(frame: pl.DataFrame, column: str) -> np.ndarray:
    if column not in frame.columns:
        return np.full(frame.height, np.nan)
    return frame[column].cast(pl.Float64).fill_null(np.nan).to_numpy()


def at_largest(summary: pl.DataFrame) -> pl.DataFrame:
    """The dense summary at its largest n and m, every encoder epoch."""
    return summary.filter(
        (pl.col("n") == summary["n"].max()) & (pl.col("m") == summary["m"].max())
    ).sort([*[c for c in CURVE if c in summary.columns], "encoder_epoch"])


def plot_curve(pretrain: pl.DataFrame, path: Path, save: Save) -> None:
    """Training loss and throughput against the epoch."""
    fig, axes = panels(2)
    epoch = _values(pretrain, "epoch")
    axes[0].plot(epoch, _values(pretrain, "loss"), "o-")
    axes[0].set(xlabel="epoch", ylabel="training loss (nats)", title="pretraining loss")
    axes[1].plot(epoch, _values(pretrain, "images_per_second"), "o-", color="C1")
    axes[1].set(xlabel="epoch", ylabel="images / s", title="throughput (all workers)")
    save(fig, path)


def plot_by_epoch(top: pl.DataFrame, path: Path, save: Save) -> None:
    """Each metric against the encoder epoch, a line per dense objective (seed CI bars)."""
    fig, axes = panels(len(METRICS))
    keys = [c for c in CURVE if c in top.columns]
    for ax, (metric, label, baseline) in zip(axes, METRICS, strict=False):
        for i, (key, line) in enumerate(top.group_by(keys, maintain_order=True)):
            ax.errorbar(
                _values(line, "encoder_epoch"),
                _values(line, f"{metric}_mean"),
                yerr=_values(line, f"{metric}_seed_ci"),
                marker="o",
                ms=3,
                color=f"C{i % 10}",
                label=" ".join(str(k) for k in key),
            )
            if baseline is not None:
                ax.plot(
                    _values(line, "encoder_epoch"),
                    _values(line, f"{baseline}_mean"),
                    ":",
                    color=f"C{i % 10}",
                    lw=0.8,
                )
        m, n = top["m"].max(), top["n"].max()
        ax.set(xlabel="encoder epoch", ylabel=label, title=f"{label}, m={m}, n={n}")
        ax.legend(fontsize=5)
    save(fig, path)


def section(
    pretrain: pl.DataFrame | None,
    dense: pl.DataFrame,
    out: Path,
    save: Save,
    table: Callable[..., str],
) -> str:
    """The pretraining section of the page ("" when the dense cells have no encoder epochs)."""
    if "encoder_epoch" not in dense.columns or dense["encoder_epoch"].is_null().all():
        return ""
    parts = ["<h1>Pretrained encoders</h1>"]
    if pretrain is not None and pretrain.height:
        plot_curve(pretrain, out / "pretrain_curve.png", save)
        parts.append('<h2>pretraining curve</h2><img src="pretrain_curve.png">')
    top = at_largest(dense)
    plot_by_epoch(top, out / "dense_by_encoder_epoch.png", save)
    parts.append(
        "<h2>dense cells against the encoder's epoch (dotted: chance and majority "
        'baselines)</h2><img src="dense_by_encoder_epoch.png">'
    )
    parts.append(table(top.select([c for c in TABLE if c in top.columns])))
    return "\n".join(parts)
