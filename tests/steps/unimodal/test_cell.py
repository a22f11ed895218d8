"""crl.steps.unimodal.cell: the grid's keys, one cell end to end, and its file."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch

from crl.core.provenance import PROVENANCE_COLUMNS
from crl.kernels import bounds, certified, rademacher, stats
from crl.kernels.certificates import empirical_bernstein_upper, kl_bernoulli, kl_inverse_upper
from crl.kernels.seeding import short_hash
from crl.steps import cells, oracle, schema
from crl.steps.features import (
    Features,
    Normalizer,
    SplitArrays,
    load_features,
    on_unit_sphere,
    tau_of,
)
from crl.steps.keys import CellKey, grid_keys, oracle_keys
from crl.steps.unimodal import cell, sampling
from crl.steps.unimodal.family import FAMILY as UNIMODAL
from crl.steps.unimodal.family import UnimodalContext
from tests.conftest import TIMING
from tests.steps.helpers import config, materialise


def _documented_cell_columns() -> list[str]:
    """The documented columns of a unimodal cell, in order: the provenance columns, then the
    first block of crl/steps/columns.json's cells (the first table of docs/tables.md's
    `tables/cells.parquet`)."""
    return [*schema.tables()["provenance"], *schema.cell_columns()["unimodal"]]


def simultaneous_best(row: dict, n: int, level: float) -> float:
    """best_bound as one statement at `level`, rebuilt from the columns: T1's S-form
    (gamma_m, gamma_S: 3 B sqrt(ln(4/delta)/2n)) and E-form (gamma_E: B sqrt(ln(2/delta)/2n))
    each at level / 2 (union bound over the two events), added to their complexity terms."""
    B = row["loss_range"]
    s_form = 3 * B * math.sqrt(math.log(4 / level) / (2 * n))
    e_form = B * math.sqrt(math.log(2 / level) / (2 * n))
    assert row["gamma_m_concentration_term"] == pytest.approx(s_form, rel=1e-12)
    assert row["gamma_S_concentration_term"] == pytest.approx(s_form, rel=1e-12)
    assert row["gamma_E_concentration_term"] == pytest.approx(e_form, rel=1e-12)
    s_half = 3 * B * math.sqrt(math.log(8 / level) / (2 * n))
    e_half = B * math.sqrt(math.log(4 / level) / (2 * n))
    return min(
        row["gamma_m_complexity_term"] + s_half,
        row["gamma_S_complexity_term"] + s_half,
        row["gamma_E_complexity_term"] + e_half,
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Features, float]:
    root = tmp_path_factory.mktemp("cell")
    cfg = config()
    features = load_features(materialise(cfg, root))
    return features, tau_of(cfg, features.train.labels)


def _without_wall(row: dict) -> dict:
    return {k: v for k, v in row.items() if k not in TIMING}


def test_grid_keys_size_and_order() -> None:
    cfg = config()
    keys = grid_keys(cfg)
    objectives = [
        ("one_negative", "hinge"),
        ("scrl", "hinge"),
        ("scrl", "lse"),
        ("sscrl", "hinge"),
        ("sscrl", "lse"),
    ]  # one_negative admits no lse
    assert len(keys) == len(objectives) * 2 * 2 * 2
    expected = [
        CellKey(r, loss, m, n, s)
        for r, loss in objectives
        for m in (1, 3)
        for n in (10, 20)
        for s in (0, 1)
    ]
    assert keys == expected
    reordered = config(grid={"m": [3, 1], "seeds": [1]})
    assert [k.m for k in grid_keys(reordered)[:4]] == [3, 3, 1, 1]  # config order


def test_cell_id_is_stable_and_distinct() -> None:
    cfg = config()
    keys = grid_keys(cfg)
    ids = [k.cell_id(cfg.hash()) for k in keys]
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"[0-9a-f]{16}", i) for i in ids)
    assert ids == [k.cell_id(config().hash()) for k in grid_keys(config())]
    other = config(eval={"temperature": 0.25})
    assert keys[0].cell_id(other.hash()) != ids[0]  # the config hash is part of the id
    assert CellKey("scrl", "lse", 3, 10, 0).cell_id("abc") == CellKey(
        "scrl", "lse", 3, 10, 0
    ).cell_id("abc")


def test_run_cell_row_has_the_documented_columns(run: tuple[Features, float]) -> None:
    features, tau = run
    cfg = config()
    key = CellKey("one_negative", "hinge", 1, 20, 0)
    row = cell.run_cell(cfg, key, features, tau)
    documented = _documented_cell_columns()
    assert documented[: len(PROVENANCE_COLUMNS)] == list(PROVENANCE_COLUMNS)
    # provenance is added by the aggregate stage, `dataset` and `cell_git_commit` by run_and_write
    by_aggregate = {"dataset", "cell_git_commit", "oracle_loss", "oracle_loss_ci", "excess_risk"}
    # only with encoder.pretrain: the key's epoch, and the encoder's probe (added by run_and_write)
    pretrained = {"encoder_epoch", "encoder_probe_accuracy", "encoder_probe_accuracy_ci"}
    assert set(row) == set(documented) - set(PROVENANCE_COLUMNS) - by_aggregate - pretrained
    assert len(documented) == len(set(documented))
    at_epoch = cell.run_cell(cfg, dataclasses.replace(key, encoder_epoch=3), features, tau)
    assert set(at_epoch) - set(row) == {"encoder_epoch"} and at_epoch["encoder_epoch"] == 3


# the loss of f = 0 (every score 0), from the definitions: Saunshi's k-negative hinge
# max(0, 1 + max_i (s_i - s_+)) and logistic log2(1 + sum_i e^(s_i - s_+)); InfoNCE
# log(1 + m e^0); Li's LSE risk T (log mean_pool e^0) = 0
AT_ZERO = {
    "hinge": lambda m: 1.0,
    "logistic": lambda m: math.log2(1 + m),
    "info_nce": lambda m: math.log1p(m),
    "lse": lambda m: 0.0,
}


@pytest.mark.parametrize(
    ("regime", "loss"),
    [("scrl", "hinge"), ("scrl", "logistic"), ("scrl", "info_nce"), ("sscrl", "lse")],
)
def test_signal_columns_from_first_principles(
    run: tuple[Features, float], regime: str, loss: str
) -> None:
    features, tau = run
    row = cell.run_cell(config(), CellKey(regime, loss, 3, 20, 0), features, tau)
    # the per-tuple losses are computed on float32 features, as the test loss's are
    assert row["trivial_loss"] == pytest.approx(AT_ZERO[loss](3), rel=1e-6, abs=1e-12)
    assert row["learning_gain"] == pytest.approx(row["trivial_loss"] - row["test_loss"], abs=1e-12)
    # f = 0 loses the same on every tuple: the paired interval is the test loss's own
    assert row["learning_gain_ci"] == pytest.approx(row["test_loss_ci"], rel=1e-9)
    assert row["learning_gain_rel"] == pytest.approx(row["learning_gain"] / row["loss_range"])
    assert row["learned"] == (row["learning_gain"] - row["learning_gain_ci"] > 0)
    assert row["gap_snr"] == pytest.approx(abs(row["gap"]) / row["test_loss_ci"])


def test_run_cell_values(run: tuple[Features, float]) -> None:
    features, tau = run
    cfg = config()
    key = CellKey("scrl", "hinge", 3, 20, 1)
    row = cell.run_cell(cfg, key, features, tau)
    assert row["cell_id"] == key.cell_id(cfg.hash())
    assert (row["regime"], row["loss"], row["m"], row["n"], row["seed"]) == (
        "scrl",
        "hinge",
        3,
        20,
        1,
    )
    assert (row["d"], row["p"], row["R"]) == (3, 6, 1.0)
    assert (row["temperature"], row["delta"]) == (0.5, 0.05)
    assert row["gap"] == row["test_loss"] - row["train_loss"]
    assert row["test_anchors"] == 20  # eval.test_anchors fresh draws from the model
    assert row["test_loss_ci"] > 0
    assert row["sign_draws"] == 4
    assert row["rademacher_rows"] == 2 * 20 + 20 * 3  # anchors, positives, own negatives
    assert row["rademacher"] > 0 and row["rademacher_ci"] >= 0
    assert row["tau"] == tau == pytest.approx(1 / 3)
    assert row["device"] == "cpu" and row["wall_seconds"] > row["bounds_seconds"] > 0
    assert row["mean_classifier_loss"] == "hinge"
    for metric in (
        "mean_classifier_accuracy",
        "top1_accuracy",
        "linear_probe_accuracy",
        "retrieval_auc",
    ):
        assert 0.0 <= row[metric] <= 1.0
    # synthetic data: every point a fresh draw from the model, so the bounds are certified
    assert row["sampling"] == "fresh_from_model" and row["certified"] is True
    for name in ("gamma_m", "gamma_S", "gamma_E"):
        assert row[f"{name}_holds"] is True
        total = row[f"{name}_complexity_term"] + row[f"{name}_concentration_term"]
        assert row[name] == pytest.approx(total, rel=1e-12)
    assert row["best_bound"] == pytest.approx(simultaneous_best(row, 20, 0.05), rel=1e-12)
    assert row["best_bound"] > min(row["gamma_m"], row["gamma_S"], row["gamma_E"])
    assert row["bound_over_gap"] == pytest.approx(row["best_bound"] / abs(row["gap"]))
    assert row["bound_delta"] == 0.05 and row["S2"] == row["S_pairs"] + row["S_neg"]
    assert row["lse_inner_bound"] is None and row["sscrl_inner"] is None
    assert row["test_loss_shared"] is None and row["gap_outer"] is None
    assert row["bound_transfer"] is None and row["transfer_holds"] is None  # m = 3


def test_run_cell_shared_negatives_split_the_gap(run: tuple[Features, float]) -> None:
    features, tau = run
    cfg = config()
    row = cell.run_cell(cfg, CellKey("sscrl", "lse", 3, 10, 0), features, tau)
    assert row["rademacher_rows"] == 2 * 10 + 10 * 3  # shared negatives once per anchor
    assert row["mean_classifier_loss"] == "logistic"
    assert row["gap"] == row["test_loss"] - row["train_loss"]
    assert row["gap_outer"] == pytest.approx(row["test_loss_shared"] - row["train_loss"])
    assert row["gap_outer"] + row["gap_inner"] == pytest.approx(row["gap"])
    assert row["bound_delta"] == 0.025  # delta split between outer and inner (Cor. 4.3)
    assert row["sscrl_total"] == pytest.approx(row["gamma_S"] + row["sscrl_inner"])
    assert row["sscrl_inner_reason"] is None and row["sscrl_total_holds"] is True
    assert row["gamma_S_holds"] is True  # against |gap_outer|
    # LSE is bounded by T log of the largest exp ratio: |score| <= R^2 = 1 so |loss| <= 2
    assert abs(row["train_loss"]) <= 2.0 and abs(row["test_loss"]) <= 2.0
    assert row["test_loss_pool_ci"] > 0 and row["lse_inner_est"] > 0
    hinge = cell.run_cell(cfg, CellKey("sscrl", "hinge", 3, 10, 0), features, tau)
    assert hinge["sscrl_inner"] is None and hinge["sscrl_total"] is None
    assert "Prop. 4.4" in hinge["sscrl_inner_reason"] and hinge["best_bound"] is None
    # outer bounds at delta/4 each form, the inner at delta/2: one statement at delta
    best = simultaneous_best(row, 10, 0.025) + row["sscrl_inner"]
    assert row["best_bound"] == pytest.approx(best, rel=1e-12)


@pytest.mark.parametrize("loss", ["hinge", "logistic"])
def test_gamma_m_at_one_negative_is_the_seeds_gamma(run: tuple[Features, float], loss: str) -> None:
    features, tau = run
    cfg = config(grid={"losses": ["hinge", "logistic"]})
    key = CellKey("one_negative", loss, 1, 10, 0)
    row = cell.run_cell(cfg, key, features, tau)
    closed_form = 1.0 * math.sqrt(3 * row["S2"])  # R sqrt(d S2)
    gamma = bounds.saunshi_gamma(closed_form, 10, 1.0, 0.05, loss)
    assert abs(row["gamma_m"] - gamma.value) <= 1e-12 * gamma.value
    assert row["gamma_m_complexity_term"] == pytest.approx(gamma.rademacher_term, rel=1e-12)
    assert row["gamma_m_holds"] == (abs(row["gap"]) <= row["gamma_m"])
    assert row["bound_transfer"] == pytest.approx(
        (row["train_loss"] + row["gamma_m"] - tau) / (1 - tau)
    )
    assert row["transfer_holds"] == (row["mean_classifier_risk"] <= row["bound_transfer"])
    assert row["mean_classifier_loss"] == loss
    assert row["rademacher_rows"] == 3 * 10


def test_lse_upper_side_adds_the_inner_bound(run: tuple[Features, float]) -> None:
    features, tau = run
    row = cell.run_cell(config(), CellKey("scrl", "lse", 3, 10, 0), features, tau)
    assert row["lse_inner_bound"] == pytest.approx(min(2.0, 0.5 * math.expm1(2.0) ** 2 / 6))
    assert row["best_bound"] == pytest.approx(
        simultaneous_best(row, 10, 0.05) + row["lse_inner_bound"], rel=1e-12
    )


def test_run_cell_without_tau_has_no_transfer_bound(run: tuple[Features, float]) -> None:
    features, _ = run
    row = cell.run_cell(config(), CellKey("one_negative", "hinge", 1, 10, 0), features, None)
    assert row["gamma_m"] is not None
    assert row["bound_transfer"] is None and row["transfer_holds"] is None and row["tau"] is None


def test_run_cell_is_deterministic(run: tuple[Features, float]) -> None:
    features, tau = run
    key = CellKey("one_negative", "hinge", 1, 20, 1)
    first = cell.run_cell(config(), key, features, tau)
    second = cell.run_cell(config(), key, features, tau)
    assert _without_wall(first) == _without_wall(second)
    other_seed = cell.run_cell(config(), CellKey("one_negative", "hinge", 1, 20, 0), features, tau)
    assert other_seed["train_loss"] != first["train_loss"]


def test_run_and_write_writes_the_row(run: tuple[Features, float], tmp_path: Path) -> None:
    features, tau = run
    cfg = config()
    context = UnimodalContext(cfg, {None: features}, tau)
    job = cells.CellJob(
        {"unimodal": (UNIMODAL, context)}, tmp_path / "cells", tmp_path / ".staging", "abc123"
    )
    key = CellKey("scrl", "lse", 1, 10, 1)
    row = cells.run_and_write(cells.CellItem("unimodal", key), job)
    assert row["dataset"] == "synthetic" and row["cell_git_commit"] == "abc123"
    path = tmp_path / "cells" / f"{key.cell_id(cfg.hash())}.parquet"
    assert [p.name for p in (tmp_path / "cells").iterdir()] == [path.name]
    assert list((tmp_path / ".staging").iterdir()) == []
    back = pl.read_parquet(path)
    assert back.height == 1
    assert back.row(0, named=True) == row
    assert _without_wall(row) == _without_wall(
        {
            **cell.run_cell(cfg, key, features, tau),
            "dataset": "synthetic",
            "cell_git_commit": "abc123",
        }
    )


# --- cells whose sample streams in blocks -------------------------------------------------------


def _split_features(rows: int, test_rows: int, p: int = 6) -> Features:
    gen = np.random.default_rng(5)
    x, xt = gen.normal(size=(rows, p)), gen.normal(size=(test_rows, p))
    x, xt = (a / (2 * np.linalg.norm(a, axis=1, keepdims=True)) for a in (x, xt))
    labels, test_labels = np.arange(rows) % 3, np.arange(test_rows) % 3
    return Features(
        SplitArrays(x.astype(np.float32), labels),
        SplitArrays(xt.astype(np.float32), test_labels),
        Normalizer(np.zeros(p, dtype=np.float32), 1.0),
    )


@pytest.mark.parametrize(("regime", "loss"), [("scrl", "lse"), ("sscrl", "logistic")])
def test_a_split_cell_in_blocks_equals_the_cell_held_whole(
    regime: str, loss: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same sample indices in 4 blocks: the same APG objective (so the same W up to the
    solver's tolerance), training loss and sample statistics; only the Rademacher estimate's
    sign-to-row assignment differs."""
    cfg = config(
        dataset={"kind": "digits"},
        model={"solver": "apg", "tol": 1e-9, "max_iter": 5000},
        eval={"test_anchors": 20, "negative_pool": 16, "rademacher_draws": 64},
    )
    features = _split_features(400, 100)
    key = CellKey(regime, loss, 3, 20, 0)
    whole = cell.run_cell(cfg, key, features, None)
    per_anchor = (2 if regime == "sscrl" else 5) * 6
    monkeypatch.setattr(sampling, "BLOCK_ELEMENTS", 6 * per_anchor)  # 6 anchors a block
    blocks = cell.run_cell(cfg, key, features, None)
    assert (whole["sample_blocks"], blocks["sample_blocks"]) == (1, 4)
    assert whole["sampling"] == blocks["sampling"] == "distinct_from_split"
    assert blocks["solver_converged"] and whole["solver_converged"]
    # each solve stops with a gradient mapping below tol, so its objective is within
    # tol * (the ball's diameter 2R) of the minimum: two solves differ by at most twice that
    per_solve = cfg.model.tol * 2 * cfg.model.R
    assert blocks["train_loss"] == pytest.approx(whole["train_loss"], abs=2 * per_solve)
    assert blocks["test_loss"] == pytest.approx(whole["test_loss"], rel=1e-6)
    for name in ("S_pairs", "S_neg", "v_A", "v_0", "v_N", "gamma_E"):
        assert blocks[name] == pytest.approx(whole[name], rel=1e-12)
    assert blocks["rademacher_rows"] == whole["rademacher_rows"] == 20 * 5
    assert abs(blocks["rademacher"] - whole["rademacher"]) < 4 * (
        blocks["rademacher_ci"] + whole["rademacher_ci"]
    )


