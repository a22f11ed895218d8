"""The dense cells' certificate ladder (crl.steps.dense.ladder): a batch of heads scores each
its own image as the loops do, the draws are unbiased for the empirical Gibbs risk, the
test-set certificate covers the population loss at its level, and a cell carries every rung or
its reason."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from crl.kernels import certificates, pac_bayes, stats
from crl.kernels.dense import bounds as dense_bounds
from crl.kernels.solver import SolverSpec
from crl.steps import ladder as rungs
from crl.steps.dense import ladder as dense_ladder
from crl.steps.dense.cell import DenseKey, run_dense_cell
from crl.steps.dense.features import load_dense_features
from crl.steps.dense.objective import Batch, objective
from tests.steps.dense.test_steps import build, dense_config
from tests.steps.helpers import naive_dense_loss

F64 = torch.float64
LADDER = {"noise": [0.05, 0.2], "pilot_draws": 128, "mc_draws": 2000, "test_heads": 4}


def _batch(n: int, k: int, m: int, p: int, gen: torch.Generator, shared: bool = False) -> Batch:
    """n images of k unit position features per view (view 2 a noisy copy of view 1, so a head
    can learn the match), position a matched to a, and m unit negatives each (or one queue)."""

    def unit(x: torch.Tensor) -> torch.Tensor:
        return x / torch.linalg.vector_norm(x, dim=-1, keepdim=True)

    phi1 = unit(torch.randn(n, k, p, generator=gen, dtype=F64))
    phi2 = unit(phi1 + 0.3 * torch.randn(n, k, p, generator=gen, dtype=F64))
    neg = unit(torch.randn(*((m, p) if shared else (n, m, p)), generator=gen, dtype=F64))
    match = torch.arange(k).expand(n, k).clone()
    pooled_neg = unit(torch.randn(*neg.shape, generator=gen, dtype=F64))
    return Batch(
        phi1, phi2, match, neg, phi1.mean(1, keepdim=True), phi2.mean(1, keepdim=True), pooled_neg
    )


@pytest.mark.parametrize("negatives", ["own", "ext"])
@pytest.mark.parametrize("lam", [1.0, 0.4])
def test_a_batch_of_heads_scores_each_its_own_image_as_the_loops_do(
    negatives: str, lam: float
) -> None:
    gen = torch.Generator().manual_seed(0)
    b = _batch(5, 3, 2, 4, gen)
    heads = torch.randn(7, 2, 4, generator=gen, dtype=F64)
    rows = torch.tensor([4, 0, 0, 2, 3, 1, 4])
    got = objective(heads, b.take(rows), negatives, 0.7, lam)
    for j, i in enumerate(rows.tolist()):
        W = heads[j].numpy()
        dense = naive_dense_loss(
            W, b.phi1[i : i + 1].numpy(), b.phi2[i : i + 1].numpy(), b.match[i : i + 1].numpy(),
            b.neg[i : i + 1].numpy(), negatives, 0.7,
        )  # fmt: skip
        glob = naive_dense_loss(
            W, b.pooled1[i : i + 1].numpy(), b.pooled2[i : i + 1].numpy(), np.zeros((1, 1)),
            b.pooled_neg[i : i + 1].numpy(), "ext", 0.7,
        )  # fmt: skip
        want = dense if lam == 1.0 else lam * dense + (1 - lam) * glob
        assert float(got[j]) == pytest.approx(want, rel=1e-12)
    with pytest.raises(ValueError, match="shared queue"):
        objective(heads, _batch(7, 3, 2, 4, gen, shared=True), negatives, 0.7, lam)


def test_dense_draws_are_unbiased_for_the_empirical_gibbs_risk() -> None:
    """The mean of draws (fresh head, uniform image) against the empirical Gibbs risk computed
    with 3000 heads each scored on every image: within 4 standard errors of the draws' mean."""
    gen = torch.Generator().manual_seed(1)
    b = _batch(12, 3, 4, 5, gen)
    mean, sigma, R = torch.randn(2, 5, generator=gen, dtype=F64), 0.4, 1.5
    terms = dense_ladder._terms(b, "own", 0.5, 0.7)
    draws, _ = pac_bayes.unit_draws(mean, sigma, R, b.n, 20000, terms, 512, gen)
    heads = pac_bayes.gibbs_heads(mean, sigma, R, 3000, gen)
    every = torch.stack([objective(h, b, "own", 0.5, 0.7).mean() for h in heads])
    assert torch.linalg.vector_norm(heads.flatten(1), dim=1).max() <= R + 1e-12
    spread = float(draws.std()) / math.sqrt(draws.numel())
    assert abs(float(draws.mean()) - float(every.mean())) < 4 * spread
    means = pac_bayes.unit_means(mean, sigma, R, b.n, 8, terms, 20, gen)
    assert means.shape == (b.n,)


def test_the_dense_test_set_certificate_covers_the_population_loss() -> None:
    """A fixed head on images of a known law: the population loss from 200000 fresh images
    (standard error below 0.001 of the range); over 300 held-out sets of 25 images the
    certificate falls below it in at most delta of them, the plain mean in many."""
    gen = torch.Generator().manual_seed(2)
    W = torch.randn(2, 4, generator=gen, dtype=F64)
    W = W / torch.linalg.vector_norm(W)  # R = 1
    k, m, T, delta = 3, 4, 0.5, 0.1
    N = dense_bounds.negatives_count(k, m, "own")
    low, width = dense_bounds.dense_range(N, N, 1.0, T)
    scale = rungs.Scale(low, width)
    truth = float(objective(W, _batch(200000, k, m, 4, gen), "own", T, 1.0).mean())
    misses = plain = 0
    for _ in range(300):
        terms = objective(W, _batch(25, k, m, 4, gen), "own", T, 1.0)
        cert = rungs.test_set_columns(terms, scale, delta)
        assert cert["cert_test_set_n"] == 25 and cert["cert_test_set"] <= low + width
        misses += cert["cert_test_set"] < truth
        plain += float(terms.mean()) < truth
    assert misses / 300 <= delta and plain / 300 > 0.3
    assert rungs.test_set_columns(terms, None, delta)["cert_test_set_reason"] == (rungs.NO_RANGE)


