"""The frontier between learning and certification: tables/frontier.parquet from the summary.

A grid point (one row of the summary: a setting of R, temperature and normalisation, an m, the
seeds averaged) is

- *learned* when its head beat f = 0 in every seed (`learned_fraction` = 1: each seed's paired
  interval on the gain lies above 0), and
- *certified* when its sampling is certified in every seed (dense cells: always) and its best
  certified bound on the gap (`best_bound`; `best_dense_bound` for dense cells) is below the
  loss's range (`bound_rel` = best bound / loss range < 1; at or above 1 the bound says nothing
  the range does not).

For every (family, dataset, regime, loss, n, encoder_epoch) the frontier has two rows (with a
pretraining, one pair per checkpoint: what the encoder of that epoch lets a head learn and a
bound certify; encoder_epoch is null without one):

- `largest_certified_gain`: among certified points, the one whose head gained most over f = 0
  (`learning_gain`, in the loss's units: nats for InfoNCE and logistic-type losses, score units
  for LSE), learned or not (the `learned` column says). Not `learning_gain_rel`: the range
  grows like e^{2R^2/T} for InfoNCE, so the gain relative to it favours the smallest R however
  little the head learns;
- `smallest_learned_bound`: among learned points, the one with the smallest `bound_rel`,
  certified or not.

Both rows also carry, per rung of the certificate ladder (crl.steps.signal.RUNGS),
`learning_certified_<rung>`: whether some grid point of the group has the rung's certificate of
the population loss below the loss of f = 0 in every seed (learning certified; null where no
point of the group has that rung). `learning_onset` gives, per (family, dataset, regime, loss,
encoder_epoch), the smallest n at which each rung certifies learning.

Each row names its point (m, R, temperature, normalise; for dense cells also negatives,
correspondence, lam) and carries its gain, its bound, its
retrieval AUC and how many points qualified (`candidates`, of `points`); a row with no
qualifying point keeps the nulls and `candidates` = 0, so "no cell is both" is a row a reader
sees, not a missing one.
"""

from __future__ import annotations

import polars as pl

from crl.core.provenance import PROVENANCE_COLUMNS
from crl.steps.signal import RUNGS
from crl.steps.tables import DENSE_KEYS, SETTINGS

GROUP = ["family", "dataset", "regime", "loss", "n", "encoder_epoch"]
KINDS = ("largest_certified_gain", "smallest_learned_bound")
POINT = ["m", *(s for s in SETTINGS if s not in GROUP), *DENSE_KEYS]
VALUES = {
    "learning_gain": pl.Float64,
    "learning_gain_seed_ci": pl.Float64,
    "learning_gain_rel": pl.Float64,
    "best_bound": pl.Float64,
    "loss_range": pl.Float64,
    "bound_rel": pl.Float64,
    "learned": pl.Boolean,
    "certified": pl.Boolean,
    "retrieval_auc": pl.Float64,
    "test_loss": pl.Float64,
}
CERTIFIED_LEARNING = [f"learning_certified_{rung}" for rung in RUNGS]
SCHEMA = {
    **{column: pl.String for column in PROVENANCE_COLUMNS},
    "family": pl.String,
    "dataset": pl.String,
    "regime": pl.String,
    "loss": pl.String,
    "n": pl.Int64,
    "kind": pl.String,
    "m": pl.Int64,
    "R": pl.Float64,
    "temperature": pl.Float64,
    "normalise": pl.String,
    "negatives": pl.String,
    "correspondence": pl.String,
    "lam": pl.Float64,
    "encoder_epoch": pl.Int64,
    **VALUES,
    "candidates": pl.Int64,
    "points": pl.Int64,
    **{column: pl.Boolean for column in CERTIFIED_LEARNING},
}


def _mean(column: str) -> pl.Expr:
    return pl.col(f"{column}_mean").cast(pl.Float64)


