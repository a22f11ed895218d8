"""The report's frontier section: one panel per family (learning gain against certified bound,
one point per grid point), the counts of points whose head did not learn or whose gap lies in
its own noise, and the frontier table; and the one setting the other panels are drawn at."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import polars as pl  # noqa: E402

from crl.core.provenance import PROVENANCE_COLUMNS  # noqa: E402
from crl.steps import frontier  # noqa: E402
from crl.steps.figures import panels  # noqa: E402
from crl.steps.tables import SETTINGS  # noqa: E402

Save = Callable[[plt.Figure, Path], None]


def reference_setting(frame: pl.DataFrame) -> dict:
    """For each setting (R, temperature, normalise, encoder_epoch) that takes several values in
    `frame`, the value the per-objective panels are drawn at: the middle one of its sorted
    values, and for encoder_epoch the last checkpoint (the trained encoder)."""
    chosen = {}
    for column in SETTINGS:
        if column not in frame.columns:
            continue
        values = sorted(v for v in frame[column].unique().to_list() if v is not None)
        if len(values) > 1:
            chosen[column] = (
                values[-1] if column == "encoder_epoch" else values[(len(values) - 1) // 2]
            )
    return chosen


def at_setting(frame: pl.DataFrame, setting: dict) -> pl.DataFrame:
    """The rows of `frame` at `setting` (rows without the column's value, e.g. another
    family's, are kept)."""
    for column, value in setting.items():
        if column in frame.columns:
            frame = frame.filter(pl.col(column).is_null() | (pl.col(column) == value))
    return frame


def setting_note(setting: dict) -> str:
    """One sentence naming the setting of the panels, or "" when nothing varies."""
    if not setting:
        return ""
    named = ", ".join(
        f"{k} = {v:g}" if isinstance(v, float) else f"{k} = {v}" for k, v in setting.items()
    )
    return (
        f"<p>The grid varies {', '.join(setting)}: the panels below are drawn at {named}; "
        "the frontier above and the pretraining panels cover every setting.</p>"
    )


Y_TOP = 1e3  # bounds above this many loss ranges are drawn on the top edge (as triangles)


def plot(points: pl.DataFrame, path: Path, save: Save) -> None:
    """Per family: learning_gain_rel against best certified bound / loss range, one marker per
    grid point (filled: learned in every seed; hollow: not), the vacuity line at 1 and the
    learned-and-certified corner (gain above 0, bound below the range) shaded. Bounds beyond
    Y_TOP ranges sit on the top edge as triangles."""
    families = points["family"].unique(maintain_order=True).to_list()
    fig, axes = panels(len(families))
    for ax, family in zip(axes, families, strict=False):
        sub = points.filter(pl.col("family") == family)
        shown = sub.filter(pl.col("bound_rel").is_not_null() & (pl.col("bound_rel") > 0))
        colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        groups = shown.group_by(["regime", "loss"], maintain_order=True)
        for i, ((regime, loss), line) in enumerate(groups):
            colour = colours[i % len(colours)]
            for learned in (True, False):
                for clipped in (False, True):
                    part = line.filter(
                        (pl.col("learned") == learned) & ((pl.col("bound_rel") > Y_TOP) == clipped)
                    )
                    if part.is_empty():
                        continue
                    y = [Y_TOP] * part.height if clipped else part["bound_rel"].to_list()
                    first = not clipped and learned
                    ax.scatter(
                        part["learning_gain_rel"].to_list(),
                        y,
                        s=18,
                        marker="^" if clipped else "o",
                        facecolors=colour if learned else "none",
                        edgecolors=colour,
                        label=f"{regime}/{loss}" if first else None,
                    )
        ax.set_yscale("log")
        x_lo, x_hi = ax.get_xlim()
        ax.fill_between(
            [0, max(x_hi, 1e-3)],
            1e-3,
            1,
            color="tab:green",
            alpha=0.12,
            label="learned and certified",
        )
        ax.axhline(1, color="black", lw=0.8, ls="--", label="bound = loss range")
        ax.axvline(0, color="grey", lw=0.5)
        ax.set_xlim(x_lo, x_hi)
        y_lo = shown["bound_rel"].min() if shown.height else 0.1
        ax.set_ylim(min(0.5 * (y_lo or 0.1), 0.5), Y_TOP * 2)
        ax.set(
            xlabel="learning gain / loss range (hollow: not learned)",
            ylabel="best certified bound / loss range",
            title=f"{family}: learning against certification",
        )
        ax.legend(fontsize=6)
    save(fig, path)


def counts(points: pl.DataFrame) -> str:
    """How many grid points learned, are certified, are both, and have gaps in their noise."""
    total = points.height
    learned = int(points["learned"].sum())
    certified = int(points["certified"].sum())
    both = int((points["learned"] & points["certified"]).sum())
    noisy = (
        int((points["gap_snr_mean"] <= 1).fill_null(False).sum())
        if "gap_snr_mean" in points.columns
        else 0
    )
    return (
        f"<p>Of {total} grid points (seeds averaged): {learned} learned in every seed "
        f"(gain interval above 0), {total - learned} did not; {certified} certified with a "
        f"bound below the loss range; {both} both learned and certified. {noisy} have a mean "
        "gap inside its own noise (gap_snr at most 1).</p>"
    )


def section(
    summary: pl.DataFrame,
    table: pl.DataFrame,
    out: Path,
    save: Save,
    html_table: Callable[..., str],
) -> str:
    """The frontier section of the report ("" when no cell has signal columns)."""
    if "learning_gain_mean" not in summary.columns:
        return ""
    points = frontier.points(summary.filter(pl.col("learning_gain_mean").is_not_null()))
    if points.is_empty():
        return ""
    plot(points, out / "frontier.png", save)
    view = table.drop(PROVENANCE_COLUMNS)
    view = view.drop([c for c in view.columns if view[c].null_count() == view.height])
    onset = frontier.learning_onset(table)
    proven = ""
    if not onset.is_empty():
        onset = onset.drop([c for c in onset.columns if onset[c].null_count() == onset.height])
        proven = (
            "<h3>Certified learning: the smallest n at which each rung proves it</h3>"
            "<p>A rung certifies learning at a grid point when its certificate of the population "
            "loss (of the head; of its Gibbs head for pb_free and pb_data) lies below the loss "
            "of f = 0 in every seed; blank: at no n of the grid.</p>"
            f"{html_table(onset, limit=400)}"
        )
    return f"""<h2>Learning against certification</h2>{counts(points)}
<img src="frontier.png">
<h3>The frontier (tables/frontier.parquet)</h3>{html_table(view, limit=400)}{proven}"""
