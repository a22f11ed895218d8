"""Paired cells on the clipped Gaussian carry certified bounds that hold."""

from __future__ import annotations

import math

import pytest

from crl.core.config import ConfigError, validate
from crl.kernels import score_model
from crl.kernels.latent.clipped import clip_pairs, clipped_mass
from crl.kernels.solver import SolverSpec
from crl.steps import ladder as rungs
from crl.steps.keys import draws_id, grid_keys
from crl.steps.paired import model_cell
from crl.steps.paired.clipped_cell import run_clipped_cell

TREE = {
    "name": "clipped",
    "seed": 3,
    "dataset": {
        "kind": "paired_gaussian",
        "correlations": [0.9, 0.5],
        "eval_triples": 4000,
        "clip": 3.0,
    },
    "model": {"R": 3.0, "solver": "apg"},
    "grid": {"regimes": ["scrl", "sscrl"], "losses": ["lse"], "m": [4], "n": [64], "seeds": [0]},
    "eval": {"temperature": 1.0, "test_anchors": 400, "negative_pool": 300},
}


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    cfg = validate(TREE)
    source = model_cell.source(cfg)
    return [
        run_clipped_cell(cfg, k, k.cell_id(cfg.hash()), draws_id(cfg, k), source)
        for k in grid_keys(cfg)
    ]


def test_clipped_cells_are_certified_and_their_bounds_hold(rows: list[dict]) -> None:
    for row in rows:
        assert row["certified"] and row["sampling"] == "fresh_from_model"
        assert row["gamma_lin_holds"] is True
        assert row["clipped_mass"] == pytest.approx(clipped_mass(2, 3.0))
        assert row["bayes_auc_lo"] < row["bayes_auc_hi"]
        assert row["excess_auc"] == pytest.approx(row["auc_star"] - row["retrieval_auc"])
        # gamma_lin from the row's own columns (crl.kernels.certified_paired)
        complexity = 2 * math.sqrt(2 * row["loss_omega"]) * row["R"] * math.sqrt(row["S_D"])
        complexity /= row["n"]
        concentration = (
            3 * row["loss_range"] * math.sqrt(math.log(4 / row["bound_delta"]) / (2 * row["n"]))
        )
        assert row["gamma_lin"] == pytest.approx(complexity + concentration, rel=1e-12)
        assert row["learning_gain"] == pytest.approx(-row["test_loss"], rel=1e-12)  # L_pool(0) = 0
    sscrl = next(r for r in rows if r["regime"] == "sscrl")
    assert sscrl["gap_outer"] + sscrl["gap_inner"] == pytest.approx(sscrl["gap"])


def test_the_ladder_of_a_clipped_cell_says_which_rungs_apply(rows: list[dict]) -> None:
    """scrl: L(s) <= train_loss + best_bound is the Rademacher rung; sscrl's bound is on the
    outer gap only; the test-set certificate from held-out pairs with their own negatives in
    both regimes; no PAC-Bayes rung without eval.ladder."""
    for row in rows:
        assert row["cert_test_set_n"] == 400 and row["cert_test_set_reason"] is None
        assert row["loss_min"] < row["cert_test_set"] < row["loss_min"] + row["loss_range"]
        assert row["learning_certified_test_set"] == (row["cert_test_set"] < 0.0)
        assert row["cert_pb_data"] is None
        assert row["cert_pb_data_reason"] == rungs.NOT_REQUESTED
        assert row["learning_certified_pb_free"] is None
        if row["regime"] == "sscrl":
            assert row["learning_certified_rademacher"] is None
        else:
            certificate = row["train_loss"] + row["best_bound"]
            assert row["learning_certified_rademacher"] == (certificate < row["trivial_loss"])


def test_a_clipped_cell_refits_to_its_train_loss(rows: list[dict]) -> None:
    cfg = validate(TREE)
    source = model_cell.source(cfg)
    row = next(r for r in rows if r["regime"] == "scrl")
    raw = model_cell.draw(cfg, source.model, "scrl", 4, 64, 0)
    sample = clip_pairs(raw, 3.0)
    for t in (sample.x, sample.y, sample.negatives):
        assert float(t.norm(dim=-1).max()) <= 1.0 + 1e-12  # the bounds' (A1)
    score, _ = score_model.fit(sample, 3.0, 1.0, SolverSpec(cfg.model.tol, cfg.model.max_iter))
    lhat = float(score_model.empirical_risk(score.M, score.B, sample, 1.0))
    assert row["train_loss"] == pytest.approx(lhat, rel=1e-9)


def test_clip_must_be_positive() -> None:
    bad = {**TREE, "dataset": {**TREE["dataset"], "clip": 0}}
    with pytest.raises(ConfigError, match="dataset.clip"):
        validate(bad)


def test_every_clipped_column_is_documented(rows: list[dict]) -> None:
    from tests.orchestration.test_paired_grid import _documented_paired_columns

    documented = _documented_paired_columns()
    # provenance, `dataset` and `cell_git_commit` come with the tables (documented above them)
    missing = set(rows[0]) - documented
    assert missing == set(), missing