def test_a_model_cell_in_blocks_is_certified_and_deterministic(
    run: tuple[Features, float], monkeypatch: pytest.MonkeyPatch
) -> None:
    features, tau = run
    monkeypatch.setattr(sampling, "BLOCK_ELEMENTS", 4 * 5 * 6)  # 4 anchors of 5 rows of p = 6
    key = CellKey("scrl", "info_nce", 3, 20, 0)
    row = cell.run_cell(config(), key, features, tau)
    assert row["sample_blocks"] == 5 and row["rademacher_rows"] == 20 * 5
    assert row["sampling"] == "fresh_from_model" and row["certified"] is True
    for name in ("gamma_m", "gamma_S", "gamma_E"):
        assert row[f"{name}_holds"] is True
    assert _without_wall(row) == _without_wall(cell.run_cell(config(), key, features, tau))


def test_one_pass_over_blocks_equals_the_accumulators_over_their_rows_in_order(
    run: tuple[Features, float],
) -> None:
    features, _ = run
    source = cell.population(config(), features)
    draw = source.train(10, 3, False, torch.Generator().manual_seed(2), 4 * 5 * 6)
    assert len(draw) == 3
    weight = torch.randn(3, 6, generator=torch.Generator().manual_seed(4)) / 3
    got = cell._sample_pass(draw, weight, "info_nce", 0.5, 1.0, 8, 11, chunk=3)
    naive = rademacher.LinearAccumulator(d=3, p=6, draws=8, seed=11)
    terms, rows = [], {"a": [], "p": [], "n": []}
    for views, sample in draw:
        anchors, positives = views.anchor[sample.anchors], views.positive[sample.positives]
        negatives = views.negative[sample.negatives]  # (c, m, p)
        naive.update(torch.cat([anchors, positives, negatives.reshape(-1, 6)]))
        rows["a"].append(anchors), rows["p"].append(positives), rows["n"].append(negatives)
        for i in range(len(anchors)):  # InfoNCE of one anchor, in float64
            fa, fp = weight.double() @ anchors[i].double(), weight.double() @ positives[i].double()
            fn = negatives[i].double() @ weight.double().T
            logits = torch.cat([(fa @ fp)[None], fn @ fa]) / 0.5
            terms.append(float(torch.logsumexp(logits, 0) - logits[0]))
    want = naive.finish(1.0)
    assert (got.rademacher.value, got.rademacher.ci) == (want.value, want.ci)
    np.testing.assert_allclose(got.terms.numpy(), terms, rtol=1e-6)
    whole = certified.sample_stats(
        torch.cat(rows["a"]), torch.cat(rows["p"]), torch.cat(rows["n"]), shared=False
    )
    for name in ("S_pairs", "S_neg", "v_A", "v_0", "v_N"):
        assert getattr(got.stats, name) == pytest.approx(getattr(whole, name), rel=1e-12)


