"""The paired family: Li et al.'s two-modality setting (`x^T M y - y^T B y`) over the grid's
regimes, on the canonical Gaussian (drawn inside each cell, clipped or not:
crl.steps.paired.model_cell, clipped_cell) or on the user's pairs (materialised shards:
crl.steps.paired.split_cell). No encoder: the cells read the pairs as they are."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from crl.core.config import Config, is_paired
from crl.core.errors import ConfigError
from crl.steps import grid_source, ladder_panel, pretrain_panel, scaling_panel, user_data
from crl.steps.family import Columns, MapWork, Pretraining, WorkerWork, machine_memory
from crl.steps.keys import CellKey, cell_config, draws_id, grid_keys
from crl.steps.pages import html_table
from crl.steps.paired import model_cell, split_cell
from crl.steps.paired import report as paired_report
from crl.steps.paired.clipped_cell import run_clipped_cell
from crl.steps.report_page import Page
from crl.steps.run_paths import RunPaths


@dataclass(frozen=True)
class PairedContext:
    """What every paired cell shares: the config and the source (the Gaussian's model and
    evaluation triples, or the user's scaled splits)."""

    config: Config
    source: model_cell.PairedSource | split_cell.PairedSplits


# float64 copies of theta = (M, B) a paired fit holds at once: the iterate, the extrapolated
# point, the candidate, the gradient and the previous iterate, and autograd's temporaries
THETA_COPIES = 8


def _check_paired_memory(config: Config) -> None:
    """Refuse a paired grid whose largest cell cannot fit: its negatives (and their weights),
    and the score model's parameters theta = (M, B), px py + py^2 values per copy."""
    ds = config.dataset
    if ds.kind == "paired_gaussian":
        px = py = len(ds.correlations)
    else:
        px, py = user_data.pair_widths(ds)
    total = machine_memory()
    theta = THETA_COPIES * (px * py + py * py) * 8
    if theta > total:
        raise ConfigError(
            f"dataset: pairs of {px} and {py} values need a score model of {px * py + py * py:,} "
            f"parameters, about {theta / 2**30:.0f} GiB while fitting; this machine has "
            f"{total / 2**30:.0f} GiB (reduce the pairs' dimensions, e.g. by PCA)"
        )
    keys = grid_keys(config)
    if not keys:
        raise ConfigError("config field grid.m: no (m, n) cell is inside the grid's limits")
    p = max(px, py)
    needed = max(k.n * k.m * (p + 4) * 8 if k.regime == "scrl" else k.n * k.m * 32 for k in keys)
    if needed + theta > total:
        raise ConfigError(
            f"config field grid.m: the largest paired cell needs about "
            f"{(needed + theta) / 2**30:.0f} GiB; this machine has {total / 2**30:.0f} GiB "
            "(grid.scrl_max_negatives caps scrl cells)"
        )


class Paired:
    name = "paired"
    columns = Columns()  # its columns are in the shared lists (crl.steps.summary_columns)

    def active(self, config: Config) -> bool:
        return config.grid is not None and is_paired(config.dataset)

    def check(self, config: Config) -> None:
        """The user pairs' sizes and shards; the largest cell's memory."""
        if config.dataset.kind == "paired_parquet":
            grid_source.check_sizes(config)
        _check_paired_memory(config)

    def keys(self, config: Config) -> list[CellKey]:
        return grid_keys(config)

    def materialize(self, config: Config, paths: RunPaths) -> list[MapWork]:
        """The user pairs' shards (the Gaussian is drawn inside each cell)."""
        if config.dataset.kind == "paired_gaussian":
            return []
        return [grid_source.shard_work(config, paths)]

    def pretrainings(self, config: Config, paths: RunPaths) -> list[Pretraining]:
        return []

    def embed(self, config: Config, paths: RunPaths) -> list[WorkerWork]:
        return []

    def context(self, config: Config, paths: RunPaths) -> PairedContext:
        if config.dataset.kind == "paired_gaussian":
            return PairedContext(config, model_cell.source(config))
        return PairedContext(config, split_cell.load(config, paths.data))

    def run_cell(self, key: CellKey, context: PairedContext) -> dict:
        """The Gaussian's cell (clipped or not) or the user pairs' cell, at the key's R and
        temperature."""
        config, source = cell_config(context.config, key), context.source
        cell_id = key.cell_id(context.config.hash())
        draws = draws_id(context.config, key)
        if isinstance(source, split_cell.PairedSplits):
            row = split_cell.run_paired_split_cell(config, key, cell_id, draws, source)
        elif source.clipped is None:
            row = model_cell.run_paired_cell(config, key, cell_id, source)
        else:
            row = run_clipped_cell(config, key, cell_id, draws, source)
        row["dataset"] = context.config.dataset.kind
        return row

    def report(self, summary: pl.DataFrame, fits: pl.DataFrame, page: Page) -> list[str]:
        """The reference setting, the certificate ladder and the scaling in n (bounded cells
        with `eval.ladder`), then m*(n), its finding and the gap (exact, or against the
        certified bound for user pairs)."""
        opening, at, at_fits = page.at_reference(summary, fits, pretrain_panel.UNIMODAL)
        keys = ladder_panel.UNIMODAL_KEYS
        ladder = ladder_panel.section(
            at, page.out, page.save, html_table, keys, "paired_ladder.png"
        )
        scaling = scaling_panel.section(
            at, page.out, page.save, html_table, keys, "paired_scaling.png"
        )
        return [*opening, ladder, scaling, paired_report.body(at, at_fits, page.out, page.save)]


FAMILY = Paired()
