"""The README's picture (docs/quickstart.png): the quickstart's |gap| against n beside its
certified bounds, for two (regime, loss) objectives, drawn from a run's summary table by the
unimodal report's own gap panel (crl.steps.unimodal.report.plot_gap).
`crl docs figure runs/<quickstart run>` redraws it."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from crl.steps.figures import save_png
from crl.steps.unimodal import report

OBJECTIVES = (("one_negative", "logistic"), ("scrl", "info_nce"))


def draw(tables: Path, path: Path, staging: Path) -> Path:
    """The picture of the run whose tables are in `tables`, written atomically to `path`.
    Raises ValueError naming what the summary lacks."""
    summary = pl.read_parquet(tables / "summary.parquet")
    if "regime" not in summary.columns:
        raise ValueError(f"{tables / 'summary.parquet'}: no single-modality cells to draw")
    wanted = pl.any_horizontal(
        [(pl.col("regime") == r) & (pl.col("loss") == loss) for r, loss in OBJECTIVES]
    )
    shown = summary.filter(wanted & pl.col("family").eq("unimodal"))
    if "encoder_epoch" in shown.columns and shown["encoder_epoch"].null_count() < shown.height:
        shown = shown.filter(pl.col("encoder_epoch") == shown["encoder_epoch"].max())
    missing = [o for o in OBJECTIVES if shown.filter(pl.col("regime") == o[0]).is_empty()]
    if missing:
        raise ValueError(f"{tables / 'summary.parquet'}: no cells of {missing}")
    report.plot_gap(shown, path, lambda fig, p: save_png(fig, p, staging), "n")
    return path
