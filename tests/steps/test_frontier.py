"""tables/frontier.parquet: the learned-and-certified frontier picked from a summary."""

from __future__ import annotations

import polars as pl
import pytest

from crl.core.provenance import PROVENANCE_COLUMNS
from crl.steps import frontier

PROV = dict.fromkeys(PROVENANCE_COLUMNS, "x")


def _point(m, R, T, gain, bound, learned, certified=1.0, n=800, loss="lse", **extra) -> dict:
    return {
        **PROV,
        "family": "unimodal",
        "dataset": "synthetic",
        "regime": "scrl",
        "loss": loss,
        "R": R,
        "temperature": T,
        "normalise": "scale",
        "m": m,
        "n": n,
        "learning_gain_mean": gain,
        "learning_gain_seed_ci": 0.01,
        "learning_gain_rel_mean": gain / 4.0,
        "best_bound_mean": bound,
        "loss_range": 4.0,
        "learned_fraction": learned,
        "certified_fraction": certified,
        "retrieval_auc_mean": 0.5 + gain,
        "test_loss_mean": 1.0 - gain,
        **extra,
    }


def _summary(*rows: dict) -> pl.DataFrame:
    return pl.from_dicts(list(rows))


def test_the_two_rows_of_a_group() -> None:
    summary = _summary(
        _point(4, 1.0, 1.0, 0.01, 1.0, 0.5),  # certified (1/4), not learned
        _point(4, 2.0, 0.5, 0.20, 3.0, 1.0),  # learned, certified (3/4)
        _point(16, 2.0, 0.5, 0.30, 3.5, 1.0, certified=0.5),  # learned, sampling not certified
        _point(4, 4.0, 0.1, 0.50, 9.0, 1.0),  # learned, bound above the range
    )
    table = frontier.frontier(summary)
    assert table.columns == list(frontier.SCHEMA)
    assert table.height == 2
    gain = table.filter(pl.col("kind") == "largest_certified_gain").row(0, named=True)
    assert (gain["m"], gain["R"], gain["temperature"]) == (4, 2.0, 0.5)
    assert gain["learning_gain"] == 0.20 and gain["bound_rel"] == pytest.approx(0.75)
    assert gain["learned"] and gain["certified"]
    assert (gain["candidates"], gain["points"]) == (2, 4)
    bound = table.filter(pl.col("kind") == "smallest_learned_bound").row(0, named=True)
    assert (bound["m"], bound["R"], bound["temperature"]) == (4, 2.0, 0.5)
    assert bound["candidates"] == 3  # every seed learned in three points
    assert bound["best_bound"] == 3.0 and bound["loss_range"] == 4.0


def test_a_group_where_nothing_qualifies_keeps_its_rows_with_nulls() -> None:
    summary = _summary(
        _point(4, 1.0, 1.0, 0.001, 0.5, 0.0),  # certified, never learned
        _point(4, 4.0, 0.1, 0.4, 20.0, 1.0, n=50),  # learned, vacuous
    )
    table = frontier.frontier(summary).sort(["n", "kind"])
    assert table.select(["n", "kind", "candidates"]).rows() == [
        (50, "largest_certified_gain", 0),
        (50, "smallest_learned_bound", 1),
        (800, "largest_certified_gain", 1),
        (800, "smallest_learned_bound", 0),
    ]
    empty = table.filter(pl.col("candidates") == 0)
    assert empty["m"].null_count() == 2 and empty["learning_gain"].null_count() == 2
    best = table.filter((pl.col("n") == 800) & (pl.col("candidates") == 1)).row(0, named=True)
    assert best["learned"] is False and best["learning_gain"] == 0.001


def test_dense_points_use_the_dense_bound_and_their_axes() -> None:
    dense = _point(4, 1.0, 0.5, 0.2, None, 1.0, certified=None, loss="dense_info_nce")
    dense.update(
        family="dense",
        dataset="shapes",
        best_dense_bound_mean=2.0,
        negatives="ext",
        correspondence="geometric",
        lam=1.0,
        normalise=None,
    )
    table = frontier.frontier(_summary(dense))
    row = table.filter(pl.col("kind") == "largest_certified_gain").row(0, named=True)
    assert row["certified"] and row["bound_rel"] == 0.5
    assert (row["negatives"], row["correspondence"], row["lam"]) == ("ext", "geometric", 1.0)


def test_each_checkpoint_of_a_pretraining_has_its_own_pair_of_rows() -> None:
    """The random encoder's best certified point and the trained one's are both rows: the
    frontier tells what pretraining changed at each n."""
    summary = _summary(
        _point(4, 1.0, 1.0, 0.01, 1.0, 0.0, encoder_epoch=0),  # random: certified, not learned
        _point(4, 1.0, 1.0, 0.20, 3.0, 1.0, encoder_epoch=10),  # trained: learned, certified
    )
    table = frontier.frontier(summary)
    gain = table.filter(pl.col("kind") == "largest_certified_gain")
    assert gain.select(["encoder_epoch", "learning_gain", "learned"]).rows() == [
        (0, 0.01, False),
        (10, 0.20, True),
    ]
    assert set(table["points"].to_list()) == {1}


def test_without_signal_columns_the_frontier_is_empty() -> None:
    table = frontier.frontier(_summary({**PROV, "regime": "scrl", "n": 5}))
    assert table.height == 0 and table.columns == list(frontier.SCHEMA)


def test_gains_compare_in_the_losss_units_not_relative_to_the_range() -> None:
    wide = _point(4, 4.0, 1.0, 0.8, 10.0, 1.0)  # gains more, over a range 16x wider
    wide.update(loss_range=64.0, learning_gain_rel_mean=0.8 / 64.0)
    narrow = _point(4, 1.0, 1.0, 0.1, 1.0, 1.0)  # learning_gain_rel 0.025
    table = frontier.frontier(_summary(wide, narrow))
    best = table.filter(pl.col("kind") == "largest_certified_gain").row(0, named=True)
    assert best["R"] == 4.0 and best["learning_gain"] == 0.8
    assert best["learning_gain_rel"] == pytest.approx(0.0125)


def test_certified_learning_per_rung_and_its_onset_in_n() -> None:
    """A rung certifies learning in a group when some point has it in every seed (a fraction of
    1); the onset table gives the smallest such n per rung, blank where none does."""

    def at(n: int, m: int, test_set: float, pb: float | None) -> dict:
        extra = {"learning_certified_test_set_fraction": test_set}
        if pb is not None:
            extra["learning_certified_pb_data_fraction"] = pb
        return _point(m, 1.0, 1.0, 0.1, 1.0, 1.0, n=n, **extra)

    summary = _summary(
        at(50, 4, 0.5, 0.0),
        at(50, 16, 0.0, 0.0),  # no point of n = 50 in every seed
        at(200, 4, 1.0, 0.5),
        at(800, 4, 1.0, 1.0),
    )
    table = frontier.frontier(summary)
    first = table.filter(pl.col("kind") == "largest_certified_gain").sort("n")
    assert first["learning_certified_test_set"].to_list() == [False, True, True]
    assert first["learning_certified_pb_data"].to_list() == [False, False, True]
    assert first["learning_certified_rademacher"].to_list() == [None, None, None]
    onset = frontier.learning_onset(table).row(0, named=True)
    assert onset["n_grid"] == "50, 200, 800"
    assert (onset["test_set"], onset["pb_data"], onset["rademacher"]) == (200, 800, None)
