"""Polars aggregation: cells -> tables/cells.parquet, summary.parquet, fits.parquet (the
summary's columns: crl.steps.summary_columns).

Every table carries the provenance columns (run_id, config_hash, crl_version, git_commit).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from crl.core.provenance import PROVENANCE_COLUMNS
from crl.kernels import rates, saturation, stats
from crl.steps.summary_columns import CHECKED_HOLDS as CHECKED_HOLDS
from crl.steps.summary_columns import FIRST, HOLDS, MEANS, SUMMARISED

OBJECTIVE = ["dataset", "regime", "loss"]
# the settings a cell is fitted under (constant in a run unless the grid makes them axes;
# encoder_epoch: with encoder.pretrain or dense.pretrain, the checkpoint of the encoder)
SETTINGS = ["R", "temperature", "normalise", "encoder_epoch"]
# the dense grid's further axes
DENSE_KEYS = ["negatives", "correspondence", "lam"]
# m* metrics (lower is better) as expressions over the cells table
M_STAR_METRICS = {
    "excess_auc": pl.col("excess_auc"),
    "excess_risk": pl.col("excess_risk"),
    "auc_error": 1.0 - pl.col("retrieval_auc"),
    "probe_error": 1.0 - pl.col("linear_probe_accuracy"),
    "classifier_error": 1.0 - pl.col("mean_classifier_accuracy"),
}
SLOPE_QUANTITIES = [
    "gap",
    "gamma_m",
    "gamma_S",
    "gamma_E",
    "gamma_lin",
    "best_bound",
    "gamma_dense_S",
    "gamma_dense_E",
    "queue_total",
]
# each certificate of the ladder over the held-out loss it certifies: (certificate, held-out)
EXCESS_QUANTITIES = {
    "cert_test_set_excess": ("cert_test_set", "test_loss_m"),
    "cert_pb_data_excess": ("cert_pb_data", "gibbs_test_loss"),
    "cert_pb_ref_excess": ("cert_pb_ref", "gibbs_test_loss"),
    "cert_pb_free_excess": ("cert_pb_free", "cert_pb_free_gibbs_test"),
}
FITS_SCHEMA = {
    **{column: pl.String for column in PROVENANCE_COLUMNS},
    "dataset": pl.String,
    "regime": pl.String,
    "loss": pl.String,
    "kind": pl.String,
    "shape": pl.String,
    "n": pl.Int64,
    "coef_c": pl.Float64,
    "coef_a": pl.Float64,
    "coef_b": pl.Float64,
    "alpha": pl.Float64,
    "beta": pl.Float64,
    "exponent": pl.Float64,
    "exponent_lo": pl.Float64,
    "exponent_hi": pl.Float64,
    "delta": pl.Float64,
    "primary": pl.Boolean,
    "m_star": pl.Float64,
    "m_star_lo": pl.Float64,
    "m_star_hi": pl.Float64,
    "plateau": pl.Float64,
    "seeds": pl.Int64,
    "slope_m": pl.Float64,
    "slope_m_ci": pl.Float64,
    "slope_n": pl.Float64,
    "slope_n_ci": pl.Float64,
    "r2": pl.Float64,
    "rmse": pl.Float64,
    "points": pl.Int64,
}


def curve_keys(frame: pl.DataFrame) -> list[str]:
    """What one (m, n) surface of a frame shares: dataset, regime, loss, the settings (R,
    temperature, normalise, encoder_epoch) and the dense axes, those of them the frame has."""
    return [*OBJECTIVE, *(k for k in [*SETTINGS, *DENSE_KEYS] if k in frame.columns)]


def keys_of(frame: pl.DataFrame) -> list[str]:
    """The grouping keys of a cells frame: its curve keys, then m and n."""
    return [*curve_keys(frame), "m", "n"]


def with_provenance(frame: pl.DataFrame, provenance: dict[str, str]) -> pl.DataFrame:
    """`frame` with the provenance columns (PROVENANCE_COLUMNS, in order) in front."""
    prov = [pl.lit(provenance[k]).alias(k) for k in PROVENANCE_COLUMNS]
    return frame.select([*prov, pl.all()])


def collect_cells(cell_files: list[Path], provenance: dict[str, str]) -> pl.DataFrame:
    """The per-cell files, sorted by key, with provenance columns in front."""
    if not cell_files:
        raise ValueError("collect_cells: no cell files")
    frame = pl.concat([pl.read_parquet(f) for f in cell_files], how="diagonal_relaxed")
    frame = frame.sort([*keys_of(frame), "seed"], nulls_last=True, maintain_order=True)
    frame = frame.select(["cell_id", "dataset", pl.all().exclude("cell_id", "dataset")])
    return with_provenance(frame, provenance)


def summarise(
    cells: pl.DataFrame, summarised: tuple[str, ...] = (), holds: tuple[str, ...] = ()
) -> pl.DataFrame:
    """Mean, std and 95% t-interval half-width over seeds for each (dataset, regime, loss, m, n);
    `summarised` and `holds`: further columns (a plugin family's own: crl.steps.family.Columns)
    aggregated as SUMMARISED and HOLDS are."""
    present = [c for c in [*SUMMARISED, *summarised] if c in cells.columns]
    aggs = [pl.len().alias("seeds")]
    for col in present:
        aggs += [
            pl.col(col).cast(pl.Float64).mean().alias(f"{col}_mean"),
            pl.col(col).cast(pl.Float64).std().alias(f"{col}_std"),
        ]
    columns = set(cells.columns)
    aggs += [
        *(
            pl.col(h).cast(pl.Float64).mean().alias(f"{h}_fraction")
            for h in [*HOLDS, *holds]
            if h in columns
        ),
        *(pl.col(c).first().alias(c) for c in FIRST if c in columns),
        *(pl.col(c).cast(pl.Float64).mean().alias(f"{c}_mean") for c in MEANS if c in columns),
    ]
    keys = keys_of(cells)
    out = cells.group_by([*PROVENANCE_COLUMNS, *keys], maintain_order=True).agg(aggs)
    out = out.sort(keys, nulls_last=True, maintain_order=True)
    t = pl.col("seeds").map_elements(
        lambda k: stats.t_quantile(0.95, k - 1), return_dtype=pl.Float64
    )
    return out.with_columns(
        [(t * pl.col(f"{c}_std") / pl.col("seeds").sqrt()).alias(f"{c}_seed_ci") for c in present]
    )


def _slope_values(group: pl.DataFrame) -> dict[str, np.ndarray]:
    """The seed means whose log-log slopes the fits table gives: |gap| and each bound
    (SLOPE_QUANTITIES), and each certificate's excess over its held-out loss (EXCESS_QUANTITIES;
    null where the group's cells have no such certificate). Shape: each (rows,)."""
    out = {}
    for quantity in SLOPE_QUANTITIES:
        if f"{quantity}_mean" in group.columns:  # no bounds (paired Gaussian cells)
            out[quantity] = group[f"{quantity}_mean"].cast(pl.Float64).abs().to_numpy()
    for quantity, (certificate, held) in EXCESS_QUANTITIES.items():
        names = (f"{certificate}_mean", f"{held}_mean")
        if all(c in group.columns for c in names):
            excess = group[names[0]].cast(pl.Float64) - group[names[1]].cast(pl.Float64)
            out[quantity] = excess.fill_null(np.nan).to_numpy()
    return out


def _fit_rows(group: pl.DataFrame) -> list[dict]:
    m = group["m"].to_numpy().astype(np.float64)
    n = group["n"].to_numpy().astype(np.float64)
    rows: list[dict] = []
    for quantity, values in _slope_values(group).items():  # the gap, each bound, each excess
        slopes = rates.fit_loglog_slopes(m, n, values)
        if math.isfinite(slopes.coef_c):  # enough points for the axes that vary
            rows.append(
                {
                    "kind": "slopes",
                    "shape": quantity,
                    "coef_c": slopes.coef_c,
                    "slope_m": slopes.slope_m,
                    "slope_m_ci": slopes.slope_m_ci,
                    "slope_n": slopes.slope_n,
                    "slope_n_ci": slopes.slope_n_ci,
                    "r2": slopes.r2,
                    "points": slopes.n_points,
                }
            )
    # rate shapes over the cells with a finite mean gap (a paired cell's exact gap is +inf
    # where L(s) is)
    finite = group.filter(pl.col("gap_mean").cast(pl.Float64).is_finite())
    m, n = finite["m"].to_numpy().astype(np.float64), finite["n"].to_numpy().astype(np.float64)
    gap = finite["gap_mean"].to_numpy().astype(np.float64)
    for shape in rates.RATE_SHAPES:
        if len(gap) < 3:
            break
        fit = rates.fit_rate(shape, m, n, gap)
        rows.append(
            {
                "kind": "rate",
                "shape": shape,
                "r2": fit.r2,
                "rmse": fit.rmse,
                "points": fit.n_points,
                **{f"coef_{k}": v for k, v in fit.coefs.items()},
            }
        )
    if len(set(m)) > 1 and len(set(n)) > 1 and len(gap) >= 6:  # 5 parameters
        power = rates.fit_power(m, n, gap)
        rows.append(
            {
                "kind": "power",
                "shape": "c+a*m^-alpha+b*n^-beta",
                "r2": power.r2,
                "rmse": power.rmse,
                "points": power.n_points,
                "alpha": power.alpha,
                "beta": power.beta,
                **{f"coef_{k}": v for k, v in power.coefs.items()},
            }
        )
    return rows


@dataclass(frozen=True)
class MStarSpec:
    """Which m* the fits table reports: metrics (names of M_STAR_METRICS), the primary delta and
    the sensitivity deltas, bootstrap replicates, confidence and the bootstrap's seed."""

    metrics: tuple[str, ...]
    delta: float
    deltas: tuple[float, ...]
    replicates: int
    confidence: float
    seed: int


def _curves(cells: pl.DataFrame, metric: str) -> tuple[np.ndarray, list]:
    """Per n: the m grid and the (seeds, m) matrix of the metric; an m where some seed is not
    finite (an infinite excess risk) is left out whole, since its seed mean is not finite."""
    values = cells.with_columns(M_STAR_METRICS[metric].cast(pl.Float64).alias("_metric"))
    n_values, curves = [], []
    for (n_value,), sub in values.sort("n").group_by(["n"], maintain_order=True):
        wide = sub.pivot(on="m", index="seed", values="_metric", aggregate_function="first")
        m_cols = sorted((c for c in wide.columns if c != "seed"), key=int)
        matrix = wide.select(m_cols).to_numpy().astype(np.float64)  # (seeds, K)
        keep = np.all(np.isfinite(matrix), axis=0)
        if keep.sum() < 3:  # the rule needs a plateau (two points) and one more
            continue
        m_grid = np.array([int(c) for c in m_cols], dtype=np.float64)[keep]
        n_values.append(float(n_value))
        curves.append((m_grid, matrix[:, keep]))
    return np.array(n_values), curves


def m_star_rows(cells: pl.DataFrame, spec: MStarSpec) -> list[dict]:
    """m*(n) with bootstrap intervals and the exponent of m* ~ n^a, per metric and delta."""
    rows: list[dict] = []
    for metric in spec.metrics:
        needed = M_STAR_METRICS[metric].meta.root_names()
        if not set(needed) <= set(cells.columns):
            continue
        n_values, curves = _curves(cells, metric)
        if not curves:
            continue
        for delta in sorted({spec.delta, *spec.deltas}):
            law = saturation.m_star_law(
                n_values,
                curves,
                delta,
                replicates=spec.replicates,
                confidence=spec.confidence,
                seed=spec.seed,
            )
            common = {"shape": metric, "delta": delta, "primary": delta == spec.delta}
            for n_value, (m_grid, per_seed), est in zip(n_values, curves, law.per_n, strict=True):
                rows.append(
                    {
                        **common,
                        "kind": "m_star",
                        "n": int(n_value),
                        "m_star": est.value,
                        "m_star_lo": est.lo,
                        "m_star_hi": est.hi,
                        "plateau": float(per_seed.mean(axis=0)[-2:].mean()),
                        "seeds": int(per_seed.shape[0]),
                        "points": int(m_grid.size),
                    }
                )
            if len(n_values) >= 2:
                rows.append(
                    {
                        **common,
                        "kind": "m_star_exponent",
                        "coef_c": law.coef,
                        "exponent": law.exponent,
                        "exponent_lo": law.exponent_lo,
                        "exponent_hi": law.exponent_hi,
                        "points": int(len(n_values)),
                    }
                )
    return rows


def fits(summary: pl.DataFrame, cells: pl.DataFrame, spec: MStarSpec) -> pl.DataFrame:
    """Rate-shape fits of mean gaps per (dataset, regime, loss), and m*(n) with its exponent."""
    prov = summary.select(PROVENANCE_COLUMNS).row(0, named=True)
    rows = []
    group_keys = curve_keys(summary)
    for values, group in summary.group_by(group_keys, maintain_order=True):
        ident = dict(zip(group_keys, values, strict=True))
        sub = cells.filter(pl.all_horizontal([pl.col(k).eq_missing(v) for k, v in ident.items()]))
        for row in [*_fit_rows(group), *m_star_rows(sub, spec)]:
            rows.append({**prov, **ident, **row})
    return pl.from_dicts(rows, schema=fits_schema(summary))


def fits_schema(summary: pl.DataFrame) -> dict:
    """FITS_SCHEMA with the summary's settings and dense axes after `loss`."""
    items = list(FITS_SCHEMA.items())
    at = [name for name, _ in items].index("loss") + 1
    extra = [(k, summary.schema[k]) for k in curve_keys(summary)[len(OBJECTIVE) :]]
    return dict(items[:at] + extra + items[at:])