def test_grid_axes_multiply_the_grid_and_join_the_cell_id() -> None:
    base = config(grid={"regimes": ["scrl"], "losses": ["lse"], "seeds": [0]})
    plain = grid_keys(base)
    assert all(k.R is None and k.temperature is None and k.normalise is None for k in plain)
    # a grid without the axes keeps the ids it had before they existed
    config_hash = base.hash()
    assert [k.cell_id(config_hash) for k in plain] == [
        short_hash(config_hash, k.regime, k.loss, k.m, k.n, k.seed) for k in plain
    ]
    axes = {"R": [0.5, 2.0], "temperature": [0.1, 1.0], "normalise": ["scale", "unit"]}
    wide = config(grid={"regimes": ["scrl"], "losses": ["lse"], "seeds": [0], **axes})
    keys = grid_keys(wide)
    assert len(keys) == 8 * len(plain)
    assert {(k.R, k.temperature, k.normalise) for k in keys} == {
        (r, t, z) for r in axes["R"] for t in axes["temperature"] for z in axes["normalise"]
    }
    ids = [k.cell_id(wide.hash()) for k in keys]
    assert len(set(ids)) == len(ids)


def test_a_cell_runs_at_its_keys_r_temperature_and_normalisation(
    run: tuple[Features, float],
) -> None:
    features, tau = run
    cfg = config()
    key = CellKey("scrl", "info_nce", 3, 20, 0, R=2.0, temperature=0.25, normalise="unit")
    row = cell.run_cell(cfg, key, features, tau)
    assert (row["R"], row["temperature"], row["normalise"]) == (2.0, 0.25, "unit")
    assert row["cell_id"] == key.cell_id(cfg.hash())  # the run's hash, not the cell's config's
    # the bounds are those of the class at the key's R and T
    consts = certified.loss_constants("info_nce", 3, 2.0, 0.25)
    assert (row["loss_range"], row["loss_lipschitz"]) == (consts.B, consts.L)
    plain = cell.run_cell(cfg, CellKey("scrl", "info_nce", 3, 20, 0), features, tau)
    assert plain["loss_range"] == certified.loss_constants("info_nce", 3, 1.0, 0.5).B
    assert (plain["R"], plain["temperature"], plain["normalise"]) == (1.0, 0.5, "scale")
    # unit features have norm ~1 where scaled ones have norms below 1: S2 = sum ||phi||^2 grows
    assert row["S2"] > plain["S2"]


