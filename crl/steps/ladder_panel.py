"""The report's ladder section of a family: for every group of its summary (single-modality:
(regime, loss, m); dense: the objective, the encoder epoch and m) whose cells carry the
PAC-Bayes rungs, at the report's reference setting, the rungs against n on one log axis, all as
bounds on (or estimates of) the head's population loss, in fractions of the loss's range
((value - loss_min) / loss_range, so that losses below 0, as LSE's, show):

held-out loss (`test_loss`), the data-dependent Gibbs head's held-out loss (`gibbs_test_loss`),
the test-set certificate, the PAC-Bayes certificates (data-free, data-dependent, and over the
data-dependent prior's mean as a reference), the best
Rademacher bound read as `train_loss + best_bound` (`best_dense_bound` for dense cells), and
`train_loss + uniform_deviation_est` (the uniform deviation the Rademacher bounds bound,
estimated from below; single-modality cells)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import polars as pl  # noqa: E402

from crl.steps.figures import panels  # noqa: E402

Save = Callable[[plt.Figure, Path], None]
MAX_PANELS = 12
RUNGS = [
    ("held-out loss", pl.col("test_loss_mean"), "black", "-"),
    ("Gibbs held-out loss", pl.col("gibbs_test_loss_mean"), "gray", "--"),
    ("test-set certificate", pl.col("cert_test_set_mean"), "tab:green", "-"),
    ("PAC-Bayes, data-dependent prior", pl.col("cert_pb_data_mean"), "tab:blue", "-"),
    ("PAC-Bayes, data-free prior", pl.col("cert_pb_free_mean"), "tab:cyan", "-"),
    ("PAC-Bayes, excess over the prior's mean", pl.col("cert_pb_ref_mean"), "tab:purple", "-"),
    ("best Rademacher bound", pl.col("train_loss_mean") + pl.col("_rademacher"), "tab:red", "-"),
    (
        "train + uniform deviation est.",
        pl.col("train_loss_mean") + pl.col("uniform_deviation_est_mean"),
        "tab:orange",
        ":",
    ),
]


UNIMODAL_KEYS = ("regime", "loss", "m")
DENSE_KEYS = ("regime", "negatives", "correspondence", "lam", "encoder_epoch", "m")
BOUNDS = ("best_bound_mean", "best_dense_bound_mean")


def rows(summary: pl.DataFrame) -> pl.DataFrame:
    """The summary rows that carry the ladder (a data-dependent PAC-Bayes certificate), with
    `_rademacher` the best Rademacher bound of the row's family."""
    if "cert_pb_data_mean" not in summary.columns:
        return summary.clear()
    bounds = [pl.col(c) for c in BOUNDS if c in summary.columns]
    rademacher = pl.coalesce(bounds) if bounds else pl.lit(None, dtype=pl.Float64)
    out = summary.filter(pl.col("cert_pb_data_mean").is_not_null())
    return out.with_columns(rademacher.cast(pl.Float64).alias("_rademacher"))


SHORT = {"lam": "lam", "encoder_epoch": "epoch", "m": "m"}  # the others: their value alone


def title(key: dict) -> str:
    """A panel's title from its group's key: "scrl / ext / geometric / lam 1 / epoch 3 / m 4"
    (a null key, as the encoder epoch without a pretraining, left out)."""
    parts = (f"{SHORT[k]} {v:g}" if k in SHORT else f"{v}" for k, v in key.items() if v is not None)
    return " / ".join(parts)


def plot(
    summary: pl.DataFrame, path: Path, save: Save, keys: tuple[str, ...] = UNIMODAL_KEYS
) -> None:
    """One panel per group: every rung against n (log-log)."""
    ladder = rows(summary)
    by = [k for k in keys if k in ladder.columns]
    groups = list(ladder.group_by(by, maintain_order=True))[:MAX_PANELS]
    fig, axes = panels(len(groups))
    for ax, (values_of_key, group) in zip(axes, groups, strict=False):
        group = group.sort("n")
        low = pl.col("loss_min") if "loss_min" in group.columns else pl.lit(0.0)
        for label, expr, color, style in RUNGS:
            scaled = (expr - low) / pl.col("loss_range")
            if not all(c in group.columns for c in expr.meta.root_names()):
                continue
            values = group.select(pl.col("n"), scaled.alias("value")).drop_nulls()
            values = values.filter(pl.col("value") > 0)
            if values.height:
                ax.plot(
                    values["n"], values["value"], style, marker="o", ms=3, color=color, label=label
                )
        ax.set(xscale="log", yscale="log", xlabel="n", ylabel="(loss - loss_min) / loss range")
        ax.set_xticks(group["n"].to_list(), [str(n) for n in group["n"].to_list()])
        ax.minorticks_off()
        ax.set_title(title(dict(zip(by, values_of_key, strict=True))), fontsize=8)
    if groups:
        axes[0].legend(fontsize=6)
    save(fig, path)


def section(
    summary: pl.DataFrame,
    out: Path,
    save: Save,
    html_table: Callable[..., str],
    keys: tuple[str, ...] = UNIMODAL_KEYS,
    image: str = "ladder.png",
) -> str:
    """The ladder section ("" when no cell carries it)."""
    ladder = rows(summary)
    if ladder.is_empty():
        return ""
    plot(summary, out / image, save, keys)
    columns = [
        *keys,
        "loss",
        "n",
        "seeds",
        "test_loss_mean",
        "gibbs_test_loss_mean",
        "cert_test_set_mean",
        "cert_pb_data_mean",
        "cert_pb_data_kl_mean",
        "cert_pb_data_excess_ratio_mean",
        "cert_pb_free_mean",
        "cert_pb_free_kl_mean",
        "cert_pb_ref_mean",
        "cert_pb_ref_excess_ratio_mean",
        *BOUNDS,
        "uniform_deviation_est_mean",
        "gap_mean",
    ]
    view = ladder.select(list(dict.fromkeys(c for c in columns if c in ladder.columns)))
    return f"""<h2>How loose? The certificate ladder</h2>
<p>Every rung as a bound on (or estimate of) the head's population loss, means over seeds: the
PAC-Bayes certificates bound the Gibbs head's loss (gray), the others the head's own; the
Rademacher bound bounds the uniform deviation, which the ascent estimates from below.
<code>cert_pb_data_excess_ratio</code>: the data-dependent certificate's excess over the Gibbs
held-out loss, relative to that of a test-set certificate from as many tuples.</p>
<img src="{image}">{html_table(view, limit=200)}"""
