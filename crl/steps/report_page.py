"""What a family's section of the report is given (crl.steps.family's `report`): where the page
and its figures go, how a figure is saved, the pretraining table, and the panels every family
opens its section with (the reference setting of the grid's optional axes, the pretraining)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import polars as pl

from crl.steps import frontier_panel, pretrain_panel
from crl.steps.figures import save_png
from crl.steps.pages import html_table


@dataclass(frozen=True)
class Page:
    """The report being built: its folder, the staging folder of atomic writes, and the run's
    pretrain table (None without one)."""

    out: Path
    staging: Path
    pretrain: pl.DataFrame | None

    def save(self, fig: plt.Figure, path: Path) -> None:
        save_png(fig, path, self.staging)

    def at_reference(
        self, summary: pl.DataFrame, fits: pl.DataFrame, encoder: pretrain_panel.Family
    ) -> tuple[list[str], pl.DataFrame, pl.DataFrame]:
        """A family's opening sections (the note of the reference setting of the optional axes;
        every encoder epoch of its pretraining, a line per objective and head setting: what
        each head can see of what the encoder learned), then its summary and fits at the
        reference setting, which its own panels draw."""
        setting = frontier_panel.reference_setting(summary)
        pretrained = pretrain_panel.section(
            self.pretrain,
            summary,
            encoder,
            self.out,
            self.save,
            html_table,
        )
        at = frontier_panel.at_setting(summary, setting)
        return (
            [frontier_panel.setting_note(setting), pretrained],
            at,
            frontier_panel.at_setting(fits, setting),
        )