def test_unit_normalisation_puts_every_row_on_the_sphere(run: tuple[Features, float]) -> None:
    features, _ = run
    unit = on_unit_sphere(features)
    for split, original in ((unit.train, features.train), (unit.test, features.test)):
        norms = np.linalg.norm(split.x.astype(np.float64), axis=1)
        assert norms.max() <= 1.0 and norms.min() > 1 - 1e-5
        # the direction is the scaled feature's
        cos = (split.x * original.x).sum(1) / np.linalg.norm(original.x, axis=1)
        assert cos == pytest.approx(norms, rel=1e-5)
    fresh = torch.randn(50, features.train.x.shape[1]) * 7.0
    projected = unit.normalizer(fresh)
    assert float(projected.norm(dim=1).max()) <= 1.0
    assert torch.allclose(projected, torch.from_numpy(unit.normalizer.array(fresh.numpy())))
    assert float(unit.normalizer(torch.from_numpy(features.normalizer.mean)[None]).norm()) == 0.0


def test_oracle_keys_one_per_loss_m_and_setting_lse_against_the_pool() -> None:
    cfg = config(
        grid={"regimes": ["scrl", "sscrl"], "losses": ["hinge", "lse"], "R": [1.0, 2.0]},
        eval={"oracle_anchors": 500, "negative_pool": 16},
    )
    oracles = [k for k in grid_keys(cfg) if k.oracle]
    assert (
        oracle_keys(cfg) == oracles and len(grid_keys(cfg)) == len(oracles) + 2 * 2 * 2 * 2 * 2 * 2
    )
    hinge = [k for k in oracles if k.loss == "hinge"]
    assert {(k.regime, k.m, k.R) for k in hinge} == {("scrl", m, R) for m in (1, 3) for R in (1, 2)}
    lse = [k for k in oracles if k.loss == "lse"]
    assert {(k.regime, k.m, k.R) for k in lse} == {("sscrl", 16, 1.0), ("sscrl", 16, 2.0)}
    assert all(k.n == 500 and k.seed == 0 for k in oracles)
    ids = {k.cell_id(cfg.hash()) for k in grid_keys(cfg)}
    assert len(ids) == len(grid_keys(cfg))
    assert not oracle_keys(config())  # off by default


