"""The single-modality ladder: the anchors split disjointly, and a cell with `eval.ladder` carries
every rung or its reason (the certificates' coverage: tests/steps/test_ladder_rungs.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from crl.kernels import learner
from crl.steps.features import Features, Normalizer, SplitArrays, load_features, tau_of
from crl.steps.keys import CellKey
from crl.steps.signal import certified_learning_columns
from crl.steps.unimodal import cell, ladder, sampling
from tests.conftest import TIMING
from tests.steps.helpers import config, materialise

LADDER = {"noise": [0.015, 0.05, 0.1], "pilot_draws": 256, "mc_draws": 4000}


def test_split_anchors_is_disjoint_and_complete() -> None:
    gen = torch.Generator().manual_seed(1)
    table = torch.randn(50, 4)
    views = learner.Views(table, table, table, torch.zeros(50, dtype=torch.long), True)
    sample = learner.draw(views, 10, 3, False, gen)
    whole = sampling.TrainDraw.whole(views, sample, sampling.FRESH)
    head, tail = sampling.split_anchors(whole, 4)
    assert (head.n, tail.n) == (4, 6) and head.certified and tail.certified
    joined = torch.cat([head[0][1].anchors, tail[0][1].anchors])
    assert torch.equal(joined, sample.anchors)
    assert torch.equal(torch.cat([head[0][1].negatives, tail[0][1].negatives]), sample.negatives)
    blocks = sampling.TrainDraw(sampling.FRESH, [3, 3, 3, 1], 3, False, lambda b: (views, sample))
    head, tail = sampling.split_anchors(blocks, 5)
    assert (head.sizes, tail.sizes) == ([3, 3], [3, 1])
    with pytest.raises(ValueError, match="shared"):
        shared = learner.draw(views, 10, 3, True, gen)
        sampling.split_anchors(sampling.TrainDraw.whole(views, shared, sampling.FRESH), 4)
    with pytest.raises(ValueError, match="count"):
        sampling.split_anchors(whole, 10)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Features, float]:
    cfg = config()
    features = load_features(materialise(cfg, tmp_path_factory.mktemp("ladder")))
    return features, tau_of(cfg, features.train.labels)


def _ladder_config(**model: object):
    return config(
        model={"solver": "apg", "tol": 1e-6, "max_iter": 500, "R": 2.0, **model},
        eval={"ladder": {**LADDER, "ascent_starts": 2, "ascent_iterations": 30}},
    )


@pytest.mark.parametrize("loss", ["logistic", "info_nce"])
def test_a_cell_carries_the_ladder(
    run: tuple[Features, float], loss: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    features, tau = run
    row = cell.run_cell(_ladder_config(), CellKey("scrl", loss, 3, 60, 0), features, tau)
    low, high = row["loss_min"], row["loss_min"] + row["loss_range"]
    for prior in ("free", "data"):
        name = f"cert_pb_{prior}"
        assert row[f"{name}_reason"] is None
        assert high >= row[name] >= row[f"{name}_mc"] >= row[f"{name}_gibbs_train"] >= low
        assert row[f"{name}_kl"] >= 0 and row[f"{name}_sigma"] > 0
    assert row["cert_pb_free_n"] == 60 and row["cert_pb_data_n"] == 30
    assert low <= row["gibbs_test_loss"] <= high and row["gibbs_test_loss_ci"] > 0
    assert row["cert_pb_data_excess_ratio"] > 0
    # learning certified: each rung's certificate against the constant loss of f = 0
    trivial = row["trivial_loss"]
    assert row["learning_certified_pb_data"] == (row["cert_pb_data"] < trivial)
    assert row["learning_certified_pb_free"] == (row["cert_pb_free"] < trivial)
    assert row["learning_certified_pb_ref"] == (row["cert_pb_ref"] < trivial)
    # the excess rung: the prior mean's test-set certificate plus the excess bound
    assert row["cert_pb_ref_reason"] is None
    expected = min(row["cert_pb_ref_reference"] + row["cert_pb_ref_gap"], high)
    assert row["cert_pb_ref"] == pytest.approx(expected, rel=1e-12)
    assert low < row["cert_pb_ref_reference"] <= high
    assert row["learning_certified_test_set"] == (row["cert_test_set"] < trivial)
    rademacher = row["train_loss"] + row["best_bound"]
    assert row["learning_certified_rademacher"] == (rademacher < trivial)
    # the uniform deviation's search starts at the fitted head: it finds at least its gap's
    # size (on fresh tuples, up to their interval)
    assert row["uniform_deviation_reason"] is None
    assert row["uniform_deviation_est"] + 3 * row["uniform_deviation_est_ci"] >= row["gap"]
    # the other columns do not depend on the ladder (it draws from a generator of its own)
    monkeypatch.setattr(cell, "_ladder", lambda *args: {})
    plain = cell.run_cell(_ladder_config(), CellKey("scrl", loss, 3, 60, 0), features, tau)
    for name in ("train_loss", "test_loss", "gamma_m", "cert_test_set", "retrieval_auc"):
        assert plain[name] == row[name]


def test_without_the_section_every_rung_says_so(run: tuple[Features, float]) -> None:
    features, tau = run
    row = cell.run_cell(config(), CellKey("scrl", "hinge", 2, 20, 0), features, tau)
    assert row["cert_pb_free_reason"] == row["cert_pb_data_reason"] == ladder.NOT_REQUESTED
    assert row["uniform_deviation_reason"] == ladder.NOT_REQUESTED
    assert all(row[name] is None for name in ("cert_pb_data", "gibbs_test_loss"))


def test_rungs_that_do_not_apply_give_their_reason(run: tuple[Features, float]) -> None:
    features, tau = run
    row = cell.run_cell(_ladder_config(), CellKey("sscrl", "lse", 3, 30, 0), features, tau)
    assert row["cert_pb_free"] is None and row["cert_pb_free_reason"] == ladder.SHARED
    assert row["gibbs_test_loss"] is None
    assert row["uniform_deviation_reason"] is None  # L_m(W) - Lhat_S(W) is defined here too
    split = config(
        dataset={"kind": "digits"},
        model={"solver": "apg", "tol": 1e-6, "max_iter": 300},
        eval={"ladder": LADDER, "test_anchors": 20, "negative_pool": 16},
    )
    gen = np.random.default_rng(5)
    x = gen.normal(size=(40, 6))
    x /= 2 * np.linalg.norm(x, axis=1, keepdims=True)
    few = Features(
        SplitArrays(x[:30].astype(np.float32), np.arange(30) % 3),
        SplitArrays(x[30:].astype(np.float32), np.arange(10) % 3),
        Normalizer(np.zeros(6, dtype=np.float32), 1.0),
    )
    row = cell.run_cell(split, CellKey("scrl", "hinge", 4, 20, 0), few, None)
    assert row["sampling"] == sampling.REUSE
    assert row["cert_pb_data_reason"] == ladder.REUSED
    assert row["uniform_deviation_reason"] == ladder.NOT_FRESH


def test_ladder_config_is_left_out_of_the_hash_when_absent() -> None:
    assert config(eval={"ladder": None}).hash() == config().hash()
    with_ladder = config(eval={"ladder": LADDER})
    assert with_ladder.hash() != config().hash()
    with pytest.raises(Exception, match="noise"):
        config(eval={"ladder": {"noise": [0.1, 0.1]}})


def test_a_ladder_adds_columns_and_moves_none(run: tuple[Features, float]) -> None:
    """The draws are keyed without the ladder (Config.draws_hash) and its rungs draw from a
    generator of their own: every column the plain cell has is the same with the ladder."""
    features, tau = run
    key = CellKey("scrl", "logistic", 3, 30, 0)
    with_ladder = cell.run_cell(_ladder_config(), key, features, tau)
    plain_config = _ladder_config().model_copy(
        update={"eval": _ladder_config().eval.model_copy(update={"ladder": None})}
    )
    plain = cell.run_cell(plain_config, key, features, tau)
    moved = [
        c
        for c in plain
        if c not in (*TIMING, "cell_id")
        and not c.startswith(("cert_pb", "uniform_deviation", "gibbs_", "learning_certified_pb"))
        and plain[c] != with_ladder[c] and plain[c] == plain[c]
    ]  # fmt: skip
    assert moved == []


def test_certified_learning_columns_compare_with_f_zero() -> None:
    got = certified_learning_columns(
        2.0, {"a": 1.5, "b": 2.0, "c": math.inf, "d": None, "e": math.nan}
    )
    assert got == {
        "learning_certified_a": True,
        "learning_certified_b": False,  # equal to f = 0's loss: not below it
        "learning_certified_c": False,
        "learning_certified_d": None,
        "learning_certified_e": False,
    }


def test_prior_iterations_caps_only_the_prior_fit() -> None:
    capped = config(
        model={"solver": "apg", "max_iter": 500},
        eval={"ladder": {**LADDER, "prior_iterations": 7}},
    )
    prior = ladder._prior_config(capped, capped.eval.ladder.prior_iterations)
    assert (prior.model.max_iter, prior.model.steps) == (7, 7)
    assert capped.model.max_iter == 500  # the cell's own fit keeps its cap
    plain = config(eval={"ladder": LADDER})
    assert ladder._prior_config(plain, plain.eval.ladder.prior_iterations) is plain