def test_the_dense_pac_bayes_rungs_on_synthetic_images() -> None:
    """Both rungs on a fitted head: ordered terms, the data-dependent prior on the first half,
    a Gibbs held-out risk inside the range; a shared queue gives its reason."""
    from crl.core.ladder_config import PacBayesConfig

    gen = torch.Generator().manual_seed(3)
    train, test = _batch(40, 3, 4, 4, gen), _batch(30, 3, 4, 4, gen)
    head = torch.randn(2, 4, generator=gen, dtype=F64)
    N = dense_bounds.negatives_count(3, 4, "ext")
    low, width = dense_bounds.dense_range(N, N, 1.0, 0.5)
    scale = rungs.Scale(low, width)
    ladder = PacBayesConfig(**LADDER)
    args = ("ext", 1.0, 1.0, 0.5, SolverSpec(1e-6, 50), 0.05, scale, gen)
    row = dense_ladder.pac_bayes_columns(ladder, train, head / head.norm(), test, *args)
    for prior in ("free", "data"):
        name = f"cert_pb_{prior}"
        assert row[f"{name}_reason"] is None
        assert low + width >= row[name] >= row[f"{name}_mc"] >= row[f"{name}_gibbs_train"] >= low
    assert row["cert_pb_free_n"] == 40 and row["cert_pb_data_n"] == 20
    assert low <= row["gibbs_test_loss"] <= low + width and row["gibbs_test_loss_ci"] > 0
    shared = _batch(40, 3, 4, 4, gen, shared=True)
    row = dense_ladder.pac_bayes_columns(ladder, shared, head, test, *args)
    assert row["cert_pb_data"] is None and row["cert_pb_data_reason"] == rungs.SHARED
    row = dense_ladder.pac_bayes_columns(None, train, head, test, *args)
    assert row["cert_pb_free_reason"] == dense_ladder.NOT_REQUESTED


@pytest.fixture(scope="module")
def cells(tmp_path_factory: pytest.TempPathFactory):
    cfg = dense_config(eval={"ladder": LADDER}, grid={"n": [16]})
    features = load_dense_features(build(cfg, tmp_path_factory.mktemp("dense-ladder")), 9)
    rows = {}
    for regime in ("scrl", "sscrl"):
        key = DenseKey(regime, "ext", "geometric", 1.0, 3, 16, 0)
        rows[regime] = run_dense_cell(cfg, key, key.cell_id(cfg.hash()), features)
    plain = dense_config(grid={"n": [16]})
    key = DenseKey("scrl", "ext", "geometric", 1.0, 3, 16, 0)
    rows["plain"] = run_dense_cell(plain, key, key.cell_id(plain.hash()), features)
    return rows


def test_a_dense_cell_carries_the_ladder(cells: dict) -> None:
    row = cells["scrl"]
    low, high = row["loss_range_lo"], row["loss_range_hi"]
    width = high - low
    for prior in ("free", "data"):
        name = f"cert_pb_{prior}"
        assert row[f"{name}_reason"] is None
        assert high >= row[name] >= row[f"{name}_mc"] >= row[f"{name}_gibbs_train"] >= low
    assert row["cert_pb_free_n"] == 16 and row["cert_pb_data_n"] == 8
    assert row["cert_pb_ref_reason"] is None and low < row["cert_pb_ref_reference"] <= high
    expected = min(row["cert_pb_ref_reference"] + row["cert_pb_ref_gap"], high)
    assert row["cert_pb_ref"] == pytest.approx(expected, rel=1e-12)
    assert row["ladder_seconds"] > 0
    n_test = row["test_anchors"]
    unit = certificates.scaled(row["test_loss"], low, width)
    # the held-out terms' variance from their 95% half-width (z std / sqrt(n), unbiased std)
    variance = (row["test_loss_ci"] * math.sqrt(n_test) / stats.z_value(0.95) / width) ** 2
    bound = certificates.held_out_upper(unit, variance, n_test, 0.05)
    expected = certificates.unscaled(bound, low, width)
    assert row["cert_test_set"] == pytest.approx(expected) and row["cert_test_set_n"] == n_test
    trivial = row["trivial_loss"]
    assert row["learning_certified_test_set"] == (row["cert_test_set"] < trivial)
    assert row["learning_certified_pb_data"] == (row["cert_pb_data"] < trivial)
    radem = row["train_loss"] + row["best_dense_bound"]
    assert row["learning_certified_rademacher"] == (radem < trivial)


def test_rungs_that_do_not_apply_to_a_dense_cell_say_why(cells: dict) -> None:
    assert cells["sscrl"]["cert_pb_free_reason"] == rungs.SHARED
    assert cells["sscrl"]["cert_test_set"] is not None  # fresh negatives per held-out image
    assert cells["sscrl"]["learning_certified_pb_free"] is None
    assert cells["plain"]["cert_pb_data_reason"] == dense_ladder.NOT_REQUESTED
    # the ladder draws from a generator of its own: the other columns do not move
    same = [c for c in ("test_loss", "train_loss", "best_dense_bound", "cert_test_set", "head")]
    assert all(cells["plain"][c] == cells["scrl"][c] for c in same)
