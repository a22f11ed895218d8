"""The report's ladder section: drawn from the summary rows that carry the PAC-Bayes rungs."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from crl.steps import figures, ladder_panel
from crl.steps.pages import html_table


def _summary(with_ladder: bool) -> pl.DataFrame:
    rows = []
    for loss in ("lse", "info_nce"):
        for n in (256, 1024, 4096):
            rows.append(
                {
                    "regime": "scrl",
                    "loss": loss,
                    "m": 16,
                    "n": n,
                    "seeds": 3,
                    "train_loss_mean": 1.7,
                    "test_loss_mean": 1.8,
                    "gap_mean": 0.1,
                    "best_bound_mean": 12.0,
                    "cert_test_set_mean": 2.9,
                    "loss_range": 20.0,
                    "gibbs_test_loss_mean": 2.3 if with_ladder else None,
                    "cert_pb_data_mean": 3.0 + 1000 / n if with_ladder else None,
                    "cert_pb_free_mean": 5.0 if with_ladder else None,
                    "uniform_deviation_est_mean": 0.05 if with_ladder else None,
                }
            )
    return pl.DataFrame(rows)


def test_the_section_draws_every_group_with_the_ladder(tmp_path: Path) -> None:
    staging = tmp_path / ".staging"

    def save(fig, path: Path) -> None:
        figures.save_png(fig, path, staging)

    html = ladder_panel.section(_summary(True), tmp_path, save, html_table)
    assert "certificate ladder" in html and "cert_pb_data_mean" in html
    assert (tmp_path / "ladder.png").stat().st_size > 10_000
    assert ladder_panel.rows(_summary(True)).height == 6
    # no rung: no section, no figure
    assert ladder_panel.section(_summary(False), tmp_path / "none", save, html_table) == ""
    assert (
        ladder_panel.section(_summary(True).drop("cert_pb_data_mean"), tmp_path, save, html_table)
        == ""
    )


def test_the_dense_section_groups_by_objective_and_reads_the_dense_bound(tmp_path: Path) -> None:
    staging = tmp_path / ".staging"
    rows = []
    for negatives in ("own", "ext"):
        for n in (64, 256):
            rows.append(
                {
                    "regime": "scrl",
                    "loss": "dense_info_nce",
                    "negatives": negatives,
                    "correspondence": "geometric",
                    "lam": 1.0,
                    "encoder_epoch": 0,
                    "m": 4,
                    "n": n,
                    "seeds": 2,
                    "train_loss_mean": 2.0,
                    "test_loss_mean": 2.1,
                    "gap_mean": 0.1,
                    "best_dense_bound_mean": 3.0,
                    "cert_test_set_mean": 2.5,
                    "loss_min": 0.5,
                    "loss_range": 6.0,
                    "gibbs_test_loss_mean": 2.2,
                    "cert_pb_data_mean": 2.9,
                    "cert_pb_free_mean": 3.5,
                }
            )
    summary = pl.DataFrame(rows)
    got = ladder_panel.rows(summary)
    assert got["_rademacher"].to_list() == [3.0] * 4
    html = ladder_panel.section(
        summary,
        tmp_path,
        lambda fig, path: figures.save_png(fig, path, staging),
        html_table,
        ladder_panel.DENSE_KEYS,
        "dense_ladder.png",
    )
    assert 'src="dense_ladder.png"' in html and "best_dense_bound_mean" in html
    assert (tmp_path / "dense_ladder.png").stat().st_size > 10_000