def test_an_oracle_cell_is_marked_and_its_loss_joins_the_grids_cells(
    run: tuple[Features, float],
) -> None:
    features, tau = run
    cfg = config(eval={"oracle_anchors": 200})
    best = cell.run_cell(cfg, CellKey("scrl", "hinge", 3, 200, 0, oracle=True), features, tau)
    assert best["role"] == "oracle" and best["n"] == 200
    plain = cell.run_cell(cfg, CellKey("scrl", "hinge", 3, 20, 0), features, tau)
    assert "role" not in plain
    other = cell.run_cell(cfg, CellKey("scrl", "hinge", 1, 20, 0), features, tau)
    frame = pl.from_dicts([plain, other, {**best}], infer_schema_length=None)
    cells_only, oracles = oracle.split_oracle(frame)
    assert oracles.height == 1 and "role" not in cells_only.columns
    joined = cells_only.sort("m").rows(named=True)
    assert joined[0]["oracle_loss"] is None  # m = 1 has no oracle here
    assert joined[1]["oracle_loss"] == best["test_loss"]
    assert joined[1]["excess_risk"] == pytest.approx(plain["test_loss"] - best["test_loss"])


def test_an_lse_oracle_serves_every_m() -> None:
    base = {"dataset": "synthetic", "R": 1.0, "temperature": 0.5, "normalise": "scale"}
    frame = pl.from_dicts(
        [
            {**base, "loss": "lse", "m": 4, "test_loss": 0.3, "test_loss_ci": 0.1, "role": None},
            {**base, "loss": "lse", "m": 16, "test_loss": 0.2, "test_loss_ci": 0.1, "role": None},
            {
                **base,
                "loss": "lse",
                "m": 64,
                "test_loss": 0.1,
                "test_loss_ci": 0.02,
                "role": "oracle",
            },
        ]
    )
    cells_only, _ = oracle.split_oracle(frame)
    assert cells_only["oracle_loss"].to_list() == [0.1, 0.1]
    assert cells_only["excess_risk"].to_list() == pytest.approx([0.2, 0.1])


