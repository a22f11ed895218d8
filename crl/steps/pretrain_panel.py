"""The report's pretraining sections, one per pretrained family: the training curve
(tables/pretrain.parquet) and how the cells move with the encoder's epoch (the summary's
encoder_epoch axis) at the grid's largest m and n. Unimodal cells (encoder.pretrain): linear
probe, mean classifier, retrieval AUC, gap and best bound; dense cells (dense.pretrain): MI
estimate, correspondence top-1, dense probe, gap and best bound."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from crl.steps.figures import panels  # noqa: E402

Save = Callable[[plt.Figure, Path], None]


@dataclass(frozen=True)
class Family:
    """What the section of one family draws: its curves' keys, its metrics (column, label,
    baseline column or None) and its table's columns."""

    name: str
    curve: list[str]
    metrics: list[tuple[str, str, str | None]]
    table: list[str]


DENSE = Family(
    "dense",
    ["regime", "negatives", "correspondence", "lam"],
    [
        ("mi_estimate", "MI estimate (nats)", None),
        ("correspondence_top1", "correspondence top-1", "correspondence_chance"),
        ("dense_probe_accuracy", "dense probe accuracy", "dense_probe_majority"),
        ("gap", "gap (nats)", None),
        ("best_dense_bound", "best certified bound (nats)", None),
    ],
    [
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
    ],
)
UNIMODAL = Family(
    "unimodal",
    ["regime", "loss"],
    [
        ("linear_probe_accuracy", "linear probe accuracy on f", None),
        ("encoder_probe_accuracy", "linear probe accuracy on phi", None),
        ("mean_classifier_accuracy", "mean classifier accuracy", None),
        ("retrieval_auc", "retrieval AUC", None),
        ("gap", "gap", None),
        ("best_bound", "best certified bound", None),
    ],
    [
        "linear_probe_accuracy_mean",
        "linear_probe_accuracy_seed_ci",
        "encoder_probe_accuracy",
        "encoder_probe_accuracy_ci",
        "mean_classifier_accuracy_mean",
        "retrieval_auc_mean",
        "test_loss_mean",
        "gap_mean",
        "best_bound_mean",
        "learning_gain_rel_mean",
    ],
)


def _values(frame: pl.DataFrame, column: str) -> np.ndarray:
    if column not in frame.columns:
        return np.full(frame.height, np.nan)
    return frame[column].cast(pl.Float64).fill_null(np.nan).to_numpy()


HEAD_SETTINGS = ("R", "temperature", "normalise")  # a line each when the grid varies them


def curve_keys(frame: pl.DataFrame, family: Family) -> list[str]:
    """What tells one line of the by-epoch panels from another: the family's objective keys
    and the head settings that take several values in `frame`."""
    varying = [c for c in HEAD_SETTINGS if c in frame.columns and frame[c].n_unique() > 1]
    return [*(c for c in family.curve if c in frame.columns), *varying]


def at_largest(summary: pl.DataFrame, family: Family) -> pl.DataFrame:
    """The summary at its largest n and m, every encoder epoch."""
    return summary.filter(
        (pl.col("n") == summary["n"].max()) & (pl.col("m") == summary["m"].max())
    ).sort([*curve_keys(summary, family), "encoder_epoch"])


def _label(keys: list[str], values: tuple) -> str:
    return " ".join(
        f"{k}={v:g}" if k in HEAD_SETTINGS and isinstance(v, float) else str(v)
        for k, v in zip(keys, values, strict=True)
    )


def plot_curve(pretrain: pl.DataFrame, path: Path, save: Save) -> None:
    """Training loss, the objective's own retrieval (with its chance level and, for DenseCL,
    the queue's staleness) and throughput against the epoch; tables written before the
    retrieval columns draw the loss and throughput alone."""
    measured = "positive_top1" in pretrain.columns
    fig, axes = panels(3 if measured else 2)
    epoch = _values(pretrain, "epoch")
    axes[0].plot(epoch, _values(pretrain, "loss"), "o-")
    axes[0].set(xlabel="epoch", ylabel="training loss (nats)", title="pretraining loss")
    axes[-1].plot(epoch, _values(pretrain, "images_per_second"), "o-", color="C1")
    axes[-1].set(xlabel="epoch", ylabel="images / s", title="throughput (all workers)")
    if measured:
        ax = axes[1]
        ax.plot(epoch, _values(pretrain, "positive_top1"), "o-", color="C2", label="top-1")
        ax.plot(epoch, _values(pretrain, "positive_chance"), ":", color="C2", label="chance")
        if pretrain["queue_staleness"].drop_nulls().len():
            staleness = _values(pretrain, "queue_staleness")
            ax.plot(epoch, staleness, "s--", color="C3", label="queue staleness")
        ax.set(xlabel="epoch", ylabel="share", title="the objective's own retrieval")
        ax.legend(fontsize=6)
    save(fig, path)


def plot_by_epoch(top: pl.DataFrame, family: Family, path: Path, save: Save) -> None:
    """Each metric against the encoder epoch, a line per objective (seed CI bars)."""
    fig, axes = panels(len(family.metrics))
    keys = curve_keys(top, family)
    for ax, (metric, label, baseline) in zip(axes, family.metrics, strict=False):
        for i, (key, line) in enumerate(top.group_by(keys, maintain_order=True)):
            per_seed = f"{metric}_mean" in line.columns  # else one value per encoder
            ax.errorbar(
                _values(line, "encoder_epoch"),
                _values(line, f"{metric}_mean" if per_seed else metric),
                yerr=_values(line, f"{metric}_seed_ci" if per_seed else f"{metric}_ci"),
                marker="o",
                ms=3,
                color=f"C{i % 10}",
                label=_label(keys, key),
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
        if metric.startswith("best_"):  # bounds span orders of magnitude across objectives
            ax.set_yscale("log")
        ax.set(xlabel="encoder epoch", ylabel=label, title=f"{label}, m={m}, n={n}")
        ax.legend(fontsize=5)
    save(fig, path)


def section(
    pretrain: pl.DataFrame | None,
    cells: pl.DataFrame,
    family: Family,
    out: Path,
    save: Save,
    table: Callable[..., str],
) -> str:
    """The pretraining section of one family ("" when its cells have no encoder epochs).
    `pretrain`: the pretrain table (its rows of this family are drawn)."""
    if "encoder_epoch" not in cells.columns or cells["encoder_epoch"].is_null().all():
        return ""
    cells = cells.filter(pl.col("encoder_epoch").is_not_null())
    parts = [f"<h1>Pretrained encoders ({family.name} cells)</h1>"]
    if pretrain is not None and "encoder" in pretrain.columns:
        pretrain = pretrain.filter(pl.col("encoder") == family.name)
    elif family.name != "dense":  # tables written before the column: dense pretraining only
        pretrain = None
    if pretrain is not None and pretrain.height:
        plot_curve(pretrain, out / f"pretrain_curve_{family.name}.png", save)
        parts.append(f'<h2>pretraining curve</h2><img src="pretrain_curve_{family.name}.png">')
    top = at_largest(cells, family)
    image = f"{family.name}_by_encoder_epoch.png"
    plot_by_epoch(top, family, out / image, save)
    dotted = " (dotted: chance and majority baselines)" if family is DENSE else ""
    parts.append(
        f'<h2>{family.name} cells against the encoder\'s epoch{dotted}</h2><img src="{image}">'
    )
    columns = [*curve_keys(top, family), "encoder_epoch", "m", "n", "seeds", *family.table]
    parts.append(table(top.select([c for c in columns if c in top.columns])))
    return "\n".join(parts)