def points(summary: pl.DataFrame) -> pl.DataFrame:
    """The summary's grid points with the frontier's quantities: gain, bound, bound_rel and the
    learned / certified flags (null-safe: a point without a bound is not certified)."""
    frame = summary
    absent = {
        **{c: SCHEMA[c] for c in [*SETTINGS, *DENSE_KEYS, "loss_range"]},
        **{f"{c}_mean": pl.Float64 for c in ("best_bound", "best_dense_bound", "retrieval_auc")},
        "learning_gain_rel_mean": pl.Float64,
        "learned_fraction": pl.Float64,
        "certified_fraction": pl.Float64,
        "family": pl.String,
        **{f"{column}_fraction": pl.Float64 for column in CERTIFIED_LEARNING},
    }
    for column, dtype in absent.items():
        if column not in frame.columns:
            frame = frame.with_columns(pl.lit(None, dtype=dtype).alias(column))
    dense = pl.col("family") == "dense"
    bound = pl.coalesce(_mean("best_bound"), _mean("best_dense_bound"))
    bound_rel = bound / pl.col("loss_range").cast(pl.Float64)
    sampled = (pl.col("certified_fraction") == 1.0) | dense
    return frame.with_columns(
        _mean("learning_gain").alias("learning_gain"),
        pl.col("learning_gain_seed_ci").cast(pl.Float64).alias("learning_gain_seed_ci"),
        _mean("learning_gain_rel").alias("learning_gain_rel"),
        bound.alias("best_bound"),
        pl.col("loss_range").cast(pl.Float64),
        bound_rel.alias("bound_rel"),
        (pl.col("learned_fraction") == 1.0).fill_null(False).alias("learned"),
        (sampled & (bound_rel < 1.0)).fill_null(False).alias("certified"),
        _mean("retrieval_auc").alias("retrieval_auc"),
        _mean("test_loss").alias("test_loss"),
        *((pl.col(f"{c}_fraction") == 1.0).alias(c) for c in CERTIFIED_LEARNING),
    )


def _row(ident: dict, kind: str, chosen: pl.DataFrame, candidates: int, total: int) -> dict:
    row = {**ident, "kind": kind, "candidates": candidates, "points": total}
    best = chosen.row(0, named=True) if chosen.height else {}
    for column in [*POINT, *VALUES]:
        row[column] = best.get(column)
    return row


def frontier(summary: pl.DataFrame) -> pl.DataFrame:
    """tables/frontier.parquet: two rows per (family, dataset, regime, loss, n,
    encoder_epoch) of the grid cells that have a learning gain (see the module's docstring)."""
    if "learning_gain_mean" not in summary.columns:
        return pl.DataFrame(schema=SCHEMA)
    frame = points(summary.filter(pl.col("learning_gain_mean").is_not_null()))
    if frame.is_empty():
        return pl.DataFrame(schema=SCHEMA)
    prov = frame.select(PROVENANCE_COLUMNS).row(0, named=True)
    rows = []
    for values, group in frame.group_by(GROUP, maintain_order=True):
        ident = {**prov, **dict(zip(GROUP, values, strict=True))}
        certified = group.filter(pl.col("certified"))
        learned = group.filter(pl.col("learned"))
        by_gain = certified.sort("learning_gain", descending=True, nulls_last=True)
        by_bound = learned.sort("bound_rel", nulls_last=True)
        proven = {
            c: group[c].any() if group[c].null_count() < group.height else None
            for c in CERTIFIED_LEARNING
        }
        rows.append(_row(ident, KINDS[0], by_gain, certified.height, group.height) | proven)
        rows.append(_row(ident, KINDS[1], by_bound, learned.height, group.height) | proven)
    return pl.from_dicts(rows, schema=SCHEMA).sort([*GROUP, "kind"], maintain_order=True)


def learning_onset(table: pl.DataFrame) -> pl.DataFrame:
    """Per (family, dataset, regime, loss, encoder_epoch) of a frontier table, the smallest n at
    which each rung certifies learning (`<rung>`: null where it never does, or has no
    certificate), next to the grid's n values."""
    present = [c for c in CERTIFIED_LEARNING if c in table.columns]
    keys = [c for c in GROUP if c != "n"]
    if not present or table.is_empty():
        return pl.DataFrame()
    first = table.filter(pl.col("kind") == KINDS[0])
    return (
        first.group_by(keys, maintain_order=True)
        .agg(
            pl.col("n").unique().sort().cast(pl.String).str.join(", ").alias("n_grid"),
            *(
                pl.col("n")
                .filter(pl.col(c).fill_null(False))
                .min()
                .alias(c.removeprefix("learning_certified_"))
                for c in present
            ),
        )
        .sort(keys)
    )