@pytest.mark.parametrize("loss", ["hinge", "info_nce", "lse"])
def test_the_test_set_certificate_from_the_rows_own_columns(
    run: tuple[Features, float], loss: str
) -> None:
    features, tau = run
    row = cell.run_cell(config(), CellKey("scrl", loss, 3, 20, 0), features, tau)
    if loss != "lse":  # LSE's test_loss is pooled; the certificate is on L_m, own negatives
        assert (
            row["test_loss_m"] == row["test_loss"] and row["test_loss_m_ci"] == row["test_loss_ci"]
        )
    low, width, n = row["loss_min"], row["loss_range"], row["test_anchors"]
    q = (row["test_loss_m"] - low) / width
    p = row["cert_test_set"]
    assert row["cert_test_set_n"] == n and row["cert_test_set_reason"] is None
    assert row["test_loss_m"] < p < low + width
    # the smaller of the kl bound (kl(q || (p - low) / width) = ln(2 / delta) / n at its upper
    # end) and the empirical Bernstein bound, each at delta / 2, the terms' variance read off
    # their 95% half-width z std / sqrt(n)
    half = row["delta"] / 2
    kl = kl_inverse_upper(q, math.log(1 / half) / n)
    assert kl_bernoulli(q, kl) == pytest.approx(math.log(1 / half) / n, rel=1e-9)
    variance = (row["test_loss_m_ci"] * math.sqrt(n) / stats.z_value(0.95) / width) ** 2
    bernstein = empirical_bernstein_upper(q, variance, n, half)
    assert (p - low) / width == pytest.approx(min(kl, bernstein), rel=1e-6)
