"""The report's scaling section of a family: for every group of its summary at the reference
setting (the family's keys, m included) with at least three values of n, on log-log axes
against n: the held-out |gap|, the best Rademacher bound on it (`best_bound`;
`best_dense_bound` for dense cells) and each certificate's excess over the held-out loss it
certifies (`cert_test_set - test_loss_m`, `cert_pb_data - gibbs_test_loss`, `cert_pb_free -
cert_pb_free_gibbs_test`), seed means. Each line is labelled with its fitted exponent in n and
the exponent's 95% interval (crl.kernels.rates.fit_loglog_slopes on the line's own points; the
fits table's `slopes` rows fit m and n jointly over a setting's grid); the sources' rates are
n^-1/2. A table lists the exponents."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from crl.kernels import rates  # noqa: E402
from crl.steps import ladder_panel  # noqa: E402
from crl.steps.figures import panels  # noqa: E402

Save = Callable[[plt.Figure, Path], None]
MAX_PANELS = 12
MIN_SIZES = 3  # values of n a line needs for an exponent with an interval
# (label, column of the quantity, column subtracted or None, colour, style)
QUANTITIES = (
    ("|held-out gap|", "gap_mean", None, "black", "-"),
    ("best Rademacher bound", "best_bound_mean", None, "tab:red", "-"),
    ("best Rademacher bound", "best_dense_bound_mean", None, "tab:red", "-"),
    ("test-set excess", "cert_test_set_mean", "test_loss_m_mean", "tab:green", "-"),
    ("PAC-Bayes data excess", "cert_pb_data_mean", "gibbs_test_loss_mean", "tab:blue", "-"),
    ("PAC-Bayes ref excess", "cert_pb_ref_mean", "gibbs_test_loss_mean", "tab:purple", "-"),
    (
        "PAC-Bayes free excess",
        "cert_pb_free_mean",
        "cert_pb_free_gibbs_test_mean",
        "tab:cyan",
        "--",
    ),
)


def _values(group: pl.DataFrame, column: str, minus: str | None) -> np.ndarray | None:
    """The quantity's seed means in the group's row order (absolute for the gap), or None."""
    if column not in group.columns or (minus is not None and minus not in group.columns):
        return None
    value = pl.col(column).cast(pl.Float64)
    if minus is not None:
        value = value - pl.col(minus).cast(pl.Float64)
    out = group.select(value.abs() if minus is None else value).to_series()
    return out.fill_null(np.nan).to_numpy()


def lines(group: pl.DataFrame) -> list[dict]:
    """Every quantity of one group that has an exponent: its label, points and fit."""
    group = group.sort("n")
    n = group["n"].to_numpy().astype(np.float64)
    out = []
    for label, column, minus, color, style in QUANTITIES:
        y = _values(group, column, minus)
        if y is None:
            continue
        keep = np.isfinite(y) & (y > 0)
        if np.unique(n[keep]).size < MIN_SIZES:
            continue
        fit = rates.fit_loglog_slopes(np.ones(int(keep.sum())), n[keep], y[keep])
        if math.isfinite(fit.slope_n):
            out.append(
                {
                    "label": label,
                    "quantity": column if minus is None else f"{column} - {minus}",
                    "n": n[keep],
                    "y": y[keep],
                    "slope_n": fit.slope_n,
                    "slope_n_ci": fit.slope_n_ci,
                    "points": fit.n_points,
                    "color": color,
                    "style": style,
                }
            )
    return out


def _groups(summary: pl.DataFrame, keys: tuple[str, ...]) -> list[tuple[dict, list[dict]]]:
    by = [k for k in keys if k in summary.columns]
    found = []
    for values, group in summary.group_by(by, maintain_order=True):
        drawn = lines(group)
        if drawn:
            found.append((dict(zip(by, values, strict=True)), drawn))
    return found[:MAX_PANELS]


def section(
    summary: pl.DataFrame,
    out: Path,
    save: Save,
    html_table: Callable[..., str],
    keys: tuple[str, ...],
    image: str,
) -> str:
    """The scaling section ("" when no group has three values of n)."""
    groups = _groups(summary, keys)
    if not groups:
        return ""
    fig, axes = panels(len(groups))
    rows = []
    for ax, (key, drawn) in zip(axes, groups, strict=False):
        for line in drawn:
            label = f"{line['label']}: n^{line['slope_n']:.2f} ± {line['slope_n_ci']:.2f}"
            ax.plot(line["n"], line["y"], line["style"], marker="o", ms=3, color=line["color"])
            ax.lines[-1].set_label(label)
            rows.append({**key, **{k: line[k] for k in ("quantity", "slope_n", "slope_n_ci")}})
            rows[-1]["points"] = line["points"]
        sizes = sorted({int(v) for line in drawn for v in line["n"]})
        ax.set(xscale="log", yscale="log", xlabel="n", ylabel="loss units")
        ax.set_xticks(sizes, [f"{s:g}" for s in sizes], rotation=45 if len(sizes) > 4 else 0)
        ax.minorticks_off()
        ax.set_title(ladder_panel.title(key), fontsize=8)
        ax.legend(fontsize=5)
    save(fig, out / image)
    table = pl.DataFrame(rows)
    return f"""<h2>Scaling in n: the gap, the bounds and the certificates' excess</h2>
<p>Log-log against n, means over seeds: the held-out |gap|, the best Rademacher bound on it, and
each certificate's excess over the held-out loss it certifies; each line's exponent in n with
its 95% interval (the sources' rates are n^-1/2). The test-set certificate's excess is set by
the held-out tuples (<code>cert_test_set_n</code>), not by n: flat. A |gap| within its noise of 0
gives an exponent with a wide interval. The fits table's <code>slopes</code> rows give the same
exponents fitted over a setting's whole (m, n) grid.</p>
<img src="{image}">{html_table(table, limit=200)}"""
