"""The certificate ladder: PAC-Bayes certificates cover a known Gibbs risk at their level, the
anchors split disjointly, and a cell with `eval.ladder` carries every rung or its reason."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.stats import norm

from crl.core.config import LadderConfig
from crl.kernels import learner, pac_bayes
from crl.steps.features import Features, Normalizer, SplitArrays, load_features, tau_of
from crl.steps.keys import CellKey
from crl.steps.signal import certified_learning_columns
from crl.steps.unimodal import cell, ladder, sampling
from tests.steps.helpers import config, materialise

LADDER = {"noise": [0.015, 0.05, 0.1], "pilot_draws": 256, "mc_draws": 4000}


def _threshold_draws(z: np.ndarray, radius: float) -> ladder.Draws:
    """The loss 1{z < Phi(w)} of a scalar head w on data z ~ U(0, 1), L(w) = Phi(w): each draw
    a Gibbs head on a uniformly drawn z_i."""
    values = torch.from_numpy(z)

    def draws(mean: torch.Tensor, sigma: float, count: int, gen: torch.Generator) -> torch.Tensor:
        heads = pac_bayes.gibbs_heads(mean, sigma, radius, count, gen).reshape(-1)
        rows = torch.randint(0, len(z), (count,), generator=gen)
        cut = torch.from_numpy(norm.cdf(heads.numpy()))
        return (values[rows] < cut).double()

    return draws


def _exact_gibbs_risk(z: np.ndarray, mean: float, sigma: float) -> float:
    """(1/n) sum_i P(z_i < Phi(W)), W ~ N(mean, sigma^2): the empirical Gibbs risk in closed
    form (no projection at these scales)."""
    return float(np.mean(norm.sf((norm.ppf(z) - mean) / sigma)))


def test_the_monte_carlo_term_covers_the_exact_empirical_gibbs_risk() -> None:
    """Draws of (head, uniform anchor) are unbiased for Lhat_S(Q), and the smaller of the kl and
    Bernstein bounds on them, each at delta/2, covers it in at least 1 - delta of 400 repeats,
    with few draws so that the test can fail."""
    rng = np.random.default_rng(3)
    z = rng.uniform(size=300)
    mean, sigma, draws, delta, reps = (
        torch.tensor([[-1.2]], dtype=torch.float64),
        0.3,
        200,
        0.2,
        400,
    )
    exact = _exact_gibbs_risk(z, -1.2, sigma)
    sample = _threshold_draws(z, 20.0)
    gen = torch.Generator().manual_seed(4)
    means, misses = [], 0
    for _ in range(reps):
        unit = sample(mean, sigma, draws, gen)
        average = float(unit.mean())
        upper = min(
            pac_bayes.monte_carlo_upper(average, draws, delta / 2),
            pac_bayes.empirical_bernstein_upper(average, float(unit.var()), draws, delta / 2),
        )
        means.append(average)
        misses += upper < exact
    assert misses / reps <= delta
    spread = float(np.std(means)) / math.sqrt(reps)
    assert abs(float(np.mean(means)) - exact) < 4 * spread


def test_pac_bayes_certificates_cover_the_true_gibbs_risk() -> None:
    """W ~ N(a, sigma^2) with a chosen from the data (the 10% quantile's probit), R = 20 (the
    projection is never active: |a| < 3, sigma <= 2): L(Q) = Phi(a / sqrt(1 + sigma^2))
    exactly. Over 150 samples the data-free and the data-dependent certificates fall below
    L(Q) in at most delta of them; the plug-in Gibbs risk alone falls below it often."""
    cfg = LadderConfig(**LADDER)
    rng = np.random.default_rng(0)
    n, delta, reps, radius = 400, 0.1, 150, 20.0
    scale = ladder.Scale(0.0, 1.0)
    gen = torch.Generator().manual_seed(0)
    misses = {"free": 0, "data": 0, "plug_in": 0}
    for _ in range(reps):
        z = rng.uniform(size=n)
        mean = torch.tensor([[norm.ppf(np.quantile(z, 0.1))]], dtype=torch.float64)
        prior = torch.tensor([[norm.ppf(np.quantile(z[: n // 2], 0.1))]], dtype=torch.float64)
        free = ladder.certificate(
            mean,
            torch.zeros_like(mean),
            _threshold_draws(z, radius),
            n,
            radius,
            cfg,
            delta,
            scale,
            gen,
        )
        data = ladder.certificate(
            mean,
            prior,
            _threshold_draws(z[n // 2 :], radius),
            n - n // 2,
            radius,
            cfg,
            delta,
            scale,
            gen,
        )
        for name, cert in (("free", free), ("data", data)):
            truth = norm.cdf(float(mean) / math.sqrt(1 + cert.sigma**2))
            assert cert.bound >= cert.mc >= cert.gibbs_train >= 0.0
            misses[name] += cert.bound < truth
        truth = norm.cdf(float(mean) / math.sqrt(1 + free.sigma**2))
        misses["plug_in"] += free.gibbs_train < truth
    assert misses["free"] / reps <= delta and misses["data"] / reps <= delta
    assert misses["plug_in"] / reps > 0.2  # without its terms the estimate is no bound
    # the data-dependent prior sits near the posterior: a smaller KL
    assert data.kl < free.kl


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
    prior = ladder._prior_config(capped, capped.eval.ladder)
    assert (prior.model.max_iter, prior.model.steps) == (7, 7)
    assert capped.model.max_iter == 500  # the cell's own fit keeps its cap
    plain = config(eval={"ladder": LADDER})
    assert ladder._prior_config(plain, plain.eval.ladder) is plain
