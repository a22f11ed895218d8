"""crl.steps.sampling and crl.steps.certify: where a cell's tuples come from, and its bounds."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from crl.kernels import certified
from crl.kernels.latent import LatentClassModel
from crl.steps import certify, sampling
from crl.steps.features import Normalizer, SplitArrays


def _model() -> LatentClassModel:
    return LatentClassModel.synthetic(
        classes=3, dim=5, separation=2.0, noise=1.0, prior="uniform", zipf_exponent=1.0,
        generator=torch.Generator().manual_seed(0),
    )


def _population() -> sampling.ModelPopulation:
    return sampling.ModelPopulation(
        _model(), torch.nn.Identity(), Normalizer(np.zeros(5, dtype=np.float32), 2.0)
    )


def test_normalizer_clips_every_point_and_matches_the_splits_scaling() -> None:
    norm = Normalizer(np.array([1.0, -1.0], dtype=np.float32), 3.0)
    inside = np.array([[1.0, 0.0], [2.0, -2.0]], dtype=np.float32)
    np.testing.assert_allclose(norm.array(inside), (inside - norm.mean) / (3.0 * (1 + 1e-6)))
    far = np.array([[100.0, 50.0]], dtype=np.float32)
    assert float(np.linalg.norm(norm.array(far))) <= 1.0
    torch.testing.assert_close(norm(torch.from_numpy(inside)), torch.from_numpy(norm.array(inside)))
    assert float(norm(torch.from_numpy(far)).norm()) <= 1.0


@pytest.mark.parametrize("shared", [False, True])
def test_model_population_draws_fresh_tuples(shared: bool) -> None:
    draw = _population().train(7, 3, shared, torch.Generator().manual_seed(1))
    assert draw.sampling == sampling.FRESH and draw.certified
    views, sample = draw.views, draw.sample
    assert views.anchor.shape == views.positive.shape == (7, 5)
    assert views.negative.shape == ((3, 5) if shared else (21, 5))
    assert sample.shared == shared
    assert sample.negatives.shape == ((3,) if shared else (7, 3))
    for table in (views.anchor, views.positive, views.negative):
        assert float(table.norm(dim=1).max()) <= 1.0
    again = _population().train(7, 3, shared, torch.Generator().manual_seed(1))
    torch.testing.assert_close(again.views.negative, views.negative)
    held = _population().held_out(4, 3, 11, torch.Generator().manual_seed(2))
    assert held.sample.negatives.shape == (4, 3) and held.pool_sample.negatives.shape == (11,)
    assert held.pool_views.anchor is held.views.anchor


def _split(rows: int, classes: int, augmented: bool = False) -> SplitArrays:
    gen = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, 4, generator=gen).numpy() / 3
    labels = (np.arange(rows) % classes).astype(np.int32)
    if augmented:
        return SplitArrays(x, labels, x + 0.01, x - 0.01)
    return SplitArrays(x, labels)


@pytest.mark.parametrize("shared", [False, True])
def test_split_population_distinct_rows_when_the_split_allows(shared: bool) -> None:
    population = sampling.SplitPopulation(_split(200, 4), _split(50, 4))
    draw = population.train(10, 5, shared, torch.Generator().manual_seed(3))
    assert draw.sampling == sampling.DISTINCT and draw.certified
    s = draw.sample
    used = torch.cat([s.anchors, s.positives, s.negatives.reshape(-1)])
    assert len(set(used.tolist())) == used.numel()  # every point distinct
    labels = draw.views.labels
    assert torch.equal(labels[s.anchors], labels[s.positives])


def test_split_population_reuses_points_and_is_not_certified_when_too_small() -> None:
    population = sampling.SplitPopulation(_split(40, 4), _split(20, 4))
    draw = population.train(10, 5, False, torch.Generator().manual_seed(4))  # needs 70 > 40
    assert draw.sampling == sampling.REUSE and not draw.certified
    assert draw.sample.negatives.shape == (10, 5)


def test_split_population_augmented_positive_is_the_other_view() -> None:
    population = sampling.SplitPopulation(_split(100, 3, augmented=True), _split(30, 3))
    draw = population.train(10, 4, False, torch.Generator().manual_seed(5))
    assert draw.sampling == sampling.DISTINCT
    assert torch.equal(draw.sample.anchors, draw.sample.positives)
    assert draw.views.anchor is not draw.views.positive


def test_sample_statistics_stream_equals_the_whole_sample() -> None:
    draw = _population().train(9, 4, False, torch.Generator().manual_seed(6))
    streamed = certify.sample_statistics(draw, 4, chunk=8)  # two anchors per chunk
    v, s = draw.views, draw.sample
    whole = certified.sample_stats(
        v.anchor[s.anchors], v.positive[s.positives], v.negative[s.negatives], shared=False
    )
    for name in ("S_pairs", "S_neg", "v_A", "v_0", "v_N"):
        assert getattr(streamed, name) == pytest.approx(getattr(whole, name), rel=1e-12)


def test_pool_bootstrap_matches_a_naive_loop() -> None:
    gen = torch.Generator().manual_seed(7)
    pos = torch.randn(6, generator=gen, dtype=torch.float64)
    pool = torch.randn(6, 9, generator=gen, dtype=torch.float64)
    T, draws = 0.5, 50
    got = certify.pool_bootstrap_ci(pos, pool, T, draws, torch.Generator().manual_seed(8))
    replay = torch.Generator().manual_seed(8)
    picks = torch.randint(0, 9, (draws, 9), generator=replay)
    risks = []
    for b in range(draws):
        z = (pool[:, picks[b]] - pos[:, None]) / T
        risks.append(float((T * (torch.logsumexp(z, dim=1) - math.log(9))).mean()))
    expected = 1.959963984540054 * float(torch.tensor(risks, dtype=torch.float64).std())
    assert got == pytest.approx(expected, rel=1e-10)
    assert math.isnan(certify.pool_bootstrap_ci(pos, pool, T, 1, gen))


def test_bound_columns_compare_each_bound_with_its_gap() -> None:
    draw = _population().train(30, 4, True, torch.Generator().manual_seed(9))
    row = certify.bound_columns(draw, "sscrl", "logistic", 4, 3, 1.0, 1.0, 0.05, 0.01, -0.02)
    assert row["bound_delta"] == 0.025
    assert row["gamma_S_holds"] is True  # compared with gap_outer
    too_big = certify.bound_columns(draw, "sscrl", "logistic", 4, 3, 1.0, 1.0, 0.05, 0.01, 99.0)
    assert too_big["gamma_S_holds"] is False and too_big["gamma_m_holds"] is False
    assert too_big["sscrl_total_holds"] is True  # the total gap 0.01 is within the total
    own = sampling.ModelPopulation(_model(), torch.nn.Identity(),
                                   Normalizer(np.zeros(5, dtype=np.float32), 2.0))
    scrl = own.train(30, 4, False, torch.Generator().manual_seed(9))
    lse = certify.bound_columns(scrl, "scrl", "lse", 4, 3, 1.0, 1.0, 0.05, 0.0, None)
    g = min(lse["gamma_m"], lse["gamma_S"], lse["gamma_E"])
    # LSE: -gamma <= gap <= gamma + inner; a gap just above gamma holds only thanks to inner
    above = certify.bound_columns(
        scrl, "scrl", "lse", 4, 3, 1.0, 1.0, 0.05, lse["gamma_S"] + 0.5 * lse["lse_inner_bound"],
        None,
    )
    assert above["gamma_S_holds"] is True
    below = certify.bound_columns(
        scrl, "scrl", "lse", 4, 3, 1.0, 1.0, 0.05, -(lse["gamma_S"] + 1e-3), None
    )
    assert below["gamma_S_holds"] is False
    assert lse["best_bound"] == pytest.approx(g + lse["lse_inner_bound"])
